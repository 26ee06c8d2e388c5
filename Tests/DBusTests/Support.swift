import DBus
import Foundation
import Synchronization
import Testing
import TestSupport

/// All DBus tests run one after another: they measure time and memory, and share two cores.
@Suite("DBus", .serialized)
enum DBusTests {}

/// The tests' private dbus-daemon (Tests/TestSupport).
typealias TestBus = PrivateBus

func withBus<T>(_ body: (TestBus) async throws -> T) async throws -> T {
    let bus = try TestBus()
    defer { bus.stop() }
    return try await body(bus)
}

/// A bus with two connections: `server` exports objects, `client` calls them.
struct Pair {
    let bus: TestBus
    let server: DBusConnection
    let client: DBusConnection
    var serverName: BusName { BusName(validating: server.uniqueName)! }
}

func withPair<T>(_ body: (Pair) async throws -> T) async throws -> T {
    try await withBus { bus in
        let server = try await DBusConnection.connect(to: .address(bus.address))
        let client = try await DBusConnection.connect(to: .address(bus.address))
        do {
            let result = try await body(Pair(bus: bus, server: server, client: client))
            await server.close()
            await client.close()
            return result
        } catch {
            await server.close()
            await client.close()
            throw error
        }
    }
}

/// Takes the next `count` signals from `stream`, failing after `seconds`.
/// (A timeout cancels the iteration, which ends the stream.)
func next(_ count: Int, from stream: AsyncStream<Signal>, within seconds: Double = 5) async throws -> [Signal] {
    try await withTimeout(seconds, "waiting for \(count) signal(s)") {
        var out: [Signal] = []
        for await s in stream {
            out.append(s)
            if out.count == count { break }
        }
        return out
    }
}

/// Collects signals delivered to a callback.
final class Collector: Sendable {
    private let items = Mutex<[Signal]>([])
    var handler: @Sendable (Signal) -> Void { { [self] s in items.withLock { $0.append(s) } } }
    var signals: [Signal] { items.withLock { $0 } }

    /// Waits until at least `count` signals arrived.
    func wait(for count: Int) async throws -> [Signal] {
        try await eventually("\(count) signals (\(signals.count) so far)") { signals.count >= count }
        return signals
    }
}

/// Runs a command, returning (status, stdout); fails after `timeout` seconds.
/// Runs a program to its end on a thread of its own, so that waiting for it never holds one of
/// the few cooperative threads that the connection under test needs to deliver its replies.
func run(_ executable: String, _ arguments: [String], timeout: Double = 10) async throws -> (Int32, String) {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread {
            continuation.resume(with: Result { try runBlocking(executable, arguments, timeout: timeout) })
        }
    }
}

private func runBlocking(_ executable: String, _ arguments: [String], timeout: Double) throws -> (Int32, String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let out = Pipe()
    process.standardOutput = out
    process.standardError = out
    try process.run()
    let reader = out.fileHandleForReading
    var data = Data()
    let deadline = Date().addingTimeInterval(timeout)
    while true {
        var pfd = pollfd(fd: reader.fileDescriptor, events: Int16(POLLIN), revents: 0)
        let remaining = deadline.timeIntervalSinceNow
        if remaining <= 0 {
            kill(process.processIdentifier, SIGKILL)
            throw TestFailure("\(executable) timed out")
        }
        let r = poll(&pfd, 1, Int32(remaining * 1000))
        if r <= 0 { continue }
        var buf = [UInt8](repeating: 0, count: 65536)
        let n = read(reader.fileDescriptor, &buf, buf.count)
        if n <= 0 { break }
        data.append(contentsOf: buf[0..<n])
    }
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// This process's resident set size in KiB (VmRSS).
func residentKiB() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return -1 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? -1
    }
    return -1
}

/// Asserts that `body` throws exactly `expected`.
func expectDBusError(
    _ expected: DBusError, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(expected), nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as DBusError {
        #expect(error == expected, sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(expected), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Asserts that `body` throws a DBusError whose D-Bus name is `name`; returns it.
@discardableResult
func expectErrorName(
    _ name: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async -> DBusError? {
    do {
        try await body()
        Issue.record("expected \(name), nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as DBusError {
        #expect(error.name == name, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected \(name), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}
