public import GattSession

/// Every decision about the phones' links, as a pure state machine (no I/O, no clock of its
/// own): which devices get a link, subscribing to each service's notifying characteristics
/// (AcquireNotify, else StartNotify; a stale socket of ancsd's own released first), the
/// back-off after a failed subscription, the pause after a closed socket, the services beside
/// ANCS (started once the phone's objects settle, held off after a failure), the renewal of a
/// service's subscriptions, and what is released when a link or a service ends.
///
/// The daemon feeds it bluetoothd's tree (as `PhoneView`s), the calls' results, the sockets
/// that closed and the time, and carries out its `Command`s; it keeps its timer armed for
/// `nextDeadline`. What a service says on a running link is its session's (`GattServiceSession`).
///
/// Times are on one clock (the daemon's loop, from any origin), given with every input.
public struct LinkMachine: Sendable {
    /// One link (a device's, while it has one), numbered from 1 and never reused.
    public typealias LinkID = UInt64
    /// One call the machine asked for, numbered from 1.
    public typealias CallID = UInt64

    /// What the machine needs to know of the options.
    public struct Settings: Sendable {
        /// The service every link speaks first, without which there is no link (ANCS).
        public var primary: GattServiceDescription
        /// The services a link may speak beside it, in order.
        public var services: [GattServiceDescription]
        /// Those of `services` the options turn on.
        public var enabled: Set<CharacteristicUUID>
        /// AcquireNotify first (else StartNotify only).
        public var preferAcquireNotify: Bool

        public init(
            primary: GattServiceDescription, services: [GattServiceDescription] = [], enabled: Set<CharacteristicUUID> = [],
            preferAcquireNotify: Bool = true
        ) {
            self.primary = primary
            self.services = services
            self.enabled = enabled
            self.preferAcquireNotify = preferAcquireNotify
        }
    }

    public enum Input: Sendable {
        /// bluetoothd's devices, all of them, after a change of its tree.
        case devices([PhoneView])
        case callEnded(CallID, CallOutcome)
        /// A socket `keepSocket` handed a link closed (or could not be watched).
        case socketClosed(LinkID, service: Int, reason: String)
        /// A service's session asked for its subscriptions to be renewed.
        case renew(LinkID, service: Int, reason: String)
        /// New options; `devices` follows with views made under them.
        case reloaded(Settings)
        /// bluetoothd left the bus: its links end and its tree is gone.
        case bluetoothdStopped
        /// ancsd is stopping: every link ends.
        case shutdown(reason: String)
        /// `nextDeadline` has passed.
        case timer
    }

    /// What the daemon must do, in order.
    public enum Command: Hashable, Sendable {
        case call(CallID, GattCall)
        /// A link begins for the device (subscribing to its primary service, number 0).
        case startLink(LinkID, PhoneView)
        /// The link's primary service is subscribed: the phone is connected.
        case linkUp(LinkID)
        /// The link ends: its sockets, requests, timer and services go. `reason` is nil for a
        /// link that never came up (nothing to tell the outputs).
        case endLink(LinkID, reason: String?)
        /// The device's address changed under the link (BlueZ resolved its identity address).
        case follow(LinkID, address: String)
        /// A service beside the primary one begins on the link, with this number.
        case openService(LinkID, service: Int, uuid: CharacteristicUUID, objects: ServiceObjects)
        /// A service beside the primary one ends: its sockets, request and session go.
        case closeService(LinkID, service: Int)
        /// The socket the call acquired now carries the service's `characteristic` notifications.
        case keepSocket(CallID, LinkID, service: Int, characteristic: CharacteristicUUID)
        /// Close the service's sockets and forget its request in flight (a renewal begins).
        case dropSockets(LinkID, service: Int)
        /// The service's subscriptions are in place: its session may start (`subscribed(to:now:)`).
        case subscribed(LinkID, service: Int, characteristics: Set<CharacteristicUUID>)
        /// The service's subscriptions are being renewed: tell its session (`renewing(now:)`).
        case renewing(LinkID, service: Int)
        case log(ServiceLogLevel, String)
    }

    /// What `status` shows of a link.
    public struct LinkStatus: Equatable, Sendable {
        public var running: Bool
        /// Why its subscription failed, while it waits to start afresh.
        public var failure: String?
        /// "AcquireNotify" or "StartNotify", once the primary service is subscribed.
        public var delivery: String?
        /// The primary service's subscriptions are being renewed.
        public var renewing: Bool
        /// The characteristics of the primary service on which a renewal met another program's
        /// notify session.
        public var sharedNotifySession: String?
    }

    /// How long a phone whose primary socket closed waits before a new link: by then a lost
    /// link shows in BlueZ's properties (bluetoothd closes the sockets a moment before
    /// `ServicesResolved` and `Connected` turn false), and one that stayed up gets its link again.
    public static let socketClosedPause = Duration.milliseconds(500)
    /// The first pause before a failed subscription is tried again; it doubles up to `longestRetry`.
    public static let firstRetry = Duration.milliseconds(500)
    public static let longestRetry = Duration.seconds(30)
    /// How long a service beside the primary one that could not be subscribed to stays off.
    public static let serviceRetry = Duration.seconds(30)

    public internal(set) var settings: Settings
    var phones: [PhoneView] = []
    var phoneIndex: [String: Int] = [:]
    var links: [String: Link] = [:]
    var nextLinkID: LinkID = 0
    var nextCallID: CallID = 0
    /// What each call in flight is for.
    var calls: [CallID: PendingCall] = [:]
    /// The next pause before subscribing again, by device, while its subscriptions fail.
    var retryDelays: [String: Duration] = [:]
    /// Devices whose primary socket closed while bluetoothd still said they were connected,
    /// with the end of their pause.
    var pausedUntil: [String: Duration] = [:]
    /// Characteristics whose socket ancsd has acquired: one bluetoothd still says is acquired
    /// while no link holds it is ancsd's own from a link that ended.
    var acquiredBefore: Set<String> = []
    /// Characteristics whose last AcquireNotify of ancsd's had no answer (timed out): bluetoothd
    /// may still be writing its CCC, or have failed to and kept the socket's place taken. Their
    /// "Notify acquired" is never answered with StopNotify: bluetoothd 5.82 frees the request's
    /// session then, and crashes when the write ends (docs/system-test.md).
    var unanswered: Set<String> = []
    /// Devices that expose ANCS without a bond, said once.
    var ignored: Set<String> = []
    /// The commands of the input being handled.
    var commands: [Command] = []
    var now = Duration.zero

    public init(settings: Settings) {
        self.settings = settings
    }

    /// Feeds one input; returns what the daemon must do, in order.
    public mutating func handle(_ input: Input, now: Duration) -> [Command] {
        self.now = now
        commands = []
        switch input {
        case .devices(let views):
            phones = views
            phoneIndex = Dictionary(views.enumerated().map { ($1.path, $0) }, uniquingKeysWith: { first, _ in first })
            reconcile()
        case .callEnded(let id, let outcome):
            if let pending = calls.removeValue(forKey: id) { ended(pending, id: id, outcome) }
        case .socketClosed(let id, let number, let reason):
            socketClosed(link: id, service: number, reason: reason)
        case .renew(let id, let number, let reason):
            renew(link: id, service: number, reason: reason)
        case .reloaded(let settings):
            self.settings = settings
            ignored = []
        case .bluetoothdStopped:
            phones = []
            phoneIndex = [:]
            ignored = []
            unanswered = []  // its requests went with it
            for path in links.keys.sorted() { stopLink(at: path, reason: "bluetoothd stopped") }
        case .shutdown(let reason):
            for path in links.keys.sorted() { stopLink(at: path, reason: reason) }
        case .timer:
            timerFired()
        }
        let done = commands
        commands = []
        return done
    }

    /// When `handle(.timer, now:)` must be called next; nil when nothing waits.
    public var nextDeadline: Duration? {
        var next = pausedUntil.values.min()
        for link in links.values {
            for deadline in [link.retryAt, link.heldOff.values.min()].compactMap({ $0 }) {
                next = next.map { min($0, deadline) } ?? deadline
            }
        }
        return next
    }

    /// What `status` shows of the link `id` at `path`, while it is the device's link.
    public func status(of id: LinkID, at path: String) -> LinkStatus? {
        guard let link = links[path], link.id == id, let primary = link.services.first else { return nil }
        var failure: String?
        if case .failed(let why) = link.state { failure = why }
        return LinkStatus(
            running: link.state == .running, failure: failure, delivery: primary.deliveryName, renewing: primary.phase == .renewing,
            sharedNotifySession: primary.sharedNotifySession)
    }

    /// The link and service that receive the characteristic at `path`'s values as signals
    /// (StartNotify), with the characteristic's UUID.
    public func signalled(at path: String) -> (link: LinkID, service: Int, characteristic: CharacteristicUUID)? {
        for link in links.values where link.state != .stopped {
            for service in link.services where service.delivery[path] == .signals {
                if let uuid = service.uuid(of: path) { return (link.id, service.number, uuid) }
            }
        }
        return nil
    }

    /// Links begun since the machine started.
    public var linksStarted: LinkID { nextLinkID }

    /// The sizes of the machine's tables, for tests that prove nothing grows with time.
    public var tableSizes: [(name: String, count: Int)] {
        [("phones", phones.count), ("links", links.count), ("calls in flight", calls.count), ("retry delays", retryDelays.count),
         ("pauses", pausedUntil.count), ("acquired before", acquiredBefore.count), ("unanswered", unanswered.count),
         ("ignored", ignored.count),
         ("services", links.values.reduce(0) { $0 + $1.services.count }),
         ("held-off services", links.values.reduce(0) { $0 + $1.heldOff.count })]
    }

    // MARK: Helpers shared by the extensions

    func phone(at path: String) -> PhoneView? { phoneIndex[path].map { phones[$0] } }

    func isConnected(_ path: String) -> Bool { phone(at: path)?.connected == true }

    mutating func log(_ level: ServiceLogLevel, _ message: String) { commands.append(.log(level, message)) }

    /// Asks for a call and remembers what it is for.
    mutating func call(_ call: GattCall, for purpose: PendingCall) {
        nextCallID += 1
        var purpose = purpose
        purpose.characteristic = call.characteristic
        calls[nextCallID] = purpose
        commands.append(.call(nextCallID, call))
    }

    /// StopNotify on each of `characteristics`, whose results nothing waits for.
    mutating func release(_ characteristics: [String]) {
        for characteristic in characteristics { call(.stopNotify(characteristic), for: PendingCall(step: .release)) }
    }

    private mutating func timerFired() {
        for (path, until) in pausedUntil.sorted(by: { $0.key < $1.key }) where until <= now {
            pausedUntil[path] = nil
            log(.debug, "\(path): the pause after its closed socket is over")
            reconcile()
        }
        for path in links.keys.sorted() {
            if let retryAt = links[path]?.retryAt, retryAt <= now {
                links[path]?.retryAt = nil
                restartFailedLink(at: path)
            }
            guard let held = links[path]?.heldOff else { continue }
            for (uuid, until) in held.sorted(by: { $0.key < $1.key }) where until <= now {
                links[path]?.heldOff[uuid] = nil
                updateServices(of: path)
            }
        }
    }
}
