#if canImport(Glibc)
import Glibc
#endif
import Dispatch

/// Reads the datagrams of an AcquireNotify socket (one per GATT notification) as they come.
///
/// A dispatch read source watches the descriptor, so nothing runs while the phone is quiet.
/// Each datagram is handed to `onValue`; end of stream or an error (the link is gone) calls
/// `onClose` once. The descriptor is closed when the reader is cancelled or closed.
final class NotificationReader: @unchecked Sendable {
    // Mutable state is only touched on `queue`.
    private let source: any DispatchSourceRead
    private let fd: Int32
    private var buffer = [UInt8](repeating: 0, count: 4096)  // > the largest ATT MTU (517)
    private var closed = false

    init(fd: Int32, queue: DispatchQueue, onValue: @escaping @Sendable ([UInt8]) -> Void, onClose: @escaping @Sendable (String) -> Void) {
        self.fd = fd
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [unowned self] in
            self.drain(onValue: onValue, onClose: onClose)
        }
        source.setCancelHandler {
            _ = Glibc.close(fd)
        }
        source.resume()
    }

    private func drain(onValue: @Sendable ([UInt8]) -> Void, onClose: @Sendable (String) -> Void) {
        while !closed {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                onValue(Array(buffer[0..<count]))
                continue
            }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            if count < 0 && errno == EINTR { continue }
            let reason = count == 0 ? "the link closed" : String(cString: strerror(errno))
            closed = true
            source.cancel()
            onClose(reason)
            return
        }
    }

    /// Stops reading and closes the descriptor.
    func cancel() {
        source.cancel()
    }
}
