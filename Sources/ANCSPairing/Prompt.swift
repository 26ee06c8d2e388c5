#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import Dispatch
import Synchronization

/// Writes to standard output at once (no buffering: a prompt must show before the answer).
func say(_ text: String) {
    _ = writeAll(STDOUT_FILENO, Array(text.utf8))
}

/// One line from the terminal, read on a thread of its own so that it can be abandoned.
final class Prompt: Sendable {
    private let cancelled = Mutex(false)

    func cancel() { cancelled.withLock { $0 = true } }

    /// The line typed (without the newline), or nil at end of input or when cancelled.
    func readLine() async -> String? {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var bytes: [UInt8] = []
                while !self.cancelled.withLock({ $0 }) {
                    var fds = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
                    let ready = poll(&fds, 1, 100)
                    if ready < 0 && errno == EINTR { continue }
                    guard ready >= 0 else { break }
                    if ready == 0 { continue }
                    var byte: UInt8 = 0
                    let n = read(STDIN_FILENO, &byte, 1)
                    if n < 0 && (errno == EINTR || errno == EAGAIN) { continue }
                    guard n == 1 else { break }
                    if byte == 0x0A {
                        continuation.resume(returning: String(decoding: bytes, as: UTF8.self))
                        return
                    }
                    if bytes.count < 256 { bytes.append(byte) }
                }
                continuation.resume(returning: nil)
            }
        }
    }
}
