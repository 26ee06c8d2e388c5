#if canImport(Glibc)
public import Glibc
#endif
public import ANCSRuntime
import ANCSSession
public import EventLoop
public import JSON
import CLinux
public import SystemCalls

/// The output sink for standard output and the FIFO: each event as one line in `format`,
/// written to a file descriptor without ever blocking the daemon's event loop.
///
/// When nothing is queued, `send` writes the line at once with a write that never waits
/// (`pwritev2` with `RWF_NOWAIT`): a reader keeping up costs no wakeup. Queue and bound: what
/// that write cannot take (a full pipe) waits in a queue of at most `maxPendingBytes` (1 MiB),
/// written by the loop whenever the descriptor has room (a writable watch), up to 64 KiB in one
/// write, so a slow or absent reader stalls only this sink. When full: the oldest whole lines
/// are dropped and counted; the count is logged once the writer catches up. Nothing runs while
/// there is nothing to write. A reader that goes away (EPIPE) ends the sink with one log line.
///
/// A descriptor without non-waiting writes (a terminal): a private non-blocking description of
/// it is opened (`/proc/self/fd/N`) and written instead, never the shared one's flags changed.
/// A regular file is written with ordinary writes (they wait for the disk, never for a reader).
public final class LineSink: OutputSink {
    /// A name for log lines, like "standard output" or the FIFO's path.
    public let name: String
    public let maxPendingBytes: Int
    /// The loop that writes the queue and keeps the sink's state; `send` may be called from
    /// any thread.
    public let loop: EventLoop
    /// How events are written: read on the loop; set from anywhere (at once on the loop, where a
    /// reload sets it: standard output's sink lives on).
    public var format: OutputFormat {
        get { writer.value.format }
        set { writer.withValue { [newValue] in $0.format = newValue } }
    }
    private let logger: Logger
    private let writer: LoopBound<LineWriter>

    /// Writes to `fd`, which the sink closes when it goes if `ownsDescriptor`.
    public convenience init(
        fd: Int32, name: String, ownsDescriptor: Bool, format: OutputFormat = .json, maxPendingBytes: Int = 1 << 20, logger: Logger,
        loop: EventLoop
    ) {
        self.init(
            writer: LineWriter(fd: fd, owned: ownsDescriptor ? FileDescriptor(adopting: fd) : nil, format: format), name: name,
            maxPendingBytes: maxPendingBytes, logger: logger, loop: loop)
    }

    /// Writes to `descriptor` (the FIFO), and closes it when the sink goes.
    public convenience init(
        owning descriptor: consuming FileDescriptor, name: String, format: OutputFormat = .json, maxPendingBytes: Int = 1 << 20,
        logger: Logger, loop: EventLoop
    ) {
        let fd = descriptor.rawValue
        self.init(
            writer: LineWriter(fd: fd, owned: descriptor, format: format), name: name, maxPendingBytes: maxPendingBytes, logger: logger,
            loop: loop)
    }

    private init(writer: LineWriter, name: String, maxPendingBytes: Int, logger: Logger, loop: EventLoop) {
        self.name = name
        self.maxPendingBytes = maxPendingBytes
        self.logger = logger
        self.loop = loop
        self.writer = LoopBound(writer, loop: loop)
    }

    /// Writes one event as a line in `format`, now if that needs no waiting, or queues it: on the
    /// loop at once when called there (the daemon's events are), else holding it
    /// (`EventLoop.perform`).
    public func send(_ event: OutputRecord) {
        if loop.isCurrent {
            take(event)
        } else {
            loop.perform { self.take(event) }
        }
    }

    /// Writes one line (the newline is added) now if that needs no waiting, or queues it (as
    /// `send(_:)` of an event).
    public func send(_ line: String) {
        let bytes = newlineTerminated(line)
        loop.perform { self.take(bytes, self.writer.value) }
    }

    /// The lines written so far, and those dropped because the reader was too slow or absent
    /// (read on the loop).
    public var counts: (written: Int, dropped: Int) {
        get async {
            let writer = self.writer
            return await withCheckedContinuation { continuation in
                loop.perform { continuation.resume(returning: (writer.value.written, writer.value.droppedTotal)) }
            }
        }
    }

    public func report() async -> JSONObject {
        let counts = await counts
        return ["written": .int(counts.written), "dropped": .int(counts.dropped)]
    }

    /// Returns once every queued line is written or `timeout` passes; true if all were written.
    public func flush(timeout: Duration) async -> Bool {
        await withCheckedContinuation { continuation in
            loop.perform { self.waitUntilWritten(timeout: timeout, continuation) }
        }
    }

    // MARK: On the loop

    private func take(_ event: OutputRecord) {
        let writer = self.writer.value
        take(event.lineBytes(writer.format), writer)
    }

    /// The line goes first if nothing is queued; else (or if it did not fit) it is queued.
    private func take(_ bytes: [UInt8], _ writer: LineWriter) {
        guard !writer.broken else { return }
        if writer.isIdle {
            switch writer.attempt(bytes) {
            case .all:
                writer.written += 1
                return
            case .part(let count):
                writer.current = Array(bytes[count...])
                writer.currentLines = 1
                return waitForRoom(writer)
            case .full:
                break
            case .failed(let error):
                return fail(writer, error)
            }
        }
        writer.pending.push(bytes)
        writer.pendingBytes += bytes.count
        while writer.pendingBytes > maxPendingBytes, let oldest = writer.pending.pop() {
            writer.pendingBytes -= oldest.count
            writer.dropped += 1
            writer.droppedTotal += 1
        }
        if !writer.waiting { waitForRoom(writer) }
    }

    /// Has `drain` called when the descriptor has room: a writable watch, or (a descriptor
    /// epoll cannot watch, a regular file) ordinary writes from the loop's next turn.
    private func waitForRoom(_ writer: LineWriter) {
        writer.waiting = true
        if let watch = writer.watch { return watch.update(.writable) }
        do {
            writer.watch = try loop.watch(fd: writer.writeFD, interest: .writable) { [weak self] _ in self?.drain() }
        } catch {
            writer.route = .blocking
            loop.execute { [weak self] in self?.drain() }
        }
    }

    /// Writes what is queued, up to 64 KiB at a time, until it is all written or the
    /// descriptor is full again.
    private func drain() {
        let writer = self.writer.value
        guard writer.waiting else { return }
        while true {
            if writer.current.isEmpty {
                while writer.current.count < 1 << 16, let line = writer.pending.pop() {
                    writer.pendingBytes -= line.count
                    writer.current += line
                    writer.currentLines += 1
                }
            }
            if writer.current.isEmpty { return caughtUp(writer) }
            switch writer.attempt(writer.current) {
            case .all:
                writer.written += writer.currentLines
                writer.current.removeAll(keepingCapacity: true)
                writer.currentLines = 0
            case .part(let count):
                writer.current.removeFirst(count)
                return
            case .full:
                return
            case .failed(let error):
                return fail(writer, error)
            }
        }
    }

    /// Everything is written: the watch rests, the drops are told, the flushes answered.
    private func caughtUp(_ writer: LineWriter) {
        writer.waiting = false
        writer.watch?.update([])
        if writer.dropped > 0 {
            logger.warning("dropped \(writer.dropped) events for \(name): its reader was too slow or absent")
            writer.dropped = 0
        }
        writer.answerFlushes(true)
    }

    private func fail(_ writer: LineWriter, _ error: Errno) {
        writer.broken = true
        writer.waiting = false
        writer.watch?.cancel()
        writer.watch = nil
        writer.current = []
        writer.pending = FIFO()
        writer.pendingBytes = 0
        logger.warning("stopped writing to \(name): \(error)")
        writer.answerFlushes(false)
    }

    private func waitUntilWritten(timeout: Duration, _ continuation: CheckedContinuation<Bool, Never>) {
        let writer = self.writer.value
        guard writer.waiting else { return continuation.resume(returning: !writer.broken) }
        let id = writer.nextFlush
        writer.nextFlush += 1
        let timer = loop.makeTimer { [weak self] in self?.writer.value.answerFlush(id, false) }
        writer.flushes.append((id, continuation, timer))
        timer.schedule(after: timeout)
    }
}

/// `LineSink`'s descriptor and queue, touched on its loop only (a `LoopBound`).
private final class LineWriter {
    /// How a line reaches the descriptor without waiting, found out by the first write.
    enum Route {
        /// `pwritev2(RWF_NOWAIT)` on the descriptor itself (pipes, FIFOs, sockets, /dev/null).
        case noWait
        /// `write` on `nonBlocking`, a description of its own (a terminal).
        case nonBlocking
        /// Ordinary writes (a regular file; a descriptor that cannot be reopened).
        case blocking
    }

    enum Attempt {
        case all
        case part(Int)
        /// Nothing taken for want of room.
        case full
        case failed(Errno)
    }

    let fd: Int32
    var format: OutputFormat
    /// Lines written, and dropped, since the sink began.
    var written = 0
    var droppedTotal = 0
    /// `fd` when the sink owns it.
    private let owned: FileDescriptor?
    /// A non-blocking description of `fd`'s file, for `.nonBlocking`; `writeFD` is its number.
    private var nonBlocking: FileDescriptor?
    /// The descriptor the queue is written to (and watched).
    private(set) var writeFD: Int32
    var route = Route.noWait
    /// The front of the queue being written: a line a write took only part of, or a batch.
    var current: [UInt8] = []
    var currentLines = 0
    var pending = FIFO<[UInt8]>()
    var pendingBytes = 0
    /// Lines dropped since the writer last caught up.
    var dropped = 0
    var broken = false
    /// Something is queued and `drain` will run when the descriptor has room.
    var waiting = false
    var watch: Watch?
    var flushes: [(id: Int, continuation: CheckedContinuation<Bool, Never>, timer: LoopTimer)] = []
    var nextFlush = 0

    init(fd: Int32, owned: consuming FileDescriptor?, format: OutputFormat) {
        self.fd = fd
        self.format = format
        self.owned = owned
        writeFD = fd
    }

    deinit {
        watch?.cancel()  // before the descriptors close
    }

    var isIdle: Bool { !waiting && current.isEmpty }

    /// One write that never waits (except to a regular file).
    func attempt(_ bytes: [UInt8]) -> Attempt {
        let result = bytes.withUnsafeBytes(writeOnce)
        switch result {
        case .success(let count) where count == bytes.count: return .all
        case .success(let count) where count > 0: return .part(count)
        case .success: return .full
        case .failure(let error) where error == .wouldBlock: return .full
        case .failure(let error) where route == .noWait && [EOPNOTSUPP, EINVAL, ENOSYS, ESPIPE].contains(error.rawValue):
            route = fallbackRoute()
            return attempt(bytes)
        case .failure(let error): return .failed(error)
        }
    }

    private func writeOnce(_ buffer: UnsafeRawBufferPointer) -> Result<Int, Errno> {
        do throws(Errno) {
            return .success(
                try Errno.retrying { () -> Int in
                    switch route {
                    case .noWait: ancsd_write_nowait(fd, buffer.baseAddress, buffer.count)
                    case .nonBlocking: write(writeFD, buffer.baseAddress, buffer.count)
                    case .blocking: write(fd, buffer.baseAddress, buffer.count)
                    }
                })
        } catch {
            return .failure(error)
        }
    }

    /// For a descriptor without non-waiting writes: a non-blocking description of its own if it
    /// is a pipe or a terminal (`/proc/self/fd/N`, so the flags of the one shared with other
    /// processes stay as they are), else ordinary writes.
    private func fallbackRoute() -> Route {
        var info = stat()
        guard fstat(fd, &info) == 0, [S_IFIFO, S_IFCHR].contains(info.st_mode & S_IFMT) else { return .blocking }
        do throws(Errno) {
            let reopened = try FileDescriptor.open("/proc/self/fd/\(fd)", O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
            writeFD = reopened.rawValue
            nonBlocking = consume reopened
            return .nonBlocking
        } catch {
            return .blocking
        }
    }

    func answerFlushes(_ result: Bool) {
        for flush in flushes {
            flush.timer.cancel()
            flush.continuation.resume(returning: result)
        }
        flushes = []
    }

    func answerFlush(_ id: Int, _ result: Bool) {
        guard let index = flushes.firstIndex(where: { $0.id == id }) else { return }
        flushes.remove(at: index).continuation.resume(returning: result)
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
/// followed, and what is opened is checked to be that FIFO. The descriptor is the caller's
/// (`LineSink(owning:)`).
public func openOutputFIFO(path: String, mode: mode_t) throws(FIFOError) -> FileDescriptor {
    func failure(_ what: String, _ error: Errno = .current) -> FIFOError { FIFOError(description: "\(what): \(error)") }
    var info = stat()
    if lstat(path, &info) != 0 {
        guard errno == ENOENT else { throw failure("cannot use \(path)") }
        // Made with `mode` less the umask (never more), then given exactly `mode`.
        guard mkfifo(path, mode) == 0 else { throw failure("cannot create the FIFO \(path)") }
        guard chmod(path, mode) == 0 else { throw failure("cannot give the FIFO \(path) its mode") }
    } else if (info.st_mode & S_IFMT) != S_IFIFO {
        throw FIFOError(description: "\(path) exists and is not a FIFO")
    }
    let fifo: FileDescriptor
    do throws(Errno) {
        fifo = try FileDescriptor.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)  // read-write: never waits for a reader
    } catch {
        throw failure("cannot open the FIFO \(path)", error)
    }
    do throws(Errno) {
        info = try fifo.status()
    } catch {
        throw failure("cannot check the FIFO \(path)", error)
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
    if let problem { throw FIFOError(description: problem) }  // `fifo` closes as it goes
    let setPipeSize: Int32 = 1031  // F_SETPIPE_SZ (F_LINUX_SPECIFIC_BASE + 7), not imported from glibc
    _ = fcntl(fifo.rawValue, setPipeSize, Int32(1 << 20))
    return fifo
}
