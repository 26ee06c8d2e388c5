#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemCalls

/// Writes log lines to standard error: with journald priority prefixes (`<6>`) when standard
/// error is connected to the journal, else with a readable level word. Notification content is
/// only ever logged at `.debug`; callers keep it out of the other levels.
///
/// The threshold can change while the daemon runs (SIGHUP reloads it).
public final class Logger: Sendable {
    private let level: Atomic<Int>
    /// True when standard error goes to journald (systemd sets `JOURNAL_STREAM`).
    public let journald: Bool

    public init(threshold: LogLevel = .info, journald: Bool = Logger.stderrIsJournal()) {
        level = Atomic(threshold.rawValue)
        self.journald = journald
    }

    /// The lowest level written.
    public var threshold: LogLevel {
        get { LogLevel(rawValue: level.load(ordering: .relaxed)) ?? .info }
        set { level.store(newValue.rawValue, ordering: .relaxed) }
    }

    /// True if a message at `level` would be written.
    public func isEnabled(_ level: LogLevel) -> Bool { level >= threshold }

    public func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        guard level >= threshold else { return }
        writeStandardError(format(level, message()) + "\n")
    }

    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }

    /// The line for a message, without the newline.
    public func format(_ level: LogLevel, _ message: String) -> String {
        // Whatever a message quotes (a device name, at debug level notification content) can
        // neither break the line nor drive the terminal or journal viewer.
        let oneLine = TerminalText.sanitize(message)
        if journald {
            let priority = switch level {
            case .debug: 7
            case .info: 6
            case .warning: 4
            case .error: 3
            }
            return "<\(priority)>\(oneLine)"
        }
        let word = switch level {
        case .debug: "debug"
        case .info: "info"
        case .warning: "warning"
        case .error: "error"
        }
        return "ancsd: \(word): \(oneLine)"
    }

    /// True if standard error is the stream that `JOURNAL_STREAM` names (device:inode).
    public static func stderrIsJournal() -> Bool { isJournal(STDERR_FILENO) }

    /// True if `fd` is the journal's stream that systemd names in `JOURNAL_STREAM` (device:inode;
    /// systemd sets it when standard output or standard error goes to journald).
    public static func isJournal(_ fd: Int32) -> Bool {
        guard let value = getenv("JOURNAL_STREAM").map({ String(cString: $0) }) else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }
}

/// The severity of a message for the log.
public enum LogLevel: Int, Comparable, Hashable, Sendable {
    case debug, info, warning, error

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}

extension LogLevel {
    /// Parses `debug`, `info`, `warning` (or `warn`) and `error`.
    public init?(name: String) {
        switch name.lowercased() {
        case "debug": self = .debug
        case "info": self = .info
        case "warning", "warn": self = .warning
        case "error": self = .error
        default: return nil
        }
    }
}

/// Writes a command's error message to standard error: `ancsd: message`.
public func logError(_ message: String) {
    writeStandardError("ancsd: \(message)\n")
}

/// Writes text to standard error, unbuffered, whole.
public func writeStandardError(_ text: String) {
    writeAll(STDERR_FILENO, Array(text.utf8))
}

/// Writes every byte to a blocking descriptor, retrying on EINTR; false (and `errno`) if a write failed.
@discardableResult
public func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    bytes.withUnsafeBufferPointer { writeAll(fd, $0) }
}

/// `writeAll` of the bytes in a buffer.
@discardableResult
public func writeAll(_ fd: Int32, _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    guard let base = bytes.baseAddress else { return true }
    var offset = 0
    while offset < bytes.count {
        guard let written = try? Errno.retrying({ write(fd, base + offset, bytes.count - offset) }) else { return false }
        offset += written
    }
    return true
}

/// The machine's host name, or "ancsd".
public func hostName() -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    guard gethostname(&buffer, buffer.count - 1) == 0 else { return "ancsd" }
    let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return name.isEmpty ? "ancsd" : name
}
