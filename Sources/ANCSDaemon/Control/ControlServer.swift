#if canImport(Glibc)
public import Glibc
#endif
public import ANCSRuntime
import ANCSSession
import CLinux
public import ControlProtocol
public import EventLoop
import JSON
import Synchronization
import SystemCalls

/// Answers control requests (docs/control.md); the daemon implements it.
public protocol ControlHandler: Sendable {
    /// The answer to one valid request, or why it failed (the server adds the request's `id`).
    /// `client` identifies the connection, for subscriptions.
    func reply(to request: ControlRequest, client: ControlServer.ClientID) async -> Result<ControlAnswer, ControlError>
    /// The client went away: drop its subscription.
    func clientClosed(_ client: ControlServer.ClientID) async
}

/// Why the control socket could not be set up.
public struct ControlSocketError: Error, CustomStringConvertible {
    public var description: String
}

/// The control socket: a Unix stream socket speaking JSON Lines (docs/control.md).
///
/// Everything runs on the daemon's event loop: the listener and each client are descriptors it
/// watches, so an idle server costs nothing, and a client's watch is cancelled before its
/// descriptor is closed (a new client given the same number keeps its registration). Each
/// client's requests are answered in order; its replies and events wait in a bounded buffer (a
/// client that stops reading is disconnected when it fills); a request line over the limit gets
/// an error and the connection is closed. A client that shuts down its sending side still gets
/// the replies to what it sent. Nothing a client sends can block the daemon or disturb another.
///
/// Who may connect: the socket is made with its final mode (0660) and group, and each client's
/// credentials (SO_PEERCRED) are checked too: root, ancsd's own user, or a member of the
/// socket's group. A client that would leave the daemon fewer free descriptors than it keeps
/// for the phones is answered `busy` and closed; when descriptors run out all the same,
/// accepting pauses for a second (logged once per shortage) rather than spinning on a listener
/// that stays readable.
public final class ControlServer: Sendable {
    /// Identifies one client connection.
    public typealias ClientID = UInt64

    /// The longest request line accepted.
    public static let maxRequestLength = ControlRequest.maxLineLength
    /// The most bytes waiting to be written to one client.
    public static let maxPendingBytes = 1 << 20
    /// The most requests of one client being answered at once. A client that sends more
    /// without waiting for answers is read no further until answers go out, and each wakeup
    /// reads one chunk of it: a client that writes without pause (the soak's control flood)
    /// once held the loop in its read for seconds, and the phones' notifications waited.
    static let maxPipelined = 32
    /// Replies waiting to be written past which a client's requests are read no further (it
    /// is not reading its answers; its own writes then block, rather than it being dropped).
    static let maxUnreadReplies = 65_536
    /// How long accepting pauses when descriptors run out.
    static let shortagePause = Duration.seconds(1)
    /// For tests: called with the path right after the socket file is made, before anything
    /// else is done to it.
    static let afterBind = Mutex<(@Sendable (String) -> Void)?>(nil)

    public let path: String
    private let loop: EventLoop
    private let listener: Int32
    /// The socket file this server made: `stop` removes the path only while it is still that.
    private let identity: (device: UInt64, inode: UInt64)
    /// Members of this group may connect (besides root and the daemon's own user).
    private let allowedGroup: gid_t
    private let handler: any ControlHandler
    fileprivate let logger: Logger
    /// What clients make the server say (refused peers, clients that stopped reading): each
    /// kind said once, then counted per minute.
    fileprivate let clientLog: RateLimitedLogs
    private let state: LoopBound<State>

    /// What changes as clients come and go.
    private struct State {
        var listenerWatch: Watch?
        var clients: [ClientID: Client] = [:]
        var nextID: ClientID = 0
        var stopped = false
        /// Accepting is paused: descriptors ran out (said once per shortage).
        var shortage = false
    }

    /// Creates the socket at `path` with `mode` and, if given, `group` (else the group the file
    /// is made with: the daemon's, or the directory's if it is set-group-ID).
    ///
    /// A socket already at `path` that answers belongs to a running daemon: that is an error,
    /// never taken over. One that refuses connections is left from an earlier run and replaced.
    /// Clients are served on `loop`, the daemon's, where request tasks run too.
    public init(
        path: String, mode: mode_t = 0o660, group: String? = nil, handler: any ControlHandler, logger: Logger,
        loop: EventLoop
    ) throws(ControlSocketError) {
        self.path = path
        self.loop = loop
        self.handler = handler
        self.logger = logger
        clientLog = RateLimitedLogs(logger: logger, loop: loop)
        state = LoopBound(State(), loop: loop)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, !bytes.contains(0), bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw ControlSocketError(description: "the control socket path is empty or too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let requestedGroup = try Self.groupID(group)
        try Self.removeStale(path, address)
        let raw = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard raw >= 0 else { throw ControlSocketError(description: "socket: \(Errno.current)") }
        let socket = FileDescriptor(adopting: raw)  // closed on a failure below; the server keeps it otherwise
        let fd = socket.rawValue
        // Never a moment with more access than `mode` gives: Linux makes the socket file with the
        // socket's own mode less the umask, so it is made with `mode` or less, then given exactly
        // `mode` (the process umask is not touched: other threads may be making files).
        _ = fchmod(fd, mode)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        let bindError = errno
        if bound == 0 { Self.afterBind.withLock { $0 }?(path) }
        guard bound == 0 else {
            try? socket.close()
            throw ControlSocketError(description: "cannot make the control socket \(path): \(Errno(rawValue: bindError))")
        }
        var info = stat()
        // Without --control-group the file keeps the group it was made with (chown is a
        // privileged call the service's system call filter refuses).
        guard stat(path, &info) == 0, requestedGroup.map({ chown(path, uid_t.max, $0) == 0 }) ?? true, chmod(path, mode) == 0,
              listen(fd, 64) == 0 else {
            let reason = Errno.current.description
            try? socket.close()
            unlink(path)
            throw ControlSocketError(description: "cannot set up the control socket \(path): \(reason)")
        }
        identity = (UInt64(info.st_dev), UInt64(info.st_ino))
        allowedGroup = requestedGroup ?? info.st_gid
        listener = socket.release()
    }

    private static func groupID(_ name: String?) throws(ControlSocketError) -> gid_t? {
        guard let name else { return nil }
        var entry = Glibc.group()
        var result: UnsafeMutablePointer<Glibc.group>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else {
            throw ControlSocketError(description: "no group named \(name) for the control socket")
        }
        return entry.gr_gid
    }

    /// Removes a socket left at `path` by an earlier run; refuses anything else there, and a
    /// socket a running daemon answers on.
    private static func removeStale(_ path: String, _ address: sockaddr_un) throws(ControlSocketError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard (info.st_mode & S_IFMT) == S_IFSOCK else {
            throw ControlSocketError(description: "\(path) exists and is not a socket")
        }
        let raw = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard raw >= 0 else { throw ControlSocketError(description: "socket: \(Errno.current)") }
        let probe = FileDescriptor(adopting: raw)
        var address = address
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe.rawValue, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        let error = connected == 0 ? Errno(rawValue: 0) : Errno.current
        try? probe.close()
        if connected == 0 || error.rawValue == EAGAIN {
            throw ControlSocketError(description: """
                another ancsd is listening on \(path) (it accepted a connection); stop it first, or give this one \
                another --control path
                """)
        }
        guard error.rawValue == ECONNREFUSED else {
            throw ControlSocketError(description: "cannot tell whether \(path) is in use: \(error)")
        }
        unlink(path)  // nobody listens: a stale socket from an earlier run
    }

    /// Starts accepting clients.
    public func start() {
        loop.perform { [self] in
            guard !state.value.stopped else { return }
            state.value.listenerWatch = try? loop.watch(fd: listener, interest: .readable) { [weak self] _ in self?.acceptClients() }
            if state.value.listenerWatch == nil { logger.error("cannot watch the control socket \(path)") }
        }
    }

    /// Removes the socket (if the path is still this server's) and closes every connection.
    /// Safe from any thread, the loop's included.
    public func stop() {
        loop.perform { [self] in
            guard !state.value.stopped else { return }
            state.value.stopped = true
            var info = stat()
            if lstat(path, &info) == 0, UInt64(info.st_dev) == identity.device, UInt64(info.st_ino) == identity.inode {
                unlink(path)
            }
            state.value.listenerWatch?.cancel()
            state.value.listenerWatch = nil
            for client in state.value.clients.values { client.close() }
            state.value.clients = [:]
            close(listener)
        }
    }

    /// Sends an event line to one client; false if the client is gone. While the client waits
    /// for replies, the line waits behind them: a subscriber gets `{"ok":true,"subscribed":true}`
    /// before the first event, however soon one comes.
    @discardableResult
    public func send(_ line: String, to id: ClientID) -> Bool {
        loop.perform { [weak self] in
            guard let self, let client = self.state.value.clients[id] else { return }
            if !client.enqueueEvent(line) {
                self.clientLog.log(.warning, "control client \(id) stopped reading; disconnected it", kind: "a control client stopped reading; disconnected it")
                self.drop(id)
            }
        }
        return true
    }

    /// How many clients are connected (read on the loop).
    public var clientCount: Int {
        get async {
            await withCheckedContinuation { done in loop.execute { done.resume(returning: self.state.value.clients.count) } }
        }
    }

    private func acceptClients() {
        while !state.value.stopped {
            let fd = ancsd_accept_cloexec_nonblock(listener)
            if fd >= 0 {
                if state.value.shortage {
                    state.value.shortage = false
                    logger.info("control socket: descriptors are free again; serving clients")
                }
                admit(fd)
                continue
            }
            switch errno {
            case EINTR, ECONNABORTED, EPROTO:
                continue
            case EAGAIN, EWOULDBLOCK:
                return
            default:
                pauseAccepting(reason: Errno.current.description)
                return
            }
        }
    }

    /// Out of descriptors (EMFILE, ENFILE) or memory: the waiting connection cannot be taken,
    /// and the listener stays readable; accepting pauses instead of spinning.
    private func pauseAccepting(reason: String) {
        if !state.value.shortage {
            state.value.shortage = true
            logger.warning("""
                control socket: cannot accept clients (\(reason), \(state.value.clients.count) connected); pausing \
                \(Self.shortagePause) at a time until it can
                """)
        }
        state.value.listenerWatch?.update([])
        loop.after(Self.shortagePause) { [weak self] in
            self?.loop.perform { [weak self] in
                guard let self, !self.state.value.stopped else { return }
                self.state.value.listenerWatch?.update(.readable)
            }
        }
    }

    private func admit(_ fd: Int32) {
        if let free = Self.scarceDescriptors(after: fd) {
            turnAway(fd, ControlError(.busy, "too many control clients: the daemon keeps its last descriptors for the phones; try again in a moment"))
            clientLog.log(.warning, "control socket: turned a client away (\(state.value.clients.count) connected, at most \(free) descriptors free)",
                          kind: "control socket: turned a client away (descriptors kept for the phones)")
            return
        }
        if let refusal = refusal(of: fd) {
            turnAway(fd, ControlError(.forbidden, refusal.message))
            clientLog.log(.warning, "control socket: refused a client of uid \(refusal.uid): \(refusal.message)",
                          kind: "control socket: refused a client of uid \(refusal.uid)")
            return
        }
        state.value.nextID += 1
        let id = state.value.nextID
        guard let client = Client(id: id, fd: fd, loop: loop, server: self) else {
            close(fd)
            return
        }
        state.value.clients[id] = client
        logger.debug("control client \(id) connected")
    }

    /// Sends `error` to a client that is not served, without waiting, and closes it.
    private func turnAway(_ fd: Int32, _ error: ControlError) {
        let line = Array((JSONValue.object(error.reply(id: nil)).serialized + "\n").utf8)
        _ = line.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        close(fd)
    }

    /// The descriptors a control client may never take: the daemon's own work needs them (a
    /// phone's notification sockets, descriptors bluetoothd passes over the bus, which libdbus
    /// answers by dropping the whole bus connection when they cannot be received, the capture
    /// and state files). A quarter of the limit, at most 64.
    static func reservedDescriptors(limit: Int) -> Int { min(64, limit / 4) }

    /// How many descriptors are free at most, when that is fewer than the reserve: the kernel
    /// gives the lowest free number, so every number below the client's `fd` is taken. Nil
    /// while there is room (the limit is read on each call: it may be raised or lowered while
    /// the daemon runs, by prlimit(1)).
    static func scarceDescriptors(after fd: Int32) -> Int? {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(Int32.max) else { return nil }
        let soft = Int(limit.rlim_cur)
        let free = soft - Int(fd) - 1
        return free < reservedDescriptors(limit: soft) ? max(free, 0) : nil
    }

    /// Why the peer on `fd` may not use the socket, if it may not: only root, the daemon's own
    /// user and members of the socket's group may (the file's mode says so too; this holds
    /// whatever mode the file was given).
    private func refusal(of fd: Int32) -> (uid: uid_t, message: String)? {
        var credentials = (pid: Int32(0), uid: UInt32(0), gid: UInt32(0))
        var length = socklen_t(MemoryLayout.size(ofValue: credentials))
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else {
            return (uid_t.max, "its credentials cannot be read: \(Errno.current)")
        }
        let uid = credentials.uid, gid = credentials.gid
        if uid == 0 || uid == geteuid() || gid == allowedGroup || Self.isMember(uid: uid, primaryGroup: gid, of: allowedGroup) { return nil }
        // In a user namespace that does not map the peer (systemd's PrivateUsers=yes maps only
        // root and the service's user), the peer shows as the overflow uid: who it is cannot be
        // known here, so the kernel's check of the socket file on connect must have been enough,
        // which it is only while the file gives others no access.
        if uid == Self.overflowUID {
            var info = stat()
            if lstat(path, &info) == 0, info.st_mode & 0o007 == 0 { return nil }
        }
        return (uid, "only root, the daemon's user and members of the control socket's group may use it")
    }

    /// The uid an unmapped user shows as inside a user namespace (/proc/sys/kernel/overflowuid).
    static let overflowUID: uid_t = {
        guard case .success(let text) = readTextFile("/proc/sys/kernel/overflowuid"),
              let value = UInt32(text.trimmingCharacters(in: " \n")) else { return 65_534 }
        return value
    }()

    /// Whether the user `uid` is in group `group` (the group database's supplementary groups).
    static func isMember(uid: uid_t, primaryGroup: gid_t, of group: gid_t) -> Bool {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name else {
            return false
        }
        var count: Int32 = 64
        var groups = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(name, primaryGroup, &groups, &count) < 0 {
            guard count > 0, count <= 65_536 else { return false }
            groups = [gid_t](repeating: 0, count: Int(count))
            guard getgrouplist(name, primaryGroup, &groups, &count) >= 0 else { return false }
        }
        return groups.prefix(Int(count)).contains(group)
    }

    fileprivate func received(line: [UInt8], from client: Client) {
        let id = client.id
        let request: ControlRequest
        switch ControlRequest.parse(line: line) {
        case .success(let parsed):
            request = parsed
        case .failure(let error):
            client.enqueueReply(error.reply)
            return
        }
        client.pendingReplies += 1
        let handler = self.handler
        let order = client.nextRequestNumber()
        Task(executorPreference: loop) {
            let reply = ControlReply(id: request.id, await handler.reply(to: request, client: id)).json
            self.loop.perform {
                guard let client = self.state.value.clients[id] else { return }
                client.deliver(reply, order: order)
            }
        }
    }

    fileprivate func drop(_ id: ClientID) {
        guard let client = state.value.clients.removeValue(forKey: id) else { return }
        client.close()
        logger.debug("control client \(id) disconnected")
        let handler = self.handler
        Task(executorPreference: loop) { await handler.clientClosed(id) }
    }

    /// Its watch reported the client's descriptor ready.
    private func clientReady(_ id: ClientID, _ ready: Watch.Events) {
        guard let client = state.value.clients[id] else { return }
        if ready.contains(.writable) { client.flush() }
        if ready.contains(.readable) { client.readAvailable() }
    }

    /// One connection: reached only through the server's loop-bound state.
    fileprivate final class Client {
        let id: ClientID
        let fd: Int32
        private var watch: Watch?
        private var framer = ControlLineFramer()
        /// Request lines read and not handed over yet (`maxPipelined` were being answered).
        private var unhandled = FIFO<[UInt8]>()
        private var handingOver = false
        private var output = FIFOBuffer()
        private weak var server: ControlServer?
        private var closed = false
        /// The client shut down its sending side: once every reply it asked for is written,
        /// the connection ends.
        private var inputEnded = false
        var pendingReplies = 0
        private var issued = 0
        private var delivered = 0
        private var waiting: [Int: JSONObject] = [:]
        /// Events that came while replies were pending, and their size.
        private var heldEvents: [String] = []
        private var heldBytes = 0

        init?(id: ClientID, fd: Int32, loop: EventLoop, server: ControlServer) {
            self.id = id
            self.fd = fd
            self.server = server
            do {
                watch = try loop.watch(fd: fd, interest: .readable) { [weak server] ready in server?.clientReady(id, ready) }
            } catch {
                return nil
            }
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
            handOver()
            guard !closed else { return }
            if pendingReplies == 0, !heldEvents.isEmpty {
                let events = heldEvents
                heldEvents = []
                heldBytes = 0
                for line in events where !enqueue(line) {
                    server?.clientLog.log(.warning, "control client \(id) stopped reading; disconnected it", kind: "a control client stopped reading; disconnected it")
                    server?.drop(id)
                    return
                }
            }
            endIfDone()
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

        /// Reads one chunk (the loop calls again while more waits) and hands its lines over.
        func readAvailable() {
            guard !closed, !inputEnded, unhandled.isEmpty else { return }
            var chunk = [UInt8](repeating: 0, count: 16_384)
            let count = Errno.retryingInterrupts { chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) } }
            if count > 0 {
                for line in framer.feed(chunk[0..<count]) { unhandled.push(line) }
                if framer.overflowed {
                    enqueueReply(ControlError(.tooLong, "a request line is at most 64 KiB").reply)
                    inputEnded = true
                }
            } else if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                return
            } else if count < 0 {  // a reset: nobody reads what is left
                server?.drop(id)
                return
            } else {
                // End of input (perhaps only the client's sending side, as socat does at the end
                // of its input): a last line without a newline is a request too.
                if let line = framer.finish() { unhandled.push(line) }
                inputEnded = true
            }
            handOver()
        }

        /// Whether the client's requests are taken now: fewer than `maxPipelined` are being
        /// answered and fewer than `maxUnreadReplies` bytes wait to be written.
        private var takesRequests: Bool {
            pendingReplies < ControlServer.maxPipelined && output.count < ControlServer.maxUnreadReplies
        }

        /// Hands the lines read over while it `takesRequests`; then reads on if it does.
        private func handOver() {
            guard !handingOver else { return }  // a reply written from within `received`
            handingOver = true
            while !closed, takesRequests, let line = unhandled.pop() {
                server?.received(line: line, from: self)
            }
            handingOver = false
            guard !closed else { return }
            updateInterest()
            endIfDone()
        }

        /// After the client's input ended: closes once every reply it asked for is written.
        private func endIfDone() {
            guard inputEnded, !closed, pendingReplies == 0, unhandled.isEmpty, output.isEmpty else { return }
            server?.drop(id)
        }

        func flush() {
            while !closed && !output.isEmpty {
                let written = Errno.retryingInterrupts { output.withFront { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
                if written > 0 {
                    output.consume(written)
                    continue
                }
                if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
                server?.drop(id)
                return
            }
            guard !closed else { return }
            handOver()
        }

        /// Readable until the input ends, except while read lines wait to be handed over;
        /// writable only while something waits to be written, so an idle client costs nothing.
        private func updateInterest() {
            let reading = !inputEnded && unhandled.isEmpty && takesRequests
            var interest: Watch.Events = reading ? .readable : []
            if !output.isEmpty { interest.insert(.writable) }
            watch?.update(interest)
        }

        func close() {
            guard !closed else { return }
            closed = true
            watch?.cancel()  // before the descriptor is closed: its number may be reused at once
            watch = nil
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
