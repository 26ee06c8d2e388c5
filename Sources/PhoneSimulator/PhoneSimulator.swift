import ANCS
public import DBus
import EventLoop
import Dispatch
import JSON
import Synchronization

/// Why the simulator could not start or had to stop.
public enum SimulatorError: Error, Sendable, CustomStringConvertible {
    /// Another connection owns `org.bluez`.
    case nameTaken(String)
    /// A bus call failed.
    case bus(String)
    /// A `wait_subscribed` step timed out.
    case timeout(String)

    public var description: String {
        switch self {
        case .nameTaken(let owner): "org.bluez is already owned (\(owner))"
        case .bus(let message), .timeout(let message): message
        }
    }
}

/// A simulated bluetoothd 5.66 with one adapter and one or more iPhones that speak ANCS.
///
/// All state sits behind one mutex, and every change that shows on D-Bus runs on the bus
/// connection's loop (method handlers do; scenario steps hop there with `simPerform`), so
/// the objects, signals and replies a client sees are always in one consistent order.
/// Notification values for each characteristic of each phone leave through their own
/// serial outbox, after the method reply that caused them.
public final class PhoneSimulator: Sendable {
    public let settings: ScenarioSettings
    let busAddress: BusAddress
    let log: @Sendable (String) -> Void
    let timeline: Timeline?
    /// The `--events` log: what the phones did, for an oracle (docs/simulator.md).
    let events: Timeline?
    let state: Mutex<SimState>
    let socketQueue = DispatchQueue(label: "ancs-phone-sim.sockets")
    /// The loop every bus connection of the simulator runs on, and the outboxes with it: a
    /// Control Point write, the response it queues and the datagrams that carry it are handled
    /// on one thread, with no hop in between. (Nil only if no loop could be made: `start`
    /// then fails.)
    let loop: EventLoop?
    /// `outboxes[device][i]` carries the values of `PhoneCharacteristic.notifying[i]`: the
    /// Notification Source's, the Data Source's, AMS's Remote Command's and Entity Update's.
    let outboxes: [[Outbox]]
    /// How long the timeline and events-log lines of the values sent wait in memory before
    /// they are written (by a timer on the loop, not on the send path).
    let logFlushDelay: Duration
    /// A flush of those lines is scheduled.
    private let logFlushScheduled = Atomic<Bool>(false)

    /// `logFlushDelay`: how long after a value is sent its timeline and events-log lines may
    /// still be in memory (they are all written at an `end` step and at `stop`).
    public init(
        settings: ScenarioSettings, bus: BusAddress, timeline: Timeline? = nil, events: Timeline? = nil,
        logFlushDelay: Duration = .milliseconds(5), log: @escaping @Sendable (String) -> Void = standardErrorLog
    ) {
        self.logFlushDelay = logFlushDelay
        self.settings = settings
        self.busAddress = bus
        self.timeline = timeline
        self.events = events
        self.log = log
        let now = ContinuousClock.now
        state = Mutex(SimState(devices: settings.devices.map { device in
            var d = DeviceState(settings: device, apps: settings.apps, policy: device.ios ?? settings.ios)
            if d.connected { _ = d.addOtherPrograms(settings.otherNotifyClients) }
            if settings.ams { d.media = MediaState(player: MediaPlayer(settings.media, now: now)) }
            return d
        }))
        outboxes = settings.devices.map { _ in PhoneCharacteristic.notifying.map { _ in Outbox() } }
        loop = try? EventLoop(name: "phone-sim")
    }

    // MARK: Lifecycle

    /// Connects to the bus, exports the BlueZ tree and takes the name `org.bluez`.
    public func start() async throws {
        guard let loop else { throw SimulatorError.bus("cannot start the simulator's event loop") }
        startOutboxes(loop)
        try await comeUp()
    }

    /// Releases the name, closes every socket and the connection, stops the outboxes.
    public func stop() async {
        await stopNoise()
        let (connection, wasStopped) = state.withLock { s -> (DBusConnection?, Bool) in
            let wasStopped = s.stopped
            s.stopped = true
            for i in s.devices.indices { s.devices[i].dropSubscriptions() }
            defer { s.connection = nil }
            return (s.connection, wasStopped)
        }
        if let connection {
            _ = try? await connection.releaseName(BlueZ.busName)
            await connection.close()
        }
        // What is queued is dropped, and a `slow` pause or a wait for socket room ends at once.
        for row in outboxes { for outbox in row { outbox.finish() } }
        if let loop, !wasStopped {
            // A drain the loop is running now finishes before the loop stops.
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in loop.execute { done.resume() } }
            loop.shutdown()
        }
        flushLogs()
    }

    /// The unique bus name the simulator currently has, if connected.
    public var uniqueName: String? { state.withLock { $0.connection?.uniqueName } }

    func connection() -> DBusConnection? { state.withLock { $0.connection } }

    private func comeUp() async throws {
        let conn: DBusConnection
        do {
            conn = try await DBusConnection.connect(to: busAddress, loop: loop)
        } catch {
            throw SimulatorError.bus("cannot connect to the bus: \(error)")
        }
        do {
            _ = try await conn.subscribe(to: .nameOwnerChanged()) { [weak self, weak conn] signal in
                guard let self, let conn, let change = try? NameOwnerChanged(signal),
                      change.name.hasPrefix(":"), change.newOwner == nil
                else { return }
                conn.assumeIsolated { self.clientVanished(change.name, $0) }
            }
            try await conn.simPerform { c in try self.exportAll(c) }
            state.withLock { $0.connection = conn }
            let reply = try await conn.requestName(BlueZ.busName, flags: [.doNotQueue])
            guard reply == .primaryOwner || reply == .alreadyOwner else {
                let owner = (try? await conn.nameOwner(BlueZ.busName)) ?? nil
                throw SimulatorError.nameTaken(owner ?? "unknown owner")
            }
            log("owns org.bluez as \(conn.uniqueName); \(settings.devices.count) phone(s)")
        } catch {
            state.withLock { if $0.connection === conn { $0.connection = nil } }
            await conn.close()
            if let e = error as? SimulatorError { throw e }
            throw SimulatorError.bus("cannot set up org.bluez: \(error)")
        }
    }

    /// Like a bluetoothd restart: the name and every object vanish, sockets close, links drop;
    /// after `downtime` the name is owned again (by a new connection) and the tree re-exported,
    /// with the phones that were connected connected again in a new ANCS session.
    func restartBlueZ(downtime: Double) async throws {
        if let old = connection() {
            await old.simPerform { _ in
                self.state.withLock { s in
                    s.connection = nil
                    for i in s.devices.indices { s.devices[i].dropSubscriptions() }
                }
            }
            note(nil, "bluez", ["up": .bool(false)])
            _ = try? await old.releaseName(BlueZ.busName)
            await old.close()
            forgetRegistrations()
            log("bluetoothd stopped")
        }
        try await Task.sleep(for: .seconds(downtime))
        let sessions = state.withLock { s in
            for i in s.devices.indices where s.devices[i].connected {
                s.devices[i].newSession(renumber: settings.renumberOnConnect)
            }
            do {
                for i in s.devices.indices where strict(i) {
                    s.devices[i].hid.watched = []
                    if s.devices[i].bonded {
                        // The new bluetoothd loads the bond: the phone is dev_<identity>.
                        s.devices[i].paths = DevicePaths(address: s.devices[i].address)
                    } else if !s.devices[i].connected {
                        // Temporary devices are not stored.
                        s.devices[i].present = false
                        s.devices[i].addressUsed = false
                    }
                }
            }
            return s.devices.map { $0.connected ? $0.session : nil }
        }
        // Noted before the name is back, so a client can never react to it before the log has it.
        note(nil, "bluez", ["up": .bool(true)])
        for (device, session) in sessions.enumerated() {
            if let session { note(device, "link", ["up": .bool(true), "session": .int(Int(session))]) }
        }
        try await comeUp()
    }

    /// Appends one record to the `--events` log: `{"t_ns", "kind", "dev"?, fields…}`.
    /// A `deferred` record waits for the next `flush` (see `Timeline`).
    func note(_ device: Int?, _ kind: String, _ fields: JSONObject, at t: UInt64 = monotonicNanoseconds(), deferred: Bool = false) {
        guard let events else { return }
        var record: JSONObject = ["t_ns": .int(Int(t)), "kind": .string(kind)]
        if let device { record.append("dev", .int(device)) }
        for (key, value) in fields { record.append(key, value) }
        events.record(record, deferred: deferred)
    }

    // MARK: Outboxes

    private func startOutboxes(_ loop: EventLoop) {
        for (device, row) in outboxes.enumerated() {
            for (index, outbox) in row.enumerated() {
                let characteristic = PhoneCharacteristic.notifying[index]
                outbox.start { [weak self] in
                    guard let self else { return }
                    loop.execute { self.drain(outbox, device: device, characteristic: characteristic, loop) }
                }
            }
        }
    }

    func outbox(_ device: Int, _ characteristic: PhoneCharacteristic) -> Outbox {
        switch characteristic {
        case .notificationSource: outboxes[device][0]
        case .dataSource: outboxes[device][1]
        case .remoteCommand: outboxes[device][2]
        // Nothing is ever queued for the characteristics that do not notify.
        case .entityUpdate, .controlPoint, .entityAttribute: outboxes[device][3]
        }
    }

    /// Items one drain handles before it lets the loop's other work (a Control Point write
    /// waiting on the bus) have a turn.
    private static let drainBatch = 64

    /// Sends what `outbox` holds, in order, on the loop. Stops at a `pause` or a full socket
    /// and goes on after it on a timer. The timeline and events lines of the values sent wait
    /// in memory for `flushLogs`, `logFlushDelay` later.
    private func drain(_ outbox: Outbox, device: Int, characteristic: PhoneCharacteristic, _ loop: EventLoop) {
        // Made only when the drain goes on later (most drains empty their outbox).
        func again() -> @Sendable () -> Void {
            { [weak self] in self?.drain(outbox, device: device, characteristic: characteristic, loop) }
        }
        for _ in 0..<Self.drainBatch {
            guard let item = outbox.first() else { return }
            switch item {
            case .value(let bytes, let session), .noise(let bytes, let session):
                guard let conn = connection() else { break }
                let noted = if case .value = item { true } else { false }
                if deliver(bytes, session: session, device: device, characteristic: characteristic, noted: noted, conn) == .wouldBlock {
                    // The client is not reading its socket yet: wait rather than drop (see docs).
                    return loop.after(.microseconds(500), again())
                }
            case .pause(let seconds, let session):
                outbox.removeFirst()
                guard state.withLock({ $0.devices[device].session == session }) else { continue }
                return loop.after(.seconds(seconds), again())
            case .disconnect(let session):
                guard let conn = connection() else { break }
                conn.assumeIsolated { c in
                    guard self.state.withLock({ $0.devices[device].session == session }) else { return }
                    self.log("\(self.settings.devices[device].name): link lost in the middle of a response")
                    self.disconnect(device, c)
                }
            }
            outbox.removeFirst()
        }
        loop.execute(again())
    }

    enum Delivery: Equatable { case sent, dropped, wouldBlock }

    /// Sends one GATT notification value the way the client subscribed: a datagram on the
    /// acquired socket, or a PropertiesChanged of `Value`. Runs on the connection's loop. A
    /// value not `noted` (`garbage`'s) gets no timeline or events line.
    private func deliver(
        _ bytes: [UInt8], session: UInt64, device: Int, characteristic: PhoneCharacteristic, noted: Bool = true, _ c: DBusConnection
    ) -> Delivery {
        enum Target { case none, socket(NotifySocket), signal(ObjectPath, copies: Int) }
        let sentAt = monotonicNanoseconds()
        let target = state.withLock { s -> Target in
            guard s.connection === c, s.devices[device].connected, s.devices[device].session == session else { return .none }
            // The phone dropped the subscription without telling: it sends nothing.
            if s.devices[device].silence.isSilent(characteristic) { return .none }
            // Stored properties only: a method of the phone's state would copy all of it.
            let sub = switch characteristic {
            case .dataSource: s.devices[device].dataSource
            case .remoteCommand: s.devices[device].remoteCommand
            case .entityUpdate: s.devices[device].entityUpdate
            default: s.devices[device].notificationSource
            }
            if let socket = sub.acquired { return .socket(socket) }
            // bluetoothd 5.66 emits one PropertiesChanged per StartNotify client (notify_cb).
            return sub.clients.isEmpty ? .none : .signal(s.devices[device].paths.characteristic(characteristic), copies: sub.clients.count)
        }
        switch target {
        case .none:
            return .dropped
        case .socket(let socket):
            switch socket.send(bytes) {
            case .sent: break
            case .wouldBlock: return .wouldBlock
            case .closed: return .dropped
            }
        case .signal(let path, let copies):
            do {
                try c.assumeIsolated { c in
                    for _ in 0..<copies {
                        try c.setExportedProperty(path: path, interface: BlueZ.gattCharacteristic1, name: "Value", value: .byteArray(bytes))
                    }
                }
            } catch {
                return .dropped
            }
        }
        guard noted else { return .sent }
        if characteristic == .notificationSource, timeline != nil || events != nil,
           let event = try? NotificationSourceEvent(decoding: bytes) {
            // Stamped before the send: the consumer woken by the datagram may run (and answer)
            // before this thread gets the CPU back, so a stamp taken now would be late.
            timeline?.record(uid: event.notificationUID, event: event.eventID.description, at: sentAt)
            note(device, "ns", [
                "event": .string(event.eventID.description), "uid": .int(Int(event.notificationUID)),
                "session": .int(Int(session)), "pre_existing": .bool(event.flags.contains(.preExisting)),
            ], at: sentAt, deferred: true)
            scheduleLogFlush()
        } else if characteristic.isAMS, events != nil {
            noteMediaValue(bytes, device: device, session: session, characteristic, at: sentAt)
        }
        return .sent
    }

    /// Writes the deferred timeline and events lines `logFlushDelay` from now, unless a
    /// write is already on its way (called when a line was recorded).
    private func scheduleLogFlush() {
        guard let loop,
              logFlushScheduled.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        loop.after(logFlushDelay) { [weak self] in self?.flushLogs() }
    }

    /// Writes the timeline and events lines waiting in memory (in the order they were recorded).
    func flushLogs() {
        // Cleared first: a line recorded from now on schedules a flush of its own.
        logFlushScheduled.store(false, ordering: .releasing)
        timeline?.flush()
        events?.flush()
    }

    // MARK: State changes that show on D-Bus (on the connection's loop)

    /// Applies property changes in order; objects that are gone are skipped.
    func apply(_ changes: [PropertyChange], _ c: isolated DBusConnection?) {
        // An unwrapped `isolated` optional is no longer known to be isolated: re-assert it
        // (this runs on the connection's loop, so the check passes).
        guard let c, !changes.isEmpty else { return }
        c.assumeIsolated { c in
            for change in changes {
                try? c.setExportedProperty(path: change.path, interface: change.interface, name: change.name, value: change.value)
            }
        }
    }

    /// How long `Connected` still reads true after a link dropped. bluetoothd 5.66 closes the
    /// acquired sockets (HUP) and sets `ServicesResolved` false first, and `Connected` false
    /// only after its GATT client is gone; AcquireNotify already fails with "Not connected" in
    /// between (seen on the VM's bluetoothd under load: ancsd subscribed again in that moment).
    public static let linkDownGap = Duration.milliseconds(40)

    /// Drops the link to a phone: sockets close (HUP), subscriptions end, ServicesResolved goes
    /// false, and Connected `linkDownGap` later (at once if the link comes back before).
    func disconnect(_ device: Int, _ c: isolated DBusConnection?) {
        let changes = state.withLock { s -> [PropertyChange] in
            guard s.devices[device].connected else { return [] }
            var changes = s.devices[device].dropSubscriptions()
            s.devices[device].connected = false
            s.devices[device].connectedFalsePending = true
            s.devices[device].session &+= 1
            let path = s.devices[device].paths.device
            changes.append(PropertyChange(path, BlueZ.device1, "ServicesResolved", .bool(false)))
            note(device, "link", ["up": .bool(false), "session": .int(Int(s.devices[device].session))])
            return changes
        }
        guard !changes.isEmpty else { return }
        log("\(settings.devices[device].name): disconnected")
        apply(changes, c)
        if let loop {
            loop.after(Self.linkDownGap) { [weak self] in
                guard let self, let conn = self.connection() else { return }
                conn.assumeIsolated { c in self.apply(self.connectedFalse(device), c) }
            }
        } else {
            apply(connectedFalse(device), c)
        }
        if !state.withLock({ $0.devices[device].bonded }) { scheduleTemporaryRemoval(device) }
    }

    /// `Connected` false, if a dropped link still owes it.
    func connectedFalse(_ device: Int) -> [PropertyChange] {
        state.withLock { s in
            guard s.devices[device].connectedFalsePending else { return [] }
            s.devices[device].connectedFalsePending = false
            return [PropertyChange(s.devices[device].paths.device, BlueZ.device1, "Connected", .bool(false))]
        }
    }

    /// Brings the link back: a new ANCS session, UIDs renumbered if the settings say so.
    func connect(_ device: Int, _ c: isolated DBusConnection?) {
        apply(connectedFalse(device), c)
        let changes = state.withLock { s -> [PropertyChange] in
            guard !s.devices[device].connected else { return [] }
            s.devices[device].connected = true
            s.devices[device].connectedAt = .now
            s.devices[device].newSession(renumber: settings.renumberOnConnect)
            let path = s.devices[device].paths.device
            var changes = [PropertyChange(path, BlueZ.device1, "Connected", .bool(true)),
                           PropertyChange(path, BlueZ.device1, "ServicesResolved", .bool(true))]
            // Other programs subscribe again at once: the phone replays its notifications then.
            let others = s.devices[device].addOtherPrograms(settings.otherNotifyClients)
            if !others.isEmpty { activated(&s.devices[device], .notificationSource, device) }
            changes += others
            note(device, "link", ["up": .bool(true), "session": .int(Int(s.devices[device].session))])
            return changes
        }
        if !changes.isEmpty { log("\(settings.devices[device].name): connected (new ANCS session)") }
        apply(changes, c)
    }

    /// A client left the bus: its notify sessions end, as bluetoothd's disconnect watch does.
    func clientVanished(_ name: String, _ c: isolated DBusConnection) {
        dropRegistrations(of: name)
        let changes = state.withLock { s -> [PropertyChange] in
            var changes: [PropertyChange] = []
            for i in s.devices.indices {
                for characteristic in PhoneCharacteristic.notifying {
                    changes += s.devices[i].endSession(of: name, characteristic)
                }
            }
            return changes
        }
        apply(changes, c)
    }

    /// The client closed its end of an acquired socket.
    func socketClosed(_ socket: NotifySocket) {
        // Released at once, under the lock, whether bluetoothd is up or not: a socket that the
        // client closed while bluetoothd was restarting stayed acquired for good before, and
        // every later AcquireNotify failed with "Notify acquired" (soak seed 345850489).
        let changes = state.withLock { s -> [PropertyChange] in
            for i in s.devices.indices {
                for characteristic in PhoneCharacteristic.notifying
                where s.devices[i].subscription(characteristic).acquired === socket {
                    return s.devices[i].releaseAcquired(characteristic)
                }
            }
            return []
        }
        guard !changes.isEmpty, let conn = connection() else { return }
        Task(executorPreference: loop) {
            await conn.simPerform { c in self.apply(changes, c) }
        }
    }

    /// Queues a Notification Source event if a client is subscribed (the phone keeps
    /// notifications while nobody is; they are replayed at subscription). Call under the lock.
    /// (`inout` only so that the phone's state is not copied for the call.)
    static func queueEvent(_ event: NotificationSourceEvent, _ d: inout DeviceState, _ outbox: Outbox) {
        guard d.connected, d.subscription(.notificationSource).isActive else { return }
        outbox.send(.value(event.encoded, session: d.session))
    }
}

/// One property change to show on D-Bus.
struct PropertyChange: Sendable {
    let path: ObjectPath
    let interface: InterfaceName
    let name: String
    let value: DBusValue

    init(_ path: ObjectPath, _ interface: InterfaceName, _ name: String, _ value: DBusValue) {
        self.path = path
        self.interface = interface
        self.name = name
        self.value = value
    }
}

/// A serial queue of notification values for one characteristic of one phone. The simulator
/// drains it on its loop (`PhoneSimulator.drain`), in order, one item after another: a
/// `pause` or a socket that is full holds back everything behind it.
///
/// Why not an AsyncStream and a consumer task: each value then cost a task resumption, an
/// enqueue on the loop and an actor hop, about a tenth of the simulator's CPU per notification
/// in `make bench`. Here a value queued on the loop costs an array append, and the drain it
/// schedules (one per batch) runs right after the job that queued it, on the same thread.
final class Outbox: Sendable {
    enum Item: Sendable {
        case value([UInt8], session: UInt64)
        /// A `garbage` value: sent as a value is, and left out of the timeline and events log
        /// (an 8-byte one would read there as a Notification Source event).
        case noise([UInt8], session: UInt64)
        case pause(Double, session: UInt64)
        case disconnect(session: UInt64)
    }

    private struct Queue {
        var items: [Item] = []
        /// Index of the first item not yet taken.
        var head = 0
        /// A drain is scheduled, running or waiting on a timer: `send` need not schedule one.
        var scheduled = false
        var finished = false
        /// Schedules a drain on the simulator's loop; nil until the simulator starts.
        var schedule: (@Sendable () -> Void)?
    }

    private let queue = Mutex(Queue())

    /// Appends an item; schedules a drain unless one is already on its way.
    func send(_ item: Item) {
        let schedule = queue.withLock { q -> (@Sendable () -> Void)? in
            guard !q.finished else { return nil }
            q.items.append(item)
            guard !q.scheduled, let schedule = q.schedule else { return nil }
            q.scheduled = true
            return schedule
        }
        schedule?()
    }

    /// Starts draining with `schedule` (what is already queued is drained at once).
    func start(_ schedule: @escaping @Sendable () -> Void) {
        let now = queue.withLock { q -> Bool in
            q.schedule = schedule
            guard !q.finished, !q.scheduled, q.head < q.items.count else { return false }
            q.scheduled = true
            return true
        }
        if now { schedule() }
    }

    /// The next item, left in the queue; nil when there is none, and then the drain is over
    /// (the next `send` schedules a new one).
    func first() -> Item? {
        queue.withLock { q in
            guard !q.finished, q.head < q.items.count else {
                q.scheduled = false
                return nil
            }
            return q.items[q.head]
        }
    }

    /// Removes the item `first` returned.
    func removeFirst() {
        queue.withLock { q in
            guard q.head < q.items.count else { return }
            q.head += 1
            if q.head == q.items.count {
                q.items.removeAll(keepingCapacity: true)
                q.head = 0
            } else if q.head >= 1024 {
                q.items.removeFirst(q.head)
                q.head = 0
            }
        }
    }

    /// Drops what is queued and takes nothing more.
    func finish() {
        queue.withLock { q in
            q.finished = true
            q.items = []
            q.head = 0
        }
    }
}
