import BlueZ
import BluetoothUUIDs
import DBus
import GattSession

/// One GATT service on one phone's link: where its characteristics are, how their
/// notifications arrive, the request in flight and the renewal of its subscriptions. What the
/// service does with them is its `handler`'s (ANCS: `ANCSHandler`).
///
/// Owned and used only by the `Daemon` actor.
final class ServiceLink {
    enum Delivery: Equatable {
        case acquired(mtu: UInt16)
        case signals
    }

    let handler: any ServiceHandler
    /// The service's number on its link, from 0 (ANCS), never reused there.
    let number: Int
    /// The service's object on the phone.
    let servicePath: ObjectPath
    /// The characteristics the phone offers, by UUID, and back.
    let paths: [CharacteristicUUID: ObjectPath]
    private let uuids: [ObjectPath: CharacteristicUUID]
    /// `paths` as a list, in the description's order, for `path(of:)`.
    private let targets: [(uuid: CharacteristicUUID, path: ObjectPath)]
    /// The characteristics to subscribe to, in the order the service's description lists them.
    let notifying: [ObjectPath]
    var delivery: [ObjectPath: Delivery] = [:]
    var readers: [NotificationReader] = []
    /// The latest request in flight, with its number (earlier ones that it overtook are not
    /// tracked: their results are dropped).
    var request: (call: DBusConnection.PendingCall, connection: DBusConnection, number: UInt64)?
    /// Requests sent so far; the latest's number.
    var requestsIssued: UInt64 = 0
    /// The subscriptions are being renewed (`.resubscribe`): unsubscribed, and subscribing again.
    var renewing = false
    /// The service was added to a running link and is subscribing for the first time.
    var starting = false
    /// A renewal met a notify session of another program on this service (bluetoothd then
    /// writes no CCCD): the characteristics' names for `status` and the log, nil when none was met.
    var sharedNotifySession: String?
    /// Session time at which the handler's session wants `handleTimer`, as last armed.
    var timerDeadline: Duration?

    var description: GattServiceDescription { handler.description }

    init(handler: any ServiceHandler, service: GattServiceObjects, number: Int) {
        self.handler = handler
        self.number = number
        servicePath = service.path
        let targets = Self.characteristics(of: service, in: handler.description)
        let paths = Dictionary(targets.map { ($0.uuid, $0.path) }, uniquingKeysWith: { first, _ in first })
        self.paths = paths
        self.targets = targets
        uuids = Dictionary(paths.map { ($0.value, $0.key) }, uniquingKeysWith: { first, _ in first })
        notifying = handler.description.characteristics.filter(\.notifies).compactMap { paths[$0.uuid] }
    }

    /// The characteristics of `description` that `service` has, in the description's order,
    /// keyed by the description's own UUID values (which the session's requests carry too).
    static func characteristics(
        of service: GattServiceObjects, in description: GattServiceDescription
    ) -> [(uuid: CharacteristicUUID, path: ObjectPath)] {
        description.characteristics.compactMap { characteristic in
            guard let uuid = BluetoothUUID(characteristic.uuid.rawValue), let path = service.characteristics[uuid] else { return nil }
            return (characteristic.uuid, path)
        }
    }

    /// The UUID of one of this service's characteristics.
    func uuid(of path: ObjectPath) -> CharacteristicUUID? { uuids[path] }

    /// The object of the characteristic a request names. A scan of a few entries rather than a
    /// hash of the UUID's text: a request's UUID is the description's own value, so each
    /// comparison is of the same string's storage.
    func path(of uuid: CharacteristicUUID) -> ObjectPath? {
        for target in targets where target.uuid == uuid { return target.path }
        return nil
    }

    /// A characteristic's name for logs ("Data Source"), else its path.
    func name(of path: ObjectPath) -> String {
        uuids[path].flatMap { description.characteristic($0)?.name } ?? path.rawValue
    }

    /// "AcquireNotify" or "StartNotify", once subscribed.
    var deliveryName: String? {
        if delivery.isEmpty { return nil }
        return delivery.values.contains(.signals) ? "StartNotify" : "AcquireNotify"
    }

    /// True for a characteristic of this service delivered by signals.
    func receivesSignals(for path: ObjectPath) -> Bool {
        delivery[path] == .signals
    }

    /// Closes the sockets and forgets the request in flight (its reply is cancelled).
    func dropSubscriptions() {
        for reader in readers { reader.cancel() }
        readers = []
        delivery = [:]
        cancelRequest()
    }

    func cancelRequest() {
        if let request { request.connection.cancelCall(request.call) }
        request = nil
    }
}

/// A GATT service as the daemon drives it on one link: the service's pure session (a
/// `GattServiceSession`) and what the daemon does with its events. The transport (subscribing,
/// the sockets, the requests, the timer) is the same for every service and is the daemon's
/// (`Daemon+Transport.swift`); a handler only turns its session's events into output.
///
/// Each method runs the session and hands its actions to `daemon.perform(_:on:of:events:)`.
protocol ServiceHandler: AnyObject {
    var description: GattServiceDescription { get }
    /// The session's next deadline (`GattServiceSession.nextDeadline`).
    var nextDeadline: Duration? { get }
    /// The subscriptions are in place (first, and again after a renewal).
    func subscribed(to characteristics: Set<CharacteristicUUID>, service: ServiceLink, link: PhoneLink, daemon: isolated Daemon)
    /// A value the phone notified. `signalled`: it came as a PropertiesChanged signal, not from a socket.
    func received(
        _ value: [UInt8], from characteristic: CharacteristicUUID, signalled: Bool, service: ServiceLink, link: PhoneLink,
        daemon: isolated Daemon)
    /// A request ended: `number` counts the service's requests from 1, so the latest's is
    /// `service.requestsIssued` (a session that keeps one in flight is told only the latest's).
    func finished(_ result: GattResult, request number: UInt64, service: ServiceLink, link: PhoneLink, daemon: isolated Daemon)
    /// The session's deadline passed.
    func timerFired(service: ServiceLink, link: PhoneLink, daemon: isolated Daemon)
    /// The subscriptions are being renewed.
    func renewing(service: ServiceLink, link: PhoneLink, daemon: isolated Daemon)
    /// A request is going out as the service's request `number` (for the recorder, a filter that
    /// expects its answer, or a control client waiting for its outcome).
    func sending(_ request: GattRequest, number: UInt64, link: PhoneLink)
    /// The link is going away: end whatever waits on the service.
    func tearDown()
}

/// What a handler does with its session's events (`Daemon.perform(_:on:of:events:)`).
protocol ServiceEvents: AnyObject {
    associatedtype Event: Sendable
    func handle(_ event: Event, link: PhoneLink, daemon: isolated Daemon)
}

extension ServiceHandler {
    func sending(_ request: GattRequest, number: UInt64, link: PhoneLink) {}
}
