// ancs-gatt-phone: an iPhone's ANCS service on a real BlueZ stack, for the system test.
import DBus
import Dispatch
import GattPhone
import Glibc
import JSON
import PhoneSimulator
import Synchronization
import SystemCalls

let usage = """
    usage: ancs-gatt-phone --adapter hciN --peer ADDRESS [--lenient] [--bus ADDRESS]

    Plays an iPhone on a real bluetoothd, answering Control Point writes like iOS. As iOS
    does (the default): it scans, connects once to the accessory at ADDRESS (where ancsd
    runs) only if its advertisement carries the HID service UUID 0x1812 (and the ANCS
    solicitation, where bluetoothd shows it), never asks to pair (its bluetoothd's HID host
    pairs when it meets the accessory's encrypted attributes, or the accessory asks for
    security; the default agent confirms), registers the ANCS service as a GATT application
    only once bonded, leaves reconnecting to its bluetoothd, and reports the Report Map and
    input reports its HID host got; a Keyboard usage in the map is flagged
    ("accessory_flagged") only when the settings' "accessory" is "remote" (default "keyboard"). Standard input is a scenario (docs/simulator.md), read as
    it arrives: the settings line, then steps (silent_drop and silent_drop_all among them).
    With "ams": true in the settings it serves the Apple Media Service beside ANCS, its
    player driven by the media_track, media_play, media_pause, media_volume and
    media_commands steps.
    What the phone sees and does is written to standard output as JSON Lines
    ({"event": ...}). See docs/system-test.md.

      --adapter hciN    the adapter that plays the phone
      --peer ADDRESS    the accessory's Bluetooth address
      --lenient         the phone of earlier versions: ANCS registered at once, connects to
                        ADDRESS whatever it advertises, pairs itself, reconnects itself
      --bus ADDRESS     the bus (default: $DBUS_SYSTEM_BUS_ADDRESS, else the system bus)
      --help            show this help

    Exit status: 0 when standard input ends, 1 on a bus failure, 2 on a bad scenario line
    or command line.

    """

func fail(_ status: Int32, _ message: String) -> Never {
    let line = Array(("ancs-gatt-phone: " + message + "\n").utf8)
    line.withUnsafeBytes { _ = write(2, $0.baseAddress, $0.count) }
    exit(status)
}

var adapter: String?
var peer: String?
var busAddress: BusAddress = .system
var policy = PhonePolicy.strict
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    func value() -> String {
        guard let v = arguments.popFirst() else { fail(2, "\(argument) needs a value\n\n" + usage) }
        return v
    }
    switch argument {
    case "--help", "-h":
        print(usage, terminator: "")
        exit(0)
    case "--adapter": adapter = value()
    case "--peer": peer = value().uppercased()
    case "--bus": busAddress = .address(value())
    case "--lenient": policy = .lenient
    default: fail(2, "unknown argument \(argument)\n\n" + usage)
    }
}
guard let adapter, let peer else { fail(2, "--adapter and --peer are required\n\n" + usage) }

/// One JSON line per event on standard output, written whole.
let output = Mutex(())
let report: @Sendable (JSONObject) -> Void = { object in
    let line = Array((JSONValue.object(object).serialized + "\n").utf8)
    output.withLock { _ in
        var offset = 0
        while offset < line.count {
            let written = try? Errno.retrying { line[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) } }
            guard let written, written > 0 else { return }
            offset += written
        }
    }
}

/// Standard input, line by line (reads block). The main thread reads the settings line, then
/// one reader thread takes over: never two at once.
final class StandardInputLines: @unchecked Sendable {
    private var pending: [UInt8] = []
    private var buffer = [UInt8](repeating: 0, count: 4096)
    private var atEnd = false
    private(set) var number = 0

    /// The next line and its 1-based number; nil at the end of input.
    func next() -> (number: Int, text: String)? {
        while true {
            if let newline = pending.firstIndex(of: 0x0A) {
                defer { pending.removeSubrange(...newline) }
                number += 1
                return (number, String(decoding: pending[..<newline], as: UTF8.self))
            }
            if atEnd {
                guard !pending.isEmpty else { return nil }
                defer { pending = [] }
                number += 1
                return (number, String(decoding: pending, as: UTF8.self))
            }
            let n = (try? Errno.retrying { read(0, &buffer, buffer.count) }) ?? -1
            if n <= 0 { atEnd = true } else { pending += buffer[0..<n] }
        }
    }
}

let input = StandardInputLines()
var parsedSettings: ScenarioSettings?
while parsedSettings == nil, let line = input.next() {
    guard !Scenario.isBlankOrComment(Substring(line.text)) else { continue }
    do { parsedSettings = try ScenarioSettings(parsingLine: line.text, number: line.number) } catch { fail(2, "scenario \(error)") }
}
guard let settings = parsedSettings else { fail(2, "standard input ended before the scenario's settings line") }

let steps = AsyncStream<ScenarioStep> { continuation in
    DispatchQueue(label: "ancs-gatt-phone.stdin").async {
        while let line = input.next() {
            guard !Scenario.isBlankOrComment(Substring(line.text)) else { continue }
            do {
                continuation.yield(try ScenarioStep(parsingLine: line.text, number: line.number, settings: settings))
            } catch {
                fail(2, "scenario \(error)")
            }
        }
        continuation.finish()
    }
}

do {
    let phone = try GattPhone(.init(adapter: adapter, peer: peer, bus: busAddress, settings: settings, policy: policy), report: report)
    try await phone.run(steps: steps)
    exit(0)
} catch {
    fail(1, "\(error)")
}
