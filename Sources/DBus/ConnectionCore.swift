import CDBus
import EventLoop

/// All state of one connection, owned by the `DBusConnection` actor and touched only while
/// holding its event loop (or in deinit, when nothing else can reach it).
///
/// This file holds the state, libdbus's installation, dispatching, sending, the routing of
/// incoming messages and the shutdown; the rest lives beside it, by concern: the C callbacks
/// (LibDBusCallbacks.swift), the glue to the event loop (WatchesAndTimeouts.swift), calls
/// awaiting their reply (PendingCalls.swift), signal subscriptions (SignalRouting.swift) and
/// exported objects with their method dispatch (ObjectServer.swift).
final class ConnectionCore {
    /// The libdbus connection; valid until `shutdown()`.
    let raw: OpaquePointer
    let loop: EventLoop
    weak var owner: DBusConnection?
    private(set) var isClosed = false
    private var installed = false
    var uniqueName = ""
    private var nextID: UInt64 = 1

    // Watches and timeouts (WatchesAndTimeouts.swift)
    var watches: [UInt64: WatchState] = [:]
    var watchIDs: [OpaquePointer: UInt64] = [:]
    /// libdbus's timeouts: a handful at most, so a small array.
    var timeouts: [TimeoutState] = []
    /// The timerfd of the calls' deadlines and libdbus's timeouts, watched on the loop.
    var timer: OwnedWatch?
    var armedDeadline: UInt64?
    /// False after the timer fired: the timerfd's state is then re-set unconditionally.
    var armedKnown = true

    // Pending calls (PendingCalls.swift)
    /// Outstanding calls by the serial their message was sent with (a handful at most: a
    /// cancellation, which is rare, finds its call by id with a scan).
    var pendingBySerial: [UInt32: PendingEntry] = [:]

    // Signal subscriptions (SignalRouting.swift)
    var subscriptions: [UInt64: Subscription] = [:]
    /// Owners of the well-known names used as `sender` in subscriptions.
    var owners: [String: (count: Int, owner: String?)] = [:]

    // Exported objects (ObjectServer.swift)
    var exports: [ObjectPath: ExportState] = [:]
    var managers: Set<ObjectPath> = []

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
        try startTimer()
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

    // MARK: Dispatching

    private var drainScheduled = false
    private var dispatching = false
    var inHandler = false
    private var shutdownRequested = false

    func dispatchStatusChanged() {
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

    func checkFDs(_ message: OwnedMessage) throws(DBusError) {
        if dbus_message_contains_unix_fds(message.raw) != 0 && dbus_connection_can_send_type(raw, CDBUS_TYPE_UNIX_FD) == 0 {
            throw .failed("this connection cannot pass unix file descriptors")
        }
    }

    // MARK: Incoming messages

    func filter(_ raw: OpaquePointer) -> DBusHandlerResult {
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
        failAllCalls()
        endSubscriptions()
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
        stopWatchesAndTimer()
        dbus_connection_unref(raw)
    }
}
