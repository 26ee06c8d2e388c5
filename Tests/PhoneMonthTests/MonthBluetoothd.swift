import ANCSSession
import AMS
import GattSession
import LinkMachine
import TestSupport

/// bluetoothd between the daemon and the phone, as docs/dbus.md and the simulator describe it
/// (5.66's behaviour where versions differ): the device's `Connected`, with the gap after a link
/// loss in which it still reads true while calls already fail "Not connected"; AcquireNotify,
/// StartNotify, StopNotify and `Notifying` per characteristic; the CCCD written on when the
/// first subscription comes and off when the last goes, and AcquireNotify and StartNotify
/// answered once that write is; one ATT request at a time to the phone, in order, and the link
/// ended by an ATT request unanswered for 30 s; the phone's values to the acquired socket (kept
/// in it until the daemon reads) or as signals; every socket hung up when the link goes.
///
/// The air between it and the phone takes 5–25 ms each way and keeps its order; D-Bus to the
/// daemon takes 0.2–1 ms and keeps its order; a socket's values reach the daemon in 50 µs, so a
/// Data Source answer may overtake the reply to the write that asked for it, as on a real loop.
final class MonthBluetoothd {
    typealias SocketID = UInt64

    struct Socket {
        let characteristic: Characteristic
        /// The daemon reads it (the machine said `keepSocket`).
        var read = false
        /// Values waiting for the daemon to read them.
        var buffer: [[UInt8]] = []
        /// bluetoothd closed its end: the daemon's reader gets end of file after the buffer.
        var hungUp = false
    }

    struct Subscription {
        var acquired: SocketID?
        /// The daemon's StartNotify session.
        var client = false
        /// The CCCD as bluetoothd last wrote it on this link.
        var cccdOn = false
    }

    static let address = "5C:AD:CF:3A:11:07"
    /// The phone's services as bluetoothd's tree shows them while it is connected.
    static let ancsObjects = ServiceObjects(path: "\(Characteristic.devicePath)/service0030", characteristics: [
        ANCSSession.notificationSourceUUID: Characteristic.notificationSource.path,
        ANCSSession.controlPointUUID: Characteristic.controlPoint.path, ANCSSession.dataSourceUUID: Characteristic.dataSource.path,
    ])
    static let amsObjects = ServiceObjects(path: "\(Characteristic.devicePath)/service0040", characteristics: [
        Characteristic.remoteCommand.uuid: Characteristic.remoteCommand.path, Characteristic.entityUpdate.uuid: Characteristic.entityUpdate.path,
        Characteristic.entityAttribute.uuid: Characteristic.entityAttribute.path,
    ])
    /// How long `Connected` still reads true after the link dropped (the simulator's `linkDownGap`).
    static let linkDownGap = Duration.milliseconds(40)
    /// bluetoothd ends a link whose ATT request the phone has not answered for this long.
    static let attTimeout = Duration.seconds(30)

    let clock: VirtualClock
    let phone: MonthPhone
    var rng: SplitMix64
    weak var daemon: DaemonModel?
    /// How often AcquireNotify is refused (the daemon then uses StartNotify).
    var acquireRefusal = 0.1
    /// Called when the LE link is lost (the reason).
    var onLinkLost: (String) -> Void = { _ in }

    private(set) var running = true
    /// The phone offers AMS (it withdraws it and offers it again with Service Changed).
    private(set) var mediaOffered = true
    /// The LE link is up.
    private(set) var linkUp = false
    /// `Device1.Connected` as bluetoothd shows it.
    private(set) var connectedShown = false
    /// Each LE link's number: what was on the air of a lost link never arrives.
    private(set) var generation: UInt64 = 0
    private(set) var subscriptions: [Characteristic: Subscription] = [:]
    private(set) var sockets: [SocketID: Socket] = [:]
    private var nextSocket: SocketID = 0

    private var queue: [(request: ATTRequest, done: (ATTAnswer?) -> Void)] = []
    private var outstanding: (number: UInt64, done: (ATTAnswer?) -> Void)?
    private var requestNumber: UInt64 = 0
    private var lastUplink = Duration.zero
    private var lastDownlink = Duration.zero
    private var lastDBus = Duration.zero
    /// Counts for the report.
    private(set) var attTimeouts = 0
    private(set) var acquireRefused = 0

    init(clock: VirtualClock, phone: MonthPhone, seed: UInt64) {
        self.clock = clock
        self.phone = phone
        rng = SplitMix64(seed: seed)
        phone.notify = { [unowned self] characteristic, bytes in self.fromPhone(characteristic, bytes) }
    }

    /// The phone as the daemon's `PhoneView` of bluetoothd's tree.
    var view: PhoneView {
        PhoneView(
            path: Characteristic.devicePath, address: Self.address, name: "iPhone", connected: connectedShown, bonded: true,
            ancs: connectedShown ? Self.ancsObjects : nil,
            services: connectedShown && mediaOffered ? [MediaSession.service.uuid: Self.amsObjects] : [:])
    }

    // MARK: D-Bus to the daemon

    /// Runs `body` at the daemon after D-Bus's latency, in order.
    private func toDaemon(_ body: @escaping (DaemonModel) -> Void) {
        lastDBus = max(clock.now + rng.duration(.microseconds(200), .microseconds(1000)), lastDBus)
        clock.at(lastDBus) { [weak self] in
            if let daemon = self?.daemon { body(daemon) }
        }
    }

    /// Runs `body` at bluetoothd after D-Bus's latency (a call from the daemon).
    private func fromDaemon(_ body: @escaping () -> Void) {
        clock.after(rng.duration(.microseconds(200), .microseconds(1000)), body)
    }

    private func treeChanged() {
        guard running else { return }
        toDaemon { $0.treeChanged() }
    }

    // MARK: The LE link

    /// The phone connects: a new ANCS session on the phone; `Connected` true.
    func phoneConnects() {
        guard running, !linkUp else { return }
        generation += 1
        linkUp = true
        subscriptions = [:]
        phone.linkUp(uidBase: UInt32.random(in: 1...60_000, using: &rng))
        connectedShown = true
        treeChanged()
    }

    /// The link is lost: requests fail, sockets hang up, `Connected` false after the gap.
    func linkLost(_ reason: String) {
        guard linkUp else { return }
        generation += 1
        linkUp = false
        phone.linkDown()
        let pending = (outstanding.map { [$0.done] } ?? []) + queue.map(\.done)
        outstanding = nil
        queue = []
        for done in pending { done(nil) }
        for c in Characteristic.notifying {  // in a fixed order: a seed replays the same month
            if let socket = subscriptions[c]?.acquired { hangUp(socket) }
        }
        subscriptions = [:]
        onLinkLost(reason)
        let lost = generation
        clock.after(Self.linkDownGap) { [weak self] in
            guard let self, self.generation == lost, !self.linkUp, self.connectedShown else { return }
            self.connectedShown = false
            self.treeChanged()
        }
    }

    /// bluetoothd stops: the daemon sees its name go; links end and sockets hang up.
    func stop() {
        guard running else { return }
        linkLost("bluetoothd stopped")
        connectedShown = false
        running = false
        lastDBus = max(clock.now + .microseconds(300), lastDBus)
        clock.at(lastDBus) { [weak self] in self?.daemon?.bluetoothdVanished() }
    }

    /// bluetoothd is back: the daemon reads its tree.
    func start() {
        guard !running else { return }
        running = true
        treeChanged()
    }

    /// The phone withdraws AMS or offers it again (Service Changed): bluetoothd ends the
    /// service's subscriptions (acquired sockets hang up) and removes its objects, or adds them.
    func setMediaOffered(_ offered: Bool) {
        guard offered != mediaOffered else { return }
        mediaOffered = offered
        if !offered {
            for c in [Characteristic.remoteCommand, .entityUpdate] {
                if let socket = subscriptions[c]?.acquired { hangUp(socket) }
                subscriptions[c] = nil
            }
            phone.withdrawMedia()
        }
        treeChanged()
    }

    /// A characteristic whose object is not in the tree now.
    private func gone(_ c: Characteristic) -> Bool {
        !mediaOffered && (c == .remoteCommand || c == .entityUpdate || c == .entityAttribute)
    }

    static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"

    // MARK: Calls

    /// A GATT call of the daemon's; `reply` gets its outcome (and the socket of an AcquireNotify).
    func call(_ call: GattCall, reply: @escaping (DaemonModel, CallOutcome, SocketID?) -> Void) {
        fromDaemon { [self] in
            guard running else { return answer(reply, Self.failure("org.freedesktop.DBus.Error.ServiceUnknown", "The name is not activatable")) }
            guard let c = Characteristic(path: call.characteristic), c.notifies else {
                return answer(reply, Self.failure("org.bluez.Error.NotSupported", "Operation is not supported"))
            }
            guard !gone(c) else { return answer(reply, Self.failure(Self.unknownObject, "Unknown object '\(c.path)'")) }
            var sub = subscriptions[c] ?? Subscription()
            switch call {
            case .acquireNotify:
                guard linkUp else { return answer(reply, Self.notConnected) }
                if sub.acquired != nil { return answer(reply, Self.failure("org.bluez.Error.NotPermitted", "Notify acquired")) }
                if sub.client { return answer(reply, Self.failure("org.bluez.Error.InProgress", "In Progress")) }
                if rng.chance(acquireRefusal) {
                    acquireRefused += 1
                    return answer(reply, Self.failure("org.bluez.Error.NotSupported", "Operation is not supported"))
                }
                nextSocket += 1
                let socket = nextSocket
                sockets[socket] = Socket(characteristic: c)
                sub.acquired = socket
                subscriptions[c] = sub
                enable(c) { [self] ok in
                    guard ok else {
                        hangUp(socket)
                        return answer(reply, Self.notConnected)
                    }
                    guard running else { return answer(reply, Self.noReply) }
                    toDaemon { reply($0, .acquired(mtu: UInt16(MonthPhone.mtu)), socket) }
                }
            case .startNotify:
                // 5.66 answers success on a link that is down, and subscribes nothing.
                guard linkUp else { return answer(reply, .done) }
                if sub.acquired != nil { return answer(reply, Self.failure("org.bluez.Error.NotPermitted", "Notify acquired")) }
                if sub.client { return answer(reply, .done) }
                sub.client = true
                subscriptions[c] = sub
                enable(c) { [self] ok in answer(reply, ok ? .done : Self.notConnected) }
            case .stopNotify:
                if let socket = sub.acquired {  // bluetoothd ends an acquired session for whoever asks
                    release(socket)
                    answer(reply, .done)
                } else if sub.client {
                    sub.client = false
                    subscriptions[c] = sub
                    disableIfUnused(c)
                    answer(reply, .done)
                } else {
                    answer(reply, Self.failure("org.bluez.Error.Failed", "No notify session started"))
                }
            case .readNotifying:
                answer(reply, .notifying(sub.client))
            }
        }
    }

    /// Replies to a call (a bluetoothd that left the bus replies nothing: the bus says so).
    private func answer(_ reply: @escaping (DaemonModel, CallOutcome, SocketID?) -> Void, _ outcome: CallOutcome) {
        let outcome = running ? outcome : Self.noReply
        toDaemon { reply($0, outcome, nil) }
    }

    static let noReply = failure("org.freedesktop.DBus.Error.NoReply", "Message recipient disconnected from message bus without replying")

    static func failure(_ name: String, _ message: String) -> CallOutcome {
        .failed(CallError(name: name, message: message, description: "\(name): \(message)"))
    }

    static let notConnected = failure("org.bluez.Error.Failed", "Not connected")

    /// A write (with response) or read of a characteristic, for a session's request.
    func request(_ request: GattRequest, reply: @escaping (DaemonModel, GattResult) -> Void) {
        fromDaemon { [self] in
            guard running else { return toDaemon { reply($0, .failed("org.freedesktop.DBus.Error.ServiceUnknown")) } }
            guard linkUp else { return toDaemon { reply($0, .failed("org.bluez.Error.Failed: Not connected")) } }
            let uuid: CharacteristicUUID = switch request {
            case .write(let uuid, _), .read(let uuid): uuid
            }
            if let c = Characteristic(uuid: uuid), gone(c) { return toDaemon { reply($0, .failed("\(Self.unknownObject)")) } }
            let att: ATTRequest
            switch request {
            case .write(let uuid, let bytes):
                guard let c = Characteristic(uuid: uuid) else { return toDaemon { reply($0, .failed("no such characteristic")) } }
                att = .write(c, bytes)
            case .read(let uuid):
                guard let c = Characteristic(uuid: uuid) else { return toDaemon { reply($0, .failed("no such characteristic")) } }
                att = .read(c)
            }
            send(att) { [self] answer in
                let result: GattResult = switch answer {
                case _ where !running: .failed("org.freedesktop.DBus.Error.NoReply")
                case .written?: .written
                case .value(let bytes)?: .read(bytes)
                case .error(let code)?: .attError(code)
                case nil: .failed("org.bluez.Error.Failed: Not connected")
                }
                toDaemon { reply($0, result) }
            }
        }
    }

    // MARK: Sockets

    /// The daemon reads the socket now (`keepSocket`): what waited in it arrives.
    func daemonReads(_ id: SocketID) {
        guard var socket = sockets[id] else { return }
        socket.read = true
        let waiting = socket.buffer
        socket.buffer = []
        sockets[id] = socket
        for bytes in waiting { deliver(bytes, on: id) }
        if socket.hungUp { deliverHangUp(id) }
    }

    /// The daemon closed its end (a reader cancelled, a socket not kept): bluetoothd sees the
    /// hang-up and releases the subscription if the socket is still the characteristic's.
    func daemonCloses(_ id: SocketID) {
        guard sockets[id] != nil else { return }
        sockets[id]?.read = false
        clock.after(.microseconds(50)) { [weak self] in self?.release(id) }
    }

    private func release(_ id: SocketID) {
        guard let socket = sockets[id] else { return }
        let c = socket.characteristic
        if subscriptions[c]?.acquired == id {
            subscriptions[c]?.acquired = nil
            disableIfUnused(c)
        }
        hangUp(id)
    }

    /// bluetoothd closes its end: end of file for the daemon's reader, after what waits in it.
    private func hangUp(_ id: SocketID) {
        guard var socket = sockets[id], !socket.hungUp else { return }
        socket.hungUp = true
        sockets[id] = socket
        if socket.read { deliverHangUp(id) } else if socket.buffer.isEmpty { sockets[id] = nil }
    }

    private func deliver(_ bytes: [UInt8], on id: SocketID) {
        clock.after(.microseconds(50)) { [weak self] in
            guard let self, self.sockets[id]?.read == true else { return }
            self.daemon?.socketValue(id, bytes)
        }
    }

    private func deliverHangUp(_ id: SocketID) {
        clock.after(.microseconds(60)) { [weak self] in
            guard let self, let socket = self.sockets.removeValue(forKey: id), socket.read else { return }
            self.daemon?.socketHungUp(id)
        }
    }

    // MARK: The CCCDs

    /// The first subscription of `c` on this link: writes its CCCD on, then `done(true)`.
    private func enable(_ c: Characteristic, done: @escaping (Bool) -> Void) {
        if subscriptions[c]?.cccdOn == true { return done(true) }
        subscriptions[c, default: Subscription()].cccdOn = true
        send(.writeCCCD(c, on: true)) { answer in done(answer != nil) }
    }

    /// The last subscription of `c` went: its CCCD off.
    private func disableIfUnused(_ c: Characteristic) {
        guard let sub = subscriptions[c], sub.acquired == nil, !sub.client, sub.cccdOn else { return }
        subscriptions[c]?.cccdOn = false
        send(.writeCCCD(c, on: false)) { _ in }
    }

    // MARK: The air

    /// Queues an ATT request; one is on the air at a time.
    private func send(_ request: ATTRequest, done: @escaping (ATTAnswer?) -> Void) {
        queue.append((request, done))
        sendNext()
    }

    private func sendNext() {
        guard outstanding == nil, linkUp, !queue.isEmpty else { return }
        let (request, done) = queue.removeFirst()
        requestNumber += 1
        let number = requestNumber, link = generation
        outstanding = (number, done)
        let sent = clock.now
        lastUplink = max(clock.now + rng.duration(.milliseconds(5), .milliseconds(25)), lastUplink)
        clock.at(lastUplink) { [weak self] in
            guard let self, self.generation == link else { return }
            let (answer, then) = self.phone.handle(request)
            guard let answer else {
                // Never answered: bluetoothd ends the link when its ATT timeout runs out.
                return self.clock.at(sent + Self.attTimeout) { [weak self] in
                    guard let self, self.generation == link, self.outstanding?.number == number else { return }
                    self.attTimeouts += 1
                    self.linkLost("ATT timeout")
                }
            }
            self.downlink(link) { $0.answered(number, answer) }
            for (c, bytes) in then { self.downlink(link) { $0.arrived(c, bytes) } }
        }
    }

    private func answered(_ number: UInt64, _ answer: ATTAnswer) {
        guard let current = outstanding, current.number == number else { return }
        outstanding = nil
        current.done(answer)
        sendNext()
    }

    /// Something the phone sends reaches bluetoothd after the air's latency, in order.
    private func downlink(_ link: UInt64, _ body: @escaping (MonthBluetoothd) -> Void) {
        lastDownlink = max(clock.now + rng.duration(.milliseconds(5), .milliseconds(25)), lastDownlink)
        clock.at(lastDownlink) { [weak self] in
            guard let self, self.generation == link, self.linkUp else { return }
            body(self)
        }
    }

    private func fromPhone(_ c: Characteristic, _ bytes: [UInt8]) {
        downlink(generation) { $0.arrived(c, bytes) }
    }

    /// A value of the phone's reached bluetoothd: to the acquired socket and to the StartNotify session.
    private func arrived(_ c: Characteristic, _ bytes: [UInt8]) {
        guard let sub = subscriptions[c] else { return }
        if let id = sub.acquired, var socket = sockets[id], !socket.hungUp {
            if socket.read {
                deliver(bytes, on: id)
            } else {
                socket.buffer.append(bytes)
                sockets[id] = socket
            }
        }
        if sub.client {
            let path = c.path
            toDaemon { $0.signal(path, bytes) }
        }
    }

    /// What bluetoothd holds: open sockets, subscriptions, queued ATT requests.
    var tableSizes: [(name: String, count: Int)] {
        [("sockets", sockets.count), ("subscriptions", subscriptions.count), ("ATT queue", queue.count + (outstanding == nil ? 0 : 1))]
    }
}
