#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import Dispatch
import JSON
import Synchronization

/// Batches handed from a producer thread to a consumer, in order, with a bound on how many wait:
/// `ancsd decode` reads and parses its input on one thread while it decodes and writes on the
/// other.
final class BatchChannel<Item: Sendable>: Sendable {
    private struct State {
        var batches: [[Item]] = []
        var finished = false
        var error: (any Error & Sendable)?
    }

    private let state = Mutex(State())
    private let filled = DispatchSemaphore(value: 0)
    private let free: DispatchSemaphore

    /// A channel where at most `depth` batches wait.
    init(depth: Int) { free = DispatchSemaphore(value: depth) }

    /// Hands over a batch; waits while `depth` batches wait already.
    func send(_ batch: [Item]) {
        free.wait()
        state.withLock { $0.batches.append(batch) }
        filled.signal()
    }

    /// Ends the stream, with the error that ended it if any.
    func finish(throwing error: (any Error & Sendable)? = nil) {
        state.withLock {
            $0.finished = true
            $0.error = error
        }
        filled.signal()
    }

    /// The next batch; nil at the end; throws the producer's error after its last batch.
    func receive() throws -> [Item]? {
        filled.wait()
        let (batch, error) = state.withLock { state -> ([Item]?, (any Error & Sendable)?) in
            if !state.batches.isEmpty { return (state.batches.removeFirst(), nil) }
            return (nil, state.error)
        }
        if batch != nil { free.signal() }
        if let error { throw error }
        return batch
    }
}

/// Hands a value that is not `Sendable` to one other thread, which is then its only user.
struct Handoff<Value>: @unchecked Sendable {
    // @unchecked: the sender gives the value up; only the receiving thread touches it afterwards.
    let value: Value
}

/// Batches the consumer is done with, handed back so the producer fills them again: their
/// storage is allocated once, by the producer's thread, and neither thread allocates or frees
/// a batch's memory per batch.
final class SpentBatches<Batch: Sendable>: Sendable {
    private let batches = Mutex<[Batch]>([])

    /// Hands a batch back (the consumer's side).
    func give(_ spent: consuming Batch) {
        let spent = spent
        batches.withLock { $0.append(spent) }
    }

    /// A batch handed back, if there is one (the producer's side), as the consumer left it.
    func take() -> Batch? { batches.withLock { $0.popLast() } }
}

/// JSON Lines written to a file descriptor by a thread of its own, so the thread that makes them
/// never waits on `write(2)` (into a file, copying the bytes costs the kernel about as much as
/// making them): it fills one buffer while the last is written.
final class BackgroundWriter: Sendable {
    /// A buffer on its way to be written, or back for reuse.
    private final class Buffer: @unchecked Sendable {
        // @unchecked: owned by one thread at a time, handed over through the channel or the list.
        var writer: JSONWriter

        init(capacity: Int) { writer = JSONWriter(capacity: capacity) }

        /// Writes the lines out to `fd`; false if a write failed.
        func write(to fd: Int32) -> Bool { writer.withBytes { writeAll(fd, $0) } }
    }

    /// How many bytes a buffer collects before it is handed over.
    static let bufferSize = 1 << 18

    private let fd: Int32
    private let full = BatchChannel<Buffer>(depth: 2)
    private let empty = Mutex<[Buffer]>([])
    private let failed = Atomic(false)
    private let finished = DispatchSemaphore(value: 0)

    /// Starts the writing thread, writing to `fd`.
    init(fd: Int32 = STDOUT_FILENO) {
        self.fd = fd
        DispatchQueue(label: "ancsd.decode.writer").async { [self] in run() }
    }

    /// An empty writer to fill with lines, of the size handed over.
    func makeWriter() -> JSONWriter { JSONWriter(capacity: Self.bufferSize + 4096) }

    /// Hands `writer`'s lines over once `bufferSize` bytes collect, leaving it empty.
    func lineEnded(_ writer: inout JSONWriter) {
        if writer.count >= Self.bufferSize { send(&writer) }
    }

    /// Hands `writer`'s lines over to be written, leaving it empty.
    func send(_ writer: inout JSONWriter) {
        guard writer.count > 0 else { return }
        let buffer = empty.withLock { $0.popLast() } ?? Buffer(capacity: Self.bufferSize + 4096)
        swap(&buffer.writer, &writer)
        full.send([buffer])
    }

    /// Writes out what `writer` holds, then waits until everything handed over is written.
    /// False if a write failed (a closed pipe): output from then on was dropped.
    @discardableResult
    func finish(_ writer: inout JSONWriter) -> Bool {
        send(&writer)
        full.finish()
        finished.wait()
        return !failed.load(ordering: .relaxed)
    }

    private func run() {
        while let buffers = try? full.receive() {
            for buffer in buffers {
                // Two statements, not one condition: swiftlang 6.0.3 fails to compile the borrow
                // of the noncopyable writer inside a short-circuit condition (SIL ownership error).
                if !failed.load(ordering: .relaxed) {
                    let written = buffer.write(to: fd)
                    if !written { failed.store(true, ordering: .relaxed) }
                }
                buffer.writer.removeAll()
                empty.withLock { $0.append(buffer) }
            }
        }
        finished.signal()
    }
}
