import DBus
import Glibc
public import JSON
import Synchronization
import SystemCalls

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
///
/// Lines recorded with `deferred` wait in memory until `flush` (the simulator flushes on a
/// timer a few milliseconds after it sends a value, so the send path never writes the file
/// and a burst costs one write per flush, not one per line); any other line is written at
/// once, after the waiting ones, so the file keeps their order.
public final class Timeline: Sendable {
    private struct File {
        /// False after `close`: nothing is recorded any more.
        var isOpen = true
        /// Deferred lines not written yet.
        var pending: [UInt8] = []
    }

    private let descriptor: FileDescriptor
    private let file = Mutex(File())

    /// Opens (creating, appending to) `path`; nil if it cannot be opened.
    public init?(path: String) {
        do {
            descriptor = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, permissions: 0o644)
        } catch {
            return nil
        }
    }

    /// Records a Notification Source event sent; deferred until `flush`.
    func record(uid: UInt32, event: String, at t: UInt64) {
        file.withLock { f in
            guard f.isOpen else { return }
            f.pending.append(contentsOf: #"{"uid":"#.utf8)
            Self.appendDecimal(UInt64(uid), to: &f.pending)
            f.pending.append(contentsOf: #","event":""#.utf8)
            f.pending.append(contentsOf: event.utf8)
            f.pending.append(contentsOf: #"","t_ns":"#.utf8)
            Self.appendDecimal(t, to: &f.pending)
            f.pending.append(contentsOf: "}\n".utf8)
        }
    }

    /// Appends `object` as one JSON line (the `--events` log), at once unless `deferred`.
    public func record(_ object: JSONObject, deferred: Bool = false) {
        let line = JSONValue.object(object).serializedBytes(newline: true)
        file.withLock { f in
            guard f.isOpen else { return }
            f.pending.append(contentsOf: line)
            if !deferred { writePending(&f) }
        }
    }

    /// Writes the deferred lines.
    public func flush() {
        file.withLock { f in
            if f.isOpen, !f.pending.isEmpty { writePending(&f) }
        }
    }

    private func writePending(_ f: inout File) {
        // A line that cannot be written is lost, as the file is only a record for tests.
        try? descriptor.writeAll(f.pending)
        f.pending.removeAll(keepingCapacity: f.pending.count <= 1 << 16)
    }

    private static func appendDecimal(_ value: UInt64, to out: inout [UInt8]) {
        guard value >= 10 else { return out.append(UInt8(ascii: "0") + UInt8(value)) }
        appendDecimal(value / 10, to: &out)
        out.append(UInt8(ascii: "0") + UInt8(value % 10))
    }

    /// Writes the deferred lines; later ones are dropped. The descriptor closes with the value.
    public func close() {
        file.withLock { f in
            guard f.isOpen else { return }
            if !f.pending.isEmpty { writePending(&f) }
            f.isOpen = false
        }
    }

    deinit { close() }
}

/// Writes log lines to standard error.
public let standardErrorLog: @Sendable (String) -> Void = { message in
    let line = Array(("ancs-phone-sim: " + message + "\n").utf8)
    line.withUnsafeBytes { _ = write(2, $0.baseAddress, $0.count) }
}
