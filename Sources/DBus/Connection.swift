import CDBus
public import EventLoop
import Glibc
import Synchronization

/// Which bus to connect to.
public enum BusAddress: Sendable, Hashable {
    /// The system bus: `DBUS_SYSTEM_BUS_ADDRESS` if set, else libdbus's default
    /// `unix:path=/var/run/dbus/system_bus_socket`.
    case system
    /// The session bus: `DBUS_SESSION_BUS_ADDRESS` if set, else `$XDG_RUNTIME_DIR/bus`
    /// when that socket exists.
    case session
    /// An explicit D-Bus address such as `unix:path=/tmp/bus`.
    case address(String)

    /// The D-Bus address string this resolves to.
    /// - Throws: `DBusError.connectionFailed` when no address can be found.
    public func resolve() throws(DBusError) -> String {
        func env(_ name: String) -> String? {
            guard let p = getenv(name) else { return nil }
            let s = String(cString: p)
            return s.isEmpty ? nil : s
        }
        switch self {
        case .system:
            return env("DBUS_SYSTEM_BUS_ADDRESS") ?? "unix:path=/var/run/dbus/system_bus_socket"
        case .session:
            if let a = env("DBUS_SESSION_BUS_ADDRESS") { return a }
            if let dir = env("XDG_RUNTIME_DIR") {
                let path = dir + "/bus"
                var st = stat()
                if stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFSOCK,
                    let escaped = dbus_address_escape_value(path)
                {
                    defer { dbus_free(escaped) }
                    return "unix:path=" + String(cString: escaped)
                }
            }
            throw .connectionFailed("no session bus: DBUS_SESSION_BUS_ADDRESS is not set and $XDG_RUNTIME_DIR/bus does not exist")
        case .address(let a):
            try checkNoNUL(a, what: "bus address")
            return a
        }
    }
}

/// Flags for `requestName`.
public struct RequestNameFlags: OptionSet, Sendable, Hashable {
    /// The `DBUS_NAME_FLAG_*` bits.
    public let rawValue: UInt32
    /// Creates flags from `DBUS_NAME_FLAG_*` bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// `DBUS_NAME_FLAG_ALLOW_REPLACEMENT`: another connection may take the name over.
    public static let allowReplacement = RequestNameFlags(rawValue: CDBUS_NAME_FLAG_ALLOW_REPLACEMENT)
    /// `DBUS_NAME_FLAG_REPLACE_EXISTING`: take the name over if its owner allows it.
    public static let replaceExisting = RequestNameFlags(rawValue: CDBUS_NAME_FLAG_REPLACE_EXISTING)
    /// `DBUS_NAME_FLAG_DO_NOT_QUEUE`: fail instead of waiting in the queue.
    public static let doNotQueue = RequestNameFlags(rawValue: CDBUS_NAME_FLAG_DO_NOT_QUEUE)
}

/// The bus's answer to `requestName`.
public enum RequestNameReply: UInt32, Sendable {
    /// `DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER`: we own the name now.
    case primaryOwner = 1
    /// `DBUS_REQUEST_NAME_REPLY_IN_QUEUE`: queued behind the current owner.
    case inQueue = 2
    /// `DBUS_REQUEST_NAME_REPLY_EXISTS`: owned by someone else, not queued.
    case exists = 3
    /// `DBUS_REQUEST_NAME_REPLY_ALREADY_OWNER`: we already owned it.
    case alreadyOwner = 4
}

/// The bus's answer to `releaseName`.
public enum ReleaseNameReply: UInt32, Sendable {
    /// `DBUS_RELEASE_NAME_REPLY_RELEASED`
    case released = 1
    /// `DBUS_RELEASE_NAME_REPLY_NON_EXISTENT`
    case nonExistent = 2
    /// `DBUS_RELEASE_NAME_REPLY_NOT_OWNER`
    case notOwner = 3
}

/// A callback subscription made with `DBusConnection.subscribe(to:handler:)`.
public struct SignalSubscription: Sendable, Hashable {
    let id: UInt64
}

/// A private connection to a message bus, with an event loop that needs no thread of its own.
///
/// All state is owned by this actor, whose executor is an `EventLoop` that also runs libdbus's
/// I/O (watches on its fds) and its timeouts (one timer, armed only while a timeout is
/// pending). An idle connection makes no wakeups. Close it with `close()`; dropping the last
/// reference closes it too.
public actor DBusConnection: LoopActor {
    /// The loop that is this actor's executor and runs libdbus's I/O.
    public nonisolated let loop: EventLoop
    /// The loop was made for this connection alone, and ends with it.
    private let ownsLoop: Bool
    let core: ConnectionCore
    private let nameBox = Mutex<String>("")
    private let callIDs = Atomic<UInt64>(1 << 32)
    /// The headers of recent method calls, copied to start the next call of the same method.
    private let callHeaders = CallHeaders()
    /// Whether method calls may make the bus start (D-Bus-activate) their destination.
    public nonisolated let activatesServices: Bool

    /// This actor runs on its connection's event loop. Another actor may return this from
    /// its own `unownedExecutor` to share the loop (and so the connection's isolation
    /// domain); for calls without thread hops, also run its tasks with `taskExecutor` as
    /// their executor preference.
    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        loop.asUnownedSerialExecutor()
    }

    /// The connection's event loop as a task executor. Code that talks to D-Bus a lot runs
    /// fastest in a task preferring it — `Task(executorPreference: connection.taskExecutor)`
    /// or `withTaskExecutorPreference(connection.taskExecutor) { … }`: a reply then resumes
    /// the waiting code on the thread that read it, with no further thread hop. Keep such
    /// code non-blocking: it shares the connection's loop.
    public nonisolated var taskExecutor: any TaskExecutor { loop }

    /// Our unique bus name (`:1.42`), known once `connect` has returned.
    public nonisolated var uniqueName: String { nameBox.withLock { $0 } }

    /// The default method-call timeout (libdbus's default).
    public static let defaultTimeout: Duration = .seconds(25)

    private init(raw: OpaquePointer, loop: EventLoop, ownsLoop: Bool, activatesServices: Bool) {
        self.loop = loop
        self.ownsLoop = ownsLoop
        self.activatesServices = activatesServices
        self.core = ConnectionCore(raw: raw, loop: loop)
    }

    deinit {
        // Nothing can reach this connection any more, so nothing can enqueue on its own loop.
        if ownsLoop { loop.shutdown() }
    }

    /// Opens a private connection to `address`, authenticates and registers with the bus
    /// (`Hello`), all without blocking a thread on I/O.
    ///
    /// The connection runs on `loop` if given (else on a loop of its own, a thread that ends with
    /// the connection): a client whose own actor runs on the same loop calls it and gets its
    /// replies without a thread switch either way.
    ///
    /// With `activatesServices` false, every method call is sent with NO_AUTO_START: calling a
    /// service that is not running fails at once (`NameHasNoOwner`) instead of making the bus
    /// start it (a daemon must not start bluetoothd by calling it, nor wait for an activation
    /// that systemd skips).
    /// - Throws: `DBusError.connectionFailed`, `.timeout` or `.disconnected`.
    public static func connect(
        to address: BusAddress, timeout: Duration = .seconds(25), loop: EventLoop? = nil,
        activatesServices: Bool = true
    ) async throws -> DBusConnection {
        let resolved = try address.resolve()
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        guard let raw = dbus_connection_open_private(resolved, &error) else {
            let message = error.message.map { String(cString: $0) } ?? "cannot connect to \(resolved)"
            dbus_error_free(&error)
            throw DBusError.connectionFailed(message)
        }
        // A private connection that is dropped open aborts the process: close on every path.
        dbus_connection_set_exit_on_disconnect(raw, 0)
        let connectionLoop: EventLoop
        do {
            connectionLoop = try loop ?? EventLoop(name: "dbus")
        } catch {
            dbus_connection_close(raw)
            dbus_connection_unref(raw)
            throw DBusError.connectionFailed("\(error)")
        }
        let connection = DBusConnection(
            raw: raw, loop: connectionLoop, ownsLoop: loop == nil, activatesServices: activatesServices)
        try await connection.start(timeout: timeout)
        return connection
    }

    private func start(timeout: Duration) async throws {
        core.owner = self
        do {
            try core.install()
            let reply = try await call(
                destination: .bus, path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "Hello", timeout: timeout)
            guard let name = try reply.arguments(matching: "s").first?.stringValue else {
                throw DBusError.failed("Hello returned no name")
            }
            core.uniqueName = name
            nameBox.withLock { $0 = name }
        } catch {
            core.shutdown()
            throw error
        }
    }

    /// Closes the connection: pending calls fail with `.disconnected`, signal streams end,
    /// `waitUntilDisconnected()` returns. Calling it again does nothing.
    public func close() {
        core.shutdown()
    }

    /// False once the connection is closed or the bus has gone away.
    public var isConnected: Bool { !core.isClosed }

    /// Returns when the connection is closed, by `close()` or because the bus went away
    /// (at once if it already is), or when the waiting task is cancelled.
    public func waitUntilDisconnected() async {
        let id = core.newID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // The handler below removes the waiter from a job on the queue, which can run
                // before this one when the task was already cancelled (the operation may hop
                // executors after the handler ran): a cancelled task does not wait at all.
                if Task.isCancelled { return continuation.resume() }
                core.addDisconnectWaiter(id, continuation)
            }
        } onCancel: {
            self.onQueue { $0.core.removeDisconnectWaiter(id) }
        }
    }

    /// Runs `body` on the connection's loop, inside the actor, if it still exists.
    nonisolated func onQueue(_ body: @escaping @Sendable (isolated DBusConnection) -> Void) {
        loop.execute { [weak self] in
            self?.handle(body)
        }
    }

    /// For watch and timer handlers, already on the loop: runs `body` inside the actor (the
    /// loop runs the jobs it made runnable right after).
    nonisolated func handle(_ body: @Sendable (isolated DBusConnection) -> Void) {
        assumeOnLoop(body)
    }

    /// Runs `body` inside the actor as soon as possible (`EventLoop.perform`): inline when
    /// already on this connection's loop; on the calling thread from a thread that runs no loop
    /// (no thread hop when the loop is free — `body` must only hand work to libdbus, which never
    /// blocks here); asynchronously from another loop's thread, where waiting could deadlock.
    nonisolated func perform(_ body: @escaping @Sendable (isolated DBusConnection) -> Void) {
        // On the loop (the common case: a daemon sharing it), at once, without wrapping `body`
        // in a closure for the loop.
        if loop.isCurrent { return assumeOnLoop(body) }
        loop.perform { [self] in
            assumeOnLoop(body)
        }
    }

    /// Sends an already validated message, in the caller's isolation.
    func send(_ message: OwnedMessage, isolation: isolated (any Actor)? = #isolation) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            perform { connection in
                do {
                    try connection.core.send(message)
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    // MARK: Calls

    static func milliseconds(_ d: Duration) throws(DBusError) -> Int32 {
        let (seconds, atto) = d.components
        guard seconds > 0 || (seconds == 0 && atto > 0) else {
            throw .invalidArgument("timeout must be positive")
        }
        let ms = seconds.multipliedReportingOverflow(by: 1000)
        guard !ms.overflow else { return CDBUS_TIMEOUT_INFINITE }
        let total = ms.partialValue + (atto + 999_999_999_999_999) / 1_000_000_000_000_000
        return total >= Int64(CDBUS_TIMEOUT_INFINITE) ? CDBUS_TIMEOUT_INFINITE : Int32(total)
    }

    /// Calls a method and awaits its reply.
    ///
    /// Runs in the caller's isolation (`isolation`, which `#isolation` fills in: what Swift
    /// 6.2 calls `nonisolated(nonsending)`, in a form Swift 6.0 accepts too): the message is
    /// built and validated on the caller's thread and handed to libdbus on the connection's
    /// queue without a thread hop, and the reply resumes the caller on its own executor. An
    /// actor that shares the connection's executor (see `unownedExecutor`) calls with no hop
    /// at all.
    /// Cancelling the awaiting task cancels the pending call and throws `CancellationError`.
    /// - Throws: `DBusError.remote` for an error reply, `.timeout`, `.disconnected`,
    ///   `.invalidArgument` for arguments refused before sending.
    public func call(
        destination: BusName?, path: ObjectPath, interface: InterfaceName?, member: MemberName,
        arguments: [DBusValue] = [], timeout: Duration = DBusConnection.defaultTimeout,
        isolation: isolated (any Actor)? = #isolation
    ) async throws -> Message {
        let ms = try Self.milliseconds(timeout)
        let message = try OwnedMessage.methodCall(
            headers: callHeaders, destination: destination, path: path, interface: interface, member: member, arguments: arguments,
            autoStart: activatesServices)
        try Task.checkCancellation()
        let id = callIDs.wrappingAdd(1, ordering: .relaxed).oldValue
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Message, any Error>) in
                // As in waitUntilDisconnected: the handler's cancelCall may have run already.
                if Task.isCancelled { return continuation.resume(throwing: CancellationError()) }
                perform { connection in
                    connection.core.startCall(message, timeoutMilliseconds: ms, id: id, continuation: continuation)
                }
            }
        } onCancel: {
            self.onQueue { $0.core.cancelCall(id) }
        }
    }

    /// The number of calls waiting for their reply (for tests).
    var pendingCallCount: Int { core.pendingCallCount }

    /// Identifies a call started with `startCall`, for `cancelCall`.
    public struct PendingCall: Sendable, Hashable {
        let id: UInt64
    }

    /// Calls a method without a task: `completion` gets the reply (or the error `call` would
    /// throw) on the connection's loop, inside its isolation.
    ///
    /// For code that runs on the loop (an actor sharing the connection's executor) and must
    /// not wait, such as a daemon's hot path: called there, the message is on the socket
    /// before this returns, and the reply costs no task, job or continuation. From a thread
    /// that runs no loop it sends on the calling thread, as `call` does.
    /// - Throws: `DBusError.invalidArgument` for arguments refused before sending (then
    ///   `completion` is never called).
    @discardableResult
    public nonisolated func startCall(
        destination: BusName?, path: ObjectPath, interface: InterfaceName?, member: MemberName,
        arguments: [DBusValue] = [], timeout: Duration = DBusConnection.defaultTimeout,
        completion: @escaping @Sendable (Result<Message, any Error>) -> Void
    ) throws(DBusError) -> PendingCall {
        let ms = try Self.milliseconds(timeout)
        let message = try OwnedMessage.methodCall(
            headers: callHeaders, destination: destination, path: path, interface: interface, member: member, arguments: arguments,
            autoStart: activatesServices)
        let id = callIDs.wrappingAdd(1, ordering: .relaxed).oldValue
        if loop.isCurrent {
            // On the loop (a daemon's hot path): as `perform` would, without making a closure for later.
            assumeOnLoop { $0.core.startCall(message, timeoutMilliseconds: ms, id: id, complete: completion) }
        } else {
            perform { connection in
                connection.core.startCall(message, timeoutMilliseconds: ms, id: id, complete: completion)
            }
        }
        return PendingCall(id: id)
    }

    /// Drops a call started with `startCall`: its completion gets `CancellationError`, unless
    /// it has completed already.
    public nonisolated func cancelCall(_ call: PendingCall) {
        perform { $0.core.cancelCall(call.id) }
    }

    /// Calls a method and returns the reply's arguments after checking their signature.
    /// - Throws: as `call`, plus `DBusError.unexpectedSignature`.
    public func call(
        destination: BusName?, path: ObjectPath, interface: InterfaceName?, member: MemberName,
        arguments: [DBusValue] = [], expecting signature: Signature,
        timeout: Duration = DBusConnection.defaultTimeout, isolation: isolated (any Actor)? = #isolation
    ) async throws -> [DBusValue] {
        try await call(
            destination: destination, path: path, interface: interface, member: member, arguments: arguments,
            timeout: timeout
        ).arguments(matching: signature)
    }

    /// Sends a method call flagged "no reply expected" and returns once it is queued.
    public func callNoReply(
        destination: BusName?, path: ObjectPath, interface: InterfaceName?, member: MemberName,
        arguments: [DBusValue] = [], isolation: isolated (any Actor)? = #isolation
    ) async throws {
        let message = try OwnedMessage.methodCall(
            headers: callHeaders, destination: destination, path: path, interface: interface, member: member, arguments: arguments,
            noReply: true, autoStart: activatesServices)
        try await send(message)
    }

    /// Emits a signal (broadcast, or unicast to `destination`).
    public func emitSignal(
        path: ObjectPath, interface: InterfaceName, member: MemberName, arguments: [DBusValue] = [],
        destination: BusName? = nil, isolation: isolated (any Actor)? = #isolation
    ) async throws {
        let message = try OwnedMessage.signal(
            path: path, interface: interface, member: member, destination: destination, arguments: arguments)
        try await send(message)
    }

    /// Reply path of asynchronous method handlers.
    func finishCall(_ call: MethodCall, result: Result<[DBusValue], any Error>, output: Signature) {
        switch result {
        case .success(let values): core.replyChecked(call, values, output)
        case .failure(let error): core.replyError(call, error)
        }
    }

    // MARK: Bus methods

    private func busCall(_ member: MemberName, _ arguments: [DBusValue], expecting: Signature) async throws -> [DBusValue] {
        try await call(
            destination: .bus, path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: member, arguments: arguments, expecting: expecting)
    }

    /// Asks the bus to deliver messages matching `rule` (`AddMatch`).
    public func addMatch(_ rule: MatchRule) async throws {
        try rule.validate()
        _ = try await busCall("AddMatch", [.string(rule.string)], expecting: .empty)
    }

    /// Removes one instance of a rule added with `addMatch` (`RemoveMatch`).
    public func removeMatch(_ rule: MatchRule) async throws {
        try rule.validate()
        _ = try await busCall("RemoveMatch", [.string(rule.string)], expecting: .empty)
    }

    /// Requests ownership of a well-known name.
    public func requestName(_ name: BusName, flags: RequestNameFlags = []) async throws -> RequestNameReply {
        guard !name.isUnique else { throw DBusError.invalidArgument("cannot request a unique name") }
        let reply = try await busCall("RequestName", [.string(name.rawValue), .uint32(flags.rawValue)], expecting: "u")
        guard let code = reply[0].uint32Value, let result = RequestNameReply(rawValue: code) else {
            throw DBusError.failed("RequestName returned an unknown code")
        }
        return result
    }

    /// Releases a well-known name.
    public func releaseName(_ name: BusName) async throws -> ReleaseNameReply {
        let reply = try await busCall("ReleaseName", [.string(name.rawValue)], expecting: "u")
        guard let code = reply[0].uint32Value, let result = ReleaseNameReply(rawValue: code) else {
            throw DBusError.failed("ReleaseName returned an unknown code")
        }
        return result
    }

    /// The unique name owning `name`, or nil when nobody owns it.
    public func nameOwner(_ name: BusName) async throws -> String? {
        do {
            return try await busCall("GetNameOwner", [.string(name.rawValue)], expecting: "s")[0].stringValue
        } catch DBusError.remote(let errorName, _) where errorName == DBusError.Names.nameHasNoOwner {
            return nil
        }
    }

    // MARK: Signals

    /// Installs `rule` with the bus and returns the signals matching it, starting with the
    /// first one sent after this returns. The stream ends when the connection closes;
    /// ending (or cancelling) the iteration removes the rule — a stream never iterated keeps
    /// it until the connection closes. Buffering is unbounded.
    public func signals(matching rule: MatchRule) async throws -> AsyncStream<Signal> {
        // An overload rather than a default argument: Swift 6.0 rejects a default argument
        // of an actor's method at call sites in other actors (region isolation).
        try await signals(matching: rule, bufferingPolicy: .unbounded)
    }

    /// `signals(matching:)` with the stream's buffering policy.
    public func signals(
        matching rule: MatchRule, bufferingPolicy: AsyncStream<Signal>.Continuation.BufferingPolicy
    ) async throws -> AsyncStream<Signal> {
        let (stream, continuation) = AsyncStream<Signal>.makeStream(bufferingPolicy: bufferingPolicy)
        let id = core.newID()
        try await installSubscription(id, rule, .stream(continuation))
        continuation.onTermination = { [weak self] _ in
            self?.onQueue { $0.dropSubscription(id) }
        }
        return stream
    }

    /// Installs `rule` with the bus and calls `handler` for each matching signal, on the
    /// connection's loop (keep it quick), until `unsubscribe`.
    public func subscribe(
        to rule: MatchRule, handler: @escaping @Sendable (Signal) -> Void
    ) async throws -> SignalSubscription {
        let id = core.newID()
        try await installSubscription(id, rule, .callback(handler))
        return SignalSubscription(id: id)
    }

    /// Ends a callback subscription and removes its rule.
    public func unsubscribe(_ subscription: SignalSubscription) {
        dropSubscription(subscription.id)
    }

    private func installSubscription(_ id: UInt64, _ rule: MatchRule, _ sink: ConnectionCore.SignalSink) async throws {
        try rule.validate()
        let tracked = rule.sender.flatMap { $0.isUnique || $0 == .bus ? nil : $0 }
        if let tracked, core.retainOwnerTracking(tracked.rawValue) {
            do {
                try await addMatch(.nameOwnerChanged(name: tracked))
                core.setOwner(tracked.rawValue, try await nameOwner(tracked))
            } catch {
                releaseOwnerTracking(tracked)
                throw error
            }
        }
        do {
            try await addMatch(rule)
        } catch {
            if let tracked { releaseOwnerTracking(tracked) }
            throw error
        }
        guard !core.isClosed else { throw DBusError.disconnected }
        core.addSubscription(id, .init(rule: rule, sink: sink))
    }

    private func releaseOwnerTracking(_ name: BusName) {
        if core.releaseOwnerTracking(name.rawValue) {
            sendRemoveMatch(.nameOwnerChanged(name: name))
        }
    }

    private func dropSubscription(_ id: UInt64) {
        guard let sub = core.removeSubscription(id) else { return }
        if case .stream(let continuation) = sub.sink { continuation.finish() }
        sendRemoveMatch(sub.rule)
        if let sender = sub.rule.sender, !sender.isUnique, sender != .bus { releaseOwnerTracking(sender) }
    }

    /// RemoveMatch without waiting for the answer.
    private func sendRemoveMatch(_ rule: MatchRule) {
        guard !core.isClosed, let message = try? OwnedMessage.methodCall(
            headers: callHeaders, destination: .bus, path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "RemoveMatch", arguments: [.string(rule.string)], noReply: true)
        else { return }
        _ = try? core.send(message)
    }

    // MARK: Exported objects

    /// Exports `object` at `path`: its methods and properties become callable, with
    /// `Introspectable`, `Properties` and `Peer` answered by the connection. Emits
    /// `InterfacesAdded` from an object manager above the path.
    /// - Throws: `DBusError.invalidArgument` if the object is malformed or the path taken.
    public func export(_ object: ExportedObject, at path: ObjectPath) throws {
        try core.export(object, at: path)
    }

    /// Removes the object at `path` (emitting `InterfacesRemoved` from a manager above it).
    public func unexport(_ path: ObjectPath) {
        core.unexport(path)
    }

    /// Answers `org.freedesktop.DBus.ObjectManager.GetManagedObjects` at `path` for every
    /// object exported below it, and emits `InterfacesAdded`/`Removed` from then on.
    public func exportObjectManager(at path: ObjectPath) {
        core.addObjectManager(path)
    }

    /// Stops answering as an object manager at `path`.
    public func unexportObjectManager(at path: ObjectPath) {
        core.removeObjectManager(path)
    }

    /// Changes a property of an exported object and emits `PropertiesChanged` as declared.
    /// - Throws: `DBusError.invalidArgument` for an unknown property or a value of the wrong type.
    public func setExportedProperty(
        path: ObjectPath, interface: InterfaceName, name: String, value: DBusValue
    ) throws {
        try core.updateProperty(path, interface, name, value)
    }

    /// Changes several properties of one interface of an exported object at once and emits one
    /// `PropertiesChanged` for them all, as each is declared; nothing changes if one is refused.
    /// - Throws: `DBusError.invalidArgument` for an unknown property or a value of the wrong type.
    public func setExportedProperties(
        path: ObjectPath, interface: InterfaceName, values: [(name: String, value: DBusValue)]
    ) throws {
        try core.updateProperties(path, interface, values)
    }

    /// The stored value of an exported object's property.
    public func exportedProperty(path: ObjectPath, interface: InterfaceName, name: String) -> DBusValue? {
        core.exports[path]?.values[interface.rawValue]?[name]
    }
}
