#if canImport(Glibc)
import Glibc
#endif
import ANCSPairing
import ANCSRuntime
import BlueZ
import DBus
import EventLoop

/// `ancsd pair`: a pairing window for a new iPhone.
enum PairCommand {
    static let help = """
    Usage: ancsd [--bus ADDRESS] pair [options]

    Pairs an iPhone with this computer so that 'ancsd run' can show its notifications. For
    the pairing window only, ancsd advertises this computer as a discoverable LE peripheral
    (a HID accessory soliciting ANCS, so iOS lists it), serves the HID accessory, makes the
    adapter pairable and registers as the default pairing agent; the adapter's other settings
    (Discoverable, Connectable, alias) are not touched. On the iPhone, open Settings >
    Bluetooth and tap this computer's name (listed as a keyboard, or a remote with
    --accessory remote); ancsd asks a phone that connects to pair. If no phone has connected
    45 s into the window, ancsd says so and names the other shape to try. When both show the
    same six-digit passkey, confirm on the phone and here. Once the phone is bonded and shares
    ANCS, ancsd marks it trusted, tells you what to allow on the phone, puts the adapter's
    Pairable setting and its timeout back as they were and unregisters everything. Ctrl-C, SIGTERM
    or the timeout put everything back as well.

    Options:
      --name NAME       the name to advertise, cut to 29 bytes (default: the adapter's alias,
                        or the host name when the alias is empty or bluetoothd's "BlueZ X.Y")
      --timeout S       how long the window stays open, in seconds (default 120, at most 3600)
      --adapter hciN    the adapter to use (default: the first one that can advertise)
      --accessory keyboard|remote|none
                        serve a HID-over-GATT accessory whose attributes need encryption and
                        advertise the HID service, so iOS lists this computer in Settings >
                        Bluetooth, bonds when it reads them and later reconnects by itself; it
                        never sends a key. keyboard (default): the shape an iPhone (iOS 26.6)
                        was seen to list and bond, but iOS hides its on-screen keyboard while
                        it is connected (the keyboard icon, or disconnecting it in Settings >
                        Bluetooth, brings it back). remote (hid is the same): a media remote
                        that leaves the on-screen keyboard alone; that iOS lists it is
                        inferred, not seen. none: only the ANCS solicitation, for desktops
                        whose own Bluetooth stack already makes the phone list it
      --yes             accept the passkey without asking, for a first setup without a
                        keyboard (logged as a warning: any phone in range could pair)
      --bus ADDRESS     the D-Bus bus where bluetoothd runs (default: the system bus, or
                        DBUS_SYSTEM_BUS_ADDRESS)
      -h, --help        show this help

    The passkey is asked on the terminal; when standard input is not a terminal and --yes is
    not given, pairing requests are refused.

    Exit status:
      0    the phone is paired, bonded, exposes ANCS and is trusted
      1    failure: no bus, bluetoothd not running or gone, no usable adapter, a D-Bus error
      2    bad command line
      3    no phone paired within the timeout
      4    pairing refused: the passkey was not confirmed, or could not be asked
      130  interrupted (SIGINT); 143: terminated (SIGTERM)
    """

    static func parse(_ arguments: [String], bus: String?) throws(UsageError) -> PairingOptions? {
        var options = PairingOptions()
        if let bus { options.bus = .address(bus) }
        // For the tests only, undocumented: a shorter wait before the security request.
        if let text = getenv("ANCSD_SECURITY_REQUEST_DELAY").map({ String(cString: $0) }), let seconds = Double(text), (0...60).contains(seconds) {
            options.securityRequestDelay = .milliseconds(Int(seconds * 1000))
        }
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            switch argument {
            case .option("--help", _), .option("-h", _):
                return nil
            case .option("--name", let inline):
                let name = try scanner.value(of: "--name", inline: inline)
                guard !name.isEmpty, !name.utf8.contains(0), name.utf8.count <= 248 else {
                    throw UsageError("--name needs a name of 1 to 248 bytes")
                }
                options.name = name
            case .option("--timeout", let inline):
                let text = try scanner.value(of: "--timeout", inline: inline)
                guard let seconds = Int(text), (1...3600).contains(seconds) else {
                    throw UsageError("--timeout needs a number of seconds from 1 to 3600, not '\(text)'")
                }
                options.timeout = seconds
            case .option("--adapter", let inline):
                let name = try scanner.value(of: "--adapter", inline: inline)
                guard name.hasPrefix("hci"), let n = Int(name.dropFirst(3)), n >= 0 else {
                    throw UsageError("--adapter needs an adapter name such as hci0, not '\(name)'")
                }
                options.adapter = name
            case .option("--accessory", let inline):
                let value = try scanner.value(of: "--accessory", inline: inline)
                guard let kind = AccessoryKind(parsing: value) else {
                    throw UsageError("--accessory must be keyboard, remote or none, not '\(value)'")
                }
                options.accessory = kind
            case .option("--yes", nil), .option("-y", nil):
                options.yes = true
            case .option("--bus", let inline):
                options.bus = .address(try scanner.value(of: "--bus", inline: inline))
            case .option(let name, _):
                throw UsageError("unknown option \(name)")
            case .positional(let value):
                throw UsageError("pair takes no arguments, got '\(value)'")
            }
        }
        return options
    }

    /// Blocked in main before any thread starts, read from a signalfd on the loop (SignalWatch).
    static let handledSignals = [SIGINT, SIGTERM]

    static func run(_ arguments: [String], bus: String?, loop: EventLoop) async -> Int32 {
        var options: PairingOptions
        do {
            guard let parsed = try parse(arguments, bus: bus) else {
                print(help)
                return 0
            }
            options = parsed
        } catch {
            return usageFailure(error, command: "pair")
        }
        // The tests' way to reach the "no phone has connected" hint without waiting 45 s.
        if let text = getenv("ANCSD_PAIR_HINT_AFTER").map({ String(cString: $0) }), let seconds = Double(text),
           seconds.isFinite, seconds > 0, seconds < 3600 {
            options.noPhoneHintAfter = .milliseconds(Int(seconds * 1000))
        }
        signal(SIGPIPE, SIG_IGN)
        let logger = Logger(threshold: .info)
        let window = PairingWindow(options: options, logger: logger, interactive: isatty(STDIN_FILENO) == 1)
        // Ctrl-C or SIGTERM ends the window the way its timeout does: everything put back.
        let signals: SignalWatch
        do {
            signals = try SignalWatch(handledSignals, loop: loop) { number in
                Task(executorPreference: loop) { await window.finish(.interrupted(number)) }
            }
        } catch {
            logError("\(error)")
            return 1
        }
        defer { signals.cancel() }
        return await window.run()
    }
}
