import Dispatch
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
