#if canImport(Glibc)
public import Glibc
#endif
public import ANCSRuntime
import ANCSSession
public import Dispatch
import Synchronization

/// Delivers output lines to a file descriptor without ever blocking the caller.
///
/// Lines wait in a bounded queue and a private dispatch queue writes them with blocking writes,
/// so a slow or absent reader stalls only that queue. Past `maxPendingBytes` the oldest lines are
/// dropped and counted; the count is logged once the writer catches up. Nothing runs while there
/// is nothing to write. A reader that goes away (EPIPE) ends the sink with one log line.
public final class LineSink: Sendable {
    private struct State {
        var pending = FIFO<[UInt8]>()
        var pendingBytes = 0
        var writing = false
        var dropped = 0
        var droppedTotal = 0
        var broken = false
        var written = 0
    }

    /// A name for log lines, like "standard output" or the FIFO's path.
    public let name: String
    public let maxPendingBytes: Int
    private let fd: Int32
    private let ownsDescriptor: Bool
    private let logger: Logger
    private let queue: DispatchQueue
    private let state = Mutex(State())

    public init(fd: Int32, name: String, ownsDescriptor: Bool, maxPendingBytes: Int = 1 << 20, logger: Logger) {
        self.fd = fd
        self.name = name
        self.ownsDescriptor = ownsDescriptor
        self.maxPendingBytes = maxPendingBytes
        self.logger = logger
        queue = DispatchQueue(label: "ancsd.sink")
    }

    deinit {
        if ownsDescriptor { close(fd) }
    }

    /// Queues one line (the newline is added).
    public func send(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        let startWriter = state.withLock { state -> Bool in
            guard !state.broken else { return false }
            state.pending.push(bytes)
            state.pendingBytes += bytes.count
            while state.pendingBytes > maxPendingBytes, let oldest = state.pending.pop() {
                state.pendingBytes -= oldest.count
                state.dropped += 1
                state.droppedTotal += 1
            }
            guard !state.writing else { return false }
            state.writing = true
            return true
        }
        if startWriter { queue.async { self.drain() } }
    }

    /// Lines dropped so far because the reader was too slow or absent.
    public var droppedCount: Int { state.withLock { $0.droppedTotal } }

    /// Lines written so far.
    public var writtenCount: Int { state.withLock { $0.written } }

    /// Waits until every queued line is written or `timeout` passes; true if all were written.
    public func flush(timeout: DispatchTimeInterval) -> Bool {
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        guard done.wait(timeout: .now() + timeout) == .success else { return false }
        return state.withLock { $0.pending.isEmpty }
    }

    private func drain() {
        while true {
            let next = state.withLock { state -> [UInt8]? in
                guard let line = state.pending.pop() else {
                    state.writing = false
                    return nil
                }
                state.pendingBytes -= line.count
                return line
            }
            guard let line = next else { break }
            if writeAll(fd, line) {
                state.withLock { $0.written += 1 }
            } else {
                let reason = String(cString: strerror(errno))
                state.withLock { state in
                    state.broken = true
                    state.pending = FIFO()
                    state.pendingBytes = 0
                    state.writing = false
                }
                logger.warning("stopped writing to \(name): \(reason)")
                return
            }
        }
        let dropped = state.withLock { state -> Int in
            defer { state.dropped = 0 }
            return state.dropped
        }
        if dropped > 0 { logger.warning("dropped \(dropped) events for \(name): its reader was too slow or absent") }
    }
}

/// Why a FIFO could not be set up.
public struct FIFOError: Error, CustomStringConvertible {
    public var description: String
}

/// Opens the named pipe at `path` for the daemon's output, creating it with `mode` if missing.
///
/// It is opened read-write: the daemon itself keeps the pipe open, so writing never raises
/// SIGPIPE, events written while no reader is attached wait in the pipe (up to its size, raised
/// to 1 MiB where allowed) and reach the next reader that attaches.
public func openOutputFIFO(path: String, mode: mode_t) throws(FIFOError) -> Int32 {
    var info = stat()
    if lstat(path, &info) != 0 {
        guard errno == ENOENT else { throw FIFOError(description: "cannot use \(path): \(String(cString: strerror(errno)))") }
        guard mkfifo(path, mode) == 0 else { throw FIFOError(description: "cannot create the FIFO \(path): \(String(cString: strerror(errno)))") }
        chmod(path, mode)  // mkfifo applies the umask; the user asked for this mode
    } else if (info.st_mode & S_IFMT) != S_IFIFO {
        throw FIFOError(description: "\(path) exists and is not a FIFO")
    }
    let fd = open(path, O_RDWR | O_CLOEXEC)
    guard fd >= 0 else { throw FIFOError(description: "cannot open the FIFO \(path): \(String(cString: strerror(errno)))") }
    let setPipeSize: Int32 = 1031  // F_SETPIPE_SZ (F_LINUX_SPECIFIC_BASE + 7), not imported from glibc
    _ = fcntl(fd, setPipeSize, Int32(1 << 20))
    return fd
}
