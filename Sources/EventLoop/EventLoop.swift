#if canImport(Glibc)
import Glibc
#endif
import CEventLoop
import Synchronization
import SystemCalls

/// A serial executor that is one thread running an epoll loop of its own: the jobs of the actors
/// and tasks that use it, the handlers of the descriptors it watches and its timers all run on
/// that thread, one at a time.
///
/// Why not a DispatchQueue: on Linux, libdispatch serves every DispatchSource through its manager
/// thread, so a readable socket costs two cross-thread wakeups before its handler runs (the
/// manager's `epoll_wait`, then a worker for the queue). Here the thread that sleeps in
/// `epoll_wait` runs the handler itself, and a job the handler makes runnable (a continuation
/// resumed by a reply) runs right after it on the same thread: one wakeup per event, none at all
/// while idle (no timer is armed unless one is scheduled).
///
/// Rules:
/// - `Watch` and `LoopTimer` handlers run on the loop; keep them short and non-blocking.
/// - Cancel a watch before closing its descriptor (`Watch.cancel` unregisters it at once).
/// - A loop runs until `shutdown()`; work enqueued after that is never run, so shut a loop down
///   only when nothing can reach it any more (its owner's deinit).
/// - Whatever runs on it reads the time from `now`, so that a loop made with `clock: .virtual`
///   (tests) moves it for everything at once: there only `advance(by:)` moves the clock and
///   fires the timers; descriptors and work are served as on any loop.
public final class EventLoop: SerialExecutor, TaskExecutor, @unchecked Sendable {
    /// Why a loop, a watch or a timer could not be set up.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public let description: String
        init(_ what: String) {
            description = "\(what): \(Errno.current)"
        }
    }

    /// Where a loop's time comes from.
    public enum ClockKind: Sendable {
        /// `ContinuousClock`, the timers on a timerfd: every loop that is not a test's.
        case continuous
        /// A clock that stands still until `advance(by:)` moves it; timers fire only then.
        case virtual
    }

    private enum Work {
        case job(UnownedJob)
        case block(@Sendable () -> Void)
    }

    /// What other threads hand to the loop.
    private struct Inbox {
        var work: [Work] = []
        /// The loop is in, or about to enter, `epoll_wait` with nothing to do: wake it.
        var parked = false
        var stopping = false
    }

    private static let wakeToken: UInt64 = 0
    private static let timerToken: UInt64 = 1

    private let name: String
    /// The loop's own descriptors, closed with it: the epoll set, the eventfd that wakes it, and
    /// the timerfd of its timers.
    private let epoll: FileDescriptor
    private let wakeEvent: FileDescriptor
    private let timerEvent: FileDescriptor
    private var epollFD: Int32 { epoll.rawValue }
    private var wakeFD: Int32 { wakeEvent.rawValue }
    private var timerFD: Int32 { timerEvent.rawValue }
    private let inbox = Mutex(Inbox())
    /// Held by whoever runs the loop's work: the loop's thread between two waits, or a thread
    /// inside `perform`. Everything below is touched only by the holder.
    private let ownership = Mutex(())
    private var local: [Work] = []
    private var running: [Work] = []
    private var watches: [UInt64: Watch] = [:]
    /// The ready watches that wait for the urgent ones, in one turn (kept for its capacity).
    private var later: [(watch: Watch, events: UInt32)] = []
    private var timers: [UInt64: LoopTimer] = [:]
    private var armedDeadline: UInt64 = 0
    private let nextToken = Atomic<UInt64>(2)
    /// Made with `clock: .virtual`.
    public let isVirtual: Bool
    /// The virtual clock's reading: nanoseconds on the timers' scale (from 1: no deadline is 0),
    /// written only by `advance`, holding the loop.
    private let virtualNanoseconds = Atomic<UInt64>(1)
    /// The instant the virtual clock starts from.
    private let virtualOrigin: ContinuousClock.Instant
    /// A virtual loop's `observeTurns` handler.
    private var turnObserver: (@Sendable () -> Void)?

    /// Starts a loop on a new thread named `name` (at most 15 bytes are kept), its time from
    /// `clock`.
    public init(name: String, clock: ClockKind = .continuous) throws(Failure) {
        self.name = name
        isVirtual = clock == .virtual
        virtualOrigin = .now
        epoll = try Self.adopt(ancs_epoll_create())
        wakeEvent = try Self.adopt(ancs_eventfd())
        timerEvent = try Self.adopt(ancs_timerfd())
        guard ancs_epoll_ctl(epoll.rawValue, Int32(ANCS_EPOLL_CTL_ADD), wakeEvent.rawValue, UInt32(ANCS_EPOLLIN), Self.wakeToken) == 0,
            ancs_epoll_ctl(epoll.rawValue, Int32(ANCS_EPOLL_CTL_ADD), timerEvent.rawValue, UInt32(ANCS_EPOLLIN), Self.timerToken) == 0
        else {
            throw Failure("cannot watch the event loop's descriptors")
        }
        var thread = pthread_t()
        // The thread keeps the loop alive until it stops.
        let retained = Unmanaged.passRetained(self)
        let started = pthread_create(&thread, nil, { argument in
            guard let argument else { return nil }
            let loop = Unmanaged<EventLoop>.fromOpaque(argument).takeRetainedValue()
            ancs_name_this_thread(loop.name)
            loop.run()
            return nil
        }, retained.toOpaque())
        guard started == 0 else {
            retained.release()
            errno = started
            throw Failure("cannot start the event loop's thread")
        }
        pthread_detach(thread)
    }

    /// Owns `fd`, one of the loop's own descriptors just made (or throws if it could not be).
    private static func adopt(_ fd: Int32) throws(Failure) -> FileDescriptor {
        guard fd >= 0 else { throw Failure("cannot create the event loop's descriptors") }
        return FileDescriptor(adopting: fd)
    }

    /// Lets the loop's thread finish: it runs what is already enqueued, then exits.
    public func shutdown() {
        inbox.withLock { $0.stopping = true }
        wake()
    }

    // MARK: Time

    /// The loop's time: `ContinuousClock.now`, or on a virtual loop the instant it was made
    /// plus what `advance(by:)` added. Read from any thread.
    public var now: ContinuousClock.Instant {
        guard isVirtual else { return .now }
        return virtualOrigin + .nanoseconds(virtualNanoseconds.load(ordering: .acquiring) - 1)
    }

    /// The timers' clock, in nanoseconds: CLOCK_MONOTONIC (the timerfd's), or the virtual one.
    fileprivate var timerNanoseconds: UInt64 {
        isVirtual ? virtualNanoseconds.load(ordering: .acquiring) : ancs_monotonic_ns()
    }

    /// Moves a virtual loop's clock `duration` forward and runs, on the loop, every timer that
    /// comes due meanwhile in deadline order (timers of equal deadline in the order they were
    /// made), each with the clock at its deadline and after what the timer before it made
    /// runnable; a timer its handler schedules within the span fires too. Returns once they
    /// have run, the clock at the end of the span. Work that waits for I/O (a bus reply) goes
    /// on as usual: only the timers are the caller's to drive.
    public func advance(by duration: Duration) async {
        precondition(isVirtual, "advance(by:) moves the clock of a loop made with clock: .virtual only")
        let span = LoopTimer.nanoseconds(duration)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            execute { [self] in
                let target = virtualNanoseconds.load(ordering: .acquiring) &+ span
                advanceStep(to: target) { done.resume() }
            }
        }
    }

    /// One step of `advance`, holding the loop: waits for the runnable work to be done, fires
    /// the earliest timer due by `target`, and comes back after what it made runnable.
    private func advanceStep(to target: UInt64, _ done: @escaping @Sendable () -> Void) {
        let again = Work.block { [self] in advanceStep(to: target, done) }
        guard local.isEmpty else { return local.append(again) }
        let next = timers.values.filter { $0.deadline <= target }.min { ($0.deadline, $0.id) < ($1.deadline, $1.id) }
        guard let next else {
            virtualNanoseconds.store(target, ordering: .releasing)
            return done()
        }
        if next.deadline > virtualNanoseconds.load(ordering: .acquiring) {
            virtualNanoseconds.store(next.deadline, ordering: .releasing)
        }
        fire(next, now: virtualNanoseconds.load(ordering: .acquiring))
        local.append(again)
    }

    /// On a virtual loop, calls `body` on the loop at the end of every turn (after the
    /// descriptors that were ready, the work that was enqueued and what they made runnable):
    /// where a test checks its conditions once per message its code received, instead of polling.
    public func observeTurns(_ body: @escaping @Sendable () -> Void) {
        precondition(isVirtual, "observeTurns is for loops made with clock: .virtual")
        perform { self.turnObserver = body }
    }

    // MARK: Whose turn it is

    /// True when the calling thread runs this loop's work now (on the loop, or inside `perform`).
    public var isCurrent: Bool { pthread_getspecific(currentLoopKey) == Unmanaged.passUnretained(self).toOpaque() }

    /// True when the calling thread runs some event loop's work now.
    public static var isOnAnyLoop: Bool { pthread_getspecific(currentLoopKey) != nil }

    /// Runs `body` while holding the loop, with `isCurrent` true on this thread.
    private func owning<R>(_ body: () -> R) -> R {
        ownership.withLock { _ in
            let previous = pthread_getspecific(currentLoopKey)
            pthread_setspecific(currentLoopKey, Unmanaged.passUnretained(self).toOpaque())
            defer { pthread_setspecific(currentLoopKey, previous) }
            return body()
        }
    }

    // MARK: Running work

    public func enqueue(_ job: consuming ExecutorJob) {
        submit(.job(UnownedJob(job)))
    }

    public func checkIsolated() {
        precondition(isCurrent, "not on the event loop that isolates this code")
    }

    /// Whether the calling thread runs this loop's work now: the answer `checkIsolated` checks,
    /// given without trapping. Swift 6.2's runtime asks this first (`assumeIsolated` on the
    /// loop's handlers, where no job is running) and then needs no `checkIsolated`; to older
    /// runtimes it is an ordinary method.
    public func isIsolatingCurrentContext() -> Bool? {
        isCurrent
    }

    /// Runs `body` on the loop, after what is already enqueued.
    public func execute(_ body: @escaping @Sendable () -> Void) {
        submit(.block(body))
    }

    /// Runs `body` holding the loop as soon as it can: at once when already on it; on the calling
    /// thread from a thread that runs no loop (waiting, like `DispatchQueue.sync`, only while the
    /// loop is busy, never for I/O: keep `body` short); and with `execute` from another loop's
    /// thread, where waiting could deadlock the two loops.
    public func perform(_ body: @escaping @Sendable () -> Void) {
        if isCurrent { return body() }
        if Self.isOnAnyLoop { return execute(body) }
        owning {
            body()
            // Work that `body` made runnable goes to the loop's thread.
            guard !local.isEmpty else { return }
            let moved = local
            local = []
            handOver(moved)
        }
    }

    /// Runs `delay` from now, once, on the loop.
    public func after(_ delay: Duration, _ body: @escaping @Sendable () -> Void) {
        // Held by the loop while armed, and let go once it has fired.
        LoopTimer(loop: self, handler: body).schedule(after: delay)
    }

    private func submit(_ work: Work) {
        if isCurrent {
            local.append(work)
        } else {
            handOver([work])
        }
    }

    private func handOver(_ work: [Work]) {
        let wakeUp = inbox.withLock { inbox -> Bool in
            inbox.work.append(contentsOf: work)
            defer { inbox.parked = false }
            return inbox.parked
        }
        if wakeUp { wake() }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Runs local work, at most `budget` items; true if some is left.
    private func runLocal(budget: Int = 1024) -> Bool {
        // Called after every handler, which mostly leaves nothing to run: one look at the queue.
        if local.isEmpty { return false }
        var ran = 0
        let serial = asUnownedSerialExecutor()
        let task = asUnownedTaskExecutor()
        while !local.isEmpty && ran < budget {
            swap(&local, &running)
            for work in running {
                switch work {
                case .job(let job): job.runSynchronously(isolatedTo: serial, taskExecutor: task)
                case .block(let body): body()
                }
            }
            ran += running.count
            running.removeAll(keepingCapacity: true)
        }
        return !local.isEmpty
    }

    private func run() {
        defer {
            // Watches and timers hold the loop: let them go with its thread.
            owning {
                watches = [:]
                timers = [:]
                turnObserver = nil
            }
        }
        var ready = [ancs_ready](repeating: ancs_ready(), count: 64)
        var moreWork = false
        while true {
            let stop = owning { () -> Bool in
                let (taken, stopping) = inbox.withLock { inbox in
                    var taken: [Work] = []
                    swap(&taken, &inbox.work)
                    return (taken, inbox.stopping)
                }
                local.append(contentsOf: taken)
                moreWork = runLocal()
                if isVirtual { turnObserver?() }
                return stopping && !moreWork
            }
            if stop { break }
            let timeout: Int32 = moreWork ? 0 : inbox.withLock { inbox in
                guard inbox.work.isEmpty && !inbox.stopping else { return 0 }
                inbox.parked = true
                return -1
            }
            let count = ready.withUnsafeMutableBufferPointer { buffer in
                ancs_epoll_wait(epollFD, buffer.baseAddress, Int32(buffer.count), timeout)
            }
            if timeout != 0 { inbox.withLock { $0.parked = false } }
            guard count > 0 else { continue }
            owning {
                // Urgent watches go first, then the others, then the timers: a timer that judges
                // a silence (the session's quiet period) must first see what arrived before it
                // fired, however late the loop's thread got the CPU.
                // Each watch is looked up once; one that a handler cancels before its turn is
                // not called (`deliver` checks).
                var timerReady = false
                for index in 0..<Int(count) {
                    let event = ready[index]
                    switch event.token {
                    case Self.timerToken:
                        timerReady = true
                    case Self.wakeToken:
                        var count: UInt64 = 0
                        _ = read(wakeFD, &count, 8)
                        moreWork = runLocal()
                    default:
                        guard let watch = watches[event.token] else { continue }
                        if watch.isUrgent {
                            watch.deliver(event.events)
                            // What the handler made runnable (a reply's continuation) runs right away.
                            moreWork = runLocal()
                        } else {
                            later.append((watch, event.events))
                        }
                    }
                }
                for (watch, events) in later {
                    watch.deliver(events)
                    moreWork = runLocal()
                }
                later.removeAll(keepingCapacity: true)
                if timerReady {
                    var expirations: UInt64 = 0
                    _ = read(timerFD, &expirations, 8)
                    armedDeadline = 0
                    fireTimers()
                    moreWork = runLocal()
                }
                if isVirtual { turnObserver?() }
            }
        }
    }

    // MARK: Watches

    /// Watches `fd` for `interest`; `handler` gets what is ready (a hang-up or error is given as
    /// all of the current interest, so the handler's read or write sees it). Level-triggered:
    /// the handler must consume what is ready or change the interest.
    ///
    /// The descriptor stays the caller's: cancel the watch before closing it. One descriptor can
    /// have one watch per loop (watch a `dup` for a second one).
    ///
    /// An empty interest keeps the descriptor out of epoll altogether (epoll reports a hang-up
    /// whatever it is asked for, and the handler would not be there to consume it).
    ///
    /// An `urgent` watch is handled before the other descriptors that were ready in the same
    /// wakeup: for the input that unblocks the next step (a phone's data that completes a request,
    /// so the next one can go out), ahead of bookkeeping that can wait a few microseconds.
    public func watch(
        fd: Int32, interest: Watch.Events, urgent: Bool = false, handler: @escaping @Sendable (Watch.Events) -> Void
    ) throws(Failure) -> Watch {
        let token = newToken()
        let watch = Watch(loop: self, fd: fd, token: token, interest: interest, urgent: urgent, handler: handler)
        // Known to the loop before epoll can report it.
        perform { self.watches[token] = watch }
        if !interest.isEmpty {
            guard ancs_epoll_ctl(epollFD, Int32(ANCS_EPOLL_CTL_ADD), fd, Watch.epollBits(interest), token) == 0 else {
                let failure = Failure("cannot watch descriptor \(fd)")
                perform { self.watches[token] = nil }
                throw failure
            }
        }
        return watch
    }

    /// Applies a watch's new interest to epoll, at once, from any thread (epoll_ctl is).
    fileprivate func modify(_ watch: Watch, from old: Watch.Events, to new: Watch.Events) {
        let operation = old.isEmpty ? ANCS_EPOLL_CTL_ADD : new.isEmpty ? ANCS_EPOLL_CTL_DEL : ANCS_EPOLL_CTL_MOD
        _ = ancs_epoll_ctl(epollFD, Int32(operation), watch.fd, Watch.epollBits(new), watch.token)
    }

    fileprivate func remove(_ watch: Watch, interest: Watch.Events) {
        // At once, on the calling thread: the caller may close the descriptor next, and a new one
        // with the same number must not lose its registration to a late removal.
        if !interest.isEmpty { _ = ancs_epoll_ctl(epollFD, Int32(ANCS_EPOLL_CTL_DEL), watch.fd, 0, 0) }
        perform { self.watches[watch.token] = nil }
    }

    // MARK: Timers

    /// A timer on this loop, disarmed until scheduled.
    public func makeTimer(handler: @escaping @Sendable () -> Void) -> LoopTimer {
        LoopTimer(loop: self, handler: handler)
    }

    fileprivate func arm(_ timer: LoopTimer) {
        timers[timer.id] = timer
        rearm()
    }

    fileprivate func disarm(_ timer: LoopTimer) {
        timers[timer.id] = nil
        rearm()
    }

    /// Sets the timerfd to the earliest deadline (or disarms it): no timer, no wakeup. A
    /// virtual loop's timers wait for `advance`.
    private func rearm() {
        guard !isVirtual else { return }
        var earliest = UInt64.max
        for timer in timers.values where timer.deadline < earliest { earliest = timer.deadline }
        let wanted = earliest == .max ? 0 : earliest
        guard wanted != armedDeadline else { return }
        armedDeadline = wanted
        _ = ancs_timerfd_arm(timerFD, wanted)
    }

    private func fireTimers() {
        let now = ancs_monotonic_ns()
        let due = timers.values.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
        for timer in due where timers[timer.id] === timer && timer.deadline <= now {
            fire(timer, now: now)
            _ = runLocal()
        }
        rearm()
    }

    /// Runs a due timer's handler, after setting its next deadline (or disarming it).
    private func fire(_ timer: LoopTimer, now: UInt64) {
        if timer.interval > 0 {
            timer.deadline = max(timer.deadline + timer.interval, now + 1)
        } else {
            timer.deadline = .max
            timers[timer.id] = nil
        }
        timer.fire()
    }

    fileprivate func newToken() -> UInt64 { nextToken.wrappingAdd(1, ordering: .relaxed).oldValue }
}

/// The thread-specific slot naming the loop whose work the thread runs now.
private let currentLoopKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key, nil)
    return key
}()

/// A descriptor watched by an `EventLoop`; made by `EventLoop.watch`.
public final class Watch: Sendable {
    /// What a descriptor is watched for, and what is ready.
    public struct Events: OptionSet, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let readable = Events(rawValue: 1)
        public static let writable = Events(rawValue: 2)
    }

    /// The watched descriptor (still the caller's to close, after `cancel`).
    public let fd: Int32
    /// Handled before the loop's other ready descriptors (`EventLoop.watch(fd:interest:urgent:handler:)`).
    public let isUrgent: Bool
    fileprivate let token: UInt64
    private let loop: EventLoop
    private let handler: @Sendable (Events) -> Void
    /// The interest's bits, and `cancelledBit` once cancelled.
    private let state: Atomic<UInt8>
    private static let cancelledBit: UInt8 = 0x80

    fileprivate init(
        loop: EventLoop, fd: Int32, token: UInt64, interest: Events, urgent: Bool, handler: @escaping @Sendable (Events) -> Void
    ) {
        self.loop = loop
        self.fd = fd
        isUrgent = urgent
        self.token = token
        self.handler = handler
        state = Atomic(interest.rawValue)
    }

    fileprivate static func epollBits(_ interest: Events) -> UInt32 {
        (interest.contains(.readable) ? UInt32(ANCS_EPOLLIN) : 0) | (interest.contains(.writable) ? UInt32(ANCS_EPOLLOUT) : 0)
    }

    /// What the descriptor is watched for now (empty once cancelled).
    public var interest: Events {
        let bits = state.load(ordering: .acquiring)
        return bits & Self.cancelledBit != 0 ? [] : Events(rawValue: bits)
    }

    /// Changes what the descriptor is watched for; from any thread.
    public func update(_ interest: Events) {
        var current = state.load(ordering: .acquiring)
        while current & Self.cancelledBit == 0 && current != interest.rawValue {
            let (exchanged, original) = state.compareExchange(
                expected: current, desired: interest.rawValue, ordering: .acquiringAndReleasing)
            if exchanged {
                loop.modify(self, from: Events(rawValue: current), to: interest)
                return
            }
            current = original
        }
    }

    /// Stops watching, at once (the handler is not called again); from any thread.
    public func cancel() {
        let previous = state.bitwiseOr(Self.cancelledBit, ordering: .acquiringAndReleasing).oldValue
        guard previous & Self.cancelledBit == 0 else { return }
        loop.remove(self, interest: Events(rawValue: previous))
    }

    fileprivate func deliver(_ epollEvents: UInt32) {
        let interest = self.interest
        guard !interest.isEmpty else { return }
        var ready: Events = []
        if epollEvents & UInt32(ANCS_EPOLLIN) != 0 { ready.insert(.readable) }
        if epollEvents & UInt32(ANCS_EPOLLOUT) != 0 { ready.insert(.writable) }
        if epollEvents & UInt32(ANCS_EPOLLHUP | ANCS_EPOLLERR) != 0 { ready.formUnion(interest) }
        ready.formIntersection(interest)
        if !ready.isEmpty { handler(ready) }
    }
}

/// A one-shot or repeating timer on an `EventLoop`; made by `EventLoop.makeTimer`. Its handler
/// runs on the loop. Schedule and cancel it from any thread.
public final class LoopTimer: @unchecked Sendable {  // mutable state only while holding the loop
    fileprivate let id: UInt64
    private let loop: EventLoop
    private let handler: @Sendable () -> Void
    /// CLOCK_MONOTONIC nanoseconds; `.max` while disarmed.
    fileprivate var deadline: UInt64 = .max
    fileprivate var interval: UInt64 = 0

    fileprivate init(loop: EventLoop, handler: @escaping @Sendable () -> Void) {
        self.loop = loop
        self.handler = handler
        id = loop.newToken()
    }

    /// Fires `delay` from now, then every `repeating` if given; replaces an earlier schedule.
    public func schedule(after delay: Duration, repeating: Duration? = nil) {
        let start = loop.timerNanoseconds &+ Self.nanoseconds(delay)
        let every = repeating.map(Self.nanoseconds) ?? 0
        loop.perform { [self] in
            deadline = max(start, 1)
            interval = every
            loop.arm(self)
        }
    }

    /// Disarms the timer; it fires again only if scheduled again.
    public func cancel() {
        loop.perform { [self] in
            deadline = .max
            loop.disarm(self)
        }
    }

    fileprivate func fire() { handler() }

    fileprivate static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max / 2 : whole &+ UInt64(max(0, attoseconds) / 1_000_000_000)
    }
}
