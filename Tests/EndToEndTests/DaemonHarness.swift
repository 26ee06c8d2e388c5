import Foundation
import JSON
import TestSupport

/// `ancsd run` against the simulated iPhone on a private bus, as a user would run them.
final class DaemonRun {
    let bus: PrivateBus
    let ancsd: ChildProcess
    let phone: ChildProcess
    let scenario: URL

    /// Starts ancsd (JSON output, debug logs) and then the simulator with `scenario` — a file in
    /// `scenarios/`, or the text of one. `launcher`: a command that runs ancsd (its path and
    /// arguments appended), such as `unshare`.
    init(
        scenario name: String? = nil, text: String? = nil, ancsdArguments: [String] = [], environment: [String: String] = [:],
        launcher: [String] = []
    ) throws {
        bus = try PrivateBus()
        if let text {
            scenario = URL(fileURLWithPath: bus.directory).appendingPathComponent("scenario.jsonl")
            try text.write(to: scenario, atomically: true, encoding: .utf8)
        } else {
            scenario = repositoryRoot.appendingPathComponent("scenarios/\(name ?? "demo").jsonl")
        }
        let executable = builtProductsDirectory.appendingPathComponent("ancsd")
        let arguments = ["--bus", bus.address, "run", "--format", "json", "--log-level", "debug"] + ancsdArguments
        ancsd = try ChildProcess(
            launcher.first.map { URL(fileURLWithPath: $0) } ?? executable,
            launcher.isEmpty ? arguments : launcher.dropFirst() + [executable.path] + arguments,
            environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { _, new in new })
        try ancsd.waitForStandardError(containing: "bluetoothd is not running")
        phone = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"),
            ["--bus", bus.address, "--scenario", scenario.path])
    }

    /// The JSON events ancsd printed so far.
    var events: [JSONValue] {
        ancsd.lines.compactMap { try? JSONValue(parsing: $0.text) }
    }

    /// Waits for the phone's scenario to end and ancsd to see it go, then stops ancsd; returns
    /// every event it printed.
    func finish(timeout: Duration = .seconds(90)) throws -> [JSONValue] {
        let phoneStatus = try phone.wait(timeout: timeout)
        guard phoneStatus == 0 else {
            throw TestFailure("the simulator exited with \(phoneStatus):\n\(phone.standardError)")
        }
        try ancsd.waitUntilBluetoothdGone()
        let status = try ancsd.stop()
        guard status == 0 else { throw TestFailure("ancsd exited with \(status):\n\(ancsd.standardError)") }
        return events
    }

    deinit {
        _ = try? phone.stop(timeout: .seconds(5))
        _ = try? ancsd.stop(timeout: .seconds(5))
        bus.stop()
    }
}

extension ChildProcess {
    /// Waits until `ancsd run` has seen the simulated bluetoothd leave the bus (the simulator
    /// ended): it has handled everything the phone sent before, and ended its sessions.
    func waitUntilBluetoothdGone() throws {
        func lines(endingWith text: String) -> Int { standardError.split(separator: "\n").filter { $0.hasSuffix(text) }.count }
        try waitUntil("ancsd to see bluetoothd go:\n\(standardError)") {
            !isRunning || lines(endingWith: "bluetoothd went away") >= lines(endingWith: "bluetoothd is back")
        }
    }
}

extension Array where Element == JSONValue {
    /// The notification events of a type.
    func of(_ type: String) -> [JSONValue] { filter { $0["type"]?.stringValue == type } }

    /// The first notification event of a type with this title.
    func first(_ type: String, title: String) -> JSONValue? {
        first { $0["type"]?.stringValue == type && $0["title"]?.stringValue == title }
    }

    /// The titles of the events of a type, in order.
    func titles(_ type: String) -> [String] { of(type).compactMap { $0["title"]?.stringValue } }

    /// The events split into sessions at each `connected` of `device`.
    func sessions(of device: String) -> [[JSONValue]] {
        var sessions: [[JSONValue]] = []
        for event in self where event["device"]?.stringValue == device {
            if event["type"] == "connected" { sessions.append([]) }
            if !sessions.isEmpty { sessions[sessions.count - 1].append(event) }
        }
        return sessions
    }
}

/// Every field version 1 promises for a notification event.
let notificationFields = [
    "v", "type", "device", "uid", "category", "category_id", "category_count", "flags", "pre_existing", "seen_before", "app_id",
    "app_name", "title", "subtitle", "message", "message_size", "truncated", "date", "positive_action",
    "negative_action", "complete",
]
