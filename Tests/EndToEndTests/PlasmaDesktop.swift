import DBus
import Foundation
import Synchronization
import TestSupport

/// A real KDE Plasma notification server for `ancsd desktop`: plasmashell under Xvfb
/// (`QT_QPA_PLATFORM=xcb`; Qt's offscreen platform gives a screen Plasma takes for a fake one,
/// and the notification applet never loads), on a private session bus that can activate only
/// KDE's own services (the activity manager, kglobalaccel, kded: plasmashell aborts without
/// them), with a private HOME and XDG directories holding ancsd's desktop entry.
///
/// Plasma has no D-Bus method that lists what it shows; it tells a registered watcher
/// (`org.kde.NotificationManager.RegisterWatcher`) each notification it accepts and each it
/// closes on request, which this harness records. A click on a button is
/// `org.kde.NotificationManager.InvokeAction`, which the server broadcasts as `ActionInvoked`,
/// as a click does.
final class PlasmaDesktop: Sendable {
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
        xvfb = try ChildProcess(
            URL(fileURLWithPath: "/usr/bin/Xvfb"), ["-displayfd", "1", "-screen", "0", "1280x800x24", "-nolisten", "tcp"])
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
