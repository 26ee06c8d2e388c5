@testable import ANCSDaemon
import AMS
import ANCS
import ANCSSession
import GattSession
import LinkMachine

/// `ancsd run`'s wiring of the pure machines, as the daemon carries it out, minus I/O: the link
/// machine fed bluetoothd's tree, the calls' results, closed sockets and its one timer
/// (`Daemon+Links.swift`); each link's services with their sockets, requests and one timer, a
/// session's actions carried out requests first, one request tracked per service and only the
/// latest's result reaching an AMS session (`Daemon+Transport.swift`, `ServiceLink.swift`); ANCS's
/// handler with its replay gate, the seen store's memory of what was shown, and the copy filter
/// of signalled values (`ANCSHandler.swift`, `SeenStore.swift`, `SignalCopyFilter.swift`); AMS's
/// handler with its commands waiting for their writes (`MediaHandler.swift`, `Daemon+Media.swift`).
/// Every D-Bus call gives up after GattClient's 10 s.
///
/// What it shows goes to the oracle (`MonthOracle`), which judges it against the phone.
final class DaemonModel {
    typealias SocketID = MonthBluetoothd.SocketID
    typealias LinkID = LinkMachine.LinkID

    /// GattClient's timeout for one call.
    static let callTimeout = Duration.seconds(10)

    let clock: VirtualClock
    let bluetoothd: MonthBluetoothd
    let oracle: MonthOracle
    let configuration: SessionConfiguration
    let replays: ReplayPolicy
    private(set) var machine: LinkMachine
    /// The links, by id (one phone: at most one at a time).
    private(set) var links: [LinkID: LinkModel] = [:]
    /// What was shown of the phone's notifications (the seen store's one phone).
    var seen = SeenMemory(capacity: 4096)
    /// The socket of the AcquireNotify whose result the machine is being fed.
    private var acquiredSocket: (call: LinkMachine.CallID, socket: SocketID)?
    /// Calls waiting for their reply.
    private var openCalls: Set<LinkMachine.CallID> = []
    /// The daemon's readers: socket → the link, service and characteristic it carries.
    private(set) var readers: [SocketID: (link: LinkID, service: Int, uuid: CharacteristicUUID)] = [:]
    /// Requests whose replies are still wanted (a tracked one cancelled is removed).
    private var liveRequests: Set<UInt64> = []
    private var nextRequestToken: UInt64 = 0
    private var machineTimerDeadline: Duration?
    private var machineTimerToken: UInt64 = 0
    /// The reason of the renewal being asked for (for the report).
    private var renewalReason: String?

    init(clock: VirtualClock, bluetoothd: MonthBluetoothd, oracle: MonthOracle, configuration: SessionConfiguration, replays: ReplayPolicy) {
        self.clock = clock
        self.bluetoothd = bluetoothd
        self.oracle = oracle
        self.configuration = configuration
        self.replays = replays
        machine = LinkMachine(settings: LinkMachine.Settings(
            primary: ANCSSession.service, services: [MediaSession.service], enabled: [MediaSession.service.uuid], preferAcquireNotify: true))
    }

    // MARK: The machine

    /// Feeds the machine one input and carries out its commands.
    func feed(_ input: LinkMachine.Input) {
        let commands = machine.handle(input, now: clock.now)
        for command in commands { carryOut(command) }
        armMachineTimer()
    }

    private func carryOut(_ command: LinkMachine.Command) {
        switch command {
        case .call(let id, let call):
            start(call, id: id)
        case .startLink(let id, _):
            links[id] = LinkModel(id: id, start: clock.now, daemon: self)
        case .linkUp(let id):
            guard let link = links[id] else { return }
            link.state = .running
            oracle.connected(link)
        case .endLink(let id, let reason):
            guard let link = links.removeValue(forKey: id) else { return }
            tearDown(link)
            if let reason { oracle.disconnected(link, reason: reason) }
        case .follow:
            break  // the phone's address never changes here
        case .openService(let id, let number, _, _):
            links[id]?.services.append(ServiceModel(number: number, handler: MediaHandlerModel()))
        case .closeService(let id, let number):
            guard let link = links[id], let service = link.service(number) else { return }
            dropSubscriptions(of: service)
            service.handler.tearDown(daemon: self)
            let ancs = link.services[0]
            link.services.removeAll { $0 !== ancs && $0 === service }
            armTimer(for: link)
        case .keepSocket(let call, let id, let number, let uuid):
            guard let socket = acquiredSocket, socket.call == call else { return }
            acquiredSocket = nil
            guard let link = links[id], let service = link.service(number) else { return bluetoothd.daemonCloses(socket.socket) }
            readers[socket.socket] = (id, number, uuid)
            service.readers.append(socket.socket)
            bluetoothd.daemonReads(socket.socket)
        case .dropSockets(let id, let number):
            if let service = links[id]?.service(number) { dropSubscriptions(of: service) }
        case .subscribed(let id, let number, let characteristics):
            guard let link = links[id], let service = link.service(number) else { return }
            service.ready = true
            oracle.subscribed(link, service: number)
            service.handler.subscribed(to: characteristics, service: service, link: link, daemon: self)
        case .renewing(let id, let number):
            guard let link = links[id], let service = link.service(number) else { return }
            oracle.renewing(link, service: number, reason: renewalReason ?? "?")
            service.handler.renewing(service: service, link: link, daemon: self)
        case .log(let level, let message):
            oracle.log(level, message)
        }
    }

    private func tearDown(_ link: LinkModel) {
        link.state = .stopped
        for service in link.services {
            dropSubscriptions(of: service)
            service.handler.tearDown(daemon: self)
        }
        link.timerDeadline = nil
        link.timerToken += 1
    }

    /// Closes the service's sockets and forgets its tracked request (its reply is cancelled).
    private func dropSubscriptions(of service: ServiceModel) {
        for socket in service.readers {
            readers[socket] = nil
            bluetoothd.daemonCloses(socket)
        }
        service.readers = []
        if let request = service.request { liveRequests.remove(request.token) }
        service.request = nil
    }

    /// A call the machine asked for; its result comes back as an input, or fails after `callTimeout`.
    private func start(_ call: GattCall, id: LinkMachine.CallID) {
        openCalls.insert(id)
        bluetoothd.call(call) { daemon, outcome, socket in daemon.callReplied(id, outcome, socket: socket) }
        clock.after(Self.callTimeout) { [weak self] in
            guard let self, self.openCalls.remove(id) != nil else { return }
            let timeout = MonthBluetoothd.failure("org.freedesktop.DBus.Error.NoReply", "Did not receive a reply")
            self.oracle.callEnded(timeout)
            self.feed(.callEnded(id, timeout))
        }
    }

    private func callReplied(_ id: LinkMachine.CallID, _ outcome: CallOutcome, socket: SocketID?) {
        oracle.callEnded(outcome)
        guard openCalls.remove(id) != nil else {
            if let socket { bluetoothd.daemonCloses(socket) }  // a late reply: its descriptor is closed
            return
        }
        if let socket { acquiredSocket = (id, socket) }
        feed(.callEnded(id, outcome))
        if let socket = acquiredSocket {  // not kept: closed
            acquiredSocket = nil
            bluetoothd.daemonCloses(socket.socket)
        }
    }

    private func armMachineTimer() {
        guard let deadline = machine.nextDeadline else {
            if machineTimerDeadline != nil {
                machineTimerDeadline = nil
                machineTimerToken += 1
            }
            return
        }
        guard deadline != machineTimerDeadline else { return }
        machineTimerDeadline = deadline
        machineTimerToken += 1
        let token = machineTimerToken
        clock.at(max(deadline, clock.now)) { [weak self] in
            guard let self, self.machineTimerToken == token else { return }
            self.machineTimerDeadline = nil
            self.feed(.timer)
        }
    }

    // MARK: bluetoothd's news

    /// bluetoothd's tree changed (or it is back): the machine gets the phone as it is now.
    func treeChanged() {
        guard bluetoothd.running else { return }
        feed(.devices([bluetoothd.view]))
    }

    func bluetoothdVanished() { feed(.bluetoothdStopped) }

    /// A datagram from a socket the daemon reads.
    func socketValue(_ socket: SocketID, _ bytes: [UInt8]) {
        guard let reader = readers[socket], let link = links[reader.link], link.state != .stopped,
              let service = link.service(reader.service)
        else { return }
        service.handler.received(bytes, from: reader.uuid, signalled: false, service: service, link: link, daemon: self)
    }

    func socketHungUp(_ socket: SocketID) {
        guard let reader = readers.removeValue(forKey: socket) else { return }
        links[reader.link]?.service(reader.service)?.readers.removeAll { $0 == socket }
        feed(.socketClosed(reader.link, service: reader.service, reason: "end of file"))
    }

    /// A value signalled on the bus (StartNotify): to the service that subscribed to it so.
    func signal(_ path: String, _ bytes: [UInt8]) {
        guard let target = machine.signalled(at: path), let link = links[target.link], link.state != .stopped,
              let service = link.service(target.service)
        else { return }
        service.handler.received(bytes, from: target.characteristic, signalled: true, service: service, link: link, daemon: self)
    }

    // MARK: A session's actions

    /// Carries out a session's actions: requests first, then the rest in order.
    func perform<Event>(_ actions: [GattSessionAction<Event>], on service: ServiceModel, of link: LinkModel, events: (Event) -> Void) {
        for case .request(let request) in actions { send(request, on: service, of: link) }
        for action in actions {
            switch action {
            case .request:
                break
            case .emit(let event):
                events(event)
            case .log(let level, let message):
                oracle.log(level, message)
            case .resubscribe(let reason):
                renewalReason = reason
                feed(.renew(link.id, service: service.number, reason: reason))
                renewalReason = nil
            }
        }
        armTimer(for: link)
    }

    private func send(_ request: GattRequest, on service: ServiceModel, of link: LinkModel) {
        service.requestsIssued += 1
        let number = service.requestsIssued, id = link.id, serviceNumber = service.number
        service.handler.sending(request, number: number)
        nextRequestToken += 1
        let token = nextRequestToken
        liveRequests.insert(token)
        bluetoothd.request(request) { daemon, result in
            guard daemon.liveRequests.remove(token) != nil else { return }  // cancelled with its link, or timed out
            daemon.requestFinished(result, number: number, service: serviceNumber, link: id)
        }
        clock.after(Self.callTimeout) { [weak self] in
            guard let self, self.liveRequests.remove(token) != nil else { return }
            self.requestFinished(.failed("org.freedesktop.DBus.Error.NoReply: Did not receive a reply"), number: number, service: serviceNumber, link: id)
        }
        service.request = (token, number)
    }

    private func requestFinished(_ result: GattResult, number: UInt64, service serviceNumber: Int, link id: LinkID) {
        guard let link = links[id], link.state != .stopped, let service = link.service(serviceNumber) else { return }
        if number == service.requestsIssued { service.request = nil }
        service.handler.finished(result, request: number, service: service, link: link, daemon: self)
    }

    // MARK: The links' timers

    /// Keeps one timer per link armed for its services' earliest deadline; a later deadline
    /// keeps the armed one (sessions tolerate being called early).
    func armTimer(for link: LinkModel) {
        var deadline: Duration?
        for service in link.services {
            if let next = service.handler.nextDeadline { deadline = deadline.map { min($0, next) } ?? next }
        }
        guard let deadline else {
            if link.timerDeadline != nil {
                link.timerDeadline = nil
                link.timerToken += 1
            }
            return
        }
        if let armed = link.timerDeadline, armed <= deadline { return }
        link.timerDeadline = deadline
        link.timerToken += 1
        let token = link.timerToken, id = link.id
        clock.at(link.start + max(deadline, link.now)) { [weak self] in
            guard let self, let link = self.links[id], link.timerToken == token, link.state != .stopped else { return }
            self.timerFired(link)
        }
    }

    private func timerFired(_ link: LinkModel) {
        link.timerDeadline = nil
        let now = link.now
        for service in link.services {
            if let deadline = service.handler.nextDeadline, deadline <= now {
                service.handler.timerFired(service: service, link: link, daemon: self)
            }
        }
        armTimer(for: link)
    }

    // MARK: Media commands (`ancsd media`, MQTT, the desktop's player)

    /// The user asks the phone's player for `command`: refused at once, joined to the same
    /// command waiting already, or sent; the reply comes through the oracle.
    func mediaCommand(_ command: RemoteCommand) {
        guard let link = links.values.first(where: { $0.state == .running }),
              let service = link.services.first(where: { $0.ready && $0.handler is MediaHandlerModel }),
              let media = service.handler as? MediaHandlerModel
        else { return oracle.commandRefused(command, why: "no player") }
        oracle.commandAsked(command)
        if media.isWaiting(command) {
            media.join(command)
            return
        }
        do {
            let actions = try media.session.send(command, now: link.now)
            media.start(command, actions, service: service, link: link, daemon: self)
        } catch {
            oracle.commandReplied(command, ok: false, why: "\(error)")
        }
    }

    /// What the daemon's own tables hold.
    var tableSizes: [(name: String, count: Int)] {
        [("links", links.count), ("services", links.values.reduce(0) { $0 + $1.services.count }), ("readers", readers.count),
         ("calls waiting", openCalls.count), ("requests waiting", liveRequests.count), ("seen", seen.count)]
    }
}

/// One phone's link as the daemon carries it out (`PhoneLink`).
final class LinkModel {
    enum State { case subscribing, running, stopped }

    let id: LinkMachine.LinkID
    /// The clock's time when it started: the sessions' time is counted from here.
    let start: Duration
    unowned let daemon: DaemonModel
    var state = State.subscribing
    /// ANCS first (number 0), then the services beside it.
    var services: [ServiceModel]
    var timerDeadline: Duration?
    var timerToken: UInt64 = 0

    init(id: LinkMachine.LinkID, start: Duration, daemon: DaemonModel) {
        self.id = id
        self.start = start
        self.daemon = daemon
        services = [ServiceModel(number: 0, handler: ANCSHandlerModel(daemon: daemon))]
    }

    /// Time on the sessions' clock.
    var now: Duration { daemon.clock.now - start }

    func service(_ number: Int) -> ServiceModel? {
        number == 0 ? services[0] : services.first { $0.number == number }
    }

    var ancs: ANCSHandlerModel? { services[0].handler as? ANCSHandlerModel }
    var media: MediaHandlerModel? { services.lazy.compactMap { $0.handler as? MediaHandlerModel }.first }
}

/// One service on a link (`ServiceLink`): its sockets and the request it tracks.
final class ServiceModel {
    let number: Int
    let handler: any HandlerModel
    var readers: [MonthBluetoothd.SocketID] = []
    /// The latest request in flight (its token and number).
    var request: (token: UInt64, number: UInt64)?
    var requestsIssued: UInt64 = 0
    var ready = false

    init(number: Int, handler: any HandlerModel) {
        self.number = number
        self.handler = handler
    }
}

/// A service's handler (`ServiceHandler`).
protocol HandlerModel: AnyObject {
    var nextDeadline: Duration? { get }
    func subscribed(to characteristics: Set<CharacteristicUUID>, service: ServiceModel, link: LinkModel, daemon: DaemonModel)
    func received(_ value: [UInt8], from characteristic: CharacteristicUUID, signalled: Bool, service: ServiceModel, link: LinkModel, daemon: DaemonModel)
    func sending(_ request: GattRequest, number: UInt64)
    func finished(_ result: GattResult, request number: UInt64, service: ServiceModel, link: LinkModel, daemon: DaemonModel)
    func timerFired(service: ServiceModel, link: LinkModel, daemon: DaemonModel)
    func renewing(service: ServiceModel, link: LinkModel, daemon: DaemonModel)
    func tearDown(daemon: DaemonModel)
}

/// ANCS on a link (`ANCSHandler`): the session, the replay gate before the outputs.
final class ANCSHandlerModel: HandlerModel {
    var session: ANCSSession
    var gate: ReplayGate
    var heldBack = 0
    var notificationCount = 0
    var sharingOff = false
    /// The daemon's own filter (`Notifications/SignalCopyFilter.swift`).
    var copyFilter = SignalCopyFilter()

    init(daemon: DaemonModel) {
        session = ANCSSession(configuration: daemon.configuration)
        gate = ReplayGate(policy: daemon.replays)
    }

    var nextDeadline: Duration? { session.nextDeadline }

    func subscribed(to characteristics: Set<CharacteristicUUID>, service: ServiceModel, link: LinkModel, daemon: DaemonModel) {
        run(session.subscribed(to: characteristics, now: link.now), service, link, daemon)
    }

    func received(
        _ value: [UInt8], from characteristic: CharacteristicUUID, signalled: Bool, service: ServiceModel, link: LinkModel, daemon: DaemonModel
    ) {
        let isDataSource = characteristic == ANCSSession.dataSourceUUID
        if signalled {
            let admitted = isDataSource ? copyFilter.admitDataSource(value) : copyFilter.admitNotificationSource(value, now: link.now)
            guard admitted else { return daemon.oracle.copyDropped(value, dataSource: isDataSource) }
        } else if isDataSource {
            copyFilter.dataSourceArrived()
        }
        if !isDataSource { daemon.oracle.notificationSourceDelivered(value, link: link) } else {
            daemon.oracle.trace("daemon: DS \(value.count) bytes \(value.prefix(5))\(signalled ? " (signal)" : "")")
        }
        let actions = isDataSource ? session.handleDataSource(value, now: link.now) : session.handleNotificationSource(value, now: link.now)
        run(ANCSSession.gattActions(actions), service, link, daemon)
    }

    func sending(_ request: GattRequest, number: UInt64) {
        guard case .write(_, let bytes) = request else { return }
        copyFilter.expectResponse(to: bytes)
    }

    func finished(_ result: GattResult, request number: UInt64, service: ServiceModel, link: LinkModel, daemon: DaemonModel) {
        let write = ANCSSession.writeResult(result)
        daemon.oracle.trace("daemon: CP write \(number) result \(result)")
        run(ANCSSession.gattActions(session.handleWriteResult(write, write: number, now: link.now)), service, link, daemon)
    }

    func timerFired(service: ServiceModel, link: LinkModel, daemon: DaemonModel) {
        run(session.handleTimer(now: link.now) as [GattSessionAction<ANCSSessionEvent>], service, link, daemon)
    }

    func renewing(service: ServiceModel, link: LinkModel, daemon: DaemonModel) {
        copyFilter = SignalCopyFilter()
        run(session.renewing(now: link.now), service, link, daemon)
    }

    func tearDown(daemon: DaemonModel) {}

    private func run(_ actions: [GattSessionAction<ANCSSessionEvent>], _ service: ServiceModel, _ link: LinkModel, _ daemon: DaemonModel) {
        daemon.perform(actions, on: service, of: link) { [self] event in handle(event, link: link, daemon: daemon) }
    }

    private func handle(_ event: ANCSSessionEvent, link: LinkModel, daemon: DaemonModel) {
        switch event {
        case .notification(let event):
            show(event, link: link, daemon: daemon)
        case .actionCompleted:
            break
        case .sharingChanged(let allowed):
            guard sharingOff == allowed else { return }
            sharingOff = !allowed
            daemon.oracle.sharingChanged(allowed: allowed, link: link)
        }
    }

    /// The replay gate decides (with what the seen store remembers), as `ANCSHandler.show`.
    private func show(_ event: NotificationEvent, link: LinkModel, daemon: DaemonModel) {
        let admitted = daemon.seen.admit(event, gate: &gate)
        if gate.seenBefore.count > daemon.configuration.maxKnownNotifications + 1024 {
            gate.retain(only: Set(session.notifications.map(\.uid)))
        }
        guard let (shown, seenBefore) = admitted else {
            if event.kind != .removed { heldBack += 1 }
            daemon.oracle.heldBack(event, link: link)
            return
        }
        notificationCount += 1
        daemon.oracle.shown(shown, seenBefore: seenBefore, link: link)
    }
}

/// AMS on a link (`MediaHandler`): the session, and the commands waiting for their writes.
final class MediaHandlerModel: HandlerModel {
    var session = MediaSession()
    /// Commands waiting for their write (with how many requests joined each), then by request number.
    private var queued: [(command: RemoteCommand, waiters: Int)] = []
    private var sent: [UInt64: (command: RemoteCommand, waiters: Int)] = [:]

    var nextDeadline: Duration? { session.nextDeadline }

    func subscribed(to characteristics: Set<CharacteristicUUID>, service: ServiceModel, link: LinkModel, daemon: DaemonModel) {
        run(session.subscribed(to: characteristics, now: link.now), service, link, daemon)
    }

    func received(
        _ value: [UInt8], from characteristic: CharacteristicUUID, signalled: Bool, service: ServiceModel, link: LinkModel, daemon: DaemonModel
    ) {
        run(session.handleNotification(value, from: characteristic, now: link.now), service, link, daemon)
    }

    func sending(_ request: GattRequest, number: UInt64) {
        guard case .write(let uuid, let bytes) = request, uuid == AMSUUID.remoteCommand, bytes.count == 1,
              let index = queued.firstIndex(where: { $0.command.rawValue == bytes[0] })
        else { return }
        sent[number] = queued.remove(at: index)
    }

    /// Only the latest request's result reaches the session; a command's also answers its requests.
    func finished(_ result: GattResult, request number: UInt64, service: ServiceModel, link: LinkModel, daemon: DaemonModel) {
        if let waiting = sent.removeValue(forKey: number) {
            let ok = if case .written = result { true } else if case .read = result { true } else { false }
            for _ in 0..<waiting.waiters { daemon.oracle.commandReplied(waiting.command, ok: ok, why: "\(result)") }
        }
        guard number == service.requestsIssued else { return }
        run(session.handleResult(result, now: link.now), service, link, daemon)
    }

    func timerFired(service: ServiceModel, link: LinkModel, daemon: DaemonModel) {
        run(session.handleTimer(now: link.now), service, link, daemon)
    }

    func renewing(service: ServiceModel, link: LinkModel, daemon: DaemonModel) {
        failWaiters("the subscriptions to the phone's player were renewed", daemon)
        run(session.renewing(now: link.now), service, link, daemon)
    }

    func tearDown(daemon: DaemonModel) { failWaiters("the phone's player went away", daemon) }

    func isWaiting(_ command: RemoteCommand) -> Bool { queued.contains { $0.command == command } }

    func join(_ command: RemoteCommand) {
        guard let index = queued.firstIndex(where: { $0.command == command }) else { return }
        queued[index].waiters += 1
    }

    func start(_ command: RemoteCommand, _ actions: [GattSessionAction<MediaEvent>], service: ServiceModel, link: LinkModel, daemon: DaemonModel) {
        queued.append((command, 1))
        run(actions, service, link, daemon)
    }

    private func failWaiters(_ why: String, _ daemon: DaemonModel) {
        for waiting in queued + Array(sent.values) {
            for _ in 0..<waiting.waiters { daemon.oracle.commandReplied(waiting.command, ok: false, why: why) }
        }
        queued = []
        sent = [:]
    }

    private func run(_ actions: [GattSessionAction<MediaEvent>], _ service: ServiceModel, _ link: LinkModel, _ daemon: DaemonModel) {
        daemon.perform(actions, on: service, of: link) { event in
            switch event {
            case .state(let state): daemon.oracle.mediaState(state, link: link)
            case .commandFailed(let command, let failure): daemon.oracle.commandFailed(command, failure)
            }
        }
        if !queued.isEmpty, !session.hasRemoteCommand { failWaiters("the phone no longer offers remote commands", daemon) }
    }

    var tableSizes: [(name: String, count: Int)] { [("commands queued", queued.count), ("commands sent", sent.count)] }
}

/// The seen store's memory of one phone (`SeenSet`, `ReplayGate.admit(_:device:store:)`): what
/// was shown, by content, the least recently seen forgotten past `capacity`.
struct SeenMemory {
    let capacity: Int
    private var lastSeen: [Content: UInt64] = [:]
    private var order = FIFO<(content: Content, sequence: UInt64)>()
    private var sequence: UInt64 = 0

    init(capacity: Int) { self.capacity = capacity }

    var count: Int { lastSeen.count }
    var queued: Int { order.count }

    /// The gate decides with what was shown; what is shown, or held back but known, is remembered (anew).
    mutating func admit(_ event: NotificationEvent, gate: inout ReplayGate) -> (event: NotificationEvent, seenBefore: Bool)? {
        guard event.kind != .removed, event.notification.attributesComplete else { return gate.admit(event, known: false) }
        let content = Content(event.notification)
        let known = lastSeen[content] != nil
        let admitted = gate.admit(event, known: known)
        if admitted != nil || known { insert(content) }
        return admitted
    }

    private mutating func insert(_ content: Content) {
        sequence += 1
        lastSeen[content] = sequence
        order.push((content, sequence))
        while lastSeen.count > capacity, let oldest = order.pop() {
            if lastSeen[oldest.content] == oldest.sequence { lastSeen[oldest.content] = nil }
        }
        // Entries refreshed since they were queued are stale in `order`: rebuilt past twice the set.
        if order.count > 2 * capacity + 64 { rebuild() }
    }

    private mutating func rebuild() {
        let current = lastSeen.sorted { $0.value < $1.value }
        order.removeAll()
        for (index, (content, _)) in current.enumerated() {
            lastSeen[content] = UInt64(index + 1)
            order.push((content, UInt64(index + 1)))
        }
        sequence = UInt64(current.count)
    }
}
