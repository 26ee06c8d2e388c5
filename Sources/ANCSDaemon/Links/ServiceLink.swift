import BlueZ
import BluetoothUUIDs
import DBus
import GattSession
import LinkMachine

/// One GATT service on one phone's link as the daemon carries it out: where its
/// characteristics are, its sockets and the request in flight. What the service does with its
/// values is its `handler`'s (ANCS: `ANCSHandler`); what is subscribed, the `LinkMachine`'s.
///
/// Owned and used only by the `Daemon` actor.
final class ServiceLink {
    let handler: any ServiceHandler
    /// The service's number on its link, from 0 (ANCS), never reused there.
    let number: Int
    /// The characteristics the phone offers, by the description's UUID, in its order (a scan of
    /// a few entries finds a request's: its UUID is the description's own value, so each
    /// comparison is of the same string's storage).
    private let targets: [(uuid: CharacteristicUUID, path: ObjectPath)]
    var readers: [NotificationReader] = []
    /// The latest request in flight, with its number (earlier ones that it overtook are not
    /// tracked: their results are dropped).
    var request: (call: DBusConnection.PendingCall, connection: DBusConnection, number: UInt64)?
    /// Requests sent so far; the latest's number.
    var requestsIssued: UInt64 = 0
    /// The service has been subscribed (its session started) at least once.
    var ready = false
    /// Session time at which the handler's session wants `handleTimer`, as last armed.
    var timerDeadline: Duration?

    var description: GattServiceDescription { handler.description }

    init(handler: any ServiceHandler, service: ServiceObjects, number: Int) {
        self.handler = handler
        self.number = number
        // The paths came from bluetoothd's tree as object paths: each validates.
        targets = handler.description.characteristics.compactMap { characteristic in
            service.characteristics[characteristic.uuid].flatMap(ObjectPath.init(validating:)).map { (characteristic.uuid, $0) }
        }
    }

    /// The characteristics of `description` that `service` has, as the link machine sees
    /// them: keyed by the description's own UUID values (which the session's requests carry too).
    static func objects(of service: GattServiceObjects, in description: GattServiceDescription) -> ServiceObjects {
        var found: [CharacteristicUUID: String] = [:]
        for characteristic in description.characteristics {
            guard let uuid = BluetoothUUID(characteristic.uuid.rawValue), let path = service.characteristics[uuid] else { continue }
            found[characteristic.uuid] = path.rawValue
        }
        return ServiceObjects(path: service.path.rawValue, characteristics: found)
    }

    /// The object of the characteristic a request names.
    func path(of uuid: CharacteristicUUID) -> ObjectPath? {
        for target in targets where target.uuid == uuid { return target.path }
        return nil
    }

    /// Closes the sockets and forgets the request in flight (its reply is cancelled).
    func dropSubscriptions() {
        for reader in readers { reader.cancel() }
        readers = []
        cancelRequest()
    }

    func cancelRequest() {
        if let request { request.connection.cancelCall(request.call) }
        request = nil
    }
}

/// Where a handler's method runs: its service, on its link.
struct ServiceContext {
    let service: ServiceLink
    let link: PhoneLink

    /// Time on the link's sessions' clock.
    var now: Duration { link.now }
}

/// A GATT service as the daemon drives it on one link: the service's pure session (a
/// `GattServiceSession`) and what the daemon does with its events. The transport (subscribing,
/// the sockets, the requests, the timer) is the same for every service and is the daemon's
/// (`Daemon+Transport.swift`); a handler only turns its session's events into output.
///
/// Each method runs the session and hands its actions to `daemon.perform(_:in:events:)`.
protocol ServiceHandler: AnyObject {
    var description: GattServiceDescription { get }
    /// The session's next deadline (`GattServiceSession.nextDeadline`).
    var nextDeadline: Duration? { get }
    /// The subscriptions are in place (first, and again after a renewal).
    func subscribed(to characteristics: Set<CharacteristicUUID>, _ context: ServiceContext, daemon: isolated Daemon)
    /// A value the phone notified. `signalled`: it came as a PropertiesChanged signal, not from a socket.
    func received(
        _ value: [UInt8], from characteristic: CharacteristicUUID, signalled: Bool, _ context: ServiceContext, daemon: isolated Daemon)
    /// A request ended: `number` counts the service's requests from 1, so the latest's is
    /// `service.requestsIssued` (a session that keeps one in flight is told only the latest's).
    func finished(_ result: GattResult, request number: UInt64, _ context: ServiceContext, daemon: isolated Daemon)
    /// The session's deadline passed.
    func timerFired(_ context: ServiceContext, daemon: isolated Daemon)
    /// The subscriptions are being renewed.
    func renewing(_ context: ServiceContext, daemon: isolated Daemon)
    /// A request is going out as the service's request `number` (for the recorder, a filter that
    /// expects its answer, or a control client waiting for its outcome).
    func sending(_ request: GattRequest, number: UInt64, link: PhoneLink)
    /// The link is going away: end whatever waits on the service.
    func tearDown()
}

/// What a handler does with its session's events (`Daemon.perform(_:in:events:)`).
protocol ServiceEvents: AnyObject {
    associatedtype Event: Sendable
    func handle(_ event: Event, link: PhoneLink, daemon: isolated Daemon)
}

extension ServiceHandler {
    func sending(_ request: GattRequest, number: UInt64, link: PhoneLink) {}
}
