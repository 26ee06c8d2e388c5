#if canImport(Glibc)
import Glibc
#endif
import ANCSDaemon
import ANCSRuntime
import ANCSSession
import BlueZ
import DBus
import EventLoop
import MQTT

/// `ancsd run`: the daemon.
enum RunCommand {
    static let help = """
    Usage: ancsd [--bus ADDRESS] run [options]

    Shows the notifications of every bonded iPhone that is connected and shares them (ANCS):
    added, modified and removed, with app name, title, subtitle, message, date and actions.
    Follows phones that walk away and come back and bluetoothd restarting. Stops cleanly on
    SIGTERM or SIGINT. Pair a phone first with 'ancsd pair'; while running, ancsd keeps a
    connectable advertisement so bonded phones reconnect, and refuses every pairing request.

    Options:
    \(Setting.optionsHelp)
    \(Setting.helpEntry("--config PATH", configHelp))
    \(Setting.helpEntry("-h, --help", "show this help"))

    \(Setting.reloadHelp)

    Logs go to standard error, with journald priorities when run by systemd.
    """

    private static let configHelp = """
        read settings from PATH (default /etc/ancsd/ancsd.conf, if it exists), whose keys are the long options' names \
        ("format = json"); the command line overrides it, SIGHUP re-reads it
        """

    /// The signals `run` handles: blocked in `main` before any thread starts, read from a
    /// signalfd on the daemon's loop (`SignalWatch`).
    static let handledSignals = [SIGTERM, SIGINT, SIGHUP]

    /// The default configuration file; a missing default file is not an error.
    static let defaultConfigPath = "/etc/ancsd/ancsd.conf"

    /// The command line, kept as key/value pairs so a reload can apply it over a new file.
    struct CommandLineSettings {
        var configPath: String?
        var pairs: [(key: String, value: String)] = []
    }

    /// The settings' flags (`--no-advertise`) and the key and value each stands for.
    private static let flags = Dictionary(
        Setting.all.compactMap { setting in setting.flag.map { ($0.option, (key: setting.key, value: $0.value)) } },
        uniquingKeysWith: { first, _ in first })

    static func parse(_ arguments: [String], bus: String?) throws(UsageError) -> CommandLineSettings? {
        var settings = CommandLineSettings()
        if let bus { settings.pairs.append(("bus", bus)) }
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            switch argument {
            case .option("--help", _), .option("-h", _):
                return nil
            case .option("--config", let inline):
                settings.configPath = try scanner.value(of: "--config", inline: inline)
            case .option(let name, nil) where flags[name] != nil:
                if let flag = flags[name] { settings.pairs.append(flag) }
            case .option(let name, let inline) where name.hasPrefix("--") && RunSettings.keys.contains(String(name.dropFirst(2))):
                settings.pairs.append((String(name.dropFirst(2)), try scanner.value(of: name, inline: inline)))
            case .option(let name, _):
                throw UsageError("unknown option \(name)")
            case .positional(let value):
                throw UsageError("run takes no arguments, got '\(value)'")
            }
        }
        // Check every value now, so a mistake is reported before anything starts.
        var check = RunSettings()
        for (key, value) in settings.pairs {
            do { try check.set(key, value) } catch { throw UsageError("--\(error.description)") }
        }
        return settings
    }

    /// The configuration file's settings with the command line's on top. A list key
    /// (`Setting.isList`: `--device`, `--only-app`, …) on the command line replaces the file's
    /// list rather than adding to it. Without a state directory, systemd's `$STATE_DIRECTORY`.
    static func load(_ commandLine: CommandLineSettings) throws(SettingError) -> RunSettings {
        var settings = RunSettings()
        let path = commandLine.configPath ?? defaultConfigPath
        switch readTextFile(path) {
        case .success(let text):
            try settings.apply(configuration: text, path: path)
        case .failure(let error):
            if commandLine.configPath != nil || error.rawValue != ENOENT {
                throw SettingError("cannot read \(path): \(error.description)")
            }
        }
        for key in RunSettings.listKeys where commandLine.pairs.contains(where: { $0.key == key }) { settings.clear(key) }
        if settings.options.stateDirectory == nil, let directory = getenv("STATE_DIRECTORY").map({ String(cString: $0) }),
           let first = directory.split(separator: ":").first, first.hasPrefix("/") {
            settings.options.stateDirectory = String(first)  // systemd's StateDirectory=
        }
        for (key, value) in commandLine.pairs { try settings.set(key, value) }
        // Keys that only work together, checked once both sources are in.
        if let mqtt = settings.mqtt { try MQTTCredentials.check(mqtt) }
        settings.options.recording.softwareVersion = ancsdVersion
        return settings
    }

    /// Runs `ancsd run`. Call it with `executor` as the task's executor preference (main.swift
    /// does): every job of the daemon then runs on that one event loop, never on Swift's
    /// global executor, whose first use starts libdispatch's 1 Hz workqueue monitor.
    static func run(_ arguments: [String], bus: String?, executor: DaemonExecutor) async -> Int32 {
        let commandLine: CommandLineSettings
        let settings: RunSettings
        switch start(arguments, bus: bus) {
        case .run(let parsed, let loaded):
            commandLine = parsed
            settings = loaded
        case .exit(let status):
            return status
        }
        signal(SIGPIPE, SIG_IGN)
        let logger = Logger(threshold: settings.logLevel)
        let notifier = SystemdNotifier()
        let stdout = LineSink(fd: STDOUT_FILENO, name: "standard output", ownsDescriptor: false, logger: logger, loop: executor)
        let output: OutputRouter
        do {
            output = try makeOutput(settings, stdout: stdout, logger: logger, executor: executor)
        } catch {
            logger.error("\(error)")
            return 2  // a FIFO or an MQTT setting that cannot work: a mistake in the configuration
        }
        // The file pages only start-up needed are given back (ProcessMemory) on the daemon's
        // loop 200 ms after it is ready, once start-up is over: done at ready itself, or beside
        // it on another thread, it delays the last start-up steps, which widens a shutdown race
        // (docs/history/performance.md, "A shutdown race found on the way").
        let daemon = Daemon(
            options: settings.options, output: output, logger: logger, notifier: notifier, executor: executor,
            onReady: {
                executor.after(.milliseconds(200)) { ProcessMemory.releaseStartupText() }
            })
        var control: ControlServer?
        if let path = settings.controlPath {
            // Nil: a setting that cannot work, as the man page says of --control.
            guard let server = await openControl(at: path, settings: settings, daemon: daemon, logger: logger, executor: executor)
            else { return 2 }
            control = server
        }
        defer { control?.stop() }
        let task = Task(executorPreference: executor) { try await daemon.run() }
        let reloader = Reloader(commandLine: commandLine, settings: settings, output: output, executor: executor)

        // The signals are blocked since main began (`handledSignals`): one that came during
        // start-up waited, pending, and is read now; a SIGHUP never killed ancsd.
        guard let signals = await SignalWatch.stopping(
            task, on: handledSignals, loop: executor, logger: logger, stopping: { notifier.stopping() },
            other: { _ in  // SIGHUP
                Task(executorPreference: executor) {
                    await reloader.reload(daemon: daemon, stdout: stdout, logger: logger, notifier: notifier)
                }
            })
        else { return 1 }
        defer { signals.cancel() }

        let watchdog = startWatchdog(notifier, daemon: daemon, executor: executor)
        defer { watchdog?.cancel() }

        let status: Int32
        do {
            try await task.value
            status = 0
        } catch {
            logger.error("\(describe(error))")
            status = 1
        }
        let finalOutput = await reloader.output
        _ = await finalOutput.flush(timeout: .seconds(2))
        finalOutput.stop()
        return status
    }

    /// What `ancsd run` starts with: the command line and the settings, or the status to exit
    /// with at once (the help was printed, or what is wrong was said).
    private enum Start {
        case run(CommandLineSettings, RunSettings)
        case exit(Int32)
    }

    /// Parses the command line, loads the settings, and checks the directories they name.
    private static func start(_ arguments: [String], bus: String?) -> Start {
        let commandLine: CommandLineSettings
        do {
            guard let parsed = try parse(arguments, bus: bus) else {
                print(help)
                return .exit(0)
            }
            commandLine = parsed
        } catch {
            return .exit(usageFailure(error, command: "run"))
        }
        let settings: RunSettings
        do {
            settings = try load(commandLine)
        } catch {
            logError("\(error)")
            return .exit(2)
        }
        if let directory = settings.options.recording.directory, let problem = unusableDirectory(directory) {
            logError("cannot record into \(directory): \(problem)")
            return .exit(2)
        }
        if let directory = settings.options.stateDirectory, let problem = unusableDirectory(directory) {
            logError("cannot keep state in \(directory): \(problem)")
            return .exit(2)
        }
        return .run(commandLine, settings)
    }

    /// The control socket at `path`, attached to `daemon` and listening; nil when it cannot be
    /// made (the log says why).
    private static func openControl(
        at path: String, settings: RunSettings, daemon: Daemon, logger: Logger, executor: DaemonExecutor
    ) async -> ControlServer? {
        do {
            let server = try ControlServer(
                path: path, group: settings.controlGroup, handler: daemon, logger: logger, loop: executor)
            await daemon.attach(control: server)
            server.start()
            logger.info("control socket at \(path)")
            return server
        } catch {
            logger.error("\(error)")
            return nil
        }
    }

    /// The watchdog's timer, when systemd asks for one: answered on the daemon's executor, so a
    /// wedged daemon stops answering. It is the only periodic wakeup.
    private static func startWatchdog(_ notifier: SystemdNotifier, daemon: Daemon, executor: DaemonExecutor) -> LoopTimer? {
        notifier.watchdogInterval.map { interval -> LoopTimer in
            let timer = executor.makeTimer {
                daemon.assumeIsolated { daemon in if daemon.ping() { notifier.watchdog() } }
            }
            timer.schedule(after: interval / 2, repeating: interval / 2)
            return timer
        }
    }

    /// The outputs the settings ask for: standard output, and the FIFO if one is named.
    ///
    /// Standard output is left out when it is the journal (a systemd unit's default): events carry
    /// the phone's titles and messages, which anyone who may read the system log would read there.
    ///
    /// Every output is an `OutputSink`; a new kind of output is made here and nowhere else.
    /// A reload passes the `current` router: its exec sink is kept, with the new command for
    /// events not yet started (commands in flight finish, waiting events keep their order), and
    /// so is its MQTT sink if its settings did not change (a reload does not reconnect).
    static func makeOutput(
        _ settings: RunSettings, stdout: LineSink, logger: Logger, executor: DaemonExecutor, current: OutputRouter? = nil
    ) throws -> OutputRouter {
        let format = settings.format ?? (isatty(STDOUT_FILENO) == 1 ? .text : .json)
        var sinks: [any OutputSink] = []
        if Logger.isJournal(STDOUT_FILENO) {
            logger.info("standard output is the journal: events are not written there (their content is private); read them from the FIFO or the control socket")
        } else {
            stdout.format = format
            sinks.append(stdout)
        }
        if let path = settings.fifoPath {
            let fifo = try openOutputFIFO(path: path, mode: settings.fifoMode)
            sinks.append(LineSink(owning: fifo, name: path, format: format, logger: logger, loop: executor))
        }
        if let mqtt = settings.mqtt {
            if let kept = current?.sinks.lazy.compactMap({ $0 as? MQTTSink }).first(where: { $0.settings == mqtt }) {
                sinks.append(kept)
            } else {
                // Said once for this output: a reload that keeps it says nothing again.
                var password: String?
                if let file = mqtt.passwordFile {
                    let read = try MQTTCredentials.readPassword(file)
                    password = read.password
                    if let warning = read.warning { logger.warning(warning) }
                }
                if let warning = MQTTCredentials.plainTextWarning(mqtt.endpoint, hasPassword: password != nil) { logger.warning(warning) }
                sinks.append(try MQTTSink(
                    settings: mqtt, password: password, version: ancsdVersion, logger: logger,
                    clientID: "ancsd-\(hostName())-\(getpid())", executor: executor))
            }
        }
        // Last: nothing after it may throw, so a reload that fails changes no command.
        if let command = settings.execCommand {
            if let kept = current?.sinks.lazy.compactMap({ $0 as? ExecSink }).first {
                kept.reconfigure(command: command, timeout: settings.execTimeout)
                sinks.append(kept)
            } else {
                sinks.append(ExecSink(command: command, timeout: settings.execTimeout, logger: logger, loop: executor))
            }
        }
        return OutputRouter(sinks: sinks, loop: executor)
    }

    /// This machine's host name, for the MQTT client id.
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "host" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "host" : name
    }

    /// Re-reads the configuration on SIGHUP and applies it without dropping the phones.
    actor Reloader {
        let commandLine: CommandLineSettings
        var settings: RunSettings
        var output: OutputRouter
        let executor: DaemonExecutor

        nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

        init(commandLine: CommandLineSettings, settings: RunSettings, output: OutputRouter, executor: DaemonExecutor) {
            self.commandLine = commandLine
            self.settings = settings
            self.output = output
            self.executor = executor
        }

        func reload(daemon: Daemon, stdout: LineSink, logger: Logger, notifier: SystemdNotifier) async {
            notifier.reloading()
            let fresh: RunSettings
            do {
                fresh = try RunCommand.load(commandLine)
            } catch {
                logger.error("reload failed, keeping the current settings: \(error)")
                notifier.reloaded(status: await daemon.statusLine)
                return
            }
            // All or nothing: a reload that cannot apply everything changes nothing, and the
            // next SIGHUP tries the same file again.
            let changed = RunSettings.changes(from: settings, to: fresh)
            let restartOnly = changed.filter { $0.reload == .restart }.map(\.key)
            guard restartOnly.isEmpty else {
                logger.error("""
                    reload refused, nothing changed: \(restartOnly.joined(separator: ", ")) take\(restartOnly.count == 1 ? "s" : "") \
                    effect only when ancsd starts (systemctl restart ancsd)
                    """)
                notifier.reloaded(status: await daemon.statusLine)
                return
            }
            var newOutput: OutputRouter? = nil
            if changed.contains(where: { $0.reload == .outputs }) {
                do {
                    newOutput = try RunCommand.makeOutput(fresh, stdout: stdout, logger: logger, executor: executor, current: output)
                } catch {
                    logger.error("reload failed, nothing changed: \(error)")
                    notifier.reloaded(status: await daemon.statusLine)
                    return
                }
                output = newOutput ?? output
            }
            logger.threshold = fresh.logLevel
            settings = fresh
            await daemon.update(options: fresh.options, output: newOutput)
            let keys = changed.map(\.key).joined(separator: ", ")
            let outputs = newOutput == nil ? "" : "; the outputs were made again"
            logger.info("reloaded the configuration (\(changed.isEmpty ? "no change" : "changed: \(keys)\(outputs)"))")
            notifier.reloaded(status: await daemon.statusLine)
        }
    }

    /// Why ancsd cannot write files in `path`, if it cannot: it is missing, not a directory,
    /// or not writable and searchable.
    static func unusableDirectory(_ path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else { return systemError() }
        guard (info.st_mode & S_IFMT) == S_IFDIR else { return "it is not a directory" }
        return access(path, W_OK | X_OK) == 0 ? nil : systemError()
    }

    private static func describe(_ error: any Error) -> String {
        guard let error = error as? DBusError else { return "\(error)" }
        switch error {
        case .connectionFailed(let message): return "cannot connect to the D-Bus bus (\(message)); is dbus running?"
        case .disconnected: return "the D-Bus bus went away"
        default: return "\(error)"
        }
    }
}
