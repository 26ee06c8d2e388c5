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

/// Batches the consumer is done with, handed back so the producer frees them: the memory of
/// what a thread allocated then goes back to that thread's heap (glibc gives each thread an
/// arena), rather than through the other thread taking that arena's lock for every block.
final class SpentBatches<Item: Sendable>: Sendable {
    private let batches = Mutex<[[[Item]]]>([])

    /// Hands batches back (the consumer's side).
    func give(_ spent: [[Item]]) { batches.withLock { $0.append(spent) } }

    /// Frees what was handed back (the producer's side), keeping the storage of one batch,
    /// emptied, for the producer's next (so no large block is allocated per batch).
    func reuse() -> [Item] {
        var taken = batches.withLock { batches -> [[[Item]]] in
            var taken: [[[Item]]] = []
            swap(&taken, &batches)
            return taken
        }
        guard var last = taken.popLast(), var storage = last.popLast() else { return [] }
        storage.removeAll(keepingCapacity: true)
        return storage
    }
}
