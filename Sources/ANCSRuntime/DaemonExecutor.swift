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
/// The rules that keep an idle daemon at zero wakeups (actors, tasks, timers, descriptors,
/// signals, `LoopBound`) are in ARCHITECTURE.md, "Concurrency"; `scripts/check-concurrency`
/// (run by `make test`) enforces them.
public typealias DaemonExecutor = EventLoop
