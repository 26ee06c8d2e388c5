public import DBus
import Synchronization

/// Who owns `org.bluez` right now, for the objects we export to bluetoothd: any client on the
/// bus can call them, so every call must come from the current owner of `org.bluez`.
///
/// The owner is tracked from `GetNameOwner` and `NameOwnerChanged`; a call from someone else
/// is checked once more against a fresh `GetNameOwner`, so a signal still in flight cannot
/// turn bluetoothd away.
public final class BlueZOwner: Sendable {
    public let connection: DBusConnection
    private let state = Mutex<(owner: String?, subscription: SignalSubscription?)>((nil, nil))

    private init(connection: DBusConnection) {
        self.connection = connection
    }

    /// Starts tracking the owner of `org.bluez` on `connection`.
    public static func track(on connection: DBusConnection) async throws -> BlueZOwner {
        let tracker = BlueZOwner(connection: connection)
        let subscription = try await connection.subscribe(to: .nameOwnerChanged(name: BlueZ.service)) { [weak tracker] signal in
            guard let change = try? NameOwnerChanged(signal), change.name == BlueZ.service.rawValue else { return }
            tracker?.state.withLock { $0.owner = change.newOwner }
        }
        let owner = try await connection.nameOwner(BlueZ.service)
        tracker.state.withLock {
            $0.owner = owner
            $0.subscription = subscription
        }
        return tracker
    }

    /// Stops following NameOwnerChanged.
    public func stop() async {
        if let subscription = state.withLock({ $0.subscription }) { await connection.unsubscribe(subscription) }
    }

    /// The unique name of bluetoothd as last seen, nil while it is not running.
    public var current: String? { state.withLock { $0.owner } }

    /// True if `sender` is bluetoothd.
    public func isBlueZ(_ sender: String) async -> Bool {
        if let owner = current, owner == sender { return true }
        guard let fresh = try? await connection.nameOwner(BlueZ.service) else { return false }
        state.withLock { $0.owner = fresh }
        return fresh == sender
    }

    /// Throws `org.freedesktop.DBus.Error.AccessDenied` unless `call` comes from bluetoothd.
    public func requireBlueZ(_ call: MethodCall) async throws {
        guard await isBlueZ(call.sender) else {
            throw DBusError.remote(
                name: DBusError.Names.accessDenied,
                message: "\(call.member) on \(call.path) is only for bluetoothd (the owner of org.bluez); \(call.sender) is not")
        }
    }
}
