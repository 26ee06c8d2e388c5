/// An actor whose serial executor is an `EventLoop`: its `unownedExecutor` must be
/// `loop.asUnownedSerialExecutor()`, so that running on the loop's thread is being isolated to it.
public protocol LoopActor: Actor {
    /// The loop that is this actor's executor.
    nonisolated var loop: EventLoop { get }
}

extension LoopActor {
    /// `assumeIsolated` for the loop's handlers (a watch's, a timer's, a D-Bus reply's), which
    /// run on the loop outside any job: checks `loop.checkIsolated()` (a thread-local read, in
    /// release builds too) and runs `body` inside the actor.
    ///
    /// The standard `assumeIsolated` ends at the same check, but the runtime's way there (is a
    /// job running, is the executor the main one) cost about 1,000 instructions a call, three
    /// times for every notification (docs/performance.md). Debug builds make that check too.
    public nonisolated func assumeOnLoop<T>(_ body: (isolated Self) throws -> T) rethrows -> T {
        loop.checkIsolated()
        assert(isolatedByRuntime())
        return try withoutActuallyEscaping(body) { isolated in
            // What `Actor.assumeIsolated` does once its check has passed.
            try unsafeBitCast(isolated, to: ((Self) throws -> T).self)(self)
        }
    }

    /// The runtime's own check that the caller is isolated to this actor (traps if not).
    private nonisolated func isolatedByRuntime() -> Bool {
        preconditionIsolated()
        return true
    }
}
