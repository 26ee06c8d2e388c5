#if canImport(Glibc)
import Glibc
#endif
import ANCSDaemon
import ANCSSession
import BlueZ
import DBus
import Dispatch

/// `ancsd run`: the daemon.
enum RunCommand {
    static let help = """
    Usage: ancsd [--bus ADDRESS] run [options]

    Shows the notifications of every bonded iPhone that is connected and shares them (ANCS):
    added, modified and removed, with app name, title, subtitle, message, date and actions.
    Follows phones that walk away and come back and bluetoothd restarting. Stops cleanly on
    SIGTERM or SIGINT.

    Options:
      --format text|json   output format: one readable line per event (default on a terminal)
                           or JSON Lines (default otherwise; see docs/output.md)
      --fifo PATH          also write events to the named pipe PATH (created if missing); the
                           daemon never blocks on it, and events written while no reader is
                           attached wait for the next one, up to a bound
      --fifo-mode MODE     permissions of a FIFO that ancsd creates, in octal (default 0600)
      --device ADDR        only this phone (AA:BB:CC:DD:EE:FF); repeat for several
      --adapter hciN       only phones on this adapter
      --bus ADDRESS        the D-Bus bus where bluetoothd runs (default: the system bus, or
                           DBUS_SYSTEM_BUS_ADDRESS)
      --no-acquire-notify  receive notifications as D-Bus signals (StartNotify) instead of
                           AcquireNotify sockets
      --log-level LEVEL    debug, info (default), warning or error; notification content is
                           logged only at debug
      -h, --help           show this help

    Logs go to standard error, with journald priorities when run by systemd.
    """

    struct Configuration {
        var options = DaemonOptions()
        var format: OutputFormat?
        var fifoPath: String?
        var fifoMode: mode_t = 0o600
        var logLevel = LogLevel.info
    }

    static func parse(_ arguments: [String], bus: String?) throws(UsageError) -> Configuration? {
        var configuration = Configuration()
        if let bus { configuration.options.bus = .address(bus) }
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            switch argument {
            case .option("--help", _), .option("-h", _):
                return nil
            case .option("--format", let inline):
                let value = try scanner.value(of: "--format", inline: inline)
                guard let format = OutputFormat(rawValue: value) else { throw UsageError("--format must be text or json, not '\(value)'") }
                configuration.format = format
            case .option("--fifo", let inline):
                let value = try scanner.value(of: "--fifo", inline: inline)
                guard !value.isEmpty else { throw UsageError("--fifo needs a path") }
                configuration.fifoPath = value
            case .option("--fifo-mode", let inline):
                let value = try scanner.value(of: "--fifo-mode", inline: inline)
                guard let mode = mode_t(value, radix: 8), mode <= 0o777 else {
                    throw UsageError("--fifo-mode must be octal permissions such as 0600, not '\(value)'")
                }
                configuration.fifoMode = mode
            case .option("--device", let inline):
                let value = try scanner.value(of: "--device", inline: inline)
                guard let address = normalizedAddress(value) else {
                    throw UsageError("--device needs a Bluetooth address such as AA:BB:CC:DD:EE:FF, not '\(value)'")
                }
                configuration.options.devices.insert(address)
            case .option("--adapter", let inline):
                let value = try scanner.value(of: "--adapter", inline: inline)
                guard value.hasPrefix("hci"), let number = Int(value.dropFirst(3)), number >= 0 else {
                    throw UsageError("--adapter needs an adapter name such as hci0, not '\(value)'")
                }
                configuration.options.adapter = value
            case .option("--bus", let inline):
                let value = try scanner.value(of: "--bus", inline: inline)
                guard !value.isEmpty else { throw UsageError("--bus needs a D-Bus address") }
                configuration.options.bus = .address(value)
            case .option("--no-acquire-notify", nil):
                configuration.options.preferAcquireNotify = false
            case .option("--log-level", let inline):
                let value = try scanner.value(of: "--log-level", inline: inline)
                guard let level = LogLevel(name: value) else {
                    throw UsageError("--log-level must be debug, info, warning or error, not '\(value)'")
                }
                configuration.logLevel = level
            case .option(let name, _):
                throw UsageError("unknown option \(name)")
            case .positional(let value):
                throw UsageError("run takes no arguments, got '\(value)'")
            }
        }
        return configuration
    }

    static func run(_ arguments: [String], bus: String?) async -> Int32 {
        let configuration: Configuration
        do {
            guard let parsed = try parse(arguments, bus: bus) else {
                print(help)
                return 0
            }
            configuration = parsed
        } catch {
            return usageFailure(error, command: "run")
        }
        signal(SIGPIPE, SIG_IGN)
        let logger = Logger(threshold: configuration.logLevel)
        let format = configuration.format ?? (isatty(STDOUT_FILENO) == 1 ? .text : .json)
        var sinks = [LineSink(fd: STDOUT_FILENO, name: "standard output", ownsDescriptor: false, logger: logger)]
        if let path = configuration.fifoPath {
            do {
                let fd = try openOutputFIFO(path: path, mode: configuration.fifoMode)
                sinks.append(LineSink(fd: fd, name: path, ownsDescriptor: true, logger: logger))
            } catch {
                logger.error("\(error)")
                return 1
            }
        }
        let daemon = Daemon(options: configuration.options, output: OutputRouter(format: format, sinks: sinks), logger: logger)
        let task = Task { try await daemon.run() }
        let signals = [SIGTERM, SIGINT].map { number -> any DispatchSourceSignal in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                logger.info("stopping (\(number == SIGTERM ? "SIGTERM" : "SIGINT"))")
                task.cancel()
            }
            source.resume()
            return source
        }
        defer { signals.forEach { $0.cancel() } }
        let status: Int32
        do {
            try await task.value
            status = 0
        } catch {
            logger.error("\(describe(error, bus: configuration.options.bus))")
            status = 1
        }
        for sink in sinks { _ = sink.flush(timeout: .seconds(2)) }
        return status
    }

    private static func describe(_ error: any Error, bus: BusAddress) -> String {
        guard let error = error as? DBusError else { return "\(error)" }
        switch error {
        case .connectionFailed(let message): return "cannot connect to the D-Bus bus (\(message)); is dbus running?"
        case .disconnected: return "the D-Bus bus went away"
        default: return "\(error)"
        }
    }
}
