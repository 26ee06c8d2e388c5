import ANCSDaemon
import ANCSRuntime
import BlueZ
import JSON

/// `ancsd list`, `ancsd action` and `ancsd status`: clients of the control socket.
enum ClientCommands {
    static let listHelp = """
    Usage: ancsd list [--device ADDR] [--json] [--control PATH]

    Lists the notifications that the running daemon holds, per phone: one line each, as
    "ancsd run --format text" prints them, or the control socket's JSON reply with --json.
    --control PATH names the daemon's control socket (default /run/ancsd/control).
    """

    static let actionHelp = """
    Usage: ancsd action DEVICE UID positive|negative [--control PATH]

    Asks the phone to perform a notification's positive action (for example "Answer") or
    negative action (for example "Decline" or "Clear"), and reports its answer. Exit status 0
    when the phone performed it, 1 when it refused (the notification is gone, the action failed,
    or the notification has no such action), 2 for a mistake on the command line.
    """

    static let statusHelp = """
    Usage: ancsd status [--json] [--control PATH]

    Shows what the running daemon is doing: bluetoothd, adapters, each phone's connection and
    subscription, session age, notifications, whether the phone shares its notifications, and
    the last error; then each output's counts (lines written and dropped, commands run and
    failed, whether MQTT is connected). Notification content is never shown.
    """

    struct Options {
        var control = ControlClient.defaultPath
        var json = false
        var device: String?
        var positional: [String] = []
    }

    static func parse(_ arguments: [String], command: String, allowJSON: Bool, allowDevice: Bool) throws(UsageError) -> Options? {
        var options = Options()
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            switch argument {
            case .option("--help", _), .option("-h", _):
                return nil
            case .option("--control", let inline):
                options.control = try scanner.value(of: "--control", inline: inline)
            case .option("--json", nil) where allowJSON:
                options.json = true
            case .option("--device", let inline) where allowDevice:
                let value = try scanner.value(of: "--device", inline: inline)
                guard let address = normalizedAddress(value) else { throw UsageError("--device needs a Bluetooth address, not '\(value)'") }
                options.device = address
            case .option(let name, _):
                throw UsageError("unknown option \(name)")
            case .positional(let value):
                options.positional.append(value)
            }
        }
        return options
    }

    static func list(_ arguments: [String]) -> Int32 {
        let options: Options
        do {
            guard let parsed = try parse(arguments, command: "list", allowJSON: true, allowDevice: true) else { print(listHelp); return 0 }
            guard parsed.positional.isEmpty else { throw UsageError("list takes no arguments") }
            options = parsed
        } catch { return usageFailure(error, command: "list") }
        var request: JSONObject = ["cmd": "list"]
        if let device = options.device { request["device"] = .string(device) }
        return exchange(options.control, request) { reply in
            if options.json { print(reply.serialized); return 0 }
            let devices = reply["devices"]?.arrayValue ?? []
            if devices.isEmpty { print("no phone connected") }
            for device in devices {
                let address = device["device"]?.stringValue ?? "?"
                let notifications = device["notifications"]?.arrayValue ?? []
                print("\(address)\(device["name"]?.stringValue.map { " (\(TerminalText.sanitize($0)))" } ?? ""): \(notifications.count) notification(s)")
                for notification in notifications {
                    print("  " + textLine(notification))
                }
            }
            return 0
        }
    }

    static func action(_ arguments: [String]) -> Int32 {
        let options: Options
        let device: String, uid: UInt32, action: String
        do {
            guard let parsed = try parse(arguments, command: "action", allowJSON: false, allowDevice: false) else { print(actionHelp); return 0 }
            guard parsed.positional.count == 3 else { throw UsageError("action needs DEVICE UID positive|negative") }
            guard let address = normalizedAddress(parsed.positional[0]) else { throw UsageError("'\(parsed.positional[0])' is not a Bluetooth address") }
            guard let number = UInt32(parsed.positional[1]) else { throw UsageError("'\(parsed.positional[1])' is not a notification UID") }
            guard ["positive", "negative"].contains(parsed.positional[2]) else { throw UsageError("the action is positive or negative, not '\(parsed.positional[2])'") }
            (options, device, uid, action) = (parsed, address, number, parsed.positional[2])
        } catch { return usageFailure(error, command: "action") }
        let request: JSONObject = ["cmd": "action", "device": .string(device), "uid": .int(Int(uid)), "action": .string(action)]
        return exchange(options.control, request, timeout: 40) { _ in
            print("\(device): the phone performed the \(action) action on notification \(uid)")
            return 0
        }
    }

    static func status(_ arguments: [String]) -> Int32 {
        let options: Options
        do {
            guard let parsed = try parse(arguments, command: "status", allowJSON: true, allowDevice: false) else { print(statusHelp); return 0 }
            guard parsed.positional.isEmpty else { throw UsageError("status takes no arguments") }
            options = parsed
        } catch { return usageFailure(error, command: "status") }
        return exchange(options.control, ["cmd": "status"]) { reply in
            if options.json { print(reply.serialized); return 0 }
            print("ancsd \(reply["version"]?.stringValue ?? "?"), up \(reply["uptime_s"]?.intValue ?? 0) s")
            print("bluetoothd: \(reply["bluetoothd"]?.stringValue ?? "?"); adapters: \(reply["adapters"]?.arrayValue?.compactMap(\.stringValue).joined(separator: ", ") ?? "none")")
            let devices = reply["devices"]?.arrayValue ?? []
            if devices.isEmpty { print("no phone connected") }
            for device in devices {
                let sharing = device["sharing_allowed"]?.boolValue.map {
                    $0 ? "allowed" : "OFF: the phone refuses requests (on the iPhone: Settings > Bluetooth > (i) > Share System Notifications)"
                } ?? "not known yet"
                let renewals = device["resubscriptions"]?.intValue ?? 0
                let shared = device["shared_notify_session"]?.stringValue.map {
                    "; another program holds notifications of the \($0): renewing cannot reach the phone"
                } ?? ""
                print("""
                    \(device["device"]?.stringValue ?? "?") \(device["name"]?.stringValue.map { "(\(TerminalText.sanitize($0)))" } ?? "")
                      connected: \(device["connected"]?.boolValue == true ? "yes" : "no"), subscribed: \(device["subscribed"]?.boolValue == true ? "yes" : "no") (\(device["delivery"]?.stringValue ?? "-"))
                      session: \(device["session_age_s"]?.intValue ?? 0) s, \(device["notifications"]?.intValue ?? 0) notification(s), \(device["events"]?.intValue ?? 0) event(s)
                      notification sharing: \(sharing)
                      subscriptions renewed: \(renewals)\(shared)
                      filtered out: \(device["filtered"]?.intValue ?? 0), replays held back: \(device["held_back"]?.intValue ?? 0)\(filterMatches(device))
                      last error: \(device["last_error"]?.stringValue.map(TerminalText.sanitize) ?? "none")
                    """)
            }
            let outputs = reply["outputs"]?.arrayValue ?? []
            if !outputs.isEmpty { print("outputs:") }
            for output in outputs { print("  " + outputLine(output)) }
            return 0
        }
    }

    /// "exec: started 12, succeeded 11, failed 1, timed out 0, …": an output's name and counters.
    static func outputLine(_ output: JSONValue) -> String {
        let members = output.objectValue?.members.filter { $0.key != "name" } ?? []
        let counters = members.map { member -> String in
            let value = member.value.boolValue.map { $0 ? "yes" : "no" } ?? member.value.intValue.map(String.init) ?? member.value.serialized
            return String(member.key.map { $0 == "_" ? " " : $0 }) + " " + value
        }
        return (output["name"]?.stringValue ?? "?") + ": " + counters.joined(separator: ", ")
    }

    /// ", filters matched: only-app com.apple.* 3, ignore-category news 0", or nothing without filters.
    private static func filterMatches(_ device: JSONValue) -> String {
        guard let matches = device["filter_matches"]?.objectValue, !matches.members.isEmpty else { return "" }
        return ", filters matched: " + matches.map { "\($0.key) \($0.value.intValue ?? 0)" }.joined(separator: ", ")
    }

    /// Sends a request and hands a successful reply to `body`; reports errors (exit 1).
    private static func exchange(_ path: String, _ request: JSONObject, timeout: Int32 = 15, _ body: (JSONValue) -> Int32) -> Int32 {
        do {
            let client = try ControlClient(path: path)
            let reply = try client.request(request, timeout: timeout)
            if let (code, message) = controlError(reply) {
                logError("\(message) (\(code))")
                return 1
            }
            return body(reply)
        } catch {
            logError("\(error)")
            return 1
        }
    }

    /// A notification as one readable line.
    static func textLine(_ n: JSONValue) -> String {
        let app = n["app_name"]?.stringValue ?? n["app_id"]?.stringValue ?? n["category"]?.stringValue ?? "notification"
        var line = "#\(n["uid"]?.intValue ?? 0)  " + EventFormatter.summary(
            app: app, title: n["title"]?.stringValue, subtitle: n["subtitle"]?.stringValue,
            message: n["message"]?.stringValue, truncated: n["truncated"]?.boolValue)
        let actions = EventFormatter.actionLabels(n["positive_action"]?.stringValue, n["negative_action"]?.stringValue)
        if !actions.isEmpty { line += "  [actions: " + actions.joined(separator: "/") + "]" }
        return line
    }
}
