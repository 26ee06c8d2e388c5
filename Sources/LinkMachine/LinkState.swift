import GattSession

extension LinkMachine {
    /// One device's link.
    struct Link: Sendable {
        enum State: Equatable, Sendable {
            case subscribing
            case running
            /// Its subscription failed; it starts afresh at `retryAt`.
            case failed(String)
            case stopped
        }

        let id: LinkID
        let path: String
        var address: String
        /// The primary service's objects the link began with (a change of them ends it).
        let primary: ServiceObjects
        var state = State.subscribing
        /// The primary service first (number 0), then those beside it.
        var services: [Service]
        var nextServiceNumber = 1
        /// When a failed link starts afresh.
        var retryAt: Duration?
        /// The StopNotify calls a failed link still makes before it is replaced.
        var releasing: [String] = []
        /// Services beside the primary one kept off until a time: their subscription failed,
        /// their socket closed, or their objects are still settling.
        var heldOff: [CharacteristicUUID: Duration] = [:]
        /// Services beside the primary one the phone has offered for a moment (settled).
        var settled: Set<CharacteristicUUID> = []

        func index(of number: Int) -> Int? { services.firstIndex { $0.number == number } }

        var isFailed: Bool {
            if case .failed = state { true } else { false }
        }
    }

    /// One GATT service on a link: its characteristics and how their notifications arrive.
    struct Service: Sendable {
        enum Phase: Equatable, Sendable {
            /// Subscribing for the first time.
            case starting
            case running
            /// Unsubscribing and subscribing again.
            case renewing
        }

        enum Delivery: Equatable, Sendable {
            case acquired
            case signals
        }

        let number: Int
        let description: GattServiceDescription
        let objects: ServiceObjects
        /// The notifying characteristics in the description's order: (UUID, object path).
        let notifying: [(uuid: CharacteristicUUID, path: String)]
        var delivery: [String: Delivery] = [:]
        var phase = Phase.starting
        /// The renewal's characteristics still to unsubscribe (last first), what each was, and
        /// the characteristics found shared with another program.
        var unsubscribing: [(path: String, delivery: Delivery)] = []
        var shared: [String] = []
        var sharedNotifySession: String?

        init(number: Int, description: GattServiceDescription, objects: ServiceObjects) {
            self.number = number
            self.description = description
            self.objects = objects
            notifying = description.characteristics.filter(\.notifies).compactMap { characteristic in
                objects.characteristics[characteristic.uuid].map { (characteristic.uuid, $0) }
            }
        }

        func uuid(of path: String) -> CharacteristicUUID? {
            objects.characteristics.first { $0.value == path }?.key
        }

        /// A characteristic's name for logs ("Data Source"), else its path.
        func name(of path: String) -> String {
            uuid(of: path).flatMap { description.characteristic($0)?.name } ?? path
        }

        /// "AcquireNotify" or "StartNotify", once subscribed.
        var deliveryName: String? {
            if delivery.isEmpty { return nil }
            return delivery.values.contains(.signals) ? "StartNotify" : "AcquireNotify"
        }

        var signalled: [String] {
            notifying.map(\.path).filter { delivery[$0] == .signals }
        }
    }

    /// What a call in flight is for.
    struct PendingCall: Sendable {
        enum Step: Sendable {
            /// AcquireNotify on the characteristic `index` of the service's `notifying`.
            case acquire(index: Int, releasedStale: Bool)
            /// StopNotify on a stale socket of ancsd's own, before AcquireNotify again.
            case releaseStale(index: Int)
            /// StartNotify on the characteristic `index`.
            case start(index: Int)
            /// A renewal's StopNotify on its next characteristic.
            case unsubscribe
            /// A renewal's read of `Notifying` after StopNotify.
            case readNotifying
            /// A failed link's StopNotify before it is replaced.
            case releaseFailed
            /// A StopNotify whose result nothing waits for.
            case release
        }

        var path = ""
        /// The characteristic the call is on (`call(_:for:)` fills it in).
        var characteristic = ""
        var link: LinkID = 0
        var service = 0
        var step: Step
    }
}
