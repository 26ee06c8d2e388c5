import DBus
import Foundation
import Synchronization
import TestSupport

/// A real KDE Plasma notification server for `ancsd desktop`: plasmashell under Xvfb
/// (`QT_QPA_PLATFORM=xcb`; Qt's offscreen platform gives a screen Plasma takes for a fake one,
/// and the notification applet never loads), on a private session bus that can activate only
/// KDE's own services (the activity manager, kglobalaccel, kded: plasmashell aborts without
/// them; Plasma 6's kglobalacceld made activatable), with a private HOME and XDG directories holding ancsd's desktop entry.
///
/// Plasma has no D-Bus method that lists what it shows; it tells a registered watcher
/// (`org.kde.NotificationManager.RegisterWatcher`) each notification it accepts and each it
/// closes on request, which this harness records. A click on a button is
/// `org.kde.NotificationManager.InvokeAction`, which the server broadcasts as `ActionInvoked`,
/// as a click does. What only the screen shows (a popup's close button, the system tray's media
/// controller) is found with xdotool, clicked with it, and read back by OCR (tesseract).
final class PlasmaDesktop: Sendable {
    /// The virtual screen's width (its height is 800).
    let screenWidth = 1280

    /// A notification as the server accepted it (the watcher's `Notify`).
    struct Shown: Sendable {
        var id: UInt32
        var appName: String
        var replacesID: UInt32
        var summary: String
        var body: String
        var actions: [String]
        var hints: [String: DBusValue]
        var timeout: Int32
    }

    /// What the watcher heard, in order.
    enum Heard: Sendable {
        case notify(Shown)
        case close(UInt32)
    }

    /// Everything the server accepted, in order.
    var accepted: [Shown] { heard.compactMap { if case .notify(let shown) = $0 { shown } else { nil } } }

    /// What the server shows now: accepted, not closed since, by ID.
    var open: [UInt32: Shown] {
        var open: [UInt32: Shown] = [:]
        for event in heard {
            switch event {
            case .notify(let shown): open[shown.id] = shown
            case .close(let id): open[id] = nil
            }
        }
        return open
    }

    /// The notification shown now under `summary`.
    func showing(_ summary: String) -> Shown? { open.values.first { $0.summary == summary } }

    let bus: PrivateBus
    let display: String
    /// plasmashell's version, as it says (`plasmashell 5.27.5`).
    let version: String
    private let directory: String
    private let xvfb: ChildProcess
    private let shell: Mutex<ChildProcess?>
    private let record = Mutex<[Heard]>([])
    private let environment: [String: String]

    /// Starts Xvfb, the bus and plasmashell, and waits until it owns `org.freedesktop.Notifications`.
    init() throws {
        try UnitRun.needs("plasmashell")
        // Qt's minimal platform: plasmashell 6.3 segfaults on --version under offscreen (before it
        // prints anything; 5.27 does not), and KDE's crash handler (drkonqi, kept off by
        // KDE_DEBUG) then holds the output open for good, hanging the test.
        version = try runTool(
            "/usr/bin/plasmashell", ["--version"], environment: ["PATH": "/usr/bin:/bin", "QT_QPA_PLATFORM": "minimal", "KDE_DEBUG": "1"])
            .text.split(separator: "\n").last { $0.hasPrefix("plasmashell") }.map(String.init) ?? "plasmashell"
        let session = try makeDesktopSessionDirectory("ancsd-plasma")
        directory = session.path
        let files = FileManager.default
        // KDE's services, without those that claim org.freedesktop.Notifications (plasmashell
        // takes the name itself).
        for service in try files.contentsOfDirectory(atPath: "/usr/share/dbus-1/services")
        where service.hasPrefix("org.kde.") && service != "org.kde.plasma.Notifications.service" {
            try files.copyItem(atPath: "/usr/share/dbus-1/services/" + service, toPath: directory + "/services/" + service)
        }
        try Self.makeShortcutsActivatable(in: directory + "/services")
        xvfb = try ChildProcess(
            URL(fileURLWithPath: "/usr/bin/Xvfb"), ["-displayfd", "1", "-screen", "0", "\(screenWidth)x800x24", "-nolisten", "tcp"])
        display = ":" + (try xvfb.waitForLine(timeout: .seconds(30)) { Int($0) != nil })
        var environment = session.environment.merging([
            "PATH": builtProductsDirectory.path + ":/usr/bin:/bin", "LANG": "C.UTF-8", "DISPLAY": display, "QT_QPA_PLATFORM": "xcb",
            // Every process of this desktop carries it, the services the bus starts too: stop() finds them by it.
            "ANCSD_TEST_PLASMA": directory,
        ]) { $1 }
        // The bus passes its environment to the services it starts, which need the display.
        bus = try PrivateBus(serviceDirectory: directory + "/services", environment: environment)
        environment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        self.environment = environment
        // KDE's service cache, so that the server finds ancsd.desktop (its name and icon).
        let sycoca = ["/usr/bin/kbuildsycoca6", "/usr/bin/kbuildsycoca5"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let sycoca else { throw TestFailure("no kbuildsycoca5 or kbuildsycoca6") }
        _ = try runTool(sycoca, ["--noincremental"], environment: environment)
        shell = Mutex(try ChildProcess(URL(fileURLWithPath: "/usr/bin/plasmashell"), ["--no-respawn"], environment: environment))
        let deadline = ContinuousClock.now + .seconds(90)
        while !ownsNotifications {
            guard ContinuousClock.now < deadline, shell.withLock({ $0?.isRunning }) == true else {
                throw TestFailure("\(version) did not take org.freedesktop.Notifications:\n\(shell.withLock { $0?.standardError.suffix(4000) } ?? "")")
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
    }

    /// Plasma 6's shortcut daemon (`kglobalacceld`, package kglobalacceld) has no D-Bus service
    /// file: a Plasma session starts it as a systemd user unit (`plasma-kglobalaccel.service`).
    /// Here the private bus starts it on the first call to `org.kde.kglobalaccel`, as 5.27's
    /// `kglobalaccel5` is started by the file its package ships.
    private static func makeShortcutsActivatable(in services: String) throws {
        let file = services + "/org.kde.kglobalaccel.service"
        guard !FileManager.default.fileExists(atPath: file) else { return }
        let libexec = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib")) ?? []
        guard let daemon = libexec.map({ "/usr/lib/\($0)/libexec/kglobalacceld" }).first(where: FileManager.default.isExecutableFile)
        else { return }
        try "[D-BUS Service]\nName=org.kde.kglobalaccel\nExec=\(daemon)\n".write(toFile: file, atomically: true, encoding: .utf8)
    }

    private var ownsNotifications: Bool { busNameHasOwner("org.freedesktop.Notifications", on: bus.address) }

    /// Registers `connection` as the server's watcher; from then on `shown` and `closed` grow.
    func watch(on connection: DBusConnection) async throws {
        try await connection.export(ExportedObject(ExportedInterface("org.kde.NotificationWatcher", methods: [
            .immediate("Notify", input: "ususssasa{sv}i") { [self] call in
                let a = call.arguments
                guard a.count == 9, let id = a[0].uint32Value, let app = a[1].stringValue, let replaces = a[2].uint32Value,
                      let summary = a[4].stringValue, let body = a[5].stringValue, let actions = a[6].stringArray,
                      let hints = a[7].stringKeyedDictionary, let timeout = a[8].int32Value
                else { throw DBusError.invalidArgument("bad Notify arguments") }
                record.withLock {
                    $0.append(.notify(Shown(
                        id: id, appName: app, replacesID: replaces, summary: summary, body: body, actions: actions,
                        hints: hints, timeout: timeout)))
                }
                return []
            },
            .immediate("CloseNotification", input: "u") { [self] call in
                if let id = call.arguments.first?.uint32Value { record.withLock { $0.append(.close(id)) } }
                return []
            },
        ])), at: "/NotificationWatcher")
        _ = try await connection.call(
            destination: "org.freedesktop.Notifications", path: "/org/freedesktop/Notifications",
            interface: "org.kde.NotificationManager", member: "RegisterWatcher", expecting: .empty, timeout: .seconds(10))
    }

    /// What the watcher heard so far.
    var heard: [Heard] { record.withLock { $0 } }

    /// `InvokeAction(id, key)`: what a click on the button `key` (or on the popup, "default") does.
    func invoke(_ id: UInt32, _ key: String) throws {
        let reply = try runTool(
            "/usr/bin/busctl", ["--address=\(bus.address)", "call", "org.freedesktop.Notifications", "/org/freedesktop/Notifications",
                                "org.kde.NotificationManager", "InvokeAction", "us", String(id), key])
        guard reply.status == 0 else { throw TestFailure("InvokeAction failed: \(reply.text)") }
    }

    /// A window plasmashell shows besides its desktop and panel (those span the screen's width):
    /// a notification's popup, an applet's popup, a tooltip.
    struct Popup: Sendable, Equatable {
        var window: String
        var x: Int, y: Int, width: Int, height: Int
    }

    /// plasmashell's popups on screen now, as X sees them (xdotool).
    func popups() throws -> [Popup] {
        let windows = try runTool("/usr/bin/xdotool", ["search", "--onlyvisible", "--class", "plasmashell"], environment: environment)
        return try windows.text.split(separator: "\n").compactMap { window -> Popup? in
            let shell = try runTool("/usr/bin/xdotool", ["getwindowgeometry", "--shell", String(window)], environment: environment)
            var values: [String: Int] = [:]
            for line in shell.text.split(separator: "\n") {
                let parts = line.split(separator: "=", maxSplits: 1)
                if parts.count == 2, let value = Int(parts[1]) { values[String(parts[0])] = value }
            }
            guard let x = values["X"], let y = values["Y"], let width = values["WIDTH"], let height = values["HEIGHT"],
                  width < screenWidth else { return nil }
            return Popup(window: String(window), x: x, y: y, width: width, height: height)
        }
    }

    /// The text drawn in `popup`, read off a screenshot by OCR (tesseract, on the popup's crop
    /// scaled up and grey): what a user sees, not what was sent.
    func text(of popup: Popup) throws -> String {
        let shot = directory + "/ocr.png"
        try screenshot(to: shot)
        let crop = try runTool("/usr/bin/convert", [
            shot, "-crop", "\(popup.width)x\(popup.height)+\(popup.x)+\(popup.y)", "+repage", "-resize", "200%", "-colorspace", "gray", shot,
        ])
        guard crop.status == 0 else { throw TestFailure("convert failed: \(crop.text)") }
        let ocr = try runTool("/usr/bin/tesseract", [shot, "-"], environment: ["PATH": "/usr/bin:/bin", "OMP_THREAD_LIMIT": "1"])
        guard ocr.status == 0 else { throw TestFailure("tesseract failed: \(ocr.text)") }
        return ocr.text
    }

    /// The popup whose drawn text contains `text`.
    func popup(showing text: String) throws -> Popup? {
        try popups().first { try self.text(of: $0).contains(text) }
    }

    /// A click on a notification popup's close button (✕), at its header's right end: placed
    /// relative to the window where X has it at the click, since Plasma moves the popups on
    /// screen when one of them expires (a click at the place read before landed on the body once:
    /// the popup was closed as clicked, not by its ✕). The pointer then leaves for a corner, so
    /// no tooltip covers what comes next.
    func clickClose(_ popup: Popup) throws {
        let result = try runTool(
            "/usr/bin/xdotool", ["mousemove", "--window", popup.window, String(popup.width - 16), "15", "click", "1", "mousemove", "1", "1"],
            environment: environment)
        guard result.status == 0 else { throw TestFailure("xdotool failed: \(result.text)") }
    }

    /// Opens or closes the system tray's media controller, as a user's shortcut for it does: the
    /// desktop scripting API gives the applet a global shortcut, which kglobalaccel then fires
    /// ("activate widget N" of plasmashell).
    func toggleMediaController() throws {
        let script = """
            var ids = [];
            panels().forEach(function (panel) {
                panel.widgets("org.kde.plasma.systemtray").forEach(function (tray) {
                    desktopById(tray.readConfig("SystrayContainmentId")).widgets("org.kde.plasma.mediacontroller").forEach(function (media) {
                        media.globalShortcut = "Ctrl+Alt+Shift+F12";
                        ids.push(media.id);
                    });
                });
            });
            print(ids.join(","));
            """
        let reply = try runTool(
            "/usr/bin/busctl", ["--address=\(bus.address)", "call", "org.kde.plasmashell", "/PlasmaShell", "org.kde.PlasmaShell",
                                "evaluateScript", "s", script], environment: environment)
        let id = reply.text.split(whereSeparator: { !$0.isNumber }).first
        guard reply.status == 0, let id else { throw TestFailure("no media controller in the system tray: \(reply.text)") }
        try invokeShortcut(component: "plasmashell", "activate widget \(id)")
    }

    /// Fires one of Plasma's global shortcuts: `mediacontrol`'s `playpausemedia` and `nextmedia`
    /// are the media keys, handled by Plasma's own player multiplexer (Plasma 5.27: the media
    /// controller applet's; Plasma 6: kded6's `mprisservice` module, which a session's kded
    /// autoloads and which is loaded here, with kded6 started by the bus, before the first).
    func invokeShortcut(component: String, _ name: String) throws {
        if component == "mediacontrol", FileManager.default.isExecutableFile(atPath: "/usr/bin/kded6") {
            let loaded = try runTool(
                "/usr/bin/busctl", ["--address=\(bus.address)", "call", "org.kde.kded6", "/kded", "org.kde.kded6", "loadModule", "s",
                                    "mprisservice"])
            guard loaded.status == 0, loaded.text.contains("true") else {
                throw TestFailure("kded6 did not load mprisservice (Plasma 6's media keys): \(loaded.text)")
            }
        }
        let reply = try runTool(
            "/usr/bin/busctl", ["--address=\(bus.address)", "call", "org.kde.kglobalaccel", "/component/\(component)",
                                "org.kde.kglobalaccel.Component", "invokeShortcut", "s", name])
        guard reply.status == 0 else { throw TestFailure("invokeShortcut \(component)/\(name) failed: \(reply.text)") }
    }

    /// A screenshot of the whole screen as PNG at `path`.
    func screenshot(to path: String) throws {
        let result = try runTool("/usr/bin/import", ["-display", display, "-window", "root", path], environment: environment)
        guard result.status == 0 else { throw TestFailure("import failed: \(result.text)") }
    }

    /// Waits until `predicate` gives a value; fails after `timeout` with what the watcher heard.
    @discardableResult
    func wait<T>(_ what: String, timeout: Duration = .seconds(30), _ predicate: () throws -> T?) throws -> T {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let value = try predicate() { return value }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw TestFailure("""
            \(version) never showed \(what); heard:
            \(heard.map { event in
                switch event {
                case .notify(let n): "Notify #\(n.id) (replaces \(n.replacesID)) \(n.appName) | \(n.summary) | \(n.body) | \(n.actions)"
                case .close(let id): "CloseNotification #\(id)"
                }
            }.joined(separator: "\n"))
            """)
    }

    /// Stops plasmashell, every service the bus started for it, the bus and Xvfb.
    func stop() {
        shell.withLock { shell in
            shell?.signal(SIGKILL)
            _ = try? shell?.wait(timeout: .seconds(10))
            shell = nil
        }
        let marker = "ANCSD_TEST_PLASMA=" + directory
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), pid != getpid(),
                  let environ = FileManager.default.contents(atPath: "/proc/\(entry)/environ"),
                  environ.split(separator: 0).contains(where: { String(decoding: $0, as: UTF8.self) == marker })
            else { continue }
            kill(pid, SIGKILL)
        }
        bus.stop()
        _ = try? xvfb.stop(timeout: .seconds(5))
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { stop() }
}
