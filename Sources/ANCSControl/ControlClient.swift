#if canImport(Glibc)
import Glibc
#endif
@_exported public import ControlProtocol
public import EventLoop
import JSON
import SystemCalls

/// The client of the daemon's control socket (docs/control.md), for `ancsd list`, `status`,
/// `action`, `doctor` and `desktop` alike.
///
/// Non-blocking, on the caller's event loop: a watch cuts what arrives into lines and reads
/// each as a typed reply or event (`ControlIncoming`), delivered in order through `incoming`,
/// which ends when the daemon closes the connection (or it fails, or `close()`). `send` gives
/// each request an `id` and remembers its command, which gives the reply its type; `request`
/// sends one and waits for its answer. Requests are one short line each; one that does not fit
/// into the socket's buffer means the daemon has stopped reading, and closes the connection.
public final class ControlClient: Sendable {
    /// The longest line accepted from the daemon (a `list` of many notifications is long).
    public static let maxLineLength = 32 << 20

    /// The replies and events, in the order the daemon sent them.
    public let incoming: AsyncStream<ControlIncoming>
    private let continuation: AsyncStream<ControlIncoming>.Continuation
    /// The socket's number, for the calls; `State.socket` owns it.
    private let fd: Int32
    private let loop: EventLoop
    private let state: LoopBound<State>

    /// The connection, on the loop. A class: it holds the socket, which is not copyable.
    private final class State {
        /// The socket; nil once closed.
        var socket: FileDescriptor?
        var watch: Watch?
        var input: [UInt8] = []
        var closed = false
        var timedOut = false
        var lastID = 0
        /// The commands of the requests not answered yet, by `id`.
        var unanswered: [Int: ControlCommand] = [:]

        init(socket: consuming FileDescriptor) {
            self.socket = consume socket
        }
    }

    private init(socket: consuming FileDescriptor, loop: EventLoop) {
        fd = socket.rawValue
        self.loop = loop
        state = LoopBound(State(socket: socket), loop: loop)
        (incoming, continuation) = AsyncStream.makeStream(of: ControlIncoming.self)
    }

    /// Connects to the socket at `path`, to be served on `loop`.
    public static func connect(path: String, loop: EventLoop) -> Result<ControlClient, ControlClientError> {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            return .failure(.unreachable(path: path, reason: "the control socket path is empty or too long"))
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        do throws(Errno) {
            let client = ControlClient(socket: try connectedSocket(address), loop: loop)
            loop.perform { client.start() }
            return .success(client)
        } catch {
            return .failure(.unreachable(path: path, reason: error.description))
        }
    }

    /// A non-blocking socket connected to `address` (closed again if it cannot connect).
    private static func connectedSocket(_ address: sockaddr_un) throws(Errno) -> FileDescriptor {
        let socket = try FileDescriptor.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue))
        var address = address
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket.rawValue, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else { throw Errno.current }
        return socket
    }

    /// Connects, sends `command` and waits for its answer: what a one-shot client does.
    public static func request(
        _ command: ControlCommand, path: String, timeout: Duration, loop: EventLoop
    ) async throws(ControlClientError) -> ControlAnswer {
        let client: ControlClient
        switch connect(path: path, loop: loop) {
        case .success(let connected): client = connected
        case .failure(let error): throw error
        }
        defer { client.close() }
        return try await client.request(command, timeout: timeout)
    }

    private func start() {
        guard !state.value.closed else { return }
        do {
            state.value.watch = try loop.watch(fd: fd, interest: .readable) { [weak self] _ in self?.readAvailable() }
        } catch {
            close()
        }
    }

    /// Sends a request; its `id`, or nil if it could not be written (the connection is then
    /// closed). Call on the loop.
    @discardableResult
    public func send(_ command: ControlCommand) -> Int? {
        guard !state.value.closed else { return nil }
        state.value.lastID += 1
        let id = state.value.lastID
        var line = Array(JSONValue.object(ControlRequest(id: .int(id), command).json).serialized.utf8)
        line.append(0x0A)
        var offset = 0
        while offset < line.count {
            let written = Errno.retryingInterrupts { line[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
            if written > 0 {
                offset += written
                continue
            }
            close()
            return nil
        }
        state.value.unanswered[id] = command
        return id
    }

    /// Sends `command` and waits up to `timeout` for its answer; events that come meanwhile are
    /// passed over, so call it only while nothing else reads `incoming`. A reply that does not
    /// come in time closes the connection.
    public func request(_ command: ControlCommand, timeout: Duration) async throws(ControlClientError) -> ControlAnswer {
        let timer = loop.makeTimer { [weak self] in self?.expire() }
        defer { timer.cancel() }
        guard let id = await onLoop({ self.send(command) }) else { throw ControlClientError.closed }
        timer.schedule(after: timeout)
        for await message in incoming {
            switch message {
            case .reply(let reply) where reply.id == .int(id) || reply.id == nil:
                switch reply.result {
                case .success(let answer): return answer
                case .failure(let error): throw ControlClientError.refused(error)
                }
            case .unreadable(let error) where error.requestID == .int(id) || error.requestID == nil:
                throw ControlClientError.unreadable(error)
            default:
                continue
            }
        }
        throw await onLoop({ self.state.value.timedOut }) ? ControlClientError.timedOut(timeout) : ControlClientError.closed
    }

    private func onLoop<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { done in loop.perform { done.resume(returning: body()) } }
    }

    private func expire() {
        state.value.timedOut = true
        close()
    }

    private func readAvailable() {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while !state.value.closed {
            let count = Errno.retryingInterrupts { chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) } }
            if count > 0 {
                received(chunk[0..<count])
                continue
            }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            close()  // end of stream or error
            return
        }
    }

    /// Cuts the lines out of what came and reads each.
    private func received(_ bytes: ArraySlice<UInt8>) {
        var start = state.value.input.count
        state.value.input += bytes
        var lineStart = 0
        while let newline = state.value.input[start...].firstIndex(of: 0x0A) {
            if newline > lineStart {
                let line = Array(state.value.input[lineStart..<newline])
                continuation.yield(ControlIncoming(line: line) { id in
                    id?.integerValue.flatMap { state.value.unanswered.removeValue(forKey: $0) }
                })
            }
            lineStart = newline + 1
            start = lineStart
        }
        state.value.input.removeFirst(lineStart)
        if state.value.input.count > Self.maxLineLength { close() }
    }

    /// Closes the connection and ends `incoming`; from any thread, again does nothing.
    public func close() {
        Self.close(state, continuation)
    }

    /// On the loop, from the parts alone: `deinit` may run anywhere.
    private static func close(_ state: LoopBound<State>, _ continuation: AsyncStream<ControlIncoming>.Continuation) {
        state.withValue { state in
            guard !state.closed else { return }
            state.closed = true
            continuation.finish()
            state.watch?.cancel()  // unregistered at once, before the descriptor is closed
            state.watch = nil
            state.socket = nil
        }
    }

    deinit {
        Self.close(state, continuation)
    }
}

/// Why a control request got no answer.
public enum ControlClientError: Error, Sendable, CustomStringConvertible {
    /// Nobody answers at `path`, or this user may not use the socket (`reason` says which).
    case unreachable(path: String, reason: String)
    /// The connection closed before the reply came.
    case closed
    /// No reply within this time.
    case timedOut(Duration)
    /// The daemon refused the request: its error.
    case refused(ControlError)
    /// The daemon sent what this client cannot read.
    case unreadable(ControlDecodingError)

    public var description: String {
        switch self {
        case .unreachable(let path, let reason): "cannot reach ancsd at \(path): \(reason)"
        case .closed: "ancsd closed the connection"
        case .timedOut(let timeout): "ancsd did not answer within \(timeout)"
        case .refused(let error): "\(error.message) (\(error.code.rawValue))"
        case .unreadable(let error): "\(error)"
        }
    }
}
