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
    /// The socket file this server made: `stop` removes the path only while it is still that.
    private let identity: (device: UInt64, inode: UInt64)
    /// Members of this group may connect (besides root and the daemon's own user).
    private let allowedGroup: gid_t
    private let handler: any ControlHandler
    let logger: Logger
    /// What clients make the server say (refused peers, clients that stopped reading): each
    /// kind said once, then counted per minute.
    let clientLog: RateLimitedLogs
    private let state: LoopBound<State>

    /// What changes as clients come and go. A class: it holds the listening socket, which is
    /// not copyable.
    private final class State {
        /// The listening socket until `stop`.
        var listener: FileDescriptor?
        var listenerWatch: Watch?
        var clients: [ClientID: Client] = [:]
        var nextID: ClientID = 0
        var stopped = false
        /// Accepting is paused: descriptors ran out (said once per shortage).
        var shortage = false
        /// The requests being answered and the closings being told: cancelled by `stop`.
        var tasks = OwnedTasks()

        init(listener: consuming FileDescriptor) {
            self.listener = consume listener
        }
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
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, !bytes.contains(0), bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw ControlSocketError(description: "the control socket path is empty or too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let requestedGroup = try Self.groupID(group)
        try Self.removeStale(path, address)
        let socket = try Self.streamSocket()  // closed on a failure below; the server keeps it otherwise
        let fd = socket.rawValue
        // Never a moment with more access than `mode` gives: Linux makes the socket file with the
        // socket's own mode less the umask, so it is made with `mode` or less, then given exactly
        // `mode` (the process umask is not touched: other threads may be making files).
        _ = fchmod(fd, mode)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        let bindError = Errno.current
        if bound == 0 { Self.afterBind.withLock { $0 }?(path) }
        guard bound == 0 else {
            throw ControlSocketError(description: "cannot make the control socket \(path): \(bindError)")
        }
        var info = stat()
        // Without --control-group the file keeps the group it was made with (chown is a
        // privileged call the service's system call filter refuses).
        guard stat(path, &info) == 0, requestedGroup.map({ chown(path, uid_t.max, $0) == 0 }) ?? true, chmod(path, mode) == 0,
              listen(fd, 64) == 0 else {
            let reason = Errno.current
            unlink(path)
            throw ControlSocketError(description: "cannot set up the control socket \(path): \(reason)")
        }
        identity = (UInt64(info.st_dev), UInt64(info.st_ino))
        allowedGroup = requestedGroup ?? info.st_gid
        state = LoopBound(State(listener: socket), loop: loop)
    }

    /// A non-blocking, close-on-exec Unix stream socket.
    private static func streamSocket() throws(ControlSocketError) -> FileDescriptor {
        do throws(Errno) {
            return try FileDescriptor.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue))
        } catch {
            throw ControlSocketError(description: "socket: \(error)")
        }
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
        let probe = try streamSocket()
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
            guard !state.value.stopped, let listener = state.value.listener?.rawValue else { return }
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
            state.value.listenerWatch?.cancel()  // before the socket closes
            state.value.listenerWatch = nil
            state.value.listener = nil
            for client in state.value.clients.values { client.close() }
            state.value.clients = [:]
            state.value.tasks.cancelAll()
        }
    }

    /// Runs `work` in a task on the loop that the server owns: `stop` cancels it if it still runs.
    private func spawn(_ work: @escaping @Sendable () async -> Void) {
        state.value.tasks.add { id in
            Task(executorPreference: loop) { [self] in
                await work()
                loop.perform { self.state.value.tasks.finished(id) }
            }
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
        while !state.value.stopped, let listener = state.value.listener?.rawValue {
            do throws(Errno) {
                let client = FileDescriptor(adopting: try Errno.retrying { ancsd_accept_cloexec_nonblock(listener) })
                if state.value.shortage {
                    state.value.shortage = false
                    logger.info("control socket: descriptors are free again; serving clients")
                }
                admit(client)
            } catch .wouldBlock {
                return
            } catch let error where [ECONNABORTED, EPROTO].contains(error.rawValue) {
                continue  // that client gave up before it was taken
            } catch {
                pauseAccepting(reason: error.description)
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

    private func admit(_ socket: consuming FileDescriptor) {
        if let free = Self.scarceDescriptors(after: socket.rawValue) {
            turnAway(socket, ControlError(.busy, "too many control clients: the daemon keeps its last descriptors for the phones; try again in a moment"))
            clientLog.log(.warning, "control socket: turned a client away (\(state.value.clients.count) connected, at most \(free) descriptors free)",
                          kind: "control socket: turned a client away (descriptors kept for the phones)")
            return
        }
        if let refusal = refusal(of: socket.rawValue) {
            turnAway(socket, ControlError(.forbidden, refusal.message))
            clientLog.log(.warning, "control socket: refused a client of uid \(refusal.uid): \(refusal.message)",
                          kind: "control socket: refused a client of uid \(refusal.uid)")
            return
        }
        state.value.nextID += 1
        let id = state.value.nextID
        guard let client = Client(id: id, socket: socket, loop: loop, server: self) else { return }
        state.value.clients[id] = client
        logger.debug("control client \(id) connected")
    }

    /// Sends `error` to a client that is not served, without waiting, and closes it.
    private func turnAway(_ socket: consuming FileDescriptor, _ error: ControlError) {
        let line = Array((JSONValue.object(error.reply(id: nil)).serialized + "\n").utf8)
        _ = line.withUnsafeBytes { Glibc.send(socket.rawValue, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        try? socket.close()
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

    func received(line: [UInt8], from client: Client) {
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
        spawn { [self] in
            let reply = ControlReply(id: request.id, await handler.reply(to: request, client: id)).json
            self.loop.perform {
                guard let client = self.state.value.clients[id] else { return }
                client.deliver(reply, order: order)
            }
        }
    }

    func drop(_ id: ClientID) {
        guard let client = state.value.clients.removeValue(forKey: id) else { return }
        client.close()
        logger.debug("control client \(id) disconnected")
        let handler = self.handler
        spawn { await handler.clientClosed(id) }
    }

    /// Its watch reported the client's descriptor ready.
    func clientReady(_ id: ClientID, _ ready: Watch.Events) {
        guard let client = state.value.clients[id] else { return }
        if ready.contains(.writable) { client.flush() }
        if ready.contains(.readable) { client.readAvailable() }
    }
}
