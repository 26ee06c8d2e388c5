#if canImport(Glibc)
import Glibc
#endif
public import EventLoop
public import JSON
import SystemCalls

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
    /// The connected socket; shut down by `close()`, closed with the value.
    private let socket: FileDescriptor
    private let loop: EventLoop
    private var watch: Watch?
    private var input: [UInt8] = []
    private var closed = false
    private var pendingOutput: [UInt8] = []

    private init(socket: consuming FileDescriptor, loop: EventLoop) {
        self.socket = socket
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
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        let made = Glibc.socket(AF_UNIX, type, 0)
        guard made >= 0 else { return .failure(ControlLinkError("socket: \(Errno.current)")) }
        let socket = FileDescriptor(adopting: made)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket.rawValue, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else { return .failure(ControlLinkError(Errno.current.description)) }
        let link = ControlLink(socket: socket, loop: loop)
        loop.execute { link.start() }
        return .success(link)
    }

    private func start() {
        guard !closed else { return }
        do {
            watch = try loop.watch(fd: socket.rawValue, interest: .readable) { [weak self] _ in self?.readAvailable() }
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
            let written = try? Errno.retrying {
                pendingOutput.withUnsafeBytes { Glibc.send(socket.rawValue, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }
            if let written, written > 0 {
                pendingOutput.removeFirst(written)
                continue
            }
            close()
            return false
        }
        return true
    }

    private func readAvailable() {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while !closed {
            let received = Result<Int, Errno> { () throws(Errno) -> Int in
                try Errno.retrying { chunk.withUnsafeMutableBytes { recv(socket.rawValue, $0.baseAddress, $0.count, 0) } }
            }
            let count: Int
            switch received {
            case .success(let n): count = n
            case .failure(let error):
                if error != .wouldBlock { close() }  // EWOULDBLOCK is EAGAIN on Linux
                return
            }
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
            close()  // end of stream
            return
        }
    }

    /// Closes the connection (the daemon sees its end at once) and ends `lines`. Call on the
    /// loop; again does nothing. The descriptor itself is closed with the value.
    public func close() {
        guard !closed else { return }
        closed = true
        continuation.finish()
        watch?.cancel()  // unregistered at once
        watch = nil
        _ = Glibc.shutdown(socket.rawValue, Int32(SHUT_RDWR))
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
