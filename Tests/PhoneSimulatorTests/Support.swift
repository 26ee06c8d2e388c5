import DBus
import Foundation
import Synchronization
import Testing
import TestSupport

/// The tests' private dbus-daemon (Tests/TestSupport).
typealias TestBus = PrivateBus

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
