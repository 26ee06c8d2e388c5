import Dispatch
import Glibc
import Synchronization

/// The simulator's end of an AcquireNotify socket pair (`SOCK_SEQPACKET`, non-blocking, as
/// bluetoothd makes it): one datagram per notification. It notices the client closing its
/// end (HUP) and reports it once through `onPeerClosed`.
final class NotifySocket: Sendable {
    /// The unique bus name of the client that acquired it.
    let sender: String
    /// The descriptor, -1 once closed; sends happen under the lock so a closed number is never reused.
    private let fd: Mutex<Int32>
    /// Watches for the client's close. Dispatch sources are thread-safe; Swift does not mark them Sendable.
    nonisolated(unsafe) private let source: any DispatchSourceRead

    enum SendResult { case sent, wouldBlock, closed }

    /// Creates the pair; returns the socket and the client's end (which the caller owns).
    static func makePair(sender: String, queue: DispatchQueue, onPeerClosed: @escaping @Sendable (NotifySocket) -> Void)
        -> (NotifySocket, Int32)?
    {
        var fds: [Int32] = [-1, -1]
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        guard socketpair(AF_UNIX, type, 0, &fds) == 0 else { return nil }
        let socket = NotifySocket(sender: sender, fd: fds[0], queue: queue, onPeerClosed: onPeerClosed)
        return (socket, fds[1])
    }

    private init(sender: String, fd: Int32, queue: DispatchQueue, onPeerClosed: @escaping @Sendable (NotifySocket) -> Void) {
        self.sender = sender
        self.fd = Mutex(fd)
        source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [weak self] in
            guard let self else { return }
            // The client never writes to a notify socket: readable means closed (or junk to drop).
            var buffer = [UInt8](repeating: 0, count: 512)
            let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) {
                if self.close() { onPeerClosed(self) }
            }
        }
        source.setCancelHandler { _ = Glibc.close(fd) }
        source.resume()
    }

    /// Sends one notification value as one datagram, without blocking.
    func send(_ bytes: [UInt8]) -> SendResult {
        fd.withLock { fd in
            guard fd >= 0 else { return .closed }
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
            if n >= 0 { return .sent }
            switch errno {
            case EAGAIN, EINTR, ENOBUFS: return .wouldBlock
            default: return .closed
            }
        }
    }

    /// False once closed (a `stale_sockets` socket stays registered closed).
    var isOpen: Bool { fd.withLock { $0 >= 0 } }

    /// Closes the simulator's end (the client sees HUP). Returns false if it already was.
    @discardableResult
    func close() -> Bool {
        let wasOpen = fd.withLock { fd in
            defer { fd = -1 }
            return fd >= 0
        }
        // The cancel handler closes the descriptor once the source has stopped using it.
        if wasOpen { source.cancel() }
        return wasOpen
    }

    deinit { close() }
}
