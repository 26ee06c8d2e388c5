#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import EventLoop
import Testing

/// `SignalWatch` in the test process: signals sent to the loop's own thread (a process-directed
/// one could meet another thread of the test runner, which does not block it).
@Suite(.serialized) struct SignalWatchTests {
    /// A blocked signal that came before the watch, and one after, both reach the handler on the
    /// loop, each once, in order; none runs a signal handler.
    @Test func blockedSignalsAreReadOnTheLoop() async throws {
        let loop = try EventLoop(name: "signal-test")
        defer { loop.shutdown() }
        let received = LoopBound([Int32](), loop: loop)
        let kept = LoopBound<SignalWatch?>(nil, loop: loop)
        let numbers = await withCheckedContinuation { (continuation: CheckedContinuation<[Int32], Never>) in
            loop.execute {
                SignalWatch.block([SIGUSR1, SIGUSR2])
                pthread_kill(pthread_self(), SIGUSR1)  // pending before the watch exists
                do {
                    let watch = try SignalWatch([SIGUSR1, SIGUSR2], loop: loop) { number in
                        #expect(loop.isCurrent)
                        received.value.append(number)
                        if received.value.count == 2 { continuation.resume(returning: received.value) }
                    }
                    kept.value = watch
                    // The second signal comes on a later turn.
                    loop.execute { pthread_kill(pthread_self(), SIGUSR2) }
                } catch {
                    Issue.record("\(error)")
                    continuation.resume(returning: [])
                }
            }
        }
        #expect(numbers == [SIGUSR1, SIGUSR2])
    }

    /// A signal that is not blocked cannot be watched: the kernel would deliver it the default
    /// way (SIGTERM would end the process) before the loop read it.
    @Test func anUnblockedSignalIsRefused() async throws {
        let loop = try EventLoop(name: "signal-refuse")
        defer { loop.shutdown() }
        let refused = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            loop.execute {
                var set = sigset_t()
                sigemptyset(&set)
                sigaddset(&set, SIGUSR1)
                pthread_sigmask(SIG_UNBLOCK, &set, nil)
                defer { pthread_sigmask(SIG_BLOCK, &set, nil) }
                do {
                    _ = try SignalWatch([SIGUSR1], loop: loop) { _ in }
                    continuation.resume(returning: false)
                } catch {
                    continuation.resume(returning: "\(error)".contains("SignalWatch.block"))
                }
            }
        }
        #expect(refused)
    }
}
