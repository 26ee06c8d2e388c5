import Foundation
import JSON
import TestSupport

/// A real GNOME Shell for `ancsd desktop`: the shell headless (`--headless --wayland`, a virtual
/// monitor drawn by llvmpipe) on a private session bus and a private system bus, in a mount
/// namespace of its own with a tmpfs over /run/systemd (so it does not look for a systemd user
/// session), with a private HOME and XDG directories. The session bus can activate only the
/// shell's notification helper (`org.gnome.Shell.Notifications`, the gjs program that owns
/// `org.freedesktop.Notifications`) and dconf, as on a desktop.
///
/// The shell runs with `--unsafe-mode`, so `org.gnome.Shell.Eval` reads its banner, message list
/// and media controls and presses their buttons through a probe of the version's own objects
/// (`Fixtures/gnome-shell-<version>.js`: one interface, written for 43 and for 48).
final class GnomeShellDesktop {
    /// A notification as the shell shows it: the banner, or an entry of the message list.
    struct Shown: Equatable, Decodable {
        var title: String?
        /// The text as drawn: markup already read.
        var body: String?
        var buttons: [String]
        var urgency: Int?
        /// The notification's source: what GNOME names the application.
        var source: String?
        /// The source's name as drawn in the notification's header (48; 43 draws none).
        var header: String?
    }

    /// A player in the shell's media controls.
    struct Player: Equatable, Decodable {
        var title: String?
        var artist: String?
    }

    struct State: Decodable {
        var banner: Shown?
        /// The titles of the notifications waiting for the banner, in order.
        var queue: [String]
        var list: [Shown]
        var media: [Player]
    }

    /// The shell's major version (43 on Debian 12, 48 on Debian 13).
    let version: Int
    let bus: PrivateBus
    private let system: PrivateBus
    private let directory: String
    private let probe: String
    private var shell: ChildProcess?
    private let environment: [String: String]

    init() throws {
        try UnitRun.needs("gnome-shell")
        let reported = try runTool("/usr/bin/gnome-shell", ["--version"]).text
        guard let major = reported.split(separator: " ").last?.split(separator: ".").first.flatMap({ Int($0) }) else {
            throw TestFailure("gnome-shell --version said '\(reported)'")
        }
        version = major
        let probeFile = repositoryRoot.appendingPathComponent("Tests/EndToEndTests/Fixtures/gnome-shell-\(major >= 45 ? 48 : 43).js")
        probe = try String(contentsOf: probeFile, encoding: .utf8)
        // The directory for the session bus's service files comes first: the bus reads it.
        let session = try makeDesktopSessionDirectory("ancsd-gnome")
        directory = session.path
        for service in ["org.gnome.Shell.Notifications", "ca.desrt.dconf"] {
            try FileManager.default.copyItem(
                atPath: "/usr/share/dbus-1/services/\(service).service", toPath: directory + "/services/\(service).service")
        }
        bus = try PrivateBus(serviceDirectory: directory + "/services")
        system = try PrivateBus()
        environment = session.environment.merging([
            // ancsd on the PATH, as where it is installed: GLib takes a desktop entry whose
            // program is not found for no entry at all.
            "PATH": builtProductsDirectory.path + ":/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8",
            "DBUS_SESSION_BUS_ADDRESS": bus.address, "DBUS_SYSTEM_BUS_ADDRESS": system.address,
            "LIBGL_ALWAYS_SOFTWARE": "1", "GSETTINGS_BACKEND": "memory", "NO_AT_BRIDGE": "1",
        ]) { $1 }
        // gnome-shell 43 segfaults when stopped (exit 139); its exit status is never a result.
        shell = try ChildProcess(
            URL(fileURLWithPath: "/usr/bin/unshare"),
            ["--mount", "/bin/sh", "-c",
             "mkdir -p /run/systemd && mount -t tmpfs tmpfs /run/systemd && exec nice gnome-shell --headless --wayland --no-x11 --unsafe-mode --virtual-monitor 1280x800"],
            environment: environment)
        // Ready in about 1.5 s here; the wait is generous and says what it waited for.
        let started = ContinuousClock.now
        var pending = "nothing asked yet"
        while true {
            do {
                if try eval("Main.layoutManager._startingUp === false") != .bool(true) {
                    pending = "the shell still starting up"
                } else if !ownsNotifications {
                    pending = "org.freedesktop.Notifications without an owner"
                } else { break }
            } catch { pending = "Eval: \(error)" }
            if ContinuousClock.now - started > .seconds(10) { killHungSpawns() }
            guard ContinuousClock.now - started < .seconds(180), shell?.isRunning == true else {
                throw TestFailure("""
                    GNOME Shell \(version) did not start (\(shell?.isRunning == true ? "running" : "exited") after \(ContinuousClock.now - started), \
                    waiting for \(pending)):\n\(shell?.standardError.suffix(4000) ?? "")
                    """)
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
        print("GNOME Shell \(version) ready after \(ContinuousClock.now - started)")
        // The shell's own startup notices ("Screen Lock disabled") would hold the one banner.
        try call("clear()")
    }

    /// Whether the shell's notification helper owns `org.freedesktop.Notifications` yet.
    private var ownsNotifications: Bool { busNameHasOwner("org.freedesktop.Notifications", on: bus.address) }

    /// `org.gnome.Shell.Eval` of `code`; the value it gave, or a failure with the shell's error.
    func eval(_ code: String) throws -> JSONValue {
        let text = try evalText(code)
        return text.isEmpty ? .null : try JSONValue(parsing: Array(text.utf8))
    }

    /// `org.gnome.Shell.Eval` of `code`; the JSON text of the value it gave.
    private func evalText(_ code: String) throws -> String {
        let reply = try runTool(
            "/usr/bin/busctl", ["--address=\(bus.address)", "--json=short", "call", "org.gnome.Shell", "/org/gnome/Shell",
                                "org.gnome.Shell", "Eval", "s", code], environment: environment)
        guard reply.status == 0, let data = try JSONValue(parsing: Array(reply.text.utf8))["data"]?.arrayValue, data.count == 2,
              let ok = data[0].boolValue, let text = data[1].stringValue
        else { throw TestFailure("Eval failed: \(reply.text)") }
        guard ok else { throw TestFailure("GNOME Shell \(version): \(text)") }
        return text
    }

    /// Calls one operation of the probe (`state()`, `clickButton("Reply")`, ...).
    @discardableResult
    func call(_ operation: String) throws -> JSONValue {
        try eval(probeCall(operation))
    }

    private func probeCall(_ operation: String) -> String { "const probe = \(probe); probe.\(operation)" }

    /// What the shell shows now.
    func state() throws -> State {
        let text = try evalText(probeCall("state()"))
        return try JSONDecoder().decode(State.self, from: Data(text.utf8))
    }

    /// A JavaScript string literal of `text`.
    static func literal(_ text: String) -> String { JSONValue.string(text).serialized }

    func clickButton(_ label: String) throws { try call("clickButton(\(Self.literal(label)))") }
    func clickBanner() throws { try call("clickBanner()") }
    func closeBanner() throws { try call("closeBanner()") }
    /// `dbus-monitor` of every `ActionInvoked` on the session bus (the bus lets anyone
    /// eavesdrop), whoever it is sent to: the lines it prints.
    func monitorActions() throws -> ChildProcess {
        let monitor = try ChildProcess(
            URL(fileURLWithPath: "/usr/bin/dbus-monitor"),
            ["--address", bus.address, "type='signal',interface='org.freedesktop.Notifications',member='ActionInvoked'"])
        try monitor.waitForLine { $0.contains("NameAcquired") || $0.contains("member=NameLost") || $0.hasPrefix("signal") }
        return monitor
    }

    /// Runs the tray's state machine, as the user's next move does: the next queued banner shows.
    func nudge() throws { try call("nudge()") }
    func mediaPlayPause() throws { try call("mediaPlayPause()") }
    func mediaNext() throws { try call("mediaNext()") }

    /// A screenshot of the whole screen as PNG at `path`; `openingList`: with the message list
    /// and media controls open (which marks every notification seen: none shows as a banner
    /// afterwards).
    func screenshot(to path: String, openingList: Bool = false) throws {
        if openingList {
            try call("openList()")
            // The drop-down eases in (opacity, position): shot once it has come to rest.
            let atRest = """
                (() => { const menu = Main.panel.statusArea.dateMenu.menu, box = menu.actor;
                  return menu.isOpen && box.opacity === 255 && box.translation_x === 0 && box.translation_y === 0
                    && box.get_transition('opacity') === null; })()
                """
            try waitUntil("the drop-down at rest") { try eval(atRest) == .bool(true) }
        }
        defer { if openingList { _ = try? call("closeList()") } }
        let reply = try runTool(
            "/usr/bin/busctl", ["--address=\(bus.address)", "call", "org.gnome.Shell.Screenshot", "/org/gnome/Shell/Screenshot",
                                "org.gnome.Shell.Screenshot", "Screenshot", "bbs", "false", "false", path], environment: environment)
        guard reply.status == 0, reply.text.contains("true") else { throw TestFailure("Screenshot failed: \(reply.text)") }
    }

    /// Waits until `predicate` gives a value; fails after `timeout` with what the shell showed.
    @discardableResult
    func wait<T>(_ what: String, timeout: Duration = .seconds(30), _ predicate: (State) throws -> T?) throws -> T {
        let deadline = ContinuousClock.now + timeout
        var last: State?
        while ContinuousClock.now < deadline {
            let state = try state()
            last = state
            if let value = try predicate(state) { return value }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw TestFailure("""
            GNOME Shell \(version) never showed \(what); banner: \(String(describing: last?.banner))
            queue: \(last?.queue ?? [])
            list: \(last?.list ?? [])
            media: \(last?.media ?? [])
            """)
    }

    /// GNOME Shell 43 starts `ibus-daemon` with `GLib.spawn_async` and a child setup written in
    /// JavaScript, which the forked child runs before its exec: now and then (1 start in about 15
    /// here, and once in CI) it waits forever for a GType lock another thread of the shell held at
    /// the fork, and the shell waits for it, answering nothing. A child still running the shell's
    /// program while the shell has not been ready for 10 s (an exec follows a fork within
    /// microseconds) is that one, and is killed: the spawn then fails (ibus-daemon is not needed
    /// here) and the shell goes on. `stop()` kills it too, or it would outlive the test.
    private func killHungSpawns() {
        guard let shell, shell.isRunning,
              let program = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(shell.pid)/exe"),
              let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return }
        for entry in entries {
            guard let pid = Int32(entry),
                  let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
                  status.split(separator: "\n").contains("PPid:\t\(shell.pid)"),
                  (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) == program
            else { continue }
            print("GNOME Shell \(version): its fork \(pid) hung before its exec (the ibus-daemon spawn's child setup); killed")
            kill(pid, SIGKILL)
        }
    }

    func stop() {
        killHungSpawns()
        shell?.signal(SIGKILL)
        _ = try? shell?.wait(timeout: .seconds(10))
        shell = nil
        bus.stop()
        system.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { stop() }
}
