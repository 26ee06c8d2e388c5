import ANCSControl
import ANCSDaemon
import ANCSRuntime
import EventLoop
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
        var control = ControlSocket.defaultPath
        var json = false
        var device: BluetoothAddressText?
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
                guard let address = BluetoothAddressText(value) else { throw UsageError("--device needs a Bluetooth address, not '\(value)'") }
                options.device = address
            case .option(let name, _):
                throw UsageError("unknown option \(name)")
            case .positional(let value):
                options.positional.append(value)
            }
        }
        return options
    }

    static func list(_ arguments: [String], loop: EventLoop) async -> Int32 {
        let options: Options
        do {
            guard let parsed = try parse(arguments, command: "list", allowJSON: true, allowDevice: true) else { print(listHelp); return 0 }
            guard parsed.positional.isEmpty else { throw UsageError("list takes no arguments") }
            options = parsed
        } catch { return usageFailure(error, command: "list") }
        return await exchange(options.control, .list(device: options.device), loop: loop) { answer in
            if options.json { print(JSONValue.object(ControlReply(id: nil, .success(answer)).json).serialized); return 0 }
            guard case .list(let phones) = answer else { return 1 }
            if phones.isEmpty { print("no phone connected") }
            for phone in phones {
                print("\(phone.device)\(phone.name.map { " (\(TerminalText.sanitize($0)))" } ?? ""): \(phone.notifications.count) notification(s)")
                for notification in phone.notifications {
                    print("  " + textLine(notification))
                }
            }
            return 0
        }
    }

    static func action(_ arguments: [String], loop: EventLoop) async -> Int32 {
        let options: Options
        let device: BluetoothAddressText, uid: UInt32, action: ControlAction
        do {
            guard let parsed = try parse(arguments, command: "action", allowJSON: false, allowDevice: false) else { print(actionHelp); return 0 }
            guard parsed.positional.count == 3 else { throw UsageError("action needs DEVICE UID positive|negative") }
            guard let address = BluetoothAddressText(parsed.positional[0]) else { throw UsageError("'\(parsed.positional[0])' is not a Bluetooth address") }
            guard let number = UInt32(parsed.positional[1]) else { throw UsageError("'\(parsed.positional[1])' is not a notification UID") }
            guard let chosen = ControlAction(rawValue: parsed.positional[2]) else { throw UsageError("the action is positive or negative, not '\(parsed.positional[2])'") }
            (options, device, uid, action) = (parsed, address, number, chosen)
        } catch { return usageFailure(error, command: "action") }
        return await exchange(options.control, .action(device: device, uid: uid, action: action), timeout: .seconds(40), loop: loop) { _ in
            print("\(device): the phone performed the \(action.rawValue) action on notification \(uid)")
            return 0
        }
    }

    static func status(_ arguments: [String], loop: EventLoop) async -> Int32 {
        let options: Options
        do {
            guard let parsed = try parse(arguments, command: "status", allowJSON: true, allowDevice: false) else { print(statusHelp); return 0 }
            guard parsed.positional.isEmpty else { throw UsageError("status takes no arguments") }
            options = parsed
        } catch { return usageFailure(error, command: "status") }
        return await exchange(options.control, .status, loop: loop) { answer in
            if options.json { print(JSONValue.object(ControlReply(id: nil, .success(answer)).json).serialized); return 0 }
            guard case .status(let status) = answer else { return 1 }
            print("ancsd \(status.version), up \(status.uptimeSeconds) s")
            print("bluetoothd: \(status.bluetoothdRunning ? "running" : "absent"); adapters: \(status.adapters.isEmpty ? "none" : status.adapters.joined(separator: ", "))")
            print("accessory: \(DoctorCommand.describe(status.accessory))")
            if status.devices.isEmpty { print("no phone connected") }
            for device in status.devices {
                let sharing = device.sharingAllowed.map {
                    $0 ? "allowed" : "OFF: the phone refuses requests (on the iPhone: Settings > Bluetooth > (i) > Share System Notifications)"
                } ?? "not known yet"
                let shared = device.sharedNotifySession.map {
                    "; another program holds notifications of the \($0): renewing cannot reach the phone"
                } ?? ""
                print("""
                    \(device.device) \(device.name.map { "(\(TerminalText.sanitize($0)))" } ?? "")
                      connected: \(device.connected ? "yes" : "no"), subscribed: \(device.subscribed ? "yes" : "no") (\(device.delivery ?? "-"))
                      session: \(device.sessionAgeSeconds) s, \(device.notifications) notification(s), \(device.events) event(s)
                      notification sharing: \(sharing)
                      subscriptions renewed: \(device.resubscriptions)\(shared)
                      filtered out: \(device.filtered), replays held back: \(device.heldBack)\(filterMatches(device))
                      last error: \(device.lastError.map(TerminalText.sanitize) ?? "none")
                    """)
            }
            if !status.outputs.isEmpty { print("outputs:") }
            for output in status.outputs { print("  " + outputLine(output)) }
            return 0
        }
    }

    /// "exec: started 12, succeeded 11, failed 1, timed out 0, …": an output's name and counters.
    static func outputLine(_ output: ControlOutputStatus) -> String {
        let counters = output.counters.map { counter -> String in
            let value: String
            switch counter.value {
            case .count(let count): value = String(count)
            case .state(let state): value = state ? "yes" : "no"
            }
            return String(counter.name.map { $0 == "_" ? " " : $0 }) + " " + value
        }
        return output.name + ": " + counters.joined(separator: ", ")
    }

    /// ", filters matched: only-app com.apple.* 3, ignore-category news 0", or nothing without filters.
    private static func filterMatches(_ device: ControlPhoneStatus) -> String {
        guard !device.filterMatches.isEmpty else { return "" }
        return ", filters matched: " + device.filterMatches.map { "\($0.filter) \($0.count)" }.joined(separator: ", ")
    }

    /// Sends a request and hands its answer to `body`; reports errors (exit 1).
    private static func exchange(
        _ path: String, _ command: ControlCommand, timeout: Duration = .seconds(15), loop: EventLoop,
        _ body: (ControlAnswer) -> Int32
    ) async -> Int32 {
        do throws(ControlClientError) {
            return body(try await ControlClient.request(command, path: path, timeout: timeout, loop: loop))
        } catch {
            logError(describe(error, path: path))
            return 1
        }
    }

    /// A client's failure for a person, with what to check when the daemon cannot be reached.
    static func describe(_ error: ControlClientError, path: String) -> String {
        guard case .unreachable = error else { return "\(error)" }
        return "\(error); is \"ancsd run --control \(path)\" running (systemctl status ancsd), and may you use it (group ancsd)?"
    }

    /// A notification as one readable line.
    static func textLine(_ n: ControlNotification) -> String {
        let app = n.appName ?? n.appID ?? n.category
        var line = "#\(n.uid)  " + EventFormatter.summary(app: app, title: n.title, subtitle: n.subtitle, message: n.message, truncated: n.truncated)
        let actions = EventFormatter.actionLabels(n.positiveAction, n.negativeAction)
        if !actions.isEmpty { line += "  [actions: " + actions.joined(separator: "/") + "]" }
        return line
    }
}
