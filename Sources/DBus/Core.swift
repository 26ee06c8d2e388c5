import CDBus
import CEventLoop
import EventLoop
import Glibc

/// A received signal.
public struct Signal: Sendable {
    /// The sender's unique name (`org.freedesktop.DBus` for the bus itself).
    public let sender: String?
    /// The emitting object.
    public let path: ObjectPath
    /// The signal's interface.
    public let interface: InterfaceName
    /// The signal's name.
    public let member: MemberName
    /// The destination, for unicast signals.
    public let destination: String?
    /// The body's signature.
    public let signature: Signature
    /// The body.
    public let arguments: [DBusValue]

    init?(_ m: Message) {
        guard m.kind == .signal, let path = m.path, let interface = m.interface, let member = m.member else { return nil }
        sender = m.sender
        self.path = path
        self.interface = interface
        self.member = member
        destination = m.destination
        signature = m.signature
        arguments = m.arguments
    }

    /// The arguments, after checking the body has exactly the signature `expected`.
    /// - Throws: `DBusError.unexpectedSignature` otherwise.
    public func arguments(matching expected: Signature) throws(DBusError) -> [DBusValue] {
        guard signature == expected else {
            throw .unexpectedSignature(expected: expected.rawValue, actual: signature.rawValue)
        }
        return arguments
    }
}

// MARK: - C callbacks
//
// libdbus calls these synchronously from inside the libdbus call we made, i.e. holding the
// connection's event loop (or, for the final close, from the exclusive context of deinit).
// They reach the core through an unretained pointer; the core outlives every callback
// because it clears all callbacks in `shutdown()` before releasing the connection.

private func core(_ data: UnsafeMutableRawPointer?) -> ConnectionCore? {
    guard let data else { return nil }
    return Unmanaged<ConnectionCore>.fromOpaque(data).takeUnretainedValue()
}

private let cAddWatch: DBusAddWatchFunction = { watch, data in
    guard let watch, let core = core(data) else { return 0 }
    return core.addWatch(watch) ? 1 : 0
}
private let cRemoveWatch: DBusRemoveWatchFunction = { watch, data in
    guard let watch, let core = core(data) else { return }
    core.removeWatch(watch)
}
private let cToggleWatch: DBusWatchToggledFunction = { watch, data in
    guard let watch, let core = core(data) else { return }
    core.toggleWatch(watch)
}
private let cAddTimeout: DBusAddTimeoutFunction = { timeout, data in
    guard let timeout, let core = core(data) else { return 0 }
    core.addTimeout(timeout)
    return 1
}
private let cRemoveTimeout: DBusRemoveTimeoutFunction = { timeout, data in
    guard let timeout, let core = core(data) else { return }
    core.removeTimeout(timeout)
}
private let cToggleTimeout: DBusTimeoutToggledFunction = { timeout, data in
    guard let timeout, let core = core(data) else { return }
    core.toggleTimeout(timeout)
}
private let cDispatchStatusChanged: DBusDispatchStatusFunction = { _, status, data in
    guard status == DBUS_DISPATCH_DATA_REMAINS, let core = core(data) else { return }
    core.dispatchStatusChanged()
}
private let cFilter: DBusHandleMessageFunction = { _, message, data in
    guard let message, let core = core(data) else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
    return core.filter(message)
}

/// All state of one connection, owned by the `DBusConnection` actor and touched only while
/// holding its event loop (or in deinit, when nothing else can reach it).
final class ConnectionCore {
    /// The libdbus connection; valid until `shutdown()`.
    private let raw: OpaquePointer
    let loop: EventLoop
    weak var owner: DBusConnection?
    private(set) var isClosed = false
    private var installed = false
    var uniqueName = ""
    private var nextID: UInt64 = 1

    init(raw: OpaquePointer, loop: EventLoop) {
        self.raw = raw
        self.loop = loop
    }

    deinit {
        shutdown()
    }

    func newID() -> UInt64 {
        defer { nextID += 1 }
        return nextID
    }

    private var selfPointer: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    /// Hooks libdbus up to this core. Called once, on the loop, with `owner` set.
    func install() throws(DBusError) {
        let fd = ancs_timerfd()
        guard fd >= 0 else { throw .failed("cannot create a timer: errno \(errno)") }
        let owner = self.owner
        do {
            timer = try loop.watch(fd: fd, interest: .readable) { [weak owner] _ in
                owner?.handle { $0.core.handleTimer() }
            }
        } catch {
            close(fd)
            throw .failed("cannot watch a timer: \(error)")
        }
        timerFD = fd
        installed = true
        dbus_connection_set_exit_on_disconnect(raw, 0)
        guard dbus_connection_add_filter(raw, cFilter, selfPointer, nil) != 0,
            dbus_connection_set_watch_functions(raw, cAddWatch, cRemoveWatch, cToggleWatch, selfPointer, nil) != 0,
            dbus_connection_set_timeout_functions(raw, cAddTimeout, cRemoveTimeout, cToggleTimeout, selfPointer, nil) != 0
        else {
            throw Marshal.outOfMemory
        }
        dbus_connection_set_dispatch_status_function(raw, cDispatchStatusChanged, selfPointer, nil)
        if dbus_connection_get_dispatch_status(raw) == DBUS_DISPATCH_DATA_REMAINS { scheduleDrain() }
    }

    // MARK: Watches

    private final class WatchState {
        let raw: OpaquePointer
        /// One loop watch per direction libdbus asked for, each on a dup of its fd.
        var watches: [(watch: Watch, interest: Watch.Events)] = []
        init(raw: OpaquePointer) { self.raw = raw }
    }

    private var watches: [UInt64: WatchState] = [:]
    private var watchIDs: [OpaquePointer: UInt64] = [:]

    fileprivate func addWatch(_ watch: OpaquePointer) -> Bool {
        let id = newID()
        let fd = dbus_watch_get_unix_fd(watch)
        guard fd >= 0 else { return false }
        let flags = dbus_watch_get_flags(watch)
        let state = WatchState(raw: watch)
        let owner = self.owner
        // Each direction watches its own dup of libdbus's fd: epoll takes one registration per
        // descriptor, and libdbus may give a readable and a writable watch of one socket.
        for (bit, interest) in [(CDBUS_WATCH_READABLE, Watch.Events.readable), (CDBUS_WATCH_WRITABLE, .writable)]
        where flags & bit != 0 {
            let watchFD = fcntl(fd, F_DUPFD_CLOEXEC, 0)
            guard watchFD >= 0 else {
                cancel(state)
                return false
            }
            do {
                // Registered disabled; `update` turns it on when libdbus enables the watch.
                let watch = try loop.watch(fd: watchFD, interest: []) { [weak owner] _ in
                    owner?.handle { $0.core.handleWatch(id, bit) }
                }
                state.watches.append((watch, interest))
            } catch {
                close(watchFD)
                cancel(state)
                return false
            }
        }
        watches[id] = state
        watchIDs[watch] = id
        update(state)
        return true
    }

    private func update(_ state: WatchState) {
        let enabled = dbus_watch_get_enabled(state.raw) != 0
        for (watch, interest) in state.watches { watch.update(enabled ? interest : []) }
    }

    /// Unregisters at once (libdbus closes its fd right after removing a watch), then closes the dups.
    private func cancel(_ state: WatchState) {
        for (watch, _) in state.watches {
            watch.cancel()
            close(watch.fd)
        }
        state.watches = []
    }

    fileprivate func removeWatch(_ watch: OpaquePointer) {
        guard let id = watchIDs.removeValue(forKey: watch), let state = watches.removeValue(forKey: id) else { return }
        cancel(state)
    }

    fileprivate func toggleWatch(_ watch: OpaquePointer) {
        guard let id = watchIDs[watch], let state = watches[id] else { return }
        update(state)
    }

    /// A watch's fd is ready: let libdbus do its I/O, then dispatch what arrived.
    func handleWatch(_ id: UInt64, _ flags: UInt32) {
        guard !isClosed, let state = watches[id], dbus_watch_get_enabled(state.raw) != 0 else { return }
        inHandler = true
        dbus_watch_handle(state.raw, flags)
        inHandler = false
        drain()
    }

    // MARK: Timeouts (one timer for all of them)
    //
    // One timerfd, watched on the loop, for the calls' deadlines and libdbus's own timeouts (it
    // registers none while no DBusPendingCall is used, but may). It is armed lazily: an armed
    // deadline earlier than the one asked for stays, since firing early is harmless
    // (`handleTimer` finds nothing due and re-arms), so calls that follow each other touch the
    // timerfd only to arm it for the first and to disarm it when none is left: no call or
    // timeout pending, no wakeup.

    private final class TimeoutState {
        let raw: OpaquePointer
        var deadline: UInt64?
        init(raw: OpaquePointer) { self.raw = raw }
    }

    /// libdbus's timeouts: a handful at most, so a small array.
    private var timeouts: [TimeoutState] = []
    private var timer: Watch?
    private var timerFD: Int32 = -1
    private var armedDeadline: UInt64?
    /// False after the timer fired: the timerfd's state is then re-set unconditionally.
    private var armedKnown = true

    private static func now() -> UInt64 { ancs_monotonic_ns() }

    private func refresh(_ state: TimeoutState, now: UInt64) {
        if dbus_timeout_get_enabled(state.raw) != 0 {
            let interval = UInt64(max(0, dbus_timeout_get_interval(state.raw)))
            state.deadline = now + interval * 1_000_000
        } else {
            state.deadline = nil
        }
    }

    fileprivate func addTimeout(_ timeout: OpaquePointer) {
        let state = TimeoutState(raw: timeout)
        timeouts.append(state)
        refresh(state, now: Self.now())
        if let deadline = state.deadline { wake(by: deadline) }
    }

    fileprivate func removeTimeout(_ timeout: OpaquePointer) {
        timeouts.removeAll { $0.raw == timeout }
        disarmIfIdle()
    }

    fileprivate func toggleTimeout(_ timeout: OpaquePointer) {
        guard let state = timeouts.first(where: { $0.raw == timeout }) else { return }
        refresh(state, now: Self.now())
        if let deadline = state.deadline { wake(by: deadline) } else { disarmIfIdle() }
    }

    /// Makes the timer fire no later than `deadline`.
    private func wake(by deadline: UInt64) {
        if armedKnown, let armed = armedDeadline, armed <= deadline { return }
        setTimer(deadline)
    }

    /// Disarms the timer when no call and no enabled timeout is left.
    private func disarmIfIdle() {
        guard pendingBySerial.isEmpty, !armedKnown || armedDeadline != nil,
            timeouts.allSatisfy({ $0.deadline == nil })
        else { return }
        setTimer(nil)
    }

    private func setTimer(_ deadline: UInt64?) {
        guard timerFD >= 0, !isClosed else { return }
        armedDeadline = deadline
        armedKnown = true
        _ = ancs_timerfd_arm(timerFD, deadline.map { max($0, 1) } ?? 0)
    }

    /// The earliest deadline of a pending call or an enabled timeout.
    private func nextDeadline() -> UInt64? {
        var next: UInt64 = .max
        for t in timeouts { if let d = t.deadline, d < next { next = d } }
        for entry in pendingBySerial.values where entry.deadline < next { next = entry.deadline }
        return next == .max ? nil : next
    }

    func handleTimer() {
        guard !isClosed else { return }
        var expirations: UInt64 = 0
        _ = read(timerFD, &expirations, 8)
        armedKnown = false
        let now = Self.now()
        let due = timeouts.filter { ($0.deadline ?? .max) <= now }
        inHandler = true
        for state in due where timeouts.contains(where: { $0 === state }) {
            // libdbus timeouts repeat until removed or disabled.
            let interval = UInt64(max(0, dbus_timeout_get_interval(state.raw)))
            state.deadline = now + interval * 1_000_000
            dbus_timeout_handle(state.raw)
        }
        expireCalls(now: now)
        inHandler = false
        if !isClosed {
            let next = nextDeadline()
            if !armedKnown || next != armedDeadline { setTimer(next) }
        }
        drain()
    }

    // MARK: Dispatching

    private var drainScheduled = false
    private var dispatching = false
    private var inHandler = false
    private var shutdownRequested = false

    fileprivate func dispatchStatusChanged() {
        // Inside a watch/timer handler or the drain loop, the caller drains right after.
        if !inHandler && !dispatching { scheduleDrain() }
    }

    private func scheduleDrain() {
        guard !drainScheduled, !isClosed else { return }
        drainScheduled = true
        loop.execute { [weak owner] in
            owner?.handle { connection in
                connection.core.drainScheduled = false
                connection.core.drain()
            }
        }
    }

    /// Dispatches queued incoming messages, a bounded number per turn so the actor's other
    /// jobs interleave; the rest is rescheduled.
    func drain() {
        guard !isClosed, !dispatching else { return }
        dispatching = true
        var budget = 64
        // dbus_connection_dispatch returns the status after its message: no second look.
        var status = dbus_connection_get_dispatch_status(raw)
        while budget > 0, !shutdownRequested, status == DBUS_DISPATCH_DATA_REMAINS {
            status = dbus_connection_dispatch(raw)
            budget -= 1
        }
        dispatching = false
        if shutdownRequested {
            shutdown()
        } else if budget == 0 {
            scheduleDrain()
        }
    }

    // MARK: Sending

    /// Sends a message that expects no reply; returns its serial.
    @discardableResult
    func send(_ message: OwnedMessage) throws(DBusError) -> UInt32 {
        guard !isClosed else { throw .disconnected }
        try checkFDs(message)
        var serial: UInt32 = 0
        guard dbus_connection_send(raw, message.raw, &serial) != 0 else { throw Marshal.outOfMemory }
        return serial
    }

    private func checkFDs(_ message: OwnedMessage) throws(DBusError) {
        if dbus_message_contains_unix_fds(message.raw) != 0 && dbus_connection_can_send_type(raw, CDBUS_TYPE_UNIX_FD) == 0 {
            throw .failed("this connection cannot pass unix file descriptors")
        }
    }

    // MARK: Pending calls
    //
    // Calls are tracked here by serial, without libdbus's DBusPendingCall (which builds a NoReply
    // error message and registers a libdbus timeout for every call): a call is sent with
    // `dbus_connection_send`, its reply is caught by serial in `filter` before anything else sees
    // it, and its deadline is one of ours, kept by the connection's one timer.

    /// Where a call's outcome goes (on the loop): the decoded reply, or an error.
    typealias Completion = @Sendable (Result<Message, any Error>) -> Void

    private struct PendingEntry {
        let id: UInt64
        /// Monotonic nanoseconds; `.max` for a call without a timeout.
        let deadline: UInt64
        let complete: Completion
    }

    /// Outstanding calls by the serial their message was sent with (a handful at most: a
    /// cancellation, which is rare, finds its call by id with a scan).
    private var pendingBySerial: [UInt32: PendingEntry] = [:]

    /// The number of calls waiting for their reply.
    var pendingCallCount: Int { pendingBySerial.count }

    /// Sends `message` and arranges for `continuation` to get the reply (or an error).
    func startCall(
        _ message: OwnedMessage, timeoutMilliseconds: Int32, id: UInt64,
        continuation: CheckedContinuation<Message, any Error>
    ) {
        startCall(message, timeoutMilliseconds: timeoutMilliseconds, id: id) { continuation.resume(with: $0) }
    }

    /// Sends `message` and calls `complete` on the loop with the reply (or an error): at once
    /// when the call cannot start, otherwise from a later turn of the loop.
    func startCall(_ message: OwnedMessage, timeoutMilliseconds: Int32, id: UInt64, complete: @escaping Completion) {
        // A disconnected connection would queue the message and never answer.
        guard !isClosed, dbus_connection_get_is_connected(raw) != 0 else {
            return complete(.failure(DBusError.disconnected))
        }
        do { try checkFDs(message) } catch { return complete(.failure(error)) }
        var serial: UInt32 = 0
        guard dbus_connection_send(raw, message.raw, &serial) != 0 else {
            return complete(.failure(Marshal.outOfMemory))
        }
        let deadline: UInt64
        if timeoutMilliseconds == CDBUS_TIMEOUT_INFINITE || timeoutMilliseconds < 0 {
            deadline = .max
        } else {
            deadline = Self.now() + UInt64(timeoutMilliseconds) * 1_000_000
        }
        pendingBySerial[serial] = PendingEntry(id: id, deadline: deadline, complete: complete)
        if deadline != .max { wake(by: deadline) }
    }

    /// A reply (method return or error) arrived: completes its call, if it is still waiting.
    private func completeCall(_ raw: OpaquePointer) {
        guard let entry = pendingBySerial.removeValue(forKey: dbus_message_get_reply_serial(raw)) else { return }
        disarmIfIdle()
        let message: Message
        do {
            message = try Message.decode(raw)
        } catch {
            return entry.complete(.failure(error))
        }
        guard message.kind != .error else {
            return entry.complete(.failure(message.error ?? .failed("error reply without a name")))
        }
        entry.complete(.success(message))
    }

    /// The awaiting task was cancelled: drop the pending call (a reply that still comes is dropped).
    func cancelCall(_ id: UInt64) {
        guard let serial = pendingBySerial.first(where: { $0.value.id == id })?.key,
            let entry = pendingBySerial.removeValue(forKey: serial)
        else { return }
        disarmIfIdle()
        entry.complete(.failure(CancellationError()))
    }

    /// Fails the calls whose deadline has passed with `.timeout`.
    private func expireCalls(now: UInt64) {
        var due: [UInt32] = []
        for (serial, entry) in pendingBySerial where entry.deadline <= now { due.append(serial) }
        for serial in due {
            // A completion run earlier in this loop may have cancelled it.
            guard let entry = pendingBySerial.removeValue(forKey: serial) else { continue }
            entry.complete(.failure(DBusError.timeout))
        }
    }

    // MARK: Incoming messages

    fileprivate func filter(_ raw: OpaquePointer) -> DBusHandlerResult {
        let type = dbus_message_get_type(raw)
        if type == CDBUS_MESSAGE_TYPE_METHOD_RETURN || type == CDBUS_MESSAGE_TYPE_ERROR {
            // Replies go to their call; one that comes after its call timed out or was
            // cancelled (or that answers nothing we sent) is dropped here.
            completeCall(raw)
            return DBUS_HANDLER_RESULT_HANDLED
        }
        guard type == CDBUS_MESSAGE_TYPE_SIGNAL || type == CDBUS_MESSAGE_TYPE_METHOD_CALL else {
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        }
        let message: Message
        do {
            message = try Message.decode(raw)
        } catch {
            if type == CDBUS_MESSAGE_TYPE_METHOD_CALL && dbus_message_get_no_reply(raw) == 0 {
                sendError(replySerial: dbus_message_get_serial(raw), destination: dbus_message_get_sender(raw).map { String(cString: $0) },
                          name: DBusError.Names.failed, text: error.message)
            }
            return DBUS_HANDLER_RESULT_HANDLED
        }
        if message.kind == .signal {
            if message.interface?.rawValue == StandardInterface.local && message.member?.rawValue == "Disconnected" {
                shutdownRequested = true
                return DBUS_HANDLER_RESULT_HANDLED
            }
            deliverSignal(message)
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        }
        handleMethodCall(message)
        return DBUS_HANDLER_RESULT_HANDLED
    }

    // MARK: Signals

    enum SignalSink {
        case stream(AsyncStream<Signal>.Continuation)
        case callback(@Sendable (Signal) -> Void)
    }

    struct Subscription {
        let rule: MatchRule
        let sink: SignalSink
    }

    private(set) var subscriptions: [UInt64: Subscription] = [:]
    /// Owners of the well-known names used as `sender` in subscriptions.
    private var owners: [String: (count: Int, owner: String?)] = [:]

    func addSubscription(_ id: UInt64, _ subscription: Subscription) {
        subscriptions[id] = subscription
    }

    func removeSubscription(_ id: UInt64) -> Subscription? {
        subscriptions.removeValue(forKey: id)
    }

    /// Starts tracking a well-known name's owner; true when this is the first user.
    func retainOwnerTracking(_ name: String) -> Bool {
        if var entry = owners[name] {
            entry.count += 1
            owners[name] = entry
            return false
        }
        owners[name] = (1, nil)
        return true
    }

    /// Stops tracking; true when this was the last user.
    func releaseOwnerTracking(_ name: String) -> Bool {
        guard var entry = owners[name] else { return false }
        entry.count -= 1
        if entry.count <= 0 {
            owners[name] = nil
            return true
        }
        owners[name] = entry
        return false
    }

    func setOwner(_ name: String, _ owner: String?) {
        guard var entry = owners[name] else { return }
        entry.owner = owner
        owners[name] = entry
    }

    private func deliverSignal(_ message: Message) {
        if message.sender == BusName.bus.rawValue, message.member?.rawValue == "NameOwnerChanged",
            message.signature.rawValue == "sss", let name = message.arguments[0].stringValue, owners[name] != nil
        {
            let newOwner = message.arguments[2].stringValue ?? ""
            setOwner(name, newOwner.isEmpty ? nil : newOwner)
        }
        guard !subscriptions.isEmpty, let signal = Signal(message) else { return }
        for id in subscriptions.keys.sorted() {
            guard let sub = subscriptions[id] else { continue }
            let resolved = sub.rule.sender.flatMap { owners[$0.rawValue]?.owner }
            guard sub.rule.matches(message, resolvedSender: resolved) else { continue }
            switch sub.sink {
            case .stream(let continuation): continuation.yield(signal)
            case .callback(let callback): callback(signal)
            }
        }
    }

    // MARK: Exported objects

    final class ExportState {
        let object: ExportedObject
        var values: [String: [String: DBusValue]]
        init(_ object: ExportedObject) {
            self.object = object
            var values: [String: [String: DBusValue]] = [:]
            for iface in object.interfaces {
                var props: [String: DBusValue] = [:]
                for p in iface.properties { props[p.name.rawValue] = p.value }
                values[iface.name.rawValue] = props
            }
            self.values = values
        }

        func interface(_ name: String) -> ExportedInterface? {
            object.interfaces.first { $0.name.rawValue == name }
        }

        /// Readable properties of `iface` as `a{sv}`.
        func readableProperties(_ iface: ExportedInterface) -> DBusValue {
            var dict: [String: DBusValue] = [:]
            for p in iface.properties where p.access != .write {
                dict[p.name.rawValue] = values[iface.name.rawValue]?[p.name.rawValue] ?? p.value
            }
            return .variantDictionary(dict)
        }
    }

    private(set) var exports: [ObjectPath: ExportState] = [:]
    private(set) var managers: Set<ObjectPath> = []

    func export(_ object: ExportedObject, at path: ObjectPath) throws(DBusError) {
        guard !isClosed else { throw .disconnected }
        try object.validate()
        guard exports[path] == nil else { throw .invalidArgument("an object is already exported at \(path)") }
        let state = ExportState(object)
        exports[path] = state
        for manager in managers where manager != path && path.isDescendant(ofOrEqualTo: manager) {
            emit(manager, StandardInterface.objectManager, "InterfacesAdded", [.objectPath(path), interfacesAndProperties(state)])
        }
    }

    func unexport(_ path: ObjectPath) {
        guard let state = exports.removeValue(forKey: path) else { return }
        for manager in managers where manager != path && path.isDescendant(ofOrEqualTo: manager) {
            let names = [StandardInterface.introspectable, StandardInterface.properties] + state.object.interfaces.map(\.name.rawValue)
            emit(manager, StandardInterface.objectManager, "InterfacesRemoved", [.objectPath(path), .stringArray(names)])
        }
    }

    func addObjectManager(_ path: ObjectPath) { managers.insert(path) }
    func removeObjectManager(_ path: ObjectPath) { managers.remove(path) }

    private func interfacesAndProperties(_ state: ExportState) -> DBusValue {
        let empty = DBusValue.variantDictionary([:])
        var entries: [(key: DBusValue, value: DBusValue)] = [
            (.string(StandardInterface.introspectable), empty),
            (.string(StandardInterface.properties), empty),
        ]
        for iface in state.object.interfaces {
            entries.append((.string(iface.name.rawValue), state.readableProperties(iface)))
        }
        return .dictionary(key: Signature(unchecked: "s"), value: Signature(unchecked: "a{sv}"), entries)
    }

    /// Updates a stored property value and emits `PropertiesChanged` as declared.
    func updateProperty(_ path: ObjectPath, _ interface: InterfaceName, _ name: String, _ value: DBusValue) throws(DBusError) {
        guard let state = exports[path] else { throw .invalidArgument("no object exported at \(path)") }
        guard let iface = state.interface(interface.rawValue),
            let property = iface.properties.first(where: { $0.name.rawValue == name })
        else { throw .invalidArgument("no property \(interface).\(quoted(name)) at \(path)") }
        guard value.signatureString == property.signature.rawValue else {
            throw .invalidArgument("property \(name) has type \(property.signature), not \(value.signatureString)")
        }
        try value.validate()
        state.values[interface.rawValue, default: [:]][name] = value
        emitChanged(path, iface, property, value)
    }

    private func emitChanged(_ path: ObjectPath, _ iface: ExportedInterface, _ property: ExportedProperty, _ value: DBusValue) {
        switch property.changeSignal {
        case .none: return
        case .emits:
            emit(path, StandardInterface.properties, "PropertiesChanged",
                 [.string(iface.name.rawValue), .variantDictionary([property.name.rawValue: value]), .stringArray([])])
        case .invalidates:
            emit(path, StandardInterface.properties, "PropertiesChanged",
                 [.string(iface.name.rawValue), .variantDictionary([:]), .stringArray([property.name.rawValue])])
        }
    }

    /// Emits a signal from code that knows its names are valid.
    private func emit(_ path: ObjectPath, _ interface: String, _ member: String, _ arguments: [DBusValue]) {
        guard let message = try? OwnedMessage.signal(
            path: path, interface: InterfaceName(unchecked: interface), member: MemberName(unchecked: member),
            destination: nil, arguments: arguments)
        else { return }
        _ = try? send(message)
    }

    // MARK: Method calls

    private func handleMethodCall(_ m: Message) {
        guard let path = m.path, let member = m.member else { return }
        let call = MethodCall(
            sender: m.sender ?? "", path: path, interface: m.interface, member: member,
            arguments: m.arguments, noReplyExpected: m.noReplyExpected, serial: m.serial)
        let interface = m.interface?.rawValue
        let object = exports[path]

        switch (interface, member.rawValue) {
        case (StandardInterface.introspectable, "Introspect"), (nil, "Introspect"):
            let children = childNames(of: path)
            guard object != nil || !children.isEmpty || path == .root || managers.contains(path) else {
                return replyError(call, DBusError.Names.unknownObject, "No such object path '\(path)'")
            }
            let xml = Introspection.xml(
                interfaces: object?.object.interfaces, isManager: managers.contains(path), children: children)
            return reply(call, [.string(xml)])
        case (StandardInterface.objectManager, "GetManagedObjects") where managers.contains(path):
            return reply(call, [managedObjects(under: path)])
        case (StandardInterface.properties, _):
            guard let object else {
                return replyError(call, DBusError.Names.unknownObject, "No such object path '\(path)'")
            }
            return handleProperties(call, object)
        default:
            break
        }

        guard let object else {
            return replyError(call, DBusError.Names.unknownObject, "No such object path '\(path)'")
        }
        let method: ExportedMethod
        if let interface {
            guard let iface = object.interface(interface) else {
                return replyError(call, DBusError.Names.unknownInterface, "No such interface '\(interface)' at '\(path)'")
            }
            guard let found = iface.methods.first(where: { $0.name == member }) else {
                return replyError(call, DBusError.Names.unknownMethod, "No such method '\(member)' in '\(interface)'")
            }
            method = found
        } else {
            guard let found = object.object.interfaces.lazy.flatMap(\.methods).first(where: { $0.name == member }) else {
                return replyError(call, DBusError.Names.unknownMethod, "No such method '\(member)' at '\(path)'")
            }
            method = found
        }
        guard m.signature == method.inputSignature else {
            return replyError(
                call, DBusError.Names.invalidArgs,
                "Method '\(member)' takes signature '\(method.inputSignature)', got '\(m.signature)'")
        }
        switch method.handler {
        case .immediate(let handler):
            do {
                let result = try handler(call)
                replyChecked(call, result, method.outputSignature)
            } catch {
                replyError(call, error)
            }
        case .async(let handler):
            guard let owner else { return }
            let output = method.outputSignature
            Task {
                do {
                    let result = try await handler(call)
                    await owner.finishCall(call, result: .success(result), output: output)
                } catch {
                    await owner.finishCall(call, result: .failure(error), output: output)
                }
            }
        }
    }

    /// Sends a handler's result, or `Failed` when it has the wrong signature.
    func replyChecked(_ call: MethodCall, _ values: [DBusValue], _ output: Signature) {
        var signature = ""
        for v in values { v.appendSignature(to: &signature) }
        guard signature == output.rawValue else {
            return replyError(call, DBusError.Names.failed,
                              "Method handler returned signature '\(signature)' instead of '\(output)'")
        }
        reply(call, values)
    }

    func reply(_ call: MethodCall, _ values: [DBusValue]) {
        guard !call.noReplyExpected, !isClosed else { return }
        do {
            let message = try OwnedMessage.methodReturn(
                replySerial: call.serial, destination: call.sender.isEmpty ? nil : call.sender, arguments: values)
            try send(message)
        } catch {
            // The handler's values were refused before marshalling: its fault, not the caller's.
            let text = error.message
            replyError(call, DBusError.Names.failed, "Method handler returned an invalid reply: \(text)")
        }
    }

    func replyError(_ call: MethodCall, _ error: any Error) {
        if error is WithheldReply { return }
        let (name, text) = DBusError.replyFields(for: error)
        replyError(call, name, text)
    }

    func replyError(_ call: MethodCall, _ name: String, _ text: String) {
        guard !call.noReplyExpected else { return }
        sendError(replySerial: call.serial, destination: call.sender.isEmpty ? nil : call.sender, name: name, text: text)
    }

    private func sendError(replySerial: UInt32, destination: String?, name: String, text: String) {
        guard !isClosed, let message = try? OwnedMessage.error(
            replySerial: replySerial, destination: destination, name: name, text: text)
        else { return }
        _ = try? send(message)
    }

    private func childNames(of path: ObjectPath) -> [String] {
        var names = Set<String>()
        let prefix = path.rawValue == "/" ? "/" : path.rawValue + "/"
        for candidate in Array(exports.keys) + Array(managers) where candidate.rawValue.hasPrefix(prefix) {
            let rest = candidate.rawValue.utf8.dropFirst(prefix.utf8.count)
            let element = rest.split(separator: UInt8(ascii: "/"), maxSplits: 1).first.map { String(decoding: $0, as: UTF8.self) }
            if let element, !element.isEmpty { names.insert(element) }
        }
        return names.sorted()
    }

    private func managedObjects(under manager: ObjectPath) -> DBusValue {
        var entries: [(key: DBusValue, value: DBusValue)] = []
        for (path, state) in exports.sorted(by: { $0.key < $1.key })
        where path != manager && path.isDescendant(ofOrEqualTo: manager) {
            entries.append((.objectPath(path), interfacesAndProperties(state)))
        }
        return .dictionary(key: Signature(unchecked: "o"), value: Signature(unchecked: "a{sa{sv}}"), entries)
    }

    private func handleProperties(_ call: MethodCall, _ object: ExportState) {
        let args = call.arguments
        func lookup(_ ifaceName: String) -> ExportedInterface? {
            object.interface(ifaceName)
        }
        switch call.member.rawValue {
        case "Get":
            guard args.count == 2, let ifaceName = args[0].stringValue, let name = args[1].stringValue else {
                return replyError(call, DBusError.Names.invalidArgs, "Get takes (ss)")
            }
            guard let iface = lookup(ifaceName) else {
                return replyError(call, DBusError.Names.unknownInterface, "No such interface '\(ifaceName)'")
            }
            guard let property = iface.properties.first(where: { $0.name.rawValue == name }) else {
                return replyError(call, DBusError.Names.unknownProperty, "No such property '\(name)'")
            }
            guard property.access != .write else {
                return replyError(call, DBusError.Names.accessDenied, "Property '\(name)' is not readable")
            }
            let value = object.values[ifaceName]?[name] ?? property.value
            reply(call, [.variant(value)])
        case "GetAll":
            guard args.count == 1, let ifaceName = args[0].stringValue else {
                return replyError(call, DBusError.Names.invalidArgs, "GetAll takes (s)")
            }
            if ifaceName.isEmpty || ExportedObject.reservedInterfaces.contains(ifaceName) {
                // All standard interfaces have no properties; "" means all, which we do not merge.
                if ifaceName.isEmpty, object.object.interfaces.count == 1, let only = object.object.interfaces.first {
                    return reply(call, [object.readableProperties(only)])
                }
                return reply(call, [.variantDictionary([:])])
            }
            guard let iface = lookup(ifaceName) else {
                return replyError(call, DBusError.Names.unknownInterface, "No such interface '\(ifaceName)'")
            }
            reply(call, [object.readableProperties(iface)])
        case "Set":
            guard args.count == 3, let ifaceName = args[0].stringValue, let name = args[1].stringValue,
                case .variant(let value) = args[2]
            else {
                return replyError(call, DBusError.Names.invalidArgs, "Set takes (ssv)")
            }
            guard let iface = lookup(ifaceName) else {
                return replyError(call, DBusError.Names.unknownInterface, "No such interface '\(ifaceName)'")
            }
            guard let property = iface.properties.first(where: { $0.name.rawValue == name }) else {
                return replyError(call, DBusError.Names.unknownProperty, "No such property '\(name)'")
            }
            guard property.access != .read else {
                return replyError(call, DBusError.Names.propertyReadOnly, "Property '\(name)' is read-only")
            }
            guard value.signatureString == property.signature.rawValue else {
                return replyError(call, DBusError.Names.invalidArgs,
                                  "Property '\(name)' has type '\(property.signature)', not '\(value.signatureString)'")
            }
            do {
                try property.onSet?(value, call)
            } catch {
                return replyError(call, error)
            }
            object.values[ifaceName, default: [:]][name] = value
            reply(call, [])
            emitChanged(call.path, iface, property, value)
        default:
            replyError(call, DBusError.Names.unknownMethod, "No such method '\(call.member)' in '\(StandardInterface.properties)'")
        }
    }

    // MARK: Disconnection

    private var disconnectWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]

    func addDisconnectWaiter(_ id: UInt64, _ continuation: CheckedContinuation<Void, Never>) {
        if isClosed { return continuation.resume() }
        disconnectWaiters[id] = continuation
    }

    func removeDisconnectWaiter(_ id: UInt64) {
        disconnectWaiters.removeValue(forKey: id)?.resume()
    }

    /// Closes the connection for good: fails pending calls with `.disconnected`, ends
    /// signal streams, wakes disconnect waiters, closes and releases the libdbus connection.
    func shutdown() {
        guard !isClosed else { return }
        // Inside dbus_connection_dispatch (a handler or callback called close()): finish
        // dispatching the current message first; drain() closes right after.
        if dispatching {
            shutdownRequested = true
            return
        }
        isClosed = true
        let pending = pendingBySerial.sorted { $0.key < $1.key }
        pendingBySerial = [:]
        for (_, entry) in pending { entry.complete(.failure(DBusError.disconnected)) }
        let subs = subscriptions
        subscriptions = [:]
        for (_, sub) in subs {
            if case .stream(let continuation) = sub.sink { continuation.finish() }
        }
        let waiters = disconnectWaiters
        disconnectWaiters = [:]
        for (_, w) in waiters { w.resume() }

        if installed {
            dbus_connection_remove_filter(raw, cFilter, selfPointer)
            dbus_connection_set_dispatch_status_function(raw, nil, nil, nil)
        }
        // Closing first is mandatory: releasing an open private connection aborts.
        dbus_connection_close(raw)
        if installed {
            _ = dbus_connection_set_watch_functions(raw, nil, nil, nil, nil, nil)
            _ = dbus_connection_set_timeout_functions(raw, nil, nil, nil, nil, nil)
        }
        for (_, state) in watches { cancel(state) }
        watches = [:]
        watchIDs = [:]
        timeouts = []
        timer?.cancel()
        if timerFD >= 0 { close(timerFD) }
        timer = nil
        timerFD = -1
        dbus_connection_unref(raw)
    }
}
