#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import EventLoop
import SystemCalls

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
final class NotificationReader: Sendable {
    /// The socket's number, for the reads; `State.socket` owns it.
    private let fd: Int32
    /// What the loop reads with, and the socket and its watch while it reads.
    private let state: LoopBound<State>

    private struct State {
        /// The socket and its watch; nil once cancelled (dropping it cancels, then closes).
        var socket: OwnedWatch?
        var buffer = [UInt8](repeating: 0, count: 4096)  // > the largest ATT MTU (517)
    }

    /// Takes `fd` (closed at once if it cannot be watched). Call on `loop`.
    init(
        fd: Int32, loop: DaemonExecutor, onValue: @escaping @Sendable ([UInt8]) -> Void,
        onClose: @escaping @Sendable (String) -> Void
    ) throws(EventLoop.Failure) {
        let descriptor = FileDescriptor(adopting: fd)
        self.fd = fd
        state = LoopBound(State(), loop: loop)
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        state.value.socket = try OwnedWatch(descriptor, on: loop, interest: .readable, urgent: true) { [weak self] _ in
            self?.readOne(onValue: onValue, onClose: onClose)
        }
    }

    deinit {
        cancel()
    }

    private func readOne(onValue: @Sendable ([UInt8]) -> Void, onClose: @Sendable (String) -> Void) {
        // Not called once cancelled: the loop checks the watch's interest first.
        let fd = self.fd
        // A typed buffer: the datagram is copied out with one memcpy (a raw buffer's prefix
        // would be copied byte by byte, as a generic sequence).
        let received = state.value.buffer.withUnsafeMutableBufferPointer { buffer in
            Result { () throws(Errno) -> [UInt8] in
                let count = try Errno.retrying { recv(fd, buffer.baseAddress, buffer.count, 0) }
                return Array(buffer[..<count])
            }
        }
        let reason: String
        switch received {
        case .success(let value) where !value.isEmpty:
            return onValue(value)
        case .success(let value) where !Self.endOfStream(fd):
            // An empty datagram: a notification whose value is empty, which a phone may send
            // (bluetoothd passes it on as it is). It is the phone's to make sense of, not the end.
            return onValue(value)
        case .failure(let error) where error == .wouldBlock:
            return
        case .success:
            reason = "the link closed"
        case .failure(let error):
            reason = error.description
        }
        cancel()
        onClose(reason)
    }

    /// After a read of 0 bytes: true when that was the end of the stream, not an empty datagram.
    /// A `SOCK_SEQPACKET` read returns 0 for both; the end comes only once the peer has closed
    /// (the socket then polls as hung up) and nothing more waits. (A datagram that waits behind
    /// an empty one is there to read: peeked at, it is non-empty. Only empty ones that come
    /// right before the close can be taken for the end, and they carry nothing.)
    private static func endOfStream(_ fd: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = Errno.retryingInterrupts { poll(&entry, 1, 0) }
        guard ready >= 0 else { return true }
        guard entry.revents & Int16(POLLHUP | POLLERR) != 0 else { return false }
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) <= 0
    }

    /// Stops reading and closes the descriptor; from any thread (at once on the loop).
    func cancel() {
        state.withValue { $0.socket = nil }
    }
}
