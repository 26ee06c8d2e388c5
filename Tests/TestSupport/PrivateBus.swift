public import Foundation
import Synchronization

/// A test failure with a message.
public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A private dbus-daemon on a unix socket in a fresh temporary directory, stopped by `stop()`
/// or when released.
public final class PrivateBus: Sendable {
    public let directory: String
    public let address: String
    public let pid: Int32
    private let process: Mutex<Process?>

    static let config = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=SOCKET</listen>
          <auth>EXTERNAL</auth>
          SERVICEDIR
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>
        """

    /// `serviceDirectory`: a directory of D-Bus `.service` files the bus may activate;
    /// `environment`: the bus's whole environment, which the services it starts inherit (nil:
    /// this process's).
    public init(serviceDirectory: String? = nil, environment: [String: String]? = nil) throws {
        try UnitRun.needs("dbus-daemon")
        var template = Array((NSTemporaryDirectory() + "ancsd-bus-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw TestFailure("mkdtemp failed") }
        directory = String(cString: made)
        let configPath = directory + "/bus.conf"
        try Self.config.replacingOccurrences(of: "SOCKET", with: directory + "/bus")
            .replacingOccurrences(of: "SERVICEDIR", with: serviceDirectory.map { "<servicedir>\($0)</servicedir>" } ?? "")
            .write(toFile: configPath, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--config-file=\(configPath)", "--nofork", "--print-address"]
        if let environment { process.environment = environment }
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        pid = process.processIdentifier
        self.process = Mutex(process)
        let line = try readLine(from: out.fileHandleForReading.fileDescriptor, timeout: .seconds(10))
        guard line.hasPrefix("unix:") else {
            process.terminate()
            throw TestFailure("dbus-daemon printed '\(line)'")
        }
        address = line
    }

    /// Stops the daemon and waits for it; calling again does nothing. SIGKILL by default: a
    /// process started from a Swift concurrency thread inherits that thread's blocked signals,
    /// so dbus-daemon may never see a SIGTERM.
    public func stop(signal: Int32 = SIGKILL) {
        let taken = process.withLock { p -> Process? in
            defer { p = nil }
            return p
        }
        guard let taken else { return }
        kill(taken.processIdentifier, signal)
        taken.waitUntilExit()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Reads one line from a descriptor, failing after `timeout`.
public func readLine(from fd: Int32, timeout: Duration) throws -> String {
    var bytes: [UInt8] = []
    let deadline = ContinuousClock.now + timeout
    while true {
        let remaining = deadline - ContinuousClock.now
        guard remaining > .zero else { throw TestFailure("no line within \(timeout)") }
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ms = Int32(remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000)
        guard poll(&poller, 1, max(ms, 1)) > 0 else { continue }
        var byte: UInt8 = 0
        let count = read(fd, &byte, 1)
        guard count == 1 else { throw TestFailure("end of stream before a line") }
        if byte == 0x0A { return String(decoding: bytes, as: UTF8.self) }
        bytes.append(byte)
    }
}

/// Runs `body`, failing with a `TestFailure` when it takes longer than `seconds`.
public func withTimeout<T: Sendable>(
    _ seconds: Double, _ what: String = "operation", _ body: @escaping @Sendable () async throws -> T
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
