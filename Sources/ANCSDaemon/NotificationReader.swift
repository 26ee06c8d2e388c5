#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import EventLoop

/// Reads the datagrams of an AcquireNotify socket (one per GATT notification) as they come.
///
/// The daemon's event loop watches the descriptor, so nothing runs while the phone is quiet,
/// and a datagram is read and handled on the thread that woke for it. Each datagram is handed
/// to `onValue`; end of stream or an error (the link is gone) calls `onClose` once. The
/// descriptor is the reader's from `init` on: closed when the reader is cancelled or closes.
///
/// The watch is urgent: the phone's data goes before a D-Bus reply that came in the same wakeup,
/// because a completed Data Source response is what lets the next Control Point request go out.
/// One datagram is read per readiness: the loop's level-triggered epoll reports the socket again
/// while more wait, so no read ends in EAGAIN (one system call fewer per notification).
final class NotificationReader: @unchecked Sendable {
    // Mutable state is only touched on the loop.
    private var watch: Watch?
    private let fd: Int32
    private var buffer = [UInt8](repeating: 0, count: 4096)  // > the largest ATT MTU (517)
    private var closed = false

    init(
        fd: Int32, loop: DaemonExecutor, onValue: @escaping @Sendable ([UInt8]) -> Void,
        onClose: @escaping @Sendable (String) -> Void
    ) throws(EventLoop.Failure) {
        self.fd = fd
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        do {
            watch = try loop.watch(fd: fd, interest: .readable, urgent: true) { [weak self] _ in
                self?.readOne(onValue: onValue, onClose: onClose)
            }
        } catch {
            _ = Glibc.close(fd)
            throw error
        }
    }

    deinit {
        cancel()
    }

    private func readOne(onValue: @Sendable ([UInt8]) -> Void, onClose: @Sendable (String) -> Void) {
        while !closed {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                onValue(Array(buffer[0..<count]))
                return
            }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            if count < 0 && errno == EINTR { continue }
            let reason = count == 0 ? "the link closed" : String(cString: strerror(errno))
            cancel()
            onClose(reason)
            return
        }
    }

    /// Stops reading and closes the descriptor.
    func cancel() {
        guard let watch else { return }
        self.watch = nil
        closed = true
        watch.cancel()
        _ = Glibc.close(fd)
    }
}
