public import Dispatch

/// The one place ancsd's asynchronous code runs: a private serial DispatchQueue, used both as
/// the serial executor of the daemon's actors and as the task executor preference (SE-0417) of
/// every task the daemon starts.
///
/// Why not the default global executor: on Linux, Swift's cooperative pool is libdispatch's
/// global *non-overcommit* root queue, and the first worker of such a queue installs
/// libdispatch's workqueue monitor, a 1 s repeating timer that wakes the process every second
/// for as long as it lives (`_dispatch_workq_init_once` → `_dispatch_workq_monitor_pools`).
/// A private serial queue targets an *overcommit* root queue, which has no monitor, so an idle
/// daemon whose work all lands here makes no wakeups at all.
///
/// Rules that keep it that way (each one checked with a breakpoint on `_dispatch_workq_init_once`):
/// - actors of the daemon return this executor as their `unownedExecutor`;
/// - the top-level task runs in `withTaskExecutorPreference(executor)`, so nonisolated async
///   functions and task-group children run here too (children inherit the preference);
/// - unstructured tasks do not inherit a preference: create them with
///   `Task(executorPreference: executor)`, never plain `Task {}`;
/// - no `Task.sleep` (it schedules on the global queue): timers are DispatchSources on `queue`;
/// - DispatchSources (signals, sockets, timers) use `queue`, never `DispatchQueue.global()`.
///
/// One queue for the whole daemon also means hops between its actors and its dispatch sources
/// stay on one thread: no thread wakeups in the path of a notification.
public final class DaemonExecutor: SerialExecutor, TaskExecutor, @unchecked Sendable {
    /// The serial queue everything runs on.
    public let queue: DispatchQueue

    public init(label: String = "ancsd") {
        queue = DispatchQueue(label: label)
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async {
            // Both roles at once: a job run here is isolated to this serial executor and keeps
            // this task executor for the nonisolated code it calls.
            job.runSynchronously(isolatedTo: self.asUnownedSerialExecutor(), taskExecutor: self.asUnownedTaskExecutor())
        }
    }

    public func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }

    /// A one-shot or repeating timer on the daemon's queue; nil `deadline` leaves it disarmed.
    public func makeTimer(handler: @escaping @Sendable () -> Void) -> any DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.setEventHandler(handler: handler)
        timer.schedule(deadline: .distantFuture, repeating: .never)
        timer.resume()
        return timer
    }
}
