import ANCS
public import ANCSRuntime
import ANCSSession
import BlueZ
import DBus
import Dispatch
public import EventLoop

/// The long-running part of `ancsd run`: follows bluetoothd's object tree, runs an ANCS session
/// for every bonded, connected phone that exposes ANCS, and sends what they say to the outputs.
///
/// It survives phones walking away and coming back and bluetoothd restarting; it ends when its
/// task is cancelled (SIGTERM) or the bus goes away.
///
/// Everything it does runs on one `DaemonExecutor` (see there for why): the actor's own jobs,
/// the notification sockets, the session timers and every task it starts. An idle daemon has
/// no timer armed and nothing on Swift's global executor, so it makes no wakeups.
public actor Daemon {
    public private(set) var options: DaemonOptions
    var output: OutputRouter
    private let logger: Logger
    private let notifier: SystemdNotifier
    private var statusPending = false
    /// The status line systemd has, to send only changes.
    private var sentStatus: String?
    private var connection: DBusConnection?
    var tree = BlueZObjectTree()
    var links: [ObjectPath: PhoneLink] = [:]
    var nextLinkID: UInt64 = 0
    /// True while bluetoothd owns its bus name.
    var bluetoothdPresent = false
    /// When the daemon started, for `status`, on its loop's clock (as every time it reads).
    let started: ContinuousClock.Instant
    /// The control socket, once `attach(control:)` gave it.
    private var control: ControlServer?
    private var ignoredDevices: Set<ObjectPath> = []
    /// The next pause before subscribing again to a phone whose subscription failed, by device
    /// (milliseconds); forgotten once a subscription succeeds or the phone disconnects.
    private var subscribeRetryMilliseconds: [ObjectPath: Int] = [:]
    /// Phones whose notification socket closed while BlueZ still reported them connected. On a
    /// link loss bluetoothd closes the sockets a moment before `ServicesResolved` and then
    /// `Connected` turn false; a session started in that moment would subscribe on a link that
    /// is gone (AcquireNotify fails "Not connected", StartNotify only queues). No session starts
    /// for them until `socketClosedPause` has passed.
    private var pausedAfterSocketClosed: Set<ObjectPath> = []
    /// How long a phone whose socket closed waits before a new session; by then a lost link
    /// shows in BlueZ's properties, and one that stayed up (the socket was ended by another
    /// program's StopNotify) gets its session again.
    static let socketClosedPause = Duration.milliseconds(500)
    /// The advertisement and agent that let paired phones come back (nil with `--no-advertise`).
    private var presence: Presence?
    /// The adapters holding a paired iPhone's bond (BlueZ has seen ANCS on it, allowed by the
    /// options): only while there is one does `presence` register anything, and on one of them.
    private var phoneAdapters: Set<ObjectPath> = []
    /// Bonded devices on which ANCS was seen: they stay paired iPhones while their ANCS service
    /// is away (iOS withdraws it with Service Changed, e.g. while the phone re-registers it),
    /// so the advertisement they reconnect to is not withdrawn under them.
    private var ancsSeen: Set<ObjectPath> = []
    private var pairedPhoneKnown: Bool { !phoneAdapters.isEmpty }
    private var onReady: (@Sendable () -> Void)?
    private let executor: DaemonExecutor
    /// What each phone has shown, for `seen_before` and `--replays`.
    let seen: SeenStore

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// Counters for status reports.
    public private(set) var eventsEmitted = 0

    /// The version `ancsd --version` and `status` report.
    public static let version = ancsdVersion

    public init(
        options: DaemonOptions, output: OutputRouter, logger: Logger, notifier: SystemdNotifier = SystemdNotifier(),
        executor: DaemonExecutor, onReady: (@Sendable () -> Void)? = nil
    ) {
        self.executor = executor
        started = executor.now
        self.options = options
        self.output = output
        self.logger = logger
        self.notifier = notifier
        self.onReady = onReady
        seen = SeenStore(directory: options.stateDirectory, logger: logger)
    }

    /// A line for `systemctl status`: "2 phones connected, 14 notifications".
    public var statusLine: String {
        let phones = links.values.filter { $0.state == .running }
        let notifications = phones.reduce(0) { $0 + $1.session.notificationCount }
        let phoneText = phones.count == 1 ? "1 phone connected" : "\(phones.count) phones connected"
        let notificationText = notifications == 1 ? "1 notification" : "\(notifications) notifications"
        guard phones.isEmpty else { return "\(phoneText), \(notificationText)" }
        if !bluetoothdPresent { return "waiting for bluetoothd" }
        if tree.adapters.isEmpty { return "waiting for a Bluetooth adapter" }
        if !pairedPhoneKnown { return "waiting for a paired iPhone (ancsd pair)" }
        return "waiting for the phone, 0 notifications"
    }

    /// Serves requests from `control` (docs/control.md).
    public func attach(control server: ControlServer) {
        control = server
    }

    /// Sends every later event to a control client that asked to subscribe.
    func subscribe(_ client: ControlServer.ClientID) {
        guard let control else { return }
        output.attach(ControlSubscriber(server: control, client: client), key: ControlSubscriber.key(client))
    }

    /// Asks the phone to perform an action; returns its answer.
    func performAction(_ action: ActionID, on uid: UInt32, link: PhoneLink) async -> ActionOutcome {
        await withCheckedContinuation { continuation in
            link.actionWaiters[PhoneLink.ActionKey(uid: uid, action: action.rawValue), default: []].append(continuation)
            perform(link.session.performAction(action, on: uid, now: link.now), on: link)
        }
    }

    /// Fetches a notification's whole message again; the refreshed notification, or nil if it
    /// went away or the phone did not answer within 10 s.
    func fetchFullMessage(_ uid: UInt32, on link: PhoneLink) async -> PhoneNotification? {
        let linkID = link.id
        executor.after(.seconds(10), onLoop { daemon in
            guard let link = daemon.links.values.first(where: { $0.id == linkID }) else { return }
            for waiter in link.eventWaiters.removeValue(forKey: uid) ?? [] { waiter.resume(returning: link.session.notification(uid: uid)) }
        })
        return await withCheckedContinuation { continuation in
            link.eventWaiters[uid, default: []].append(continuation)
            perform(link.session.fetchFullMessage(of: uid, now: link.now), on: link)
        }
    }

    /// A handler for the loop (a timer's, a descriptor's, a D-Bus reply's) that runs `body` on
    /// this actor, while it exists. The loop is the actor's executor, so a handler it runs is on
    /// the actor already: `assumeIsolated` checks that rather than hopping (no task, no turn).
    nonisolated func onLoop(_ body: @escaping @Sendable (isolated Daemon) -> Void) -> @Sendable () -> Void {
        { [weak self] in self?.assumeIsolated(body) }
    }

    /// `onLoop(_:)` for a handler that is given a value.
    nonisolated func onLoop<Value: Sendable>(
        _ body: @escaping @Sendable (isolated Daemon, Value) -> Void
    ) -> @Sendable (Value) -> Void {
        { [weak self] value in self?.assumeIsolated { body($0, value) } }
    }

    /// How long the daemon has run, on its loop's clock.
    var uptime: Duration { executor.now - started }

    /// Answers the watchdog: proves the daemon's executor is not wedged.
    public func ping() -> Bool { true }

    /// Applies new settings without dropping the phones it may keep (SIGHUP). The reload has
    /// already refused settings that take effect only at start (the settings table's `.restart`
    /// keys: bus, state-dir, advertise, …), so the new `options` differ only in what applies live.
    public func update(options kept: DaemonOptions, output newOutput: OutputRouter?) {
        if kept.accessory != options.accessory, let presence {
            let accessory = kept.accessory
            Task(executorPreference: executor) { await presence.setAccessory(accessory) }
        }
        options = kept
        for link in links.values {
            link.session.updateFilter(kept.session.filter)
            link.gate.policy = kept.replays
            perform(link.session.updateChecks(
                aliveCheckInterval: kept.session.aliveCheckInterval, resubscribeAfter: kept.session.resubscribeAfter, now: link.now), on: link)
        }
        if let newOutput, newOutput !== output {
            output.moveAttached(to: newOutput)
            output.stop(keeping: newOutput)
            output = newOutput
            newOutput.start(OutputContext(actions: self, executor: executor))
        }
        ignoredDevices = []
        reconcile()
        scheduleStatus()
    }

    /// Sends the status line to systemd, at most once a second (only under systemd, and only
    /// after something changed: no wakeups otherwise).
    private func scheduleStatus() {
        guard notifier.isActive, !statusPending, statusLine != sentStatus else { return }
        statusPending = true
        executor.after(.seconds(1), onLoop { $0.sendStatus() })
    }

    private func sendStatus() {
        statusPending = false
        let line = statusLine
        guard line != sentStatus else { return }
        sentStatus = line
        notifier.status(line)
    }

    /// The phones with a running session, by address.
    public var connectedPhones: [String] {
        links.values.filter { $0.state == .running }.map(\.device.address).sorted()
    }

    /// Runs until cancelled; throws if the bus cannot be reached or goes away. Cancelled during
    /// start-up (SIGTERM while connecting), it returns as a stop, not an error.
    public func run() async throws {
        // Whoever calls, the nonisolated code this runs (the bus library's, the task group's
        // children) stays on the daemon's executor rather than Swift's global one.
        do {
            try await withTaskExecutorPreference(executor) {
                try await self.serve()
            }
        } catch is CancellationError where Task.isCancelled {
            logger.debug("stopped during start-up")
        }
    }

    private func serve() async throws {
        output.start(OutputContext(actions: self, executor: executor))
        // The connection shares the daemon's queue: a Control Point write and its reply cost no
        // thread switch inside ancsd.
        let connection = try await DBusConnection.connect(to: options.bus, loop: executor, activatesServices: false)
        self.connection = connection
        logger.debug("connected to the bus as \(connection.uniqueName)")
        defer { Task(executorPreference: executor) { await connection.close() } }

        // Matches first, then the tree: nothing said in between is lost.
        let bluezSignals = try await connection.signals(matching: MatchRule(type: .signal, sender: BlueZ.service))
        let ownerChanges = try await connection.signals(matching: .nameOwnerChanged(name: BlueZ.service))
        await refresh()
        sentStatus = statusLine
        notifier.ready(status: statusLine)
        onReady?()
        onReady = nil

        await withTaskGroup(of: Void.self) { group in
            group.addTask { for await signal in bluezSignals { await self.handleBlueZSignal(signal) } }
            group.addTask { for await signal in ownerChanges { await self.handleOwnerChange(signal) } }
            group.addTask { await connection.waitUntilDisconnected() }
            if options.advertise {  // pairing support: see Presence.swift
                let presence = Presence(
                    connection: connection, loop: executor, adapter: options.adapter, accessory: options.accessory, logger: logger)
                self.presence = presence
                tellPresence()
                group.addTask { await presence.run() }
            }
            await group.next()  // the bus went away, or we were cancelled
            group.cancelAll()
        }
        presence = nil
        await shutdown(reason: Task.isCancelled ? "ancsd stopped" : "the bus went away")
        if !Task.isCancelled { throw DBusError.disconnected }
    }

    // MARK: bluetoothd's tree

    /// Reads the whole tree again and reconciles the sessions with it.
    private func refresh() async {
        guard let connection else { return }
        do {
            tree = BlueZObjectTree(try await connection.getManagedObjects(destination: BlueZ.service))
            bluetoothdPresent = true
            logger.info("bluetoothd: \(tree.adapters.count) adapter(s), \(tree.devices.count) device(s)")
        } catch let error as DBusError where error.name == DBusError.Names.serviceUnknown || error.name == DBusError.Names.nameHasNoOwner {
            tree.clear()
            logger.warning("bluetoothd is not running; waiting for it")
        } catch {
            tree.clear()
            logger.warning("cannot read bluetoothd's objects: \(error)")
        }
        reconcile()
    }

    private func handleOwnerChange(_ signal: Signal) async {
        guard let change = try? NameOwnerChanged(signal), change.name == BlueZ.service.rawValue else { return }
        if change.oldOwner != nil {
            logger.warning("bluetoothd went away")
            bluetoothdPresent = false
            for path in Array(links.keys) { stopLink(at: path, reason: "bluetoothd stopped") }
            tree.clear()
            ignoredDevices = []
            scheduleStatus()  // Presence follows bluetoothd's restart by itself
        }
        if change.newOwner != nil {
            logger.info("bluetoothd is back")
            await refresh()
        }
    }

    private func handleBlueZSignal(_ signal: Signal) async {
        switch (signal.interface.rawValue, signal.member.rawValue) {
        case ("org.freedesktop.DBus.Properties", "PropertiesChanged"):
            guard let change = try? PropertiesChanged(signal) else { return }
            if change.interface == BlueZ.gattCharacteristicInterface, let value = change.changed["Value"]?.unwrapped.bytes {
                routeValue(value, from: signal.path)
                var rest = change.changed
                rest.removeValue(forKey: "Value")
                if rest.isEmpty && change.invalidated.isEmpty { return }
                tree.change(signal.path, interface: change.interface, changed: rest, invalidated: change.invalidated)
            } else {
                tree.change(signal.path, interface: change.interface, changed: change.changed, invalidated: change.invalidated)
            }
            if change.interface == BlueZ.deviceInterface { reconcile() }
        case ("org.freedesktop.DBus.ObjectManager", "InterfacesAdded"):
            guard let added = try? InterfacesAdded(signal) else { return }
            tree.add(added.object, added.interfaces)
            reconcile()
        case ("org.freedesktop.DBus.ObjectManager", "InterfacesRemoved"):
            guard let removed = try? InterfacesRemoved(signal) else { return }
            tree.remove(removed.object, removed.interfaces)
            reconcile()
        default:
            break
        }
    }

    /// Works out on which adapters a paired iPhone is known and tells `presence` when that changed.
    private func updatePresence() {
        let adapters = Set(tree.devices.compactMap { device -> ObjectPath? in
            guard device.isBonded, options.allows(address: device.address, adapterName: device.adapterName) else { return nil }
            if device.offersANCS || tree.ancsCharacteristics(of: device.path) != nil {
                ancsSeen.insert(device.path)
            } else if !ancsSeen.contains(device.path) {
                return nil
            }
            return device.adapter
        })
        guard adapters != phoneAdapters else { return }
        phoneAdapters = adapters
        tellPresence()
    }

    /// Hands `phoneAdapters` to `presence`. Each task reads the latest set when it runs, so tasks
    /// that run out of order still leave the last one in force. The task runs on the daemon's
    /// executor (a plain `Task {}` would run the `Presence` actor on Swift's global executor,
    /// whose first use starts libdispatch's 1 Hz workqueue monitor: see DaemonExecutor).
    private func tellPresence() {
        guard let presence else { return }
        Task(executorPreference: executor) { await presence.setPhoneAdapters(self.phoneAdapters) }
    }

    /// Starts sessions for the phones that should have one, stops those that should not.
    private func reconcile() {
        updatePresence()
        scheduleStatus()
        for (path, link) in links {
            guard let device = tree.device(at: path), device.connected, eligible(device) != nil,
                  tree.ancsCharacteristics(of: path) == link.characteristics
            else {
                stopLink(at: path, reason: tree.device(at: path)?.connected == true ? "ANCS is gone" : "disconnected")
                continue
            }
            if device.address != link.device.address { follow(device, on: link) }
        }
        for device in tree.devices where device.connected && links[device.path] == nil {
            guard !pausedAfterSocketClosed.contains(device.path) else {
                logger.debug("\(device.address): connected, but its notification socket closed a moment ago: a new session waits")
                continue
            }
            guard let characteristics = eligible(device) else { continue }
            startLink(device, characteristics)
        }
    }

    /// The phone's `Address` changed under a running link: BlueZ resolved the resolvable
    /// private address the phone connected with to its identity address (at bonding, the object
    /// path unchanged). Everything from now on is keyed on the new address — outputs, the seen
    /// store, `list`, `status`, MQTT topics — and a recording goes on in a file of its own named
    /// after it (the old one ends with the reason), so no file carries a private address beyond
    /// the moment BlueZ resolved it.
    private func follow(_ device: BlueZDevice, on link: PhoneLink) {
        let old = link.device.address
        logger.info("\(old) is now \(device.address) (BlueZ resolved the phone's identity address)")
        link.device = device
        if link.recorder != nil {
            link.recorder?.finish(at: link.now, reason: "the phone's address is now \(device.address)")
            link.recorder = SessionRecorder.start(device: device, options: options.recording, logger: logger)
            if link.state == .running { link.recorder?.connected(at: link.now) }
        }
    }

    /// The device's ANCS characteristics if it may be consumed; logs once why a device is not.
    private func eligible(_ device: BlueZDevice) -> ANCSCharacteristics? {
        guard options.allows(address: device.address, adapterName: device.adapterName),
              let characteristics = tree.ancsCharacteristics(of: device.path)
        else { return nil }
        guard device.isBonded else {
            if ignoredDevices.insert(device.path).inserted {
                logger.warning("ignoring \(device.address): it exposes ANCS but is not bonded")
            }
            return nil
        }
        ignoredDevices.remove(device.path)
        return characteristics
    }

    // MARK: Sessions

    private func startLink(_ device: BlueZDevice, _ characteristics: ANCSCharacteristics) {
        nextLinkID += 1
        let link = PhoneLink(
            id: nextLinkID, device: device, characteristics: characteristics, configuration: options.session, replays: options.replays,
            clock: executor)
        links[device.path] = link
        link.recorder = SessionRecorder.start(device: device, options: options.recording, logger: logger)
        let id = link.id, path = device.path
        link.tasks.append(Task(executorPreference: executor) { await self.subscribe(linkID: id, path: path) })
    }

    /// Data Source first, then Notification Source: the phone answers requests on the Data
    /// Source, and starts sending Notification Source events (replaying its backlog) at once.
    private func subscribe(linkID: UInt64, path: ObjectPath) async {
        guard let connection, let link = links[path], link.id == linkID else { return }
        let gatt = GattClient(connection: connection)
        for characteristic in [link.characteristics.dataSource, link.characteristics.notificationSource] {
            guard link.state == .subscribing else { return }
            do {
                try await enableNotifications(characteristic, on: link, gatt: gatt)
            } catch {
                guard link.state == .subscribing else { return }
                link.state = .failed("\(error)")
                retrySubscription(of: link, error: error)
                return
            }
        }
        guard link.state == .subscribing else { return }
        link.state = .running
        subscribeRetryMilliseconds[path] = nil
        // The alive check and the watch on the Notification Source start now: never before a
        // phone is connected and subscribed, so an idle daemon keeps no timer.
        defer { perform(link.session.subscribed(now: link.now), on: link) }
        let how = link.delivery.values.contains(.signals) ? "StartNotify" : "AcquireNotify"
        logger.info("\(link.device.address): connected (\(link.device.name ?? "unnamed"), \(how))")
        output.emit(.connected(device: link.device.address, name: link.device.name))
        link.recorder?.connected(at: link.now)
        scheduleStatus()
    }

    /// Subscribing failed while the phone is still connected — bluetoothd still held the
    /// notification socket of a link that had just dropped ("Notify acquired"), the link flapped
    /// under the call: the link is started afresh after a pause (0.5 s, doubling up to 30 s while
    /// it keeps failing), rather than leaving a connected phone unwatched until it reconnects.
    private func retrySubscription(of link: PhoneLink, error: any Error) {
        let path = link.device.path, linkID = link.id
        let delay = subscribeRetryMilliseconds[path] ?? 500
        subscribeRetryMilliseconds[path] = min(delay * 2, 30_000)
        logger.warning("\(link.device.address): cannot subscribe to ANCS: \(error); trying again in \(Double(delay) / 1000) s")
        executor.after(.milliseconds(delay), onLoop { $0.restartFailedLink(path: path, linkID: linkID) })
    }

    /// Ends the StartNotify sessions a failed link holds, waiting for bluetoothd's answers (a
    /// StopNotify that came after the next link's AcquireNotify would end that link's socket:
    /// bluetoothd releases an acquired socket for whoever asks), then starts the link afresh.
    private func restartFailedLink(path: ObjectPath, linkID: UInt64) {
        guard let link = links[path], link.id == linkID, case .failed = link.state else { return }
        let stale = link.delivery.compactMap { $0.value == .signals ? $0.key : nil }
        link.delivery = [:]
        let gatt = connection.map { GattClient(connection: $0) }
        Task(executorPreference: executor) {
            for characteristic in stale { try? await gatt?.stopNotify(characteristic) }
            await self.replaceFailedLink(path: path, linkID: linkID)
        }
    }

    private func replaceFailedLink(path: ObjectPath, linkID: UInt64) {
        guard let link = links[path], link.id == linkID, case .failed = link.state else { return }
        stopLink(at: path, reason: "subscribing failed")
        reconcile()
    }

    private func enableNotifications(_ characteristic: ObjectPath, on link: PhoneLink, gatt: GattClient) async throws {
        if options.preferAcquireNotify {
            do {
                let (fd, mtu) = try await gatt.acquireNotify(characteristic)
                guard link.state == .subscribing || (link.state == .running && link.renewing), let raw = fd.take() else { return }
                let isDataSource = characteristic == link.characteristics.dataSource
                let id = link.id, path = link.device.path
                // The reader runs on the daemon's loop: each datagram goes straight into the
                // session, with no task or thread in between.
                let reader = try NotificationReader(
                    fd: raw, loop: executor,
                    onValue: onLoop { $0.receive(isDataSource ? .dataSource($1) : .notificationSource($1), linkID: id, path: path) },
                    onClose: onLoop { $0.receive(.closed($1), linkID: id, path: path) })
                link.readers.append(reader)
                link.delivery[characteristic] = .acquired(mtu: mtu)
                return
            } catch is CancellationError {
                throw CancellationError()  // the link is going away: nothing to fall back to
            } catch let error as DBusError where Self.startNotifyCannotHelp(error) {
                throw error
            } catch {
                logger.debug("\(link.device.address): AcquireNotify on \(characteristic) failed (\(error)); using StartNotify")
            }
        }
        link.delivery[characteristic] = .signals  // before StartNotify: the first values may come at once
        do {
            try await gatt.startNotify(characteristic)
        } catch {
            link.delivery[characteristic] = nil  // nothing to stop later
            throw error
        }
    }

    /// AcquireNotify errors after which StartNotify is no way out: the link is gone (bluetoothd
    /// 5.66 says `Failed: Not connected`, later ones `NotConnected`), or a socket is still
    /// acquired (StartNotify refuses "Notify acquired" too). The session is retried instead.
    static func startNotifyCannotHelp(_ error: DBusError) -> Bool {
        switch (error.name, error.message) {
        case ("org.bluez.Error.Failed", "Not connected"), ("org.bluez.Error.NotConnected", _),
             ("org.bluez.Error.NotPermitted", "Notify acquired"):
            true
        default:
            false
        }
    }

    private func routeValue(_ value: [UInt8], from path: ObjectPath) {
        for link in links.values where link.receivesSignals(for: path) {
            let isDataSource = path == link.characteristics.dataSource
            let copies = link.copyFilter.copies
            let admitted = isDataSource
                ? link.copyFilter.admitDataSource(value)
                : link.copyFilter.admitNotificationSource(value, now: link.now)
            if link.copyFilter.copies != copies { reportCopies(on: link) }
            guard admitted else { continue }
            receive(isDataSource ? .dataSource(value) : .notificationSource(value), on: link)
        }
    }

    private func reportCopies(on link: PhoneLink) {
        let copies = link.copyFilter.copies
        if copies > 1 {
            logger.warning("""
                \(link.device.address): bluetoothd delivers every notification \(copies) times: another program has \
                notifications of the phone's ANCS characteristics turned on (bluetoothctl's "notify on", another ANCS \
                client); ancsd drops the copies, but closing that program is safer
                """)
        } else {
            logger.info("\(link.device.address): bluetoothd delivers every notification once again")
        }
    }

    /// What a link's socket said, if the link is still the one that opened it.
    private func receive(_ input: PhoneLink.Input, linkID: UInt64, path: ObjectPath) {
        guard let link = link(id: linkID, at: path) else { return }
        receive(input, on: link)
    }

    /// The link last found by `link(id:at:)`, while it is in `links`: almost every input and
    /// write result of a burst is one phone's, found again without hashing its path.
    private var recentLink: PhoneLink?

    /// The link with this id, if it is still the one at `path`.
    private func link(id: UInt64, at path: ObjectPath) -> PhoneLink? {
        if let recent = recentLink, recent.id == id { return recent }
        guard let link = links[path], link.id == id else { return nil }
        recentLink = link
        return link
    }

    private func receive(_ input: PhoneLink.Input, on link: PhoneLink) {
        guard link.state != .stopped else { return }
        switch input {
        case .notificationSource(let value):
            link.recorder?.received(.ns, value, at: link.now)
            perform(link.session.handleNotificationSource(value, now: link.now), on: link)
        case .dataSource(let value):
            link.recorder?.received(.ds, value, at: link.now)
            perform(link.session.handleDataSource(value, now: link.now), on: link)
        case .closed(let reason):
            logger.info("\(link.device.address): notification socket closed (\(reason))")
            let path = link.device.path
            stopLink(at: path, reason: "disconnected")
            guard tree.device(at: path)?.connected == true else { return }
            pausedAfterSocketClosed.insert(path)
            executor.after(Self.socketClosedPause, onLoop { daemon in
                daemon.pausedAfterSocketClosed.remove(path)
                daemon.logger.debug("\(path.rawValue): the pause after its closed socket is over")
                daemon.reconcile()
            })
        }
    }

    /// Carries out what a session asked for.
    ///
    /// A Control Point write goes out first, the rest in order after it: the phone then works
    /// on the next request while this formats and prints the notification that just completed.
    private func perform(_ actions: [SessionAction], on link: PhoneLink) {
        for case .writeControlPoint(let bytes) in actions {
            link.copyFilter.expectResponse(to: bytes)
            write(bytes, on: link)
        }
        for action in actions {
            switch action {
            case .writeControlPoint:
                break  // sent above
            case .emit(let event):
                if !link.eventWaiters.isEmpty {
                    let n = event.notification
                    for waiter in link.eventWaiters.removeValue(forKey: n.uid) ?? [] {
                        waiter.resume(returning: event.kind == .removed ? nil : n)
                    }
                }
                show(event, on: link)
            case .actionCompleted(let uid, let action, let outcome):
                logger.info("\(link.device.address): \(action) action on \(uid): \(outcome)")
                let key = PhoneLink.ActionKey(uid: uid, action: action.rawValue)
                if var waiters = link.actionWaiters[key], !waiters.isEmpty {
                    waiters.removeFirst().resume(returning: outcome)
                    link.actionWaiters[key] = waiters.isEmpty ? nil : waiters
                }
            case .log(let level, let message):
                logger.log(LogLevel(level), "\(link.device.address): \(message)")
                if level >= .warning { link.lastError = message }
            case .sharingChanged(let allowed):
                guard link.sharingOff == allowed else { break }
                link.sharingOff = !allowed
                output.emit(.sharing(device: link.device.address, allowed: allowed))
            case .resubscribe(let reason):
                renewSubscriptions(of: link, reason: reason)
            }
        }
        armTimer(for: link)
    }

    // MARK: Renewing the subscriptions

    /// Unsubscribes from the Notification Source and Data Source and subscribes again (Data
    /// Source first), so that bluetoothd writes the phone's CCCDs afresh: off when the last
    /// subscription of a characteristic goes, on when the first comes (docs/dbus.md, "Renewing
    /// the subscriptions"). What the phone sends from now on is a new ANCS session.
    ///
    /// At once: the notification sockets are closed and the signals no longer routed to the
    /// link, the write in flight is forgotten and the session starts afresh; then, in a task,
    /// StopNotify on each characteristic (waited for: a StopNotify that came after the new
    /// AcquireNotify would end the new socket) and the subscriptions again. A renewal that
    /// fails starts the link afresh, as a failed subscription does.
    private func renewSubscriptions(of link: PhoneLink, reason: String) {
        guard link.state == .running, !link.renewing, let connection else { return }
        link.renewing = true
        logger.info("\(link.device.address): renewing the ANCS subscriptions (\(reason))")
        for reader in link.readers { reader.cancel() }
        link.readers = []
        let previous = link.delivery
        link.delivery = [:]
        if let write = link.write { write.connection.cancelCall(write.call) }
        link.write = nil
        link.copyFilter = SignalCopyFilter()
        perform(link.session.resubscribed(now: link.now), on: link)
        let id = link.id, path = link.device.path
        let gatt = GattClient(connection: connection)
        link.tasks.append(Task(executorPreference: executor) {
            await self.resubscribe(linkID: id, path: path, previous: previous, gatt: gatt)
        })
    }

    private func resubscribe(linkID: UInt64, path: ObjectPath, previous: [ObjectPath: PhoneLink.Delivery], gatt: GattClient) async {
        guard let link = link(id: linkID, at: path) else { return }
        var shared: [String] = []
        for characteristic in [link.characteristics.notificationSource, link.characteristics.dataSource] {
            guard let delivery = previous[characteristic] else { continue }
            do {
                try await gatt.stopNotify(characteristic)
            } catch {
                // An acquired socket closed just before may already be gone: nothing to stop.
                logger.debug("\(link.device.address): StopNotify on \(characteristic): \(error)")
            }
            guard link.state == .running, link.renewing else { return }
            // With StartNotify, bluetoothd writes the CCCD only when the last notify session of
            // the characteristic goes: if another program holds one, Notifying stays true.
            if delivery == .signals, let connection,
               (try? await connection.getProperty(
                   destination: BlueZ.service, path: characteristic, interface: "org.bluez.GattCharacteristic1", name: "Notifying"))?
                .boolValue == true {
                shared.append(characteristic == link.characteristics.dataSource ? "Data Source" : "Notification Source")
            }
            guard link.state == .running, link.renewing else { return }
        }
        if !shared.isEmpty {
            link.sharedNotifySession = shared.joined(separator: " and ")
            logger.warning("""
                \(link.device.address): another program holds notifications of the phone's \(shared.joined(separator: " and ")) \
                (bluetoothctl's "notify on", another ANCS client): bluetoothd writes the phone's CCCD only when the last \
                subscription goes, so renewing ancsd's own cannot reach the phone; close that program, or turn Bluetooth \
                off and on on the phone
                """)
        } else {
            link.sharedNotifySession = nil
        }
        for characteristic in [link.characteristics.dataSource, link.characteristics.notificationSource] {
            do {
                try await enableNotifications(characteristic, on: link, gatt: gatt)
            } catch {
                guard link.state == .running, link.renewing else { return }
                link.renewing = false
                link.state = .failed("\(error)")
                retrySubscription(of: link, error: error)
                return
            }
            guard link.state == .running, link.renewing else { return }
        }
        link.renewing = false
        logger.info("\(link.device.address): subscribed again (\(link.deliveryName ?? "-"))")
    }

    /// Prints a session's event unless the replay policy holds it back, and remembers what was
    /// shown (`seen_before`).
    private func show(_ event: NotificationEvent, on link: PhoneLink) {
        let n = event.notification, address = link.device.address
        let admitted = link.gate.admit(event, device: address, store: seen)
        if link.gate.seenBefore.count > options.session.maxKnownNotifications + 1024 {
            link.gate.retain(only: Set(link.session.notifications.map(\.uid)))
        }
        guard let (shown, seenBefore) = admitted else {
            if event.kind != .removed { link.heldBack += 1 }
            logger.debug("\(address): \(event.kind.rawValue) \(n.uid) held back (replayed, --replays \(link.gate.policy.rawValue))")
            return
        }
        eventsEmitted += 1
        link.notificationCount += 1
        // What happened, never what it says: the journal is readable by more people than the phone's owner.
        logger.info("\(address): notification \(n.uid) \(shown.kind.rawValue) (\(n.category)\(seenBefore ? ", seen before" : ""))")
        logger.debug("\(address): \(shown.kind.rawValue) \(n.uid) \(n.appName ?? n.appIdentifier ?? "-"): \(n.title ?? "") / \(n.message ?? "")\(seenBefore ? " (seen before)" : "")")
        output.emit(.notification(shown, device: address, seenBefore: seenBefore))
        scheduleStatus()
    }

    /// Sends a Control Point write at once, on this actor's loop: no task, and the reply comes
    /// back as a callback on the same loop (`writeCompleted`).
    private func write(_ bytes: [UInt8], on link: PhoneLink) {
        guard let connection else { return }
        link.recorder?.wroteControlPoint(bytes, at: link.now)
        // The session numbers its writes; this one is its latest.
        let path = link.device.path, id = link.id, number = link.session.writesIssued
        startingWrite = true
        defer { startingWrite = false }
        do {
            let call = try GattClient(connection: connection).startWriteRequest(
                link.characteristics.controlPoint, bytes,
                completion: onLoop { $0.writeCompleted($1, number: number, linkID: id, path: path) })
            link.write = (call, connection)
        } catch {
            writeCompleted(.failure(error), number: number, linkID: id, path: path)
        }
    }

    /// A write failed before it was sent (its completion ran inside `write`): its result is
    /// handled on a later turn, not in the middle of carrying out the session's actions.
    private var startingWrite = false

    private func writeCompleted(_ outcome: Result<Void, any Error>, number: UInt64, linkID: UInt64, path: ObjectPath) {
        let result: WriteResult
        switch outcome {
        case .success:
            result = .accepted
        case .failure(let error as DBusError):
            result = attErrorCode(in: error).map { .attError(ATTErrorCode(rawValue: $0)) } ?? .failed(error.description)
        case .failure:
            return  // cancelled with its link
        }
        if startingWrite {
            executor.execute(onLoop { $0.writeFinished(result, number: number, linkID: linkID, path: path) })
        } else {
            writeFinished(result, number: number, linkID: linkID, path: path)
        }
    }

    private func writeFinished(_ result: WriteResult, number: UInt64, linkID: UInt64, path: ObjectPath) {
        guard let link = link(id: linkID, at: path), link.state != .stopped else { return }
        if number == link.session.writesIssued { link.write = nil }
        link.recorder?.writeFinished(result, at: link.now)
        perform(link.session.handleWriteResult(result, write: number, now: link.now), on: link)
    }

    /// Keeps one timer per link armed for the session's next deadline, disarmed when idle.
    ///
    /// The session tolerates being called early, so a deadline later than the armed one keeps
    /// the armed one: while requests follow each other (each moves the deadline later) the
    /// timer is re-armed about once per quiet period instead of twice per request (each a
    /// timerfd_settime).
    private func armTimer(for link: PhoneLink) {
        guard let deadline = link.session.nextDeadline else {
            if link.timerDeadline != nil {
                link.timerDeadline = nil
                link.timer?.cancel()
            }
            return
        }
        if let armed = link.timerDeadline, armed <= deadline { return }
        link.timerDeadline = deadline
        let timer: LoopTimer
        if let existing = link.timer {
            timer = existing
        } else {
            let id = link.id, path = link.device.path
            timer = executor.makeTimer(handler: onLoop { $0.timerFired(linkID: id, path: path) })
            link.timer = timer
        }
        timer.schedule(after: max(.zero, deadline - link.now))
    }

    private func timerFired(linkID: UInt64, path: ObjectPath) {
        guard let link = links[path], link.id == linkID, link.state != .stopped else { return }
        link.timerDeadline = nil
        perform(link.session.handleTimer(now: link.now), on: link)
    }

    private func stopLink(at path: ObjectPath, reason: String) {
        guard let link = links.removeValue(forKey: path) else { return }
        if recentLink === link { recentLink = nil }
        if tree.device(at: path)?.connected != true { subscribeRetryMilliseconds[path] = nil }
        let wasRunning = link.state == .running
        link.tearDown()
        link.recorder?.finish(at: link.now, reason: wasRunning ? reason : nil)
        if let connection, tree.device(at: path)?.connected == true {
            // Still connected (the link was stopped for another reason): release the subscriptions.
            let gatt = GattClient(connection: connection)
            for (characteristic, delivery) in link.delivery where delivery == .signals {
                Task(executorPreference: executor) { try? await gatt.stopNotify(characteristic) }
            }
        }
        if wasRunning {
            logger.info("\(link.device.address): \(reason) after \(link.notificationCount) notification event(s)")
            output.emit(.disconnected(device: link.device.address, reason: reason))
            scheduleStatus()
        }
    }

    private func shutdown(reason: String) async {
        for path in Array(links.keys) { stopLink(at: path, reason: reason) }
    }
}
