#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import EventLoop

extension SignalWatch {
    /// The signals of a command whose work is `task` (`run`, `desktop`), read on `loop`: SIGTERM
    /// and SIGINT are logged, then `stopping` runs and the task is cancelled; any other signal
    /// goes to `other`. Signals that came before are handled now (main blocked them). Nil, the
    /// error logged and the task cancelled and awaited, if they cannot be watched.
    static func stopping<Success: Sendable>(
        _ task: Task<Success, any Error>, on signals: [Int32], loop: EventLoop, logger: Logger,
        stopping: @escaping @Sendable () -> Void = {}, other: @escaping @Sendable (Int32) -> Void = { _ in }
    ) async -> SignalWatch? {
        do {
            return try SignalWatch(signals, loop: loop) { number in
                guard number == SIGTERM || number == SIGINT else { return other(number) }
                logger.info("stopping (\(number == SIGTERM ? "SIGTERM" : "SIGINT"))")
                stopping()
                task.cancel()
            }
        } catch {
            logger.error("\(error)")
            task.cancel()
            _ = try? await task.value
            return nil
        }
    }
}
