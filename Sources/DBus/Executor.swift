import Dispatch

/// The serial executor of a `DBusConnection`: a private serial DispatchQueue.
///
/// The actor's jobs, the DispatchSources for libdbus's watches, the timeout timer and the
/// dispatch drain all run on this one queue, so all connection state lives in one
/// isolation domain: source handlers enter the actor with `assumeIsolated`, which
/// `checkIsolated` makes legal on this queue.
final class QueueExecutor: SerialExecutor, @unchecked Sendable {
    /// The queue everything of one connection runs on.
    let queue: DispatchQueue

    /// `queue` must be serial.
    init(queue: DispatchQueue) {
        self.queue = queue
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async { unowned.runSynchronously(on: executor) }
    }

    func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}
