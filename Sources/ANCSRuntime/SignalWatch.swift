#if canImport(Glibc)
import Glibc
#endif
import CLinux
public import EventLoop
import SystemCalls

/// Signals (SIGTERM, SIGINT, SIGHUP) read from a signalfd that an `EventLoop` watches: the
/// handler runs on the loop, as any other descriptor's, and no signal handler runs at all.
///
/// The signals must be blocked in every thread, or the kernel delivers them the default way
/// (SIGTERM and SIGHUP would end the process): `block(_:)` first thing in `main`, before any
/// thread starts (threads inherit their creator's mask). A signal that comes before the watch
/// exists stays pending and is read as soon as it does: no early-signal race, nothing polled.
/// Children must not inherit the mask: `posix_spawn` with `POSIX_SPAWN_SETSIGMASK` and an
/// empty mask (CSpawn does).
public final class SignalWatch: Sendable {
    /// Why the signals cannot be watched.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    private let watch: Watch

    /// Blocks `signals` in the calling thread and, through inheritance, in every thread it
    /// starts afterwards. Call it in `main` before anything starts a thread.
    public static func block(_ signals: [Int32]) {
        var set = Self.set(of: signals)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Watches `signals` on `loop`: `handler` gets each one's number, on the loop, those that
    /// came before first. The signals must be blocked (`block(_:)`) in the calling thread.
    public init(_ signals: [Int32], loop: EventLoop, handler: @escaping @Sendable (Int32) -> Void) throws(Failure) {
        var blocked = sigset_t()
        pthread_sigmask(SIG_BLOCK, nil, &blocked)
        let unblocked = signals.filter { sigismember(&blocked, $0) != 1 }
        guard unblocked.isEmpty else {
            throw Failure(description: "signals \(unblocked) are not blocked: SignalWatch.block must come first in main")
        }
        var set = Self.set(of: signals)
        let raw = ancsd_signalfd(&set)
        guard raw >= 0 else { throw Failure(description: "cannot read signals from a signalfd: \(Errno.current)") }
        let reader = Reader(descriptor: FileDescriptor(adopting: raw), handler: handler)
        do {
            // The watch's handler holds the reader, and with it the descriptor: it is closed once
            // the loop has let the cancelled watch go, never under a handler that runs.
            watch = try loop.watch(fd: raw, interest: .readable) { _ in reader.drain() }
        } catch {
            throw Failure(description: "\(error)")
        }
    }

    deinit {
        watch.cancel()
    }

    /// Stops watching: from now on the signals stay pending, unread (they stay blocked).
    public func cancel() {
        watch.cancel()
    }

    private static func set(of signals: [Int32]) -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for number in signals { sigaddset(&set, number) }
        return set
    }

    /// The descriptor and the handler, as the loop's watch holds them.
    private final class Reader: Sendable {
        private let descriptor: FileDescriptor
        private let handler: @Sendable (Int32) -> Void

        init(descriptor: consuming FileDescriptor, handler: @escaping @Sendable (Int32) -> Void) {
            self.descriptor = descriptor
            self.handler = handler
        }

        /// Reads every pending signal and hands each to the handler.
        func drain() {
            let size = Int(ANCSD_SIGNALFD_RECORD_SIZE)
            var records = [UInt8](repeating: 0, count: size * 8)
            while true {
                // Nil on EAGAIN: nothing more is pending.
                guard let count = records.withUnsafeMutableBytes({ try? descriptor.read(into: $0) }), count >= size else { return }
                for offset in stride(from: 0, to: count - size + 1, by: size) {
                    let number = records.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self) }
                    handler(Int32(bitPattern: number))
                }
            }
        }
    }
}
