#if canImport(Glibc)
public import Glibc
#endif
public import ANCSRuntime
import Dispatch
public import JSON

/// Answers control requests (docs/control.md); the daemon implements it.
public protocol ControlHandler: Sendable {
    /// The reply to one request. `client` identifies the connection, for subscriptions.
    func reply(to request: JSONObject, client: ControlServer.ClientID) async -> JSONObject
    /// The client went away: drop its subscription.
    func clientClosed(_ client: ControlServer.ClientID) async
}

/// Why the control socket could not be set up.
public struct ControlSocketError: Error, CustomStringConvertible {
    public var description: String
}

/// The control socket: a Unix stream socket speaking JSON Lines.
///
/// All socket work runs on one private serial queue with dispatch sources, so an idle server
/// costs nothing. Each client's requests are answered in order; its replies and events wait in a
/// bounded buffer (a client that stops reading is disconnected when it fills); a request line
/// over the limit gets an error and the connection is closed. Nothing a client sends can block
/// the daemon or disturb another client.
public final class ControlServer: @unchecked Sendable {  // mutable state only on `queue`
    /// Identifies one client connection.
    public typealias ClientID = UInt64

    /// The longest request line accepted.
    public static let maxRequestLength = 64 * 1024
    /// The most bytes waiting to be written to one client.
    public static let maxPendingBytes = 1 << 20

    public let path: String
    private let queue: DispatchQueue
    private let executor: DaemonExecutor?
    private let listener: Int32
    private let handler: any ControlHandler
    private let logger: Logger
    private var source: (any DispatchSourceRead)?
    private var clients: [ClientID: Client] = [:]
    private var nextID: ClientID = 0

    /// Creates the socket at `path` (replacing a stale one) with `mode` and, if given, `group`.
    ///
    /// The server's sockets are served on a private serial queue of its own. With `executor`,
    /// request tasks run on the daemon's task executor, never on Swift's global executor (which
    /// would keep libdispatch's 1 Hz workqueue monitor running).
    public init(
        path: String, mode: mode_t = 0o660, group: String? = nil, handler: any ControlHandler, logger: Logger,
        executor: DaemonExecutor? = nil
    ) throws(ControlSocketError) {
        self.path = path
        self.executor = executor
        queue = DispatchQueue(label: "ancsd.control")
        self.handler = handler
        self.logger = logger
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw ControlSocketError(description: "the control socket path is empty or too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        var info = stat()
        if lstat(path, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFSOCK else {
                throw ControlSocketError(description: "\(path) exists and is not a socket")
            }
            unlink(path)  // a stale socket from an earlier run
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw ControlSocketError(description: "socket: \(String(cString: strerror(errno)))") }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw ControlSocketError(description: "cannot listen on \(path): \(reason)")
        }
        if let group {
            guard let entry = getgrnam(group) else {
                close(fd)
                unlink(path)
                throw ControlSocketError(description: "no group named \(group) for the control socket")
            }
            guard chown(path, uid_t.max, entry.pointee.gr_gid) == 0 else {
                let reason = String(cString: strerror(errno))
                close(fd)
                unlink(path)
                throw ControlSocketError(description: "cannot give \(path) to group \(group): \(reason)")
            }
        }
        chmod(path, mode)
        listener = fd
    }

    /// Starts accepting clients.
    public func start() {
        queue.async { [self] in
            let source = DispatchSource.makeReadSource(fileDescriptor: listener, queue: queue)
            source.setEventHandler { [weak self] in self?.acceptClients() }
            self.source = source
            source.resume()
        }
    }

    /// Removes the socket and closes every connection. Safe from any thread, the server's
    /// queue included.
    public func stop() {
        unlink(path)
        queue.async { [self] in
            source?.cancel()
            source = nil
            for client in clients.values { client.close() }
            clients = [:]
            close(listener)
        }
    }

    /// Sends an event line to one client; false if the client is gone. While the client waits
    /// for replies, the line waits behind them: a subscriber gets `{"ok":true,"subscribed":true}`
    /// before the first event, however soon one comes.
    @discardableResult
    public func send(_ line: String, to id: ClientID) -> Bool {
        queue.async { [weak self] in
            guard let self, let client = self.clients[id] else { return }
            if !client.enqueueEvent(line) {
                self.logger.warning("control client \(id) stopped reading; disconnected it")
                self.drop(id)
            }
        }
        return true
    }

    /// How many clients are connected.
    public var clientCount: Int { queue.sync { clients.count } }

    private func acceptClients() {
        while true {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { return }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            nextID += 1
            let id = nextID
            clients[id] = Client(id: id, fd: fd, queue: queue, server: self)
            logger.debug("control client \(id) connected")
        }
    }

    fileprivate func received(line: [UInt8], from client: Client) {
        let id = client.id
        let request: JSONObject
        do {
            guard let object = try JSONValue(parsing: line).objectValue else {
                client.enqueueReply(Self.errorReply(nil, "bad_request", "a request is a JSON object"))
                return
            }
            request = object
        } catch {
            client.enqueueReply(Self.errorReply(nil, "bad_request", "not JSON: \(error)"))
            return
        }
        client.pendingReplies += 1
        let handler = self.handler
        let order = client.nextRequestNumber()
        Task(executorPreference: executor) {
            var answer = await handler.reply(to: request, client: id)
            if let requestID = request["id"] { answer["id"] = requestID }
            let reply = answer
            self.queue.async {
                guard let client = self.clients[id] else { return }
                client.deliver(reply, order: order)
            }
        }
    }

    fileprivate func drop(_ id: ClientID) {
        guard let client = clients.removeValue(forKey: id) else { return }
        client.close()
        logger.debug("control client \(id) disconnected")
        let handler = self.handler
        Task(executorPreference: executor) { await handler.clientClosed(id) }
    }

    static func errorReply(_ id: JSONValue?, _ code: String, _ message: String) -> JSONObject {
        var object: JSONObject = [:]
        if let id { object.append("id", id) }
        object.append("ok", false)
        object.append("error", ["code": .string(code), "message": .string(message)])
        return object
    }

    /// One connection; used only on the server's queue.
    fileprivate final class Client: @unchecked Sendable {
        let id: ClientID
        let fd: Int32
        private let readSource: any DispatchSourceRead
        private var writeSource: (any DispatchSourceWrite)?
        private var watchingWrites = false
        private var input: [UInt8] = []
        private var output = FIFOBuffer()
        private weak var server: ControlServer?
        private var closed = false
        var pendingReplies = 0
        private var issued = 0
        private var delivered = 0
        private var waiting: [Int: JSONObject] = [:]
        /// Events that came while replies were pending, and their size.
        private var heldEvents: [String] = []
        private var heldBytes = 0

        init(id: ClientID, fd: Int32, queue: DispatchQueue, server: ControlServer) {
            self.id = id
            self.fd = fd
            self.server = server
            readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            writeSource = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
            readSource.setEventHandler { [weak self] in self?.readAvailable() }
            writeSource?.setEventHandler { [weak self] in self?.flush() }
            readSource.resume()
        }

        func nextRequestNumber() -> Int {
            defer { issued += 1 }
            return issued
        }

        /// Replies go out in request order, whichever finishes first; events that came while
        /// replies were pending follow them.
        func deliver(_ reply: JSONObject, order: Int) {
            waiting[order] = reply
            while let next = waiting.removeValue(forKey: delivered) {
                delivered += 1
                pendingReplies -= 1
                enqueueReply(next)
            }
            guard pendingReplies == 0, !heldEvents.isEmpty else { return }
            let events = heldEvents
            heldEvents = []
            heldBytes = 0
            for line in events where !enqueue(line) {
                server?.logger.warning("control client \(id) stopped reading; disconnected it")
                server?.drop(id)
                return
            }
        }

        /// Queues an event line, or holds it while replies are pending; false if the client's
        /// buffer is full.
        func enqueueEvent(_ line: String) -> Bool {
            guard pendingReplies > 0 else { return enqueue(line) }
            guard output.count + heldBytes + line.utf8.count + 1 <= ControlServer.maxPendingBytes else { return false }
            heldEvents.append(line)
            heldBytes += line.utf8.count + 1
            return true
        }

        func enqueueReply(_ reply: JSONObject) {
            if !enqueue(JSONValue.object(reply).serialized) { server?.drop(id) }
        }

        /// Queues a line; false if the buffer is full (the client is not reading).
        func enqueue(_ line: String) -> Bool {
            guard !closed else { return true }
            let bytes = Array(line.utf8) + [0x0A]
            guard output.count + bytes.count <= ControlServer.maxPendingBytes else { return false }
            output.append(bytes)
            flush()
            return true
        }

        private func readAvailable() {
            var chunk = [UInt8](repeating: 0, count: 16_384)
            while !closed {
                let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count > 0 {
                    input += chunk[0..<count]
                    while let newline = input.firstIndex(of: 0x0A) {
                        let line = Array(input[..<newline])
                        input.removeSubrange(...newline)
                        if !line.isEmpty { server?.received(line: line, from: self) }
                    }
                    if input.count > ControlServer.maxRequestLength {
                        input = []
                        enqueueReply(ControlServer.errorReply(nil, "too_long", "a request line is at most 64 KiB"))
                        flush()
                        server?.drop(id)
                        return
                    }
                    continue
                }
                if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
                if count < 0 && errno == EINTR { continue }
                server?.drop(id)  // end of stream or error
                return
            }
        }

        private func flush() {
            while !closed && !output.isEmpty {
                let written = output.withFront { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if written > 0 {
                    output.consume(written)
                    continue
                }
                if written < 0 && errno == EINTR { continue }
                if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
                server?.drop(id)
                return
            }
            // Watch for room only while something waits: an idle client costs nothing.
            // (A new dispatch source starts suspended; resume and suspend must pair.)
            if output.isEmpty == watchingWrites {
                watchingWrites.toggle()
                if watchingWrites { writeSource?.resume() } else { writeSource?.suspend() }
            }
        }

        func close() {
            guard !closed else { return }
            closed = true
            readSource.cancel()
            if !watchingWrites { writeSource?.resume() }  // a suspended source cannot be released
            writeSource?.cancel()
            writeSource = nil
            Glibc.close(fd)
        }
    }
}

/// Bytes waiting to be written, consumed from the front.
struct FIFOBuffer {
    private var bytes: [UInt8] = []
    private var start = 0

    var count: Int { bytes.count - start }
    var isEmpty: Bool { count == 0 }

    mutating func append(_ more: [UInt8]) {
        if start > 0 && start * 2 > bytes.count {
            bytes.removeFirst(start)
            start = 0
        }
        bytes += more
    }

    func withFront<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[start...])) }
    }

    mutating func consume(_ count: Int) {
        start += count
        if start == bytes.count {
            bytes = []
            start = 0
        }
    }
}
