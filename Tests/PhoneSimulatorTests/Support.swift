import DBus
import Foundation
import Synchronization
import Testing

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A private dbus-daemon on a unix socket in a fresh temp dir, killed by `stop()`.
final class TestBus: Sendable {
    let directory: String
    let address: String
    private let process: Mutex<Process?>

    static let config = """
        <busconfig>
          <type>session</type>
          <listen>unix:path=SOCKET</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>
        """

    init() throws {
        var buffer = Array((NSTemporaryDirectory() + "simbus-XXXXXX").utf8CString)
        guard let made = mkdtemp(&buffer) else { throw TestFailure("mkdtemp failed") }
        directory = String(cString: made)
        let configPath = directory + "/bus.conf"
        try TestBus.config.replacingOccurrences(of: "SOCKET", with: directory + "/bus")
            .write(toFile: configPath, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--config-file=\(configPath)", "--nofork", "--print-address"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = Mutex(process)
        let line = try readLine(out.fileHandleForReading.fileDescriptor, timeout: 10)
        guard line.hasPrefix("unix:") else {
            process.terminate()
            throw TestFailure("dbus-daemon printed \(line)")
        }
        address = line
    }

    func stop() {
        let p = process.withLock { p -> Process? in
            defer { p = nil }
            return p
        }
        guard let p else { return }
        // SIGKILL: a child spawned from a worker thread inherits its blocked signal mask, so
        // SIGTERM stays pending forever.
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Reads one line from `fd`, failing after `timeout` seconds.
func readLine(_ fd: Int32, timeout: Double) throws -> String {
    var bytes: [UInt8] = []
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        let remaining = deadline.timeIntervalSinceNow
        guard remaining > 0 else { throw TestFailure("timed out reading a line") }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let r = poll(&pfd, 1, Int32(remaining * 1000))
        if r < 0 && errno == EINTR { continue }
        guard r > 0 else { continue }
        var c: UInt8 = 0
        guard read(fd, &c, 1) == 1 else { throw TestFailure("EOF before a line") }
        if c == 10 { return String(decoding: bytes, as: UTF8.self) }
        bytes.append(c)
    }
}

/// Runs `body`, failing when it takes longer than `seconds`.
func withTimeout<T: Sendable>(
    _ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
            throw TestFailure("\(what) did not finish within \(seconds) s")
        }
        defer { group.cancelAll() }
        guard let first = try await group.next() else { throw TestFailure("no result") }
        return first
    }
}

/// Polls `condition` every 5 ms, failing after `seconds`.
func eventually(_ what: String, within seconds: Double = 5, _ condition: @Sendable () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(5))
    }
    throw TestFailure("\(what): not within \(seconds) s")
}

/// Collects signals delivered to a callback.
final class Collector: Sendable {
    private let items = Mutex<[Signal]>([])
    var handler: @Sendable (Signal) -> Void { { [self] s in items.withLock { $0.append(s) } } }
    var signals: [Signal] { items.withLock { $0 } }
    func clear() { items.withLock { $0.removeAll() } }

    /// The `Value`s carried by PropertiesChanged signals from `path`, in order.
    func values(at path: ObjectPath) -> [[UInt8]] {
        signals.compactMap { s in
            guard s.path == path, let change = try? PropertiesChanged(s) else { return nil }
            return change.changed["Value"]?.bytes
        }
    }

    /// Waits until `path` has sent at least `count` values.
    func waitForValues(_ count: Int, at path: ObjectPath, within seconds: Double = 5) async throws -> [[UInt8]] {
        try await eventually("\(count) value(s) from \(path)", within: seconds) { self.values(at: path).count >= count }
        return values(at: path)
    }
}

/// Asserts that `body` throws a DBusError with this name and message.
func expectError(
    _ name: String, _ message: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(name): \(message), nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as DBusError {
        #expect(error.name == name, sourceLocation: sourceLocation)
        #expect(error.message == message, sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(name), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Reads one datagram from a non-blocking socket, failing after `seconds`; nil at EOF (HUP).
/// It never blocks a thread: the simulator under test needs the (two) cooperative threads.
func readDatagram(_ fd: Int32, within seconds: Double = 5) async throws -> [UInt8]? {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    var buffer = [UInt8](repeating: 0, count: 1024)
    while true {
        let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
        if n > 0 { return Array(buffer[0..<n]) }
        if n == 0 { return nil }
        guard errno == EAGAIN || errno == EINTR else { throw TestFailure("recv failed: errno \(errno)") }
        guard ContinuousClock.now < deadline else { throw TestFailure("no datagram within \(seconds) s") }
        try await Task.sleep(for: .milliseconds(2))
    }
}

/// The repository's root.
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
