import ANCS
import ANCSSession
import BlueZ
import DBus
import EventLoop
import GattSession

/// One phone's connection: the GATT services spoken over it (ANCS first) and its timer.
///
/// Owned and used only by the `Daemon` actor.
final class PhoneLink {
    enum State: Equatable {
        case subscribing
        case running
        case failed(String)
        case stopped
    }

    let id: UInt64
    /// The device as BlueZ last described it: its `Address` (the identity address once bonded:
    /// BlueZ replaces the resolvable private address when the phone's IRK arrives, at the same
    /// object path) is what every output, the seen store, `list` and the recorder use.
    var device: BlueZDevice
    /// The ANCS characteristics the link was started with (a change of them ends it).
    let characteristics: ANCSCharacteristics
    /// The daemon's loop, whose clock the sessions run on.
    private let clock: EventLoop
    let start: ContinuousClock.Instant
    var state = State.subscribing
    /// The services on this link, ANCS first; each subscribed in this order.
    private(set) var services: [ServiceLink] = []
    /// Services added so far (each gets the next number).
    private var servicesAdded = 0
    /// ANCS's handler: its session, replay gate and waiters.
    let ancs: ANCSHandler
    var tasks: [Task<Void, Never>] = []
    /// Calls the services' `handleTimer`; created on first use, disarmed while nothing waits.
    var timer: LoopTimer?
    /// When `timer` fires (session time), nil while disarmed.
    var timerDeadline: Duration?
    /// Services beside ANCS (by name) that stay off for a while: their subscription failed, or
    /// their socket closed a moment ago.
    var failedServices: Set<String> = []
    /// Services beside ANCS (by name) that the phone has offered for a moment: their objects
    /// settled, so they may start.
    var settledServices: Set<String> = []
    /// The last warning or error a service logged, for `ancsd status`.
    var lastError: String?
    /// Writes the session to a capture file (`--record`).
    var recorder: SessionRecorder?

    init(
        id: UInt64, device: BlueZDevice, characteristics: ANCSCharacteristics, service: GattServiceObjects,
        configuration: SessionConfiguration, replays: ReplayPolicy, clock: EventLoop
    ) {
        self.id = id
        self.clock = clock
        self.device = device
        self.characteristics = characteristics
        start = clock.now
        ancs = ANCSHandler(configuration: configuration, replays: replays)
        services = [ServiceLink(handler: ancs, service: service, number: 0)]
        servicesAdded = 1
    }

    /// Time on the sessions' clock: the loop's, from the link's start.
    var now: Duration { clock.now - start }

    /// The service one of whose characteristics is at `path`.
    func service(for path: ObjectPath) -> ServiceLink? {
        services.first { $0.uuid(of: path) != nil }
    }

    /// The service with this number, if it is still on the link.
    func service(number: Int) -> ServiceLink? {
        if number == 0 { return services[0] }
        return services.first { $0.number == number }
    }

    /// The link's ANCS service.
    var ancsLink: ServiceLink { services[0] }

    /// Adds a service found on the phone (after ANCS).
    func add(_ handler: any ServiceHandler, service: GattServiceObjects) -> ServiceLink {
        let link = ServiceLink(handler: handler, service: service, number: servicesAdded)
        servicesAdded += 1
        services.append(link)
        return link
    }

    /// Removes a service the phone no longer offers (never ANCS: the link ends with it).
    func remove(_ service: ServiceLink) {
        let ancs = ancsLink
        services.removeAll { $0 !== ancs && $0 === service }
    }

    // MARK: ANCS, as `status`, `list` and the tests read it

    var session: ANCSSession {
        get { ancs.session }
        set { ancs.session = newValue }
    }
    var gate: ReplayGate { ancs.gate }
    var heldBack: Int { ancs.heldBack }
    /// Notification events shown from this link.
    var notificationCount: Int { ancs.notificationCount }
    var sharingOff: Bool { ancs.sharingOff }
    /// The ANCS subscriptions are being renewed.
    var renewing: Bool { ancsLink.renewing }
    /// The Control Point write in flight.
    var write: (call: DBusConnection.PendingCall, connection: DBusConnection, number: UInt64)? { ancsLink.request }
    var sharedNotifySession: String? { ancsLink.sharedNotifySession }
    /// "AcquireNotify" or "StartNotify", once ANCS is subscribed.
    var deliveryName: String? { ancsLink.deliveryName }

    /// Stops every reader, request, task and timer, and ends what waits on the services.
    func tearDown() {
        state = .stopped
        for service in services {
            for reader in service.readers { reader.cancel() }
            service.readers = []
            service.cancelRequest()
            service.handler.tearDown()
        }
        for task in tasks { task.cancel() }
        tasks = []
        timer?.cancel()
        timer = nil
        timerDeadline = nil
    }
}
