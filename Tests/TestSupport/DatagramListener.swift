import Foundation

/// A Unix datagram socket bound in a temporary directory: a stand-in for systemd's NOTIFY_SOCKET.
public final class DatagramListener: @unchecked Sendable {
    public let path: String
    private let fd: Int32

    public init(directory: String) throws {
        path = directory + "/notify-\(UUID().uuidString.prefix(8))"
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket failed") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw TestFailure("path too long") }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw TestFailure("bind failed: \(errno)") }
    }

    /// The next datagram as text, or nil after `timeout`.
    public func receive(timeout: Duration) -> String? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ms = Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        guard poll(&poller, 1, ms) > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(fd, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        return String(decoding: buffer.prefix(count), as: UTF8.self)
    }

    /// Datagrams until one contains `text`; all of them, or a failure after `timeout`.
    public func receive(until text: String, timeout: Duration) throws -> [String] {
        var seen: [String] = []
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard let message = receive(timeout: deadline - ContinuousClock.now) else { break }
            seen.append(message)
            if message.contains(text) { return seen }
        }
        throw TestFailure("no notification containing \(text) within \(timeout); got \(seen)")
    }

    deinit {
        close(fd)
        unlink(path)
    }
}
