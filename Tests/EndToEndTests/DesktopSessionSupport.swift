import Foundation
import TestSupport

/// A fresh user session's directories for a desktop shell under test, in a new temporary
/// directory: `services` (the session bus's service files), `home`, `runtime` (0700),
/// `config`, `cache` and `data`, with ancsd's desktop entry in `data/applications` as
/// `make install` puts it. Its path, and the environment variables that point there.
func makeDesktopSessionDirectory(_ prefix: String) throws -> (path: String, environment: [String: String]) {
    var template = Array((NSTemporaryDirectory() + prefix + "-XXXXXX").utf8CString)
    guard let made = mkdtemp(&template) else { throw TestFailure("mkdtemp failed") }
    let directory = String(cString: made)
    let files = FileManager.default
    for sub in ["services", "home", "runtime", "config", "cache", "data/applications"] {
        try files.createDirectory(atPath: directory + "/" + sub, withIntermediateDirectories: true)
    }
    try files.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory + "/runtime")
    try files.copyItem(
        atPath: repositoryRoot.appendingPathComponent("desktop/ancsd.desktop").path, toPath: directory + "/data/applications/ancsd.desktop")
    return (directory, [
        "HOME": directory + "/home", "XDG_RUNTIME_DIR": directory + "/runtime", "XDG_CONFIG_HOME": directory + "/config",
        "XDG_CACHE_HOME": directory + "/cache", "XDG_DATA_HOME": directory + "/data",
    ])
}

/// Whether `name` has an owner on the bus at `address` (busctl's NameHasOwner).
func busNameHasOwner(_ name: String, on address: String) -> Bool {
    let reply = try? runTool(
        "/usr/bin/busctl", ["--address=\(address)", "--json=short", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
                            "org.freedesktop.DBus", "NameHasOwner", "s", name])
    return reply?.text.contains("[true]") == true
}

/// `ancsd run` on a private system bus with the simulated phone playing `scenario`, and
/// `ancsd desktop` on a desktop's session bus (its state in the system bus's directory, so a
/// restarted companion remembers what it showed): what each desktop test drives.
final class DesktopRun {
    let system: PrivateBus
    let control: String
    let session: String
    var daemon: ChildProcess
    var companion: ChildProcess
    let phone: ChildProcess

    init(scenario: String, session: String) throws {
        self.session = session
        system = try PrivateBus()
        control = system.directory + "/control"
        let path = system.directory + "/scenario.jsonl"
        try scenario.write(toFile: path, atomically: true, encoding: .utf8)
        daemon = try Self.startDaemon(system, control)
        try daemon.waitForStandardError(containing: "bluetoothd is not running")
        companion = try Self.startCompanion(system, control, session)
        try companion.waitForStandardError(containing: "connected to ancsd at \(control)")
        phone = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", system.address, "--scenario", path])
    }

    private static func startDaemon(_ system: PrivateBus, _ control: String) throws -> ChildProcess {
        try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", system.address, "run", "--format", "json", "--log-level", "debug", "--control", control])
    }

    private static func startCompanion(_ system: PrivateBus, _ control: String, _ session: String) throws -> ChildProcess {
        try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["desktop", "--control", control, "--bus", session, "--log-level", "debug", "--state-dir", system.directory])
    }

    /// A new `ancsd run` in place of the stopped one.
    func startDaemon() throws { daemon = try Self.startDaemon(system, control) }
    /// A new `ancsd desktop` in place of the stopped one.
    func startCompanion() throws { companion = try Self.startCompanion(system, control, session) }

    /// How many times the phone performed `action` on `uid`.
    func performed(_ action: String, _ uid: Int) -> Int {
        phone.standardError.components(separatedBy: "Perform Notification Action \(action) on UID \(uid)\n").count - 1
    }

    /// How many actions the phone performed in all.
    var actionsPerformed: Int { phone.standardError.components(separatedBy: "Perform Notification Action").count - 1 }

    func stop() {
        for process in [phone, companion, daemon] { _ = try? process.stop(timeout: .seconds(5)) }
    }

    deinit { stop() }
}
