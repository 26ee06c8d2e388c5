import DBus
import Glibc
public import JSON
import Synchronization

extension DBusConnection {
    /// Runs `body` inside the connection's isolation (on its queue), so simulator state and
    /// the D-Bus objects it shows change together, in order with method handlers.
    func simPerform<T: Sendable>(_ body: @Sendable (isolated DBusConnection) throws -> T) rethrows -> T {
        try body(self)
    }
}

/// Nanoseconds of CLOCK_MONOTONIC, the clock a benchmark compares against.
public func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Appends one JSON line per Notification Source event sent:
/// `{"uid":N,"event":"added","t_ns":<CLOCK_MONOTONIC ns>}`.
public final class Timeline: Sendable {
    private let fd: Mutex<Int32>

    /// Opens (creating, appending to) `path`; nil if it cannot be opened.
    public init?(path: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return nil }
        self.fd = Mutex(fd)
    }

    func record(uid: UInt32, event: String, at t: UInt64) {
        writeLine(Array("{\"uid\":\(uid),\"event\":\"\(event)\",\"t_ns\":\(t)}\n".utf8))
    }

    /// Appends `object` as one JSON line (the `--events` log).
    public func record(_ object: JSONObject) {
        writeLine(JSONValue.object(object).serializedBytes(newline: true))
    }

    private func writeLine(_ bytes: [UInt8]) {
        fd.withLock { fd in
            guard fd >= 0 else { return }
            var offset = 0
            while offset < bytes.count {
                let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return }
                offset += n
            }
        }
    }

    /// Closes the file.
    public func close() {
        fd.withLock { fd in
            if fd >= 0 { _ = Glibc.close(fd) }
            fd = -1
        }
    }

    deinit { close() }
}

/// Writes log lines to standard error.
public let standardErrorLog: @Sendable (String) -> Void = { message in
    let line = Array(("ancs-phone-sim: " + message + "\n").utf8)
    line.withUnsafeBytes { _ = write(2, $0.baseAddress, $0.count) }
}
