public import Foundation
import Synchronization

/// A program started by a test, its output lines collected as they come, with their arrival time.
public final class ChildProcess: Sendable {
    public struct Line: Sendable {
        public let text: String
        public let arrived: ContinuousClock.Instant
    }

    private let process: Process
    private let stdoutLines = Mutex<[Line]>([])
    private let stderrText = Mutex<String>("")
    private let readers = DispatchGroup()

    /// Starts `executable` with `arguments`; standard input is `standardInput`, else closed.
    public init(
        _ executable: URL, _ arguments: [String], environment: [String: String]? = nil, standardInput: FileHandle? = nil
    ) throws {
        process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let environment { process.environment = environment }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = standardInput ?? FileHandle.nullDevice
        try process.run()
        collect(out.fileHandleForReading) { [self] line in
            stdoutLines.withLock { $0.append(Line(text: line, arrived: .now)) }
        }
        collect(err.fileHandleForReading) { [self] line in
            stderrText.withLock { $0 += line + "\n" }
        }
    }

    private func collect(_ handle: FileHandle, _ onLine: @escaping @Sendable (String) -> Void) {
        readers.enter()
        Thread.detachNewThread { [readers] in
            var pending = Data()
            while true {
                let data = handle.availableData
                if data.isEmpty { break }
                pending.append(data)
                while let newline = pending.firstIndex(of: 0x0A) {
                    onLine(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                    pending.removeSubrange(pending.startIndex...newline)
                }
            }
            if !pending.isEmpty { onLine(String(decoding: pending, as: UTF8.self)) }
            readers.leave()
        }
    }

    public var pid: Int32 { process.processIdentifier }

    /// The standard output lines so far.
    public var lines: [Line] { stdoutLines.withLock { $0 } }

    /// Standard error so far.
    public var standardError: String { stderrText.withLock { $0 } }

    public var isRunning: Bool { process.isRunning }

    /// Waits until a line satisfies `predicate`, or fails after `timeout`.
    @discardableResult
    public func waitForLine(timeout: Duration = .seconds(20), where predicate: (String) -> Bool) throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let line = lines.first(where: { predicate($0.text) }) { return line.text }
            Thread.sleep(forTimeInterval: 0.01)
        }
        throw TestFailure("no matching line within \(timeout); stdout:\n\(lines.map(\.text).joined(separator: "\n"))\nstderr:\n\(standardError)")
    }

    /// Waits until standard error contains `text` (`occurrences` times), or fails after `timeout`.
    public func waitForStandardError(containing text: String, occurrences: Int = 1, timeout: Duration = .seconds(20)) throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if standardError.components(separatedBy: text).count > occurrences { return }
            Thread.sleep(forTimeInterval: 0.01)
        }
        throw TestFailure("stderr never said '\(text)':\n\(standardError)")
    }

    /// Sends a signal.
    public func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits for the process to end and its output to be read; its exit status, or a failure after `timeout`.
    @discardableResult
    public func wait(timeout: Duration = .seconds(30)) throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            guard ContinuousClock.now < deadline else {
                kill(process.processIdentifier, SIGKILL)
                throw TestFailure("\(process.executableURL?.lastPathComponent ?? "child") did not end within \(timeout); stderr:\n\(standardError)")
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
        _ = readers.wait(timeout: .now() + 5)
        return process.terminationStatus
    }

    /// Stops the process with SIGTERM (SIGKILL if it lingers).
    public func stop(timeout: Duration = .seconds(10)) throws -> Int32 {
        signal(SIGTERM)
        return try wait(timeout: timeout)
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// Where the build put the executables: beside the running test bundle.
public var builtProductsDirectory: URL {
    let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    return URL(fileURLWithPath: executable).deletingLastPathComponent()
}

/// The repository's root.
public let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// Runs a tool to its end, standard input empty; its exit status and its output (both streams).
/// `environment`: the tool's whole environment (nil: this process's).
public func runTool(_ tool: String, _ arguments: [String], environment: [String: String]? = nil) throws -> (status: Int32, text: String) {
    try UnitRun.needs(tool)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let out = Pipe()
    process.standardOutput = out
    process.standardError = out
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return (process.terminationStatus, text)
}
