public import EventLoop

/// The one place ancsd's asynchronous code runs: an `EventLoop`, one thread with its own epoll
/// loop, used both as the serial executor of the daemon's actors and as the task executor
/// preference (SE-0417) of every task the daemon starts. The D-Bus connection, the phones'
/// notification sockets and the daemon's timers are watched by the same loop, so a datagram or a
/// reply is read, handled, and its continuation resumed on the thread that woke for it: one
/// wakeup per event (libdispatch's sources cost two, through its manager thread).
///
/// Why not Swift's default global executor: on Linux, it is libdispatch's global
/// *non-overcommit* root queue, and the first worker of such a queue installs libdispatch's
/// workqueue monitor, a 1 s repeating timer that wakes the process every second for as long as
/// it lives (`_dispatch_workq_init_once` → `_dispatch_workq_monitor_pools`).
///
/// Rules that keep an idle daemon at zero wakeups:
/// - actors of the daemon return this executor as their `unownedExecutor`;
/// - the top-level task runs in `withTaskExecutorPreference(executor)`, so nonisolated async
///   functions and task-group children run here too (children inherit the preference);
/// - unstructured tasks do not inherit a preference: create them with
///   `Task(executorPreference: executor)`, never plain `Task {}`;
/// - no `Task.sleep` (it schedules on the global queue): timers are the loop's
///   (`makeTimer`, `after`);
/// - descriptors are watched by the loop (`watch`); code that keeps DispatchSources (signals,
///   MQTT, the control socket, child processes) puts them on a private serial queue of its own,
///   never on `DispatchQueue.global()`, and reaches the daemon's actors with `execute` or a task.
public typealias DaemonExecutor = EventLoop
