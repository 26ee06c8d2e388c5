#if canImport(Glibc)
import Glibc
#endif
import ANCSControl
import ANCSDaemon
import BlueZ
import DBus
import EventLoop
import JSON

/// `ancsd doctor`: checks the setup and says how to fix each problem. Never shows content.
enum DoctorCommand {
    static let help = """
    Usage: ancsd [--bus ADDRESS] doctor [--json] [--control PATH] [--fifo PATH]

    Checks, one line each, with a plain-language fix for every problem:
      bluetoothd is running, an adapter is powered, a phone is bonded, the phone exposes ANCS
      (Apple Notification Center Service), the phone shares its notifications, the daemon's
      control socket answers, MQTT (when configured) is connected, no output dropped events or
      saw its commands fail, and the FIFO can be read.
    --json prints the checks as one JSON object instead ({"ok": …, "checks": [{"ok", "warning",
    "what", "fix"}]}), as "ancsd report" includes them.
    Exit status 0 when every check passes, 1 otherwise. Notification content is never shown.
    """

    struct Check {
        var ok: Bool
        var what: String
        var fix: String?
        /// A warning: printed as "warn", and the exit status stays 0.
        var warning = false

        /// `{"ok": …, "warning": …, "what": …, "fix": …}` (`fix` only for a check that did not pass).
        var json: JSONValue {
            var object: JSONObject = ["ok": .bool(ok), "warning": .bool(warning), "what": .string(what)]
            if let fix, !ok { object.append("fix", .string(fix)) }
            return .object(object)
        }
    }

    /// The checks as `--json` prints them.
    static func json(_ checks: [Check]) -> JSONValue {
        .object(["ok": .bool(passed(checks)), "checks": .array(checks.map(\.json))])
    }

    /// True when every check passed or only warned.
    static func passed(_ checks: [Check]) -> Bool { checks.allSatisfy { $0.ok || $0.warning } }

    struct Options {
        var control = ControlSocket.defaultPath
        var fifo = "/run/ancsd/events"
        var bus: BusAddress = .system
        var json = false
    }

    /// The options, or nil for --help.
    static func parse(_ arguments: [String], bus: String?) throws(UsageError) -> Options? {
        var options = Options()
        if let bus { options.bus = .address(bus) }
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            switch argument {
            case .option("--help", _), .option("-h", _): return nil
            case .option("--control", let inline): options.control = try scanner.value(of: "--control", inline: inline)
            case .option("--fifo", let inline): options.fifo = try scanner.value(of: "--fifo", inline: inline)
            case .option("--bus", let inline): options.bus = .address(try scanner.value(of: "--bus", inline: inline))
            case .option("--json", nil): options.json = true
            case .option(let name, _): throw UsageError("unknown option \(name)")
            case .positional(let value): throw UsageError("doctor takes no arguments, got '\(value)'")
            }
        }
        return options
    }

    // Swift 6.3.1's optimizer crashes (coroutine splitting, swifterror) on typed throws inside
    // this async function, so parsing lives in the synchronous `parse` above.
    static func run(_ arguments: [String], bus: String?, loop: EventLoop) async -> Int32 {
        let parsed: Result<Options?, UsageError> = Result { () throws(UsageError) in try parse(arguments, bus: bus) }
        let options: Options
        switch parsed {
        case .success(nil):
            print(help)
            return 0
        case .success(let value?):
            options = value
        case .failure(let error):
            return usageFailure(error, command: "doctor")
        }
        let checks = await checks(options, loop: loop)
        if options.json {
            print(json(checks).serialized)
        } else {
            for check in checks {
                print("\(check.ok ? "ok  " : check.warning ? "warn" : "FAIL") \(check.what)")
                if let fix = check.fix, !check.ok { print("     → \(fix)") }
            }
        }
        return passed(checks) ? 0 : 1
    }

    /// Every check, in the order printed: bluetoothd and the adapter, the daemon, the FIFO.
    static func checks(_ options: Options, loop: EventLoop) async -> [Check] {
        var checks = await bluetoothChecks(options.bus)
        checks += await daemonChecks(control: options.control, loop: loop)
        checks.append(fifoCheck(options.fifo))
        return checks
    }

    private static func bluetoothChecks(_ bus: BusAddress) async -> [Check] {
        let connection: DBusConnection
        do {
            connection = try await DBusConnection.connect(to: bus, timeout: .seconds(5), activatesServices: false)
        } catch {
            return [Check(ok: false, what: "the system D-Bus bus answers", fix: "start dbus (systemctl start dbus); ancsd talks to bluetoothd over it (\(error))")]
        }
        defer { Task { await connection.close() } }
        var checks: [Check] = [Check(ok: true, what: "the system D-Bus bus answers")]
        let tree: BlueZObjectTree
        do {
            tree = BlueZObjectTree(try await connection.getManagedObjects(destination: BlueZ.service, timeout: .seconds(5)))
            checks.append(Check(ok: true, what: "bluetoothd is running"))
        } catch {
            checks.append(Check(ok: false, what: "bluetoothd is running", fix: "install and start BlueZ: apt install bluez; systemctl enable --now bluetooth"))
            return checks
        }
        let powered = tree.adapters.filter { tree.property($0, BlueZ.adapterInterface, "Powered")?.boolValue == true }
        checks.append(Check(
            ok: !powered.isEmpty,
            what: tree.adapters.isEmpty ? "a Bluetooth adapter is present" : "a Bluetooth adapter is powered (\(tree.adapters.count) found)",
            fix: tree.adapters.isEmpty ? "plug in or enable a Bluetooth LE adapter (rfkill list; dmesg | grep -i bluetooth)" : "power it on: bluetoothctl power on (and check rfkill list)"))
        let bonded = tree.devices.filter(\.isBonded)
        checks.append(Check(ok: !bonded.isEmpty, what: "a phone is bonded (\(bonded.count) bonded device(s))",
                            fix: "pair the iPhone once: ancsd pair (then confirm the passkey on both)"))
        let withANCS = bonded.filter { tree.ancsCharacteristics(of: $0.path) != nil }
        checks.append(Check(
            ok: !withANCS.isEmpty, what: "a bonded phone exposes ANCS (connected: \(withANCS.filter(\.connected).count))",
            fix: "bring the iPhone near with Bluetooth on; if it is connected but ANCS is missing, forget this computer on the phone and pair again"))
        return checks
    }

    private static func daemonChecks(control: String, loop: EventLoop) async -> [Check] {
        let status: ControlStatus
        do throws(ControlClientError) {
            guard case .status(let answer) = try await ControlClient.request(.status, path: control, timeout: .seconds(5), loop: loop) else {
                throw ControlClientError.unreadable(ControlDecodingError("not a status reply"))
            }
            status = answer
        } catch {
            return [Check(ok: false, what: "ancsd answers on \(control)",
                          fix: "start it (systemctl start ancsd) or name its socket with --control; to use it without root, join the group ancsd: \(error)")]
        }
        var checks = [Check(ok: true, what: "ancsd answers on \(control)")]
        checks.append(accessoryCheck(status.accessory))
        let denied = status.devices.filter { $0.sharingAllowed == false }.map(\.device)
        checks.append(Check(
            ok: denied.isEmpty,
            what: denied.isEmpty ? "the connected phones share their notifications" : "notification sharing is off on \(denied.joined(separator: ", "))",
            fix: "on the iPhone: Settings > Bluetooth > (i) next to this computer > turn on Share System Notifications"))
        // A filter that matched nothing the phone sent in this session is often a typo.
        for device in status.devices {
            let idle = device.filterMatches.filter { $0.count == 0 }.map(\.filter)
            guard !device.filterMatches.isEmpty else { continue }
            let address = device.device
            checks.append(Check(
                ok: idle.isEmpty,
                what: idle.isEmpty ? "every filter matched a notification of \(address)"
                    : "no notification of \(address) in this session matched: \(idle.joined(separator: "; "))",
                fix: "check the bundle identifiers and category names (\"ancsd list\" shows the apps' app_id); a filter that matches nothing filters nothing",
                warning: true))
        }
        return checks + outputChecks(status.outputs.map { .object($0.json) })
    }

    /// The accessory shape and where it is registered, as `status` and `doctor` say it:
    /// "keyboard (seen listed by iOS 26), registered on hci0".
    static func describe(_ accessory: ControlAccessoryStatus) -> String {
        guard let kind = AccessoryKind(parsing: accessory.shape), let shape = kind.shape else {
            return "\(accessory.shape) (no HID accessory: only the ANCS solicitation)"
        }
        let evidence = shape.proven ? "the shape seen listed by iOS 26" : "inferred, not seen listed by an iPhone"
        return "\(kind.rawValue) (\(evidence)), " + (accessory.registeredOn.map { "registered on \($0)" } ?? "not registered")
    }

    /// Which shape is registered; not registered (no paired phone yet, --no-advertise) is a warning.
    static func accessoryCheck(_ accessory: ControlAccessoryStatus) -> Check {
        let registered = accessory.registeredOn != nil || AccessoryKind(parsing: accessory.shape) == .disabled
        return Check(
            ok: registered, what: "the HID accessory: \(describe(accessory))",
            fix: "it is registered while a paired iPhone is known and unless --no-advertise (pair with: ancsd pair --accessory \(accessory.shape)); the log says why not (journalctl -u ancsd)",
            warning: true)
    }

    /// MQTT not connected fails; events an output dropped and commands that failed are warnings.
    static func outputChecks(_ outputs: [JSONValue]) -> [Check] {
        var checks: [Check] = []
        for output in outputs {
            let name = output["name"]?.stringValue ?? "?"
            if let connected = output["connected"]?.boolValue {
                let queued = output["queued"]?.intValue ?? 0
                checks.append(Check(
                    ok: connected, what: connected ? "ancsd is connected to \(name)" : "ancsd is not connected to \(name) (\(queued) message(s) waiting)",
                    fix: "check that the broker runs and listens at that address, and the credentials; the log says why "
                        + "(journalctl -u ancsd); under systemd the unit needs network access for it (docs/mqtt.md)"))
            }
            if let failed = output["failed"]?.intValue, failed > 0 {
                checks.append(Check(
                    ok: false, what: "\(failed) of \(output["started"]?.intValue ?? 0) commands run by exec failed",
                    fix: "the log has each one's exit status and standard error (journalctl -u ancsd)", warning: true))
            }
            if let dropped = output["dropped"]?.intValue, dropped > 0 {
                checks.append(Check(
                    ok: false, what: "\(name) dropped \(dropped) event(s)",
                    fix: "its reader, command or broker was slower than the events or away (docs/output.md says how much each output holds)",
                    warning: true))
            }
        }
        return checks
    }

    private static func fifoCheck(_ path: String) -> Check {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return Check(ok: true, what: "no FIFO at \(path) (not used)")
        }
        guard (info.st_mode & S_IFMT) == S_IFIFO else {
            return Check(ok: false, what: "\(path) is a FIFO", fix: "remove it; ancsd creates the FIFO itself")
        }
        let readable = access(path, R_OK) == 0
        return Check(ok: readable, what: "the FIFO \(path) is readable", fix: "join its group (usermod -aG ancsd $USER, then log in again)")
    }
}
