#if canImport(Glibc)
public import Glibc
#endif
public import ANCSRuntime
import ANCSSession
public import JSON
import CLinux
public import Dispatch
import Synchronization

/// The output sink for standard output and the FIFO: each event as one line in `format`,
/// written to a file descriptor without ever blocking the caller.
///
/// When nothing is queued, `send` writes the line at once on the caller's thread with a write
/// that never waits (`pwritev2` with `RWF_NOWAIT`): a reader keeping up costs no thread switch.
/// Queue and bound: what that write cannot take (a full pipe, a descriptor without non-waiting
/// writes) waits in a queue of at most `maxPendingBytes` (1 MiB), and a private dispatch queue
/// writes it with blocking writes, everything queued in one write, so a slow or absent reader
/// stalls only that queue. When full: the oldest whole lines are dropped and counted; the count
/// is logged once the writer catches up. Nothing runs while there is nothing to write. A reader
/// that goes away (EPIPE) ends the sink with one log line.
public final class LineSink: OutputSink {
    private struct State {
        /// The rest of a line a non-waiting write took only part of: written before `pending`.
        var partial: [UInt8] = []
        var pending = FIFO<[UInt8]>()
        var pendingBytes = 0
        var writing = false
        var dropped = 0
        var droppedTotal = 0
        var broken = false
        var written = 0
        var format = OutputFormat.json
    }

    /// A name for log lines, like "standard output" or the FIFO's path.
    public let name: String
    public let maxPendingBytes: Int
    /// How events are written; a reload may change it (standard output's sink lives on).
    public var format: OutputFormat {
        get { state.withLock { $0.format } }
        set { state.withLock { $0.format = newValue } }
    }
    private let fd: Int32
    private let ownsDescriptor: Bool
    private let logger: Logger
    private let queue: DispatchQueue
    private let state = Mutex(State())

    public init(
        fd: Int32, name: String, ownsDescriptor: Bool, format: OutputFormat = .json, maxPendingBytes: Int = 1 << 20, logger: Logger
    ) {
        self.fd = fd
        self.name = name
        self.ownsDescriptor = ownsDescriptor
        self.maxPendingBytes = maxPendingBytes
        self.logger = logger
        queue = DispatchQueue(label: "ancsd.sink")
        state.withLock { $0.format = format }
    }

    deinit {
        if ownsDescriptor { close(fd) }
    }

    /// Writes one event as a line in `format`, now if that needs no waiting, or queues it.
    public func send(_ event: OutputRecord) {
        send(lineBytes: event.lineBytes(format))
    }

    /// Writes one line (the newline is added) now if that needs no waiting, or queues it.
    public func send(_ line: String) {
        send(lineBytes: newlineTerminated(line))
    }

    /// Writes one line given as bytes that end with its newline.
    private func send(lineBytes bytes: [UInt8]) {
        var failure: Int32?
        let startWriter = state.withLock { state -> Bool in
            guard !state.broken else { return false }
            if !state.writing {  // nothing queued: the line goes first
                switch writeWithoutWaiting(bytes) {
                case .all:
                    state.written += 1
                    return false
                case .part(let count):
                    state.partial = Array(bytes[count...])
                    state.writing = true
                    return true
                case .none:
                    break
                case .failed(let error):
                    failure = error
                    state.broken = true
                    return false
                }
            }
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
        if let failure { logger.warning("stopped writing to \(name): \(String(cString: strerror(failure)))") }
        if startWriter { queue.async { self.drain() } }
    }

    private enum Attempt {
        case all
        case part(Int)
        case none
        case failed(Int32)
    }

    /// One write that never waits; `.none` when it took nothing for want of room or support.
    private func writeWithoutWaiting(_ bytes: [UInt8]) -> Attempt {
        while true {
            let count = bytes.withUnsafeBytes { ancsd_write_nowait(fd, $0.baseAddress, $0.count) }
            if count == bytes.count { return .all }
            if count > 0 { return .part(count) }
            if count == 0 { return .none }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK, EOPNOTSUPP, EINVAL, ENOSYS, ESPIPE: return .none
            case let error: return .failed(error)
            }
        }
    }

    /// Lines dropped so far because the reader was too slow or absent.
    public var droppedCount: Int { state.withLock { $0.droppedTotal } }

    /// Lines written so far.
    public var writtenCount: Int { state.withLock { $0.written } }

    public func report() async -> JSONObject {
        let (written, dropped) = state.withLock { ($0.written, $0.droppedTotal) }
        return ["written": .int(written), "dropped": .int(dropped)]
    }

    /// Waits until every queued line is written or `timeout` passes; true if all were written.
    public func flush(timeout: DispatchTimeInterval) -> Bool {
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        guard done.wait(timeout: .now() + timeout) == .success else { return false }
        return state.withLock { $0.pending.isEmpty && $0.partial.isEmpty }
    }

    /// Writes what is queued, everything queued at a time in one blocking write.
    private func drain() {
        while true {
            let next = state.withLock { state -> (bytes: [UInt8], lines: Int)? in
                var bytes = state.partial
                var lines = bytes.isEmpty ? 0 : 1
                state.partial = []
                while bytes.count < 1 << 16, let line = state.pending.pop() {
                    state.pendingBytes -= line.count
                    bytes += line
                    lines += 1
                }
                guard !bytes.isEmpty else {
                    state.writing = false
                    return nil
                }
                return (bytes, lines)
            }
            guard let (bytes, lines) = next else { break }
            if writeAll(fd, bytes) {
                state.withLock { $0.written += lines }
            } else {
                let reason = String(cString: strerror(errno))
                state.withLock { state in
                    state.broken = true
                    state.partial = []
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
///
/// Notification content goes only where the user said: a FIFO that is there already must be
/// the daemon's user's and give nobody more than `mode` does; a symbolic link is never
/// followed, and what is opened is checked to be that FIFO.
public func openOutputFIFO(path: String, mode: mode_t) throws(FIFOError) -> Int32 {
    func failure(_ what: String) -> FIFOError { FIFOError(description: "\(what): \(String(cString: strerror(errno)))") }
    var info = stat()
    if lstat(path, &info) != 0 {
        guard errno == ENOENT else { throw failure("cannot use \(path)") }
        // Made with `mode` less the umask (never more), then given exactly `mode`.
        guard mkfifo(path, mode) == 0 else { throw failure("cannot create the FIFO \(path)") }
        guard chmod(path, mode) == 0 else { throw failure("cannot give the FIFO \(path) its mode") }
    } else if (info.st_mode & S_IFMT) != S_IFIFO {
        throw FIFOError(description: "\(path) exists and is not a FIFO")
    }
    let fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)  // read-write: never waits for a reader
    guard fd >= 0 else { throw failure("cannot open the FIFO \(path)") }
    guard fstat(fd, &info) == 0 else {
        let error = failure("cannot check the FIFO \(path)")
        close(fd)
        throw error
    }
    let problem: String? =
        if (info.st_mode & S_IFMT) != S_IFIFO {
            "\(path) is not a FIFO"
        } else if info.st_uid != geteuid() {
            "the FIFO \(path) belongs to uid \(info.st_uid), not to ancsd's user (uid \(geteuid())): notification content goes only into ancsd's own FIFO"
        } else if info.st_mode & 0o7777 & ~mode != 0 {
            "the FIFO \(path) has mode \(String(info.st_mode & 0o7777, radix: 8)), more than --fifo-mode \(String(mode, radix: 8)) allows: chmod it or remove it"
        } else {
            nil
        }
    if let problem {
        close(fd)
        throw FIFOError(description: problem)
    }
    let setPipeSize: Int32 = 1031  // F_SETPIPE_SZ (F_LINUX_SPECIFIC_BASE + 7), not imported from glibc
    _ = fcntl(fd, setPipeSize, Int32(1 << 20))
    return fd
}
