import CDBus

/// Calls awaiting their reply.
extension ConnectionCore {
    // Calls are tracked here by serial, without libdbus's DBusPendingCall (which builds a NoReply
    // error message and registers a libdbus timeout for every call): a call is sent with
    // `dbus_connection_send`, its reply is caught by serial in `filter` before anything else sees
    // it, and its deadline is one of ours, kept by the connection's one timer.

    /// Where a call's outcome goes (on the loop): the decoded reply, or an error.
    typealias Completion = @Sendable (Result<Message, any Error>) -> Void

    struct PendingEntry {
        let id: UInt64
        /// Monotonic nanoseconds; `.max` for a call without a timeout.
        let deadline: UInt64
        let complete: Completion
    }


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
    func completeCall(_ raw: OpaquePointer) {
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

    /// Fails every outstanding call with `.disconnected`, oldest first (at shutdown).
    func failAllCalls() {
        let pending = pendingBySerial.sorted { $0.key < $1.key }
        pendingBySerial = [:]
        for (_, entry) in pending { entry.complete(.failure(DBusError.disconnected)) }
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
    func expireCalls(now: UInt64) {
        var due: [UInt32] = []
        for (serial, entry) in pendingBySerial where entry.deadline <= now { due.append(serial) }
        for serial in due {
            // A completion run earlier in this loop may have cancelled it.
            guard let entry = pendingBySerial.removeValue(forKey: serial) else { continue }
            entry.complete(.failure(DBusError.timeout))
        }
    }

}
