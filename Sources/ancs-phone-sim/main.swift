// ancs-phone-sim: a simulated bluetoothd with iPhones that speak ANCS, driven by a scenario.
import DBus
import Glibc
import PhoneSimulator

let usage = """
    usage: ancs-phone-sim --scenario FILE [--bus ADDRESS] [--timeline FILE]

    Owns org.bluez on a D-Bus bus and presents BlueZ 5.66's API for one adapter and the
    phones the scenario describes, answering ANCS like an iPhone. See docs/simulator.md.

      --scenario FILE   the scenario (JSON Lines); required
      --bus ADDRESS     the bus to use (default: $DBUS_SYSTEM_BUS_ADDRESS, else the system bus)
      --timeline FILE   append {"uid":N,"event":"added","t_ns":T} per Notification Source
                        event sent (T: CLOCK_MONOTONIC nanoseconds)
      --help            show this help

    Exit status: 0 at the scenario's end, 1 on a bus failure, 2 on a bad scenario or
    command line, 3 when a wait_subscribed step timed out.

    """

func fail(_ status: Int32, _ message: String) -> Never {
    standardErrorLog(message)
    exit(status)
}

var scenarioPath: String?
var busAddress: BusAddress = .system
var timelinePath: String?
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
    case "--scenario": scenarioPath = value()
    case "--bus": busAddress = .address(value())
    case "--timeline": timelinePath = value()
    default: fail(2, "unknown argument \(argument)\n\n" + usage)
    }
}
guard let scenarioPath else { fail(2, "--scenario is required\n\n" + usage) }

/// Reads a whole file; nil if it cannot be read.
func readFile(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = read(fd, &buffer, buffer.count)
        if n < 0 && errno == EINTR { continue }
        guard n >= 0 else { return nil }
        if n == 0 { return out }
        out += buffer[0..<n]
    }
}

guard let bytes = readFile(scenarioPath) else { fail(2, "cannot read \(scenarioPath): \(String(cString: strerror(errno)))") }
let scenario: Scenario
do {
    scenario = try Scenario(parsing: String(decoding: bytes, as: UTF8.self))
} catch {
    fail(2, "\(scenarioPath): \(error)")
}

var timeline: Timeline?
if let timelinePath {
    guard let t = Timeline(path: timelinePath) else { fail(2, "cannot open the timeline \(timelinePath)") }
    timeline = t
}

let simulator = PhoneSimulator(settings: scenario.settings, bus: busAddress, timeline: timeline)
standardErrorLog("scenario \"\(scenario.settings.name)\": \(scenario.steps.count) steps")
let steps = simulator.preload(scenario.steps)
do {
    try await simulator.start()
} catch {
    fail(1, "\(error)")
}
let outcome = await simulator.run(steps)
await simulator.stop()
timeline?.close()
switch outcome {
case .ended:
    standardErrorLog("scenario \"\(scenario.settings.name)\" ended")
    exit(0)
case .failed(let line, let message, let timedOut):
    fail(timedOut ? 3 : 1, "\(scenarioPath): line \(line): \(message)")
}
