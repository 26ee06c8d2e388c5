#if canImport(Glibc)
import Glibc
#endif
import ANCSDesktop
import ANCSRuntime
import ANCSSession
import DBus

/// `ancsd desktop`: the phones' notifications as desktop notifications, in a user's session.
enum DesktopCommand {
    static let help = """
    Usage: ancsd desktop [options]

    Shows the notifications of the phones that "ancsd run" follows as desktop notifications
    (org.freedesktop.Notifications on the session bus), in the user's graphical session: one
    per phone notification, updated when the phone modifies it and closed when the phone
    removes it or stays away. The phone's actions (Reply/Clear, Answer/Decline, ...) become
    the notification's buttons, and a click on one is sent back to the phone; a click on the
    notification itself only closes it. Identical notifications share one. Follows the daemon
    as it restarts and the phones as they reconnect, keeping what it shows (nothing pops up
    twice, nothing the user dismissed comes back, also after the companion's own restart: it
    remembers what it showed, as fingerprints without content, in --state-dir); stops cleanly
    (closing what it shows) on SIGTERM or SIGINT.

    GNOME Shell and KDE Plasma file the notifications under the desktop entry ancsd.desktop
    ("iPhone"), where a user can silence them; as they show that name in place of the app's,
    the phone app's name leads each title there ("Messages · Ada").

    Each phone whose player ancsd follows (Apple Media Service) is also a media player on the
    session bus (MPRIS: org.mpris.MediaPlayer2.ancsd_<address>), which the desktop's media
    controls, playerctl and media keys show and drive: play, pause, next, previous, volume.

    The systemd user unit ancsd-desktop.service runs it:
      systemctl --user enable --now ancsd-desktop.service
    The user needs access to the control socket (its group, see --control-group of "run").

    Options:
      --control PATH       the daemon's control socket (default \(DesktopCompanion.defaultControlPath))
      --bus ADDRESS        the D-Bus bus of the notification server (default: the session bus,
                           DBUS_SESSION_BUS_ADDRESS)
      --replay-settle SECONDS
                           after the daemon or a phone comes back, how long its replay may take
                           before notifications it no longer has are closed (default 10)
      --no-mpris           put no MPRIS media player on the bus for the phones' players
      --state-dir DIR      where to remember what was shown, in the file desktop-shown
                           (default $XDG_STATE_HOME/ancsd, else ~/.local/state/ancsd; "": in
                           memory only, forgotten when the companion stops)
      --log-level LEVEL    debug, info (default), warning or error; notification content and
                           track titles are logged only at debug
      -h, --help           show this help
    """

    /// The signals `desktop` handles: blocked in `main` before any thread starts, read from a
    /// signalfd on the loop (`SignalWatch`).
    static let handledSignals = [SIGTERM, SIGINT]

    static func parse(_ arguments: [String]) throws(UsageError) -> (DesktopCompanion.Options, LogLevel)? {
        var options = DesktopCompanion.Options()
        var level = LogLevel.info
        var stateDirectory = defaultStateDirectory()
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            switch argument {
            case .option("--help", _), .option("-h", _):
                return nil
            case .option("--control", let inline):
                options.controlPath = try scanner.value(of: "--control", inline: inline)
                guard !options.controlPath.isEmpty else { throw UsageError("--control needs a path") }
            case .option("--bus", let inline):
                let address = try scanner.value(of: "--bus", inline: inline)
                guard !address.isEmpty else { throw UsageError("--bus needs a D-Bus address") }
                options.bus = .address(address)
            case .option("--replay-settle", let inline):
                let text = try scanner.value(of: "--replay-settle", inline: inline)
                guard let seconds = Double(text), seconds.isFinite, seconds >= 0, seconds <= 3600 else {
                    throw UsageError("--replay-settle takes seconds from 0 to 3600, not '\(text)'")
                }
                options.replaySettle = .milliseconds(Int(seconds * 1000))
            case .option("--no-mpris", let inline):
                guard inline == nil else { throw UsageError("--no-mpris takes no value") }
                options.mpris = false
            case .option("--state-dir", let inline):
                stateDirectory = try scanner.value(of: "--state-dir", inline: inline)
            case .option("--log-level", let inline):
                let name = try scanner.value(of: "--log-level", inline: inline)
                guard let parsed = LogLevel(name: name) else {
                    throw UsageError("--log-level must be debug, info, warning or error, not '\(name)'")
                }
                level = parsed
            case .option(let name, _):
                throw UsageError("unknown option \(name)")
            case .positional(let value):
                throw UsageError("desktop takes no arguments, got '\(value)'")
            }
        }
        if let stateDirectory, !stateDirectory.isEmpty {
            options.shownRecord = stateDirectory + "/" + DesktopCompanion.shownRecordName
        }
        return (options, level)
    }

    /// `$XDG_STATE_HOME/ancsd`, else `$HOME/.local/state/ancsd`; nil when neither is set.
    static func defaultStateDirectory() -> String? {
        if let state = getenv("XDG_STATE_HOME").map({ String(cString: $0) }), state.hasPrefix("/") { return state + "/ancsd" }
        if let home = getenv("HOME").map({ String(cString: $0) }), home.hasPrefix("/") { return home + "/.local/state/ancsd" }
        return nil
    }

    /// Makes the directory of `file` and those above it (0700: what was shown is the user's).
    static func makeDirectory(of file: String) {
        var path = ""
        for component in file.split(separator: "/").dropLast() {
            path += "/" + component
            mkdir(path, 0o700)
        }
    }

    /// Runs `ancsd desktop` until SIGTERM/SIGINT (exit 0) or until the bus fails (exit 1).
    static func run(_ arguments: [String], executor: DaemonExecutor) async -> Int32 {
        let options: DesktopCompanion.Options
        let level: LogLevel
        do {
            guard let parsed = try parse(arguments) else {
                print(help)
                return 0
            }
            (options, level) = parsed
        } catch {
            return usageFailure(error, command: "desktop")
        }
        signal(SIGPIPE, SIG_IGN)
        if let file = options.shownRecord { makeDirectory(of: file) }
        let logger = Logger(threshold: level)
        let companion = DesktopCompanion(options: options, logger: logger, executor: executor)
        let task = Task(executorPreference: executor) { try await companion.run() }
        // Blocked since main began (`handledSignals`): one that came before is read now.
        guard let signals = await SignalWatch.stopping(task, on: handledSignals, loop: executor, logger: logger) else { return 1 }
        defer { signals.cancel() }
        do {
            try await task.value
            return 0
        } catch DBusError.connectionFailed(let message) {
            logger.error("cannot connect to the D-Bus session bus (\(message))")
            return 1
        } catch {
            logger.error("\(error)")
            return 1
        }
    }
}
