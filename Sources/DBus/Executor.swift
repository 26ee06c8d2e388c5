import Dispatch

/// The serial executor of a `DBusConnection`: a private serial DispatchQueue.
///
/// The actor's jobs, the DispatchSources for libdbus's watches and timer, and the dispatch
/// drain all run on this one queue, so all connection state lives in one isolation domain:
/// source handlers enter the actor with `assumeIsolated`, which `checkIsolated` makes legal
/// on this queue.
///
/// It is also a `TaskExecutor`: a task that prefers it runs its nonisolated code on the
/// queue, so a continuation resumed by a reply is enqueued right here rather than on the
/// global executor (where Swift would otherwise resume it, then hop back). Jobs enqueued
/// while a source handler runs are run right after the handler on the same thread, instead
/// of being queued behind it and waking another thread: a reply then costs one thread
/// wakeup in all.
final class QueueExecutor: SerialExecutor, TaskExecutor, @unchecked Sendable {
    /// The queue everything of one connection runs on.
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<Bool>()
    /// Set on the queues of all connections.
    #if compiler(>=6.2)
    private static let anyConnectionKey = DispatchSpecificKey<Bool>()
    #else
    // Swift 6.0's Dispatch does not declare DispatchSpecificKey Sendable; the key is only
    // compared by identity, never mutated.
    nonisolated(unsafe) private static let anyConnectionKey = DispatchSpecificKey<Bool>()
    #endif
    // Touched only on `queue`.
    private var inHandler = false
    private var localJobs: [UnownedJob] = []

    /// `queue` must be serial; it may be shared with the client's own actor.
    init(queue: DispatchQueue) {
        self.queue = queue
        queue.setSpecific(key: key, value: true)
        queue.setSpecific(key: Self.anyConnectionKey, value: true)
    }

    /// True when the current thread is running this executor's queue.
    var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == true }

    /// True when the current thread is running the queue of any connection.
    static var isOnAnyConnectionQueue: Bool { DispatchQueue.getSpecific(key: anyConnectionKey) == true }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        // `inHandler` is only read on the queue, where it is also written.
        if isCurrent && inHandler {
            localJobs.append(unowned)
            return
        }
        let serial = asUnownedSerialExecutor()
        let task = asUnownedTaskExecutor()
        queue.async { unowned.runSynchronously(isolatedTo: serial, taskExecutor: task) }
    }

    /// Runs a source handler, then the jobs it made runnable, on this thread (on the queue).
    func runHandler(_ body: () -> Void) {
        inHandler = true
        body()
        let serial = asUnownedSerialExecutor()
        let task = asUnownedTaskExecutor()
        var budget = 64
        while !localJobs.isEmpty && budget > 0 {
            let jobs = localJobs
            localJobs = []
            for job in jobs { job.runSynchronously(isolatedTo: serial, taskExecutor: task) }
            budget -= jobs.count
        }
        inHandler = false
        // Anything left goes through the queue like any other job.
        let rest = localJobs
        localJobs = []
        for job in rest { queue.async { job.runSynchronously(isolatedTo: serial, taskExecutor: task) } }
    }

    func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}
