import EventLoop
import Glibc
import Synchronization
import Testing
import TestSupport

/// An actor isolated to a loop, as the daemon's actors are.
private actor OnLoop {
    let loop: EventLoop
    var log: [Int] = []
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
    init(_ loop: EventLoop) { self.loop = loop }
    func append(_ value: Int) -> Bool {
        log.append(value)
        return loop.isCurrent
    }
}

/// Resumes a continuation once; later calls do nothing.
private final class Once<T: Sendable>: @unchecked Sendable {
    private let lock = Mutex<CheckedContinuation<T, Never>?>(nil)
    init(_ continuation: CheckedContinuation<T, Never>) { lock.withLock { $0 = continuation } }
    func resume(_ value: T) { lock.withLock { $0.take() }?.resume(returning: value) }
}

@Suite struct EventLoopTests {
    @Test func anActorOnTheLoopRunsThereInOrder() async throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        let actor = OnLoop(loop)
        for i in 0..<200 {
            #expect(await actor.append(i))
        }
        #expect(await actor.log == Array(0..<200))
        #expect(!loop.isCurrent)
    }

    @Test func executeRunsBlocksInOrderOnTheLoopsThread() async throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        let seen = Mutex<[Int]>([])
        let onLoop = Mutex(true)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            for i in 0..<100 {
                loop.execute {
                    seen.withLock { $0.append(i) }
                    if !loop.isCurrent { onLoop.withLock { $0 = false } }
                    if i == 99 { continuation.resume() }
                }
            }
        }
        #expect(seen.withLock { $0 } == Array(0..<100))
        #expect(onLoop.withLock { $0 })
    }

    /// From a thread that runs no loop, `perform` runs on the calling thread, holding the loop.
    @Test func performFromAPlainThreadRunsAtOnceHoldingTheLoop() throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        let caller = pthread_self()
        let result = Mutex<(sameThread: Bool, current: Bool)?>(nil)
        loop.perform {
            result.withLock { $0 = (pthread_equal(pthread_self(), caller) != 0, loop.isCurrent) }
        }
        #expect(result.withLock { $0?.sameThread } == true)
        #expect(result.withLock { $0?.current } == true)
        #expect(!loop.isCurrent, "not after perform returned")
    }

    /// From another loop's thread, `perform` defers: two loops waiting for each other would deadlock.
    @Test func performFromAnotherLoopIsDeferredToTheTarget() async throws {
        let first = try EventLoop(name: "first")
        let second = try EventLoop(name: "second")
        defer {
            first.shutdown()
            second.shutdown()
        }
        let ranOnSecond = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            first.execute {
                second.perform { continuation.resume(returning: second.isCurrent && !first.isCurrent) }
            }
        }
        #expect(ranOnSecond)
    }

    @Test func aWatchSeesWhatArrivesAndNothingAfterCancel() async throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let (stream, input) = AsyncStream.makeStream(of: [UInt8].self)
        let calls = Mutex(0)
        let reader = fds[0]
        let watch = try loop.watch(fd: reader, interest: .readable) { ready in
            calls.withLock { $0 += 1 }
            #expect(ready == .readable)
            var buffer = [UInt8](repeating: 0, count: 64)
            while true {
                let count = recv(reader, &buffer, buffer.count, 0)
                guard count > 0 else { return }
                input.yield(Array(buffer[0..<count]))
            }
        }
        var iterator = stream.makeAsyncIterator()
        for value: UInt8 in [1, 2, 3] {
            #expect(send(fds[1], [value], 1, 0) == 1)
            #expect(await iterator.next() == [value])
        }
        watch.cancel()
        let before = calls.withLock { $0 }
        #expect(send(fds[1], [4], 1, 0) == 1)
        // A round trip through the loop: had the watch still been registered, it would have run first.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in loop.execute { continuation.resume() } }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in loop.execute { continuation.resume() } }
        #expect(calls.withLock { $0 } == before)
        #expect(watch.interest.isEmpty)
    }

    /// An owned watch ends as the rules ask: its watch cancelled, then its descriptor closed;
    /// one that cannot be watched (a regular file: epoll refuses it) closes the descriptor at once.
    @Test func anOwnedWatchCancelsThenClosesItsDescriptor() throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        defer { close(fds[1]) }
        var owned: OwnedWatch? = try OwnedWatch(.init(adopting: fds[0]), on: loop, interest: .readable) { _ in }
        let watch = try #require(owned?.watch)
        #expect(watch.interest == .readable && fcntl(fds[0], F_GETFD) != -1)
        owned = nil
        #expect(watch.interest.isEmpty)
        #expect(fcntl(fds[0], F_GETFD) == -1 && errno == EBADF)

        let file = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        #expect(file >= 0)
        #expect(throws: EventLoop.Failure.self) { _ = try OwnedWatch(.init(adopting: file), on: loop, interest: .readable) { _ in } }
        #expect(fcntl(file, F_GETFD) == -1 && errno == EBADF)
    }

    /// A disabled watch is out of epoll: a peer that hangs up does not spin the loop through it.
    @Test func aDisabledWatchIsNotCalledEvenOnHangUp() async throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        defer { close(fds[0]) }
        let calls = Mutex(0)
        let box = Mutex<Watch?>(nil)
        let waiter = Mutex<CheckedContinuation<Watch.Events, Never>?>(nil)
        let watch = try loop.watch(fd: fds[0], interest: []) { ready in
            calls.withLock { $0 += 1 }
            box.withLock { $0?.cancel() }
            waiter.withLock { $0.take() }?.resume(returning: ready)
        }
        box.withLock { $0 = watch }
        close(fds[1])
        for _ in 0..<3 {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in loop.execute { continuation.resume() } }
        }
        #expect(calls.withLock { $0 } == 0)
        // Enabled again, the hang-up is reported as readable (a read would see the end of stream).
        let ready = await withCheckedContinuation { (continuation: CheckedContinuation<Watch.Events, Never>) in
            waiter.withLock { $0 = continuation }
            watch.update(.readable)
        }
        #expect(ready == .readable)
        #expect(calls.withLock { $0 } == 1)
    }

    @Test func timersFireInDeadlineOrderAndCancelledOnesNever() async throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        let fired = Mutex<[String]>([])
        let cancelled = loop.makeTimer { fired.withLock { $0.append("cancelled") } }
        cancelled.schedule(after: .milliseconds(20))
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let late = loop.makeTimer {
                fired.withLock { $0.append("late") }
                continuation.resume()
            }
            late.schedule(after: .milliseconds(60))
            loop.after(.milliseconds(30)) { fired.withLock { $0.append("middle") } }
            loop.after(.milliseconds(5)) { fired.withLock { $0.append("early") } }
            cancelled.cancel()
        }
        #expect(fired.withLock { $0 } == ["early", "middle", "late"])
    }

    /// A timer that came due while the loop was busy runs after the data that arrived meanwhile:
    /// a quiet-period timer must not call a response silent with its next fragment waiting.
    @Test func dataReadyWithADueTimerIsHandledFirst() async throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let order = Mutex<[String]>([])
        let (reader, writer) = (fds[0], fds[1])
        let watch = try loop.watch(fd: reader, interest: .readable) { _ in
            var byte: UInt8 = 0
            while recv(reader, &byte, 1, 0) > 0 { order.withLock { $0.append("data") } }
        }
        defer { watch.cancel() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let timer = loop.makeTimer {
                order.withLock { $0.append("timer") }
                continuation.resume()
            }
            timer.schedule(after: .milliseconds(20))
            // The loop is busy while the timer comes due, then the data arrives: both are ready
            // when it is free again.
            loop.execute {
                usleep(40_000)
                _ = send(writer, [1], 1, 0)
            }
        }
        #expect(order.withLock { $0 } == ["data", "timer"])
    }

    /// Of the descriptors ready in one wakeup, an urgent watch's runs first, whatever the order
    /// in which they became ready: the phone's data goes before a D-Bus reply.
    @Test func anUrgentWatchIsHandledBeforeTheOthersReadyWithIt() async throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        let plain = nonBlockingDatagramPair(), urgent = nonBlockingDatagramPair()
        defer { for fd in plain + urgent { close(fd) } }
        let order = Mutex<[String]>([])
        let done = Mutex<CheckedContinuation<Void, Never>?>(nil)
        func reader(_ fd: Int32, _ name: String) -> @Sendable (Watch.Events) -> Void {
            { _ in
                var byte: UInt8 = 0
                while recv(fd, &byte, 1, 0) > 0 {
                    let count = order.withLock { $0.append(name); return $0.count }
                    if count == 2 { done.withLock { $0.take() }?.resume() }
                }
            }
        }
        let plainWatch = try loop.watch(fd: plain[0], interest: .readable, handler: reader(plain[0], "plain"))
        let urgentWatch = try loop.watch(fd: urgent[0], interest: .readable, urgent: true, handler: reader(urgent[0], "urgent"))
        defer { plainWatch.cancel(); urgentWatch.cancel() }
        #expect(urgentWatch.isUrgent && !plainWatch.isUrgent)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            done.withLock { $0 = continuation }
            // Both become ready while the loop is busy, the plain one first.
            loop.execute {
                _ = send(plain[1], [1], 1, 0)
                _ = send(urgent[1], [2], 1, 0)
            }
        }
        #expect(order.withLock { $0 } == ["urgent", "plain"])
    }

    /// A watch that an urgent handler cancels in the wakeup where both were ready is not called.
    @Test func aWatchCancelledByAnUrgentHandlerInTheSameWakeupIsNotCalled() async throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        let plain = nonBlockingDatagramPair(), urgent = nonBlockingDatagramPair()
        defer { for fd in plain + urgent { close(fd) } }
        let calls = Mutex<[String]>([])
        let plainWatch = try loop.watch(fd: plain[0], interest: .readable) { _ in
            calls.withLock { $0.append("plain") }
        }
        let done = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let urgentFD = urgent[0]
        let urgentWatch = try loop.watch(fd: urgentFD, interest: .readable, urgent: true) { _ in
            var byte: UInt8 = 0
            _ = recv(urgentFD, &byte, 1, 0)
            calls.withLock { $0.append("urgent") }
            plainWatch.cancel()
            // After the rest of this wakeup's handlers.
            loop.execute { done.withLock { $0.take() }?.resume() }
        }
        defer { urgentWatch.cancel() }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            done.withLock { $0 = continuation }
            // Both become ready while the loop is busy.
            loop.execute {
                _ = send(plain[1], [1], 1, 0)
                _ = send(urgent[1], [2], 1, 0)
            }
        }
        #expect(calls.withLock { $0 } == ["urgent"])
    }

    @Test func anActorOnTheLoopIsIsolatingItsHandlers() throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        #expect(loop.isIsolatingCurrentContext() == false, "not on the loop")
        let answers = Mutex<[Bool?]>([])
        loop.perform { answers.withLock { $0.append(loop.isIsolatingCurrentContext()) } }
        #expect(answers.withLock { $0 } == [true])
        let actor = OnLoop(loop)
        // A handler on the loop may assume the isolation of an actor on it (the daemon's readers do).
        let done = Mutex(false)
        loop.perform { done.withLock { $0 = actor.assumeIsolated { _ in true } } }
        #expect(done.withLock { $0 })
    }

    @Test func aRepeatingTimerRepeatsUntilCancelled() async throws {
        let loop = try EventLoop(name: "test")
        defer { loop.shutdown() }
        let count = Mutex(0)
        let timer = Mutex<LoopTimer?>(nil)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let made = loop.makeTimer {
                let n = count.withLock { $0 += 1; return $0 }
                if n == 5 {
                    timer.withLock { $0?.cancel() }
                    continuation.resume()
                }
            }
            timer.withLock { $0 = made }
            made.schedule(after: .milliseconds(2), repeating: .milliseconds(2))
        }
        // Cancelled from its own handler: no sixth firing, even after several periods (a timer
        // due later fires after any that would have come before it).
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            loop.makeTimer { continuation.resume() }.schedule(after: .milliseconds(30))
        }
        #expect(count.withLock { $0 } == 5)
    }

    /// The loop's thread sleeps in epoll_wait while nothing is due: no wakeups when idle.
    @Test func anIdleLoopMakesNoWakeups() async throws {
        let loop = try EventLoop(name: "idle-test")
        defer { loop.shutdown() }
        // The thread names itself first thing: after one round trip it has.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in loop.execute { continuation.resume() } }
        // Looked up again if missed: a listing of /proc/self/task can skip a thread while other
        // threads exit (the loops of tests running in parallel).
        var found: String?
        for _ in 0..<5 where found == nil { found = threadID(named: "idle-test") }
        let tid = try #require(found)
        let timer = loop.makeTimer {}
        timer.schedule(after: .seconds(3600))
        func switches() -> Int? { voluntarySwitches(ofThread: tid) }
        try await eventually("the loop back in epoll_wait") { isWaitingInEpoll(thread: tid) }
        let before = try #require(switches())
        try await Task.sleep(for: .milliseconds(500))
        let after = try #require(switches())
        #expect(after == before, "the idle loop's thread woke \(after - before) times")
        timer.cancel()
    }
}

/// A connected pair of non-blocking datagram sockets.
private func nonBlockingDatagramPair() -> [Int32] {
    var fds: [Int32] = [-1, -1]
    #expect(socketpair(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
    return fds
}
