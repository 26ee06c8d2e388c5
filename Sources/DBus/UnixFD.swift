import Glibc
import Synchronization
import SystemCalls

/// An owned unix file descriptor carried in a D-Bus message (type `h`).
///
/// A final class rather than a `~Copyable` struct, so that it can sit inside the copyable
/// `DBusValue` enum. Ownership is still exactly-once: the descriptor is closed by the first
/// of `close()`, `take()` (which hands ownership to the caller) or `deinit`; later calls do
/// nothing. Values received from a message hold a `dup` of the message's descriptor (libdbus
/// dups on read), so freeing the message never closes ours. Sending dups again inside
/// libdbus, so an `UnixFD` stays open and owned by the sender after the message is sent.
public final class UnixFD: Sendable, Hashable, CustomStringConvertible {
    /// The descriptor while it is owned here; nil once closed or taken.
    private let state: Mutex<FileDescriptor?>

    /// Takes ownership of `fd` (a negative one: none); it will be closed exactly once.
    public init(adopting fd: Int32) {
        state = Mutex(fd >= 0 ? FileDescriptor(adopting: fd) : nil)
    }

    /// Duplicates `fd` (with close-on-exec) and owns the duplicate; `fd` stays the caller's.
    /// - Throws: `DBusError.invalidArgument` when `fd` cannot be duplicated.
    public convenience init(duplicating fd: Int32) throws(DBusError) {
        let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else {
            throw .invalidArgument("cannot duplicate file descriptor \(fd): \(Errno.current)")
        }
        self.init(adopting: copy)
    }

    /// The descriptor while it is still owned here, else nil. Do not close it yourself.
    public var fileDescriptor: Int32? {
        state.withLock { $0?.rawValue }
    }

    /// Hands ownership to the caller: returns the descriptor (nil if already closed or
    /// taken) and forgets it, so it will not be closed here.
    public func take() -> Int32? {
        state.withLock { owned -> Int32? in
            guard let taken = owned.take() else { return nil }
            return taken.release()
        }
    }

    /// Closes the descriptor if it is still owned here. Safe to call more than once.
    public func close() {
        state.withLock { $0 = nil }
    }

    public static func == (a: UnixFD, b: UnixFD) -> Bool { a === b }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String { "UnixFD(\(fileDescriptor.map(String.init) ?? "closed"))" }
}
