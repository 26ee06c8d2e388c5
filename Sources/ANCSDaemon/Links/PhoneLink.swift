import ANCS
import ANCSSession
import BlueZ
import DBus
import EventLoop
import GattSession
import LinkMachine

/// One phone's connection as the daemon carries it out: the GATT services spoken over it (ANCS
/// first) with their handlers, sockets and requests, its timer and its recorder. What is
/// subscribed, and when the link starts or ends, is the `LinkMachine`'s to decide.
///
/// Owned and used only by the `Daemon` actor.
final class PhoneLink {
    enum State: Equatable {
        case subscribing
        case running
        case stopped
    }

    let id: UInt64
    /// The device as BlueZ last described it: its `Address` (the identity address once bonded:
    /// BlueZ replaces the resolvable private address when the phone's IRK arrives, at the same
    /// object path) is what every output, the seen store, `list` and the recorder use.
    var device: BlueZDevice
    /// The daemon's loop, whose clock the sessions run on.
    private let clock: EventLoop
    let start: ContinuousClock.Instant
    var state = State.subscribing
    /// The services on this link, ANCS first (number 0).
    private(set) var services: [ServiceLink] = []
    /// ANCS's handler: its session, replay gate and waiters.
    let ancs: ANCSHandler
    /// Calls the services' `handleTimer`; created on first use, disarmed while nothing waits.
    var timer: LoopTimer?
    /// When `timer` fires (session time), nil while disarmed.
    var timerDeadline: Duration?
    /// The last warning or error a service logged, for `ancsd status`.
    var lastError: String?
    /// Writes the session to a capture file (`--record`).
    var recorder: SessionRecorder?

    init(
        id: UInt64, device: BlueZDevice, service: ServiceObjects, configuration: SessionConfiguration, replays: ReplayPolicy,
        clock: EventLoop
    ) {
        self.id = id
        self.clock = clock
        self.device = device
        start = clock.now
        ancs = ANCSHandler(configuration: configuration, replays: replays)
        services = [ServiceLink(handler: ancs, service: service, number: 0)]
    }

    /// Time on the sessions' clock: the loop's, from the link's start.
    var now: Duration { clock.now - start }

    /// The service with this number, if it is still on the link.
    func service(number: Int) -> ServiceLink? {
        if number == 0 { return services[0] }
        return services.first { $0.number == number }
    }

    /// The link's ANCS service.
    var ancsLink: ServiceLink { services[0] }
    /// Where ANCS's handler runs.
    var ancsContext: ServiceContext { ServiceContext(service: services[0], link: self) }

    /// Adds a service found on the phone (after ANCS), with the number the link machine gave it.
    func add(_ handler: any ServiceHandler, service: ServiceObjects, number: Int) {
        services.append(ServiceLink(handler: handler, service: service, number: number))
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
    /// The Control Point write in flight.
    var write: (call: DBusConnection.PendingCall, connection: DBusConnection, number: UInt64)? { ancsLink.request }

    /// Stops every reader, request, task and timer, and ends what waits on the services.
    func tearDown() {
        state = .stopped
        for service in services {
            for reader in service.readers { reader.cancel() }
            service.readers = []
            service.cancelRequest()
            service.handler.tearDown()
        }
        timer?.cancel()
        timer = nil
        timerDeadline = nil
    }
}
