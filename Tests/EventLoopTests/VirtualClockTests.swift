import EventLoop
import Synchronization
import Testing

/// An actor isolated to a loop, keeping what it is told.
private actor Journal {
    let loop: EventLoop
    var entries: [String] = []
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
    init(_ loop: EventLoop) { self.loop = loop }
    func append(_ entry: String) { entries.append(entry) }
}

/// A loop made with `clock: .virtual`: its clock moves, and its timers fire, only on `advance(by:)`.
@Suite struct VirtualClockTests {
    static let sixHours = Duration.seconds(6 * 3600)

    /// What the handlers saw: a name and the loop's time since `origin`.
    final class Fired: Sendable {
        private let log = Mutex<[(String, Duration)]>([])
        let loop: EventLoop
        let origin: ContinuousClock.Instant
        init(_ loop: EventLoop) {
            self.loop = loop
            origin = loop.now
        }
        func note(_ name: String) {
            let at = loop.now - origin
            log.withLock { $0.append((name, at)) }
        }
        var names: [String] { log.withLock { $0.map(\.0) } }
        var times: [Duration] { log.withLock { $0.map(\.1) } }
    }

    @Test func aSixHourTimerFiresAtOnceWhenTheClockIsAdvancedSixHours() async throws {
        let loop = try EventLoop(name: "virtual", clock: .virtual)
        defer { loop.shutdown() }
        let fired = Fired(loop)
        let began = ContinuousClock.now
        loop.after(Self.sixHours) { fired.note("six hours") }
        await loop.advance(by: Self.sixHours - .nanoseconds(1))
        #expect(fired.names.isEmpty, "not a nanosecond early")
        #expect(loop.now - fired.origin == Self.sixHours - .nanoseconds(1))
        await loop.advance(by: .nanoseconds(1))
        #expect(fired.names == ["six hours"])
        #expect(fired.times == [Self.sixHours], "the handler reads its own deadline")
        #expect(ContinuousClock.now - began < .seconds(60), "no waiting for real time (a generous bound: parallel tests share the CPU)")
    }

    @Test func theClockStandsStillUntilAdvanced() async throws {
        let loop = try EventLoop(name: "virtual", clock: .virtual)
        defer { loop.shutdown() }
        let fired = Fired(loop)
        loop.after(.zero) { fired.note("now") }
        // A round trip through the loop: it ran what was enqueued, and no timer.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in loop.execute { done.resume() } }
        #expect(fired.names.isEmpty)
        #expect(loop.now == fired.origin)
        await loop.advance(by: .zero)
        #expect(fired.names == ["now"], "a timer due now fires on an advance by nothing")
        #expect(loop.now == fired.origin)
    }

    @Test func timersFireInDeadlineOrderEachAtItsDeadline() async throws {
        let loop = try EventLoop(name: "virtual", clock: .virtual)
        defer { loop.shutdown() }
        let fired = Fired(loop)
        loop.after(.seconds(30)) { fired.note("c") }
        loop.after(.seconds(5)) { fired.note("a") }
        loop.after(.seconds(20)) { fired.note("b1") }
        loop.after(.seconds(20)) { fired.note("b2") }  // equal deadlines: in the order made
        loop.after(.seconds(90)) { fired.note("after the span") }
        await loop.advance(by: .seconds(60))
        #expect(fired.names == ["a", "b1", "b2", "c"])
        #expect(fired.times == [.seconds(5), .seconds(20), .seconds(20), .seconds(30)])
        #expect(loop.now - fired.origin == .seconds(60))
        await loop.advance(by: .seconds(30))
        #expect(fired.names.last == "after the span")
        #expect(fired.times.last == .seconds(90))
    }

    @Test func aTimerScheduledByATimerInsideTheSpanFiresToo() async throws {
        let loop = try EventLoop(name: "virtual", clock: .virtual)
        defer { loop.shutdown() }
        let fired = Fired(loop)
        loop.after(.seconds(1)) {
            fired.note("first")
            loop.after(.seconds(2)) {
                fired.note("second")
                loop.after(.seconds(10)) { fired.note("third") }
            }
        }
        await loop.advance(by: .seconds(5))
        #expect(fired.names == ["first", "second"])
        #expect(fired.times == [.seconds(1), .seconds(3)])
        await loop.advance(by: .seconds(8))
        #expect(fired.names == ["first", "second", "third"])
        #expect(fired.times.last == .seconds(13))
    }

    @Test func aCancelledTimerNeverFiresAndARepeatingOneFiresAtEachPeriod() async throws {
        let loop = try EventLoop(name: "virtual", clock: .virtual)
        defer { loop.shutdown() }
        let fired = Fired(loop)
        let cancelled = loop.makeTimer { fired.note("cancelled") }
        cancelled.schedule(after: .seconds(1))
        let repeating = loop.makeTimer { fired.note("tick") }
        repeating.schedule(after: .seconds(10), repeating: .seconds(10))
        cancelled.cancel()
        await loop.advance(by: .seconds(35))
        #expect(fired.names == ["tick", "tick", "tick"])
        #expect(fired.times == [.seconds(10), .seconds(20), .seconds(30)])
        repeating.cancel()
        await loop.advance(by: .seconds(3600))
        #expect(fired.names.count == 3)
        // Rescheduled after a cancel, it fires again from the loop's time then.
        cancelled.schedule(after: .seconds(1))
        await loop.advance(by: .seconds(1))
        #expect(fired.names.last == "cancelled")
        #expect(fired.times.last == .seconds(3636))
    }

    /// What a timer made runnable (an actor's job, a task on the loop) runs before the next timer.
    @Test func theWorkATimerMadeRunnableRunsBeforeTheNextTimer() async throws {
        let loop = try EventLoop(name: "virtual", clock: .virtual)
        defer { loop.shutdown() }
        let journal = Journal(loop)
        let seenBySecond = Mutex<[String]>([])
        loop.after(.seconds(1)) {
            Task(executorPreference: loop) {
                await journal.append("task of the first timer")
                await journal.append("and its next step")
            }
        }
        loop.after(.seconds(2)) {
            journal.assumeIsolated { journal in seenBySecond.withLock { $0 = journal.entries } }
        }
        await loop.advance(by: .seconds(2))
        #expect(seenBySecond.withLock { $0 } == ["task of the first timer", "and its next step"])
    }

    @Test func anObserverRunsOnTheLoopAfterEachTurn() async throws {
        let loop = try EventLoop(name: "virtual", clock: .virtual)
        defer { loop.shutdown() }
        let log = Mutex<[String]>([])
        loop.observeTurns { log.withLock { $0.append(loop.isCurrent ? "turn" : "off the loop") } }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            loop.execute {
                log.withLock { $0.append("work") }
                done.resume()
            }
        }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in loop.execute { done.resume() } }
        let seen = log.withLock { $0 }
        let work = seen.firstIndex(of: "work") ?? seen.endIndex
        #expect(work < seen.endIndex)
        #expect(seen.dropFirst(work + 1).first == "turn", "after the work of its turn")
        #expect(!seen.contains("off the loop"))
    }

    @Test func aRealLoopReadsTheContinuousClock() throws {
        let loop = try EventLoop(name: "real")
        defer { loop.shutdown() }
        let before = ContinuousClock.now
        let now = loop.now
        #expect(now >= before && now <= ContinuousClock.now)
        #expect(!loop.isVirtual)
    }
}
