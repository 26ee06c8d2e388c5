import ANCSRuntime
import EventLoop

/// Waits `duration` (less if the task is cancelled), with a timer on `loop`.
func pause(_ duration: Duration, on loop: DaemonExecutor) async {
    let state = LoopBound(PauseState(), loop: loop)
    await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            loop.execute {  // the timer holds the state until it fires or the pause is cancelled
                state.value.arm(continuation, timer: loop.makeTimer { state.value.fire() }, after: duration)
            }
        }
    } onCancel: {
        loop.execute { state.value.fire() }
    }
}

/// A pause's timer and continuation, on the executor's loop (`LoopBound`).
private struct PauseState {
    private var continuation: CheckedContinuation<Void, Never>?
    private var timer: LoopTimer?
    private var fired = false

    mutating func arm(_ continuation: CheckedContinuation<Void, Never>, timer: LoopTimer, after duration: Duration) {
        guard !fired else { return continuation.resume() }
        self.continuation = continuation
        timer.schedule(after: duration)
        self.timer = timer
    }

    mutating func fire() {
        fired = true
        timer?.cancel()
        timer = nil
        continuation?.resume()
        continuation = nil
    }
}
