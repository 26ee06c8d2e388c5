#if canImport(Glibc)
import Glibc
#endif
public import EventLoop
public import JSON

/// A client connection to the daemon's control socket (docs/control.md), for `ancsd desktop`.
///
/// Non-blocking, on the caller's event loop: a watch splits what arrives into lines,
/// delivered in order through `lines`, which ends when the daemon closes the connection (or it
/// fails, or `close()`). Requests are one short line each; one that does not fit into the
/// socket's buffer means the daemon has stopped reading, and closes the connection.
public final class ControlLink: @unchecked Sendable {  // mutable state only on `loop`
    /// The longest line accepted from the daemon (a `list` of many notifications is long).
    public static let maxLineLength = 32 << 20

    /// The lines the daemon sends, without their newline.
    public let lines: AsyncStream<[UInt8]>
    private let continuation: AsyncStream<[UInt8]>.Continuation
    private let fd: Int32
    private let loop: EventLoop
    private var watch: Watch?
    private var input: [UInt8] = []
    private var closed = false
    private var pendingOutput: [UInt8] = []

    private init(fd: Int32, loop: EventLoop) {
        self.fd = fd
        self.loop = loop
        (lines, continuation) = AsyncStream.makeStream(of: [UInt8].self)
    }

    /// Connects to the socket at `path`; the reason as text when that fails.
    public static func connect(path: String, loop: EventLoop) -> Result<ControlLink, ControlLinkError> {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            return .failure(ControlLinkError("the control socket path is empty or too long: \(path)"))
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return .failure(ControlLinkError("socket: \(String(cString: strerror(errno)))")) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            return .failure(ControlLinkError(reason))
        }
        let link = ControlLink(fd: fd, loop: loop)
        loop.execute { link.start() }
        return .success(link)
    }

    private func start() {
        guard !closed else { return }
        do {
            watch = try loop.watch(fd: fd, interest: .readable) { [weak self] _ in self?.readAvailable() }
        } catch {
            close()
        }
    }

    /// Sends one request line; false (and the connection closed) if it could not be written.
    /// Call on the loop.
    @discardableResult
    public func send(_ request: JSONObject) -> Bool {
        guard !closed else { return false }
        pendingOutput += Array(JSONValue.object(request).serialized.utf8) + [0x0A]
        while !pendingOutput.isEmpty {
            let written = pendingOutput.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written > 0 {
                pendingOutput.removeFirst(written)
                continue
            }
            if written < 0 && errno == EINTR { continue }
            close()
            return false
        }
        return true
    }

    private func readAvailable() {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while !closed {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                var start = input.count
                input += chunk[0..<count]
                var lineStart = 0
                while let newline = input[start...].firstIndex(of: 0x0A) {
                    if newline > lineStart { continuation.yield(Array(input[lineStart..<newline])) }
                    lineStart = newline + 1
                    start = lineStart
                }
                input.removeFirst(lineStart)
                if input.count > Self.maxLineLength {
                    close()
                    return
                }
                continue
            }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            if count < 0 && errno == EINTR { continue }
            close()  // end of stream or error
            return
        }
    }

    /// Closes the connection and ends `lines`. Call on the loop; again does nothing.
    public func close() {
        guard !closed else { return }
        closed = true
        continuation.finish()
        watch?.cancel()  // unregistered at once, before the descriptor is closed
        watch = nil
        Glibc.close(fd)
    }

    deinit {
        close()
    }
}

/// Why connecting to the control socket failed, as text.
public struct ControlLinkError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
