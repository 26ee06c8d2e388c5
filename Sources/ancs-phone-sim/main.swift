// ancs-phone-sim: a simulated bluetoothd with iPhones that speak ANCS, driven by a scenario.
import DBus
import Dispatch
import Glibc
import JSON
import PhoneSimulator
import SystemCalls

let usage = """
    usage: ancs-phone-sim --scenario FILE [--bus ADDRESS] [--timeline FILE] [--events FILE] [--follow]

    Owns org.bluez on a D-Bus bus and presents BlueZ 5.66's API for one adapter and the
    phones the scenario describes, answering ANCS like an iPhone. See docs/simulator.md.

      --scenario FILE   the scenario (JSON Lines); required
      --bus ADDRESS     the bus to use (default: $DBUS_SYSTEM_BUS_ADDRESS, else the system bus)
      --timeline FILE   append {"uid":N,"event":"added","t_ns":T} per Notification Source
                        event sent (T: CLOCK_MONOTONIC nanoseconds)
      --events FILE     append one JSON line per thing the phones did: links, subscriptions,
                        Notification Source events sent, Control Point writes and answers
      --follow          after the scenario's steps, read more steps from standard input, one
                        JSON line each, and answer each on standard output once it is done
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
var eventsPath: String?
var follow = false
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
    case "--events": eventsPath = value()
    case "--follow": follow = true
    default: fail(2, "unknown argument \(argument)\n\n" + usage)
    }
}
guard let scenarioPath else { fail(2, "--scenario is required\n\n" + usage) }

let bytes: [UInt8]
do {
    bytes = try FileDescriptor.open(scenarioPath, O_RDONLY | O_CLOEXEC).readToEnd()
} catch {
    fail(2, "cannot read \(scenarioPath): \(error)")
}
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

var events: Timeline?
if let eventsPath {
    guard let t = Timeline(path: eventsPath) else { fail(2, "cannot open the events log \(eventsPath)") }
    events = t
}

let simulator = PhoneSimulator(settings: scenario.settings, bus: busAddress, timeline: timeline, events: events)
standardErrorLog("scenario \"\(scenario.settings.name)\": \(scenario.steps.count) steps")
let steps = simulator.preload(scenario.steps)
do {
    try await simulator.start()
} catch {
    fail(1, "\(error)")
}
var outcome = await simulator.run(steps)
if follow, outcome == .ended, !steps.contains(where: { if case .end = $0.action { true } else { false } }) {
    outcome = await followStandardInput()
}
await simulator.stop()
events?.close()
timeline?.close()
switch outcome {
case .ended:
    standardErrorLog("scenario \"\(scenario.settings.name)\" ended")
    exit(0)
case .failed(let line, let message, let timedOut):
    fail(timedOut ? 3 : 1, "\(scenarioPath): line \(line): \(message)")
}

/// Writes one line to standard output at once (the --follow answers).
func answer(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    bytes.withUnsafeBytes { _ = write(1, $0.baseAddress, $0.count) }
}

/// `--follow`: runs steps read from standard input, one JSON line each, in order. Each gets an
/// answer line on standard output once done: `{"line":N,"ok":true}`, or `"ok":false` with
/// `"error"` (a bad line or a failed step; the run goes on). Ends at an `end` step or EOF.
@MainActor func followStandardInput() async -> RunOutcome {
    // readLine blocks: it runs on a thread of its own, never on the concurrency pool.
    let (lines, continuation) = AsyncStream.makeStream(of: String.self)
    DispatchQueue(label: "ancs-phone-sim.stdin").async {
        while let line = readLine() { continuation.yield(line) }
        continuation.finish()
    }
    var number = 0
    for await text in lines {
        number += 1
        guard !Scenario.isBlankOrComment(Substring(text)) else { continue }
        let step: ScenarioStep
        do {
            step = try ScenarioStep(parsingLine: text, number: number, settings: scenario.settings)
        } catch {
            answer("{\"line\":\(number),\"ok\":false,\"error\":\(JSONValue.string("\(error)").serialized)}")
            continue
        }
        if case .end = step.action {
            answer("{\"line\":\(number),\"ok\":true}")
            return .ended
        }
        switch await simulator.run([step]) {
        case .ended: answer("{\"line\":\(number),\"ok\":true}")
        case .failed(_, let message, _):
            answer("{\"line\":\(number),\"ok\":false,\"error\":\(JSONValue.string(message).serialized)}")
        }
    }
    return .ended
}
