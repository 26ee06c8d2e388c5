import ANCS
public import ANCSRuntime
import ANCSSession
import BlueZ
import DBus
import Dispatch
public import EventLoop
import GattSession
import LinkMachine

/// The long-running part of `ancsd run`: follows bluetoothd's object tree, runs an ANCS session
/// for every bonded, connected phone that exposes ANCS, and sends what they say to the outputs.
///
/// It survives phones walking away and coming back and bluetoothd restarting; it ends when its
/// task is cancelled (SIGTERM) or the bus goes away.
///
/// Everything it does runs on one `DaemonExecutor` (see there for why): the actor's own jobs,
/// the notification sockets, the session timers and every task it starts. An idle daemon has
/// no timer armed and nothing on Swift's global executor, so it makes no wakeups.
public actor Daemon: LoopActor {
    public private(set) var options: DaemonOptions
    var output: OutputRouter
    let logger: Logger
    private let notifier: SystemdNotifier
    private var statusPending = false
    /// The status line systemd has, to send only changes.
    private var sentStatus: String?
    var connection: DBusConnection?
    var tree = BlueZObjectTree()
    var links: [ObjectPath: PhoneLink] = [:]
    /// True while bluetoothd owns its bus name.
    var bluetoothdPresent = false
    /// When the daemon started, for `status`, on its loop's clock (as every time it reads).
    let started: ContinuousClock.Instant
    /// The control socket, once `attach(control:)` gave it.
    private var control: ControlServer?
    /// Every link decision (`Daemon+Links.swift` carries them out).
    var machine: LinkMachine
    /// The machine's timer, armed for its `nextDeadline` (`linkTimerDeadline`), created on first use.
    var linkTimer: LoopTimer?
    var linkTimerDeadline: Duration?
    /// The socket an AcquireNotify just gave, while the machine decides whether to keep it.
    var acquiredSocket: (call: LinkMachine.CallID, fd: UnixFD)?
    /// The advertisement and agent that let paired phones come back (nil with `--no-advertise`).
    var presence: Presence?
    /// The adapters holding a paired iPhone's bond (BlueZ has seen ANCS on it, allowed by the
    /// options): only while there is one does `presence` register anything, and on one of them.
    var phoneAdapters: Set<ObjectPath> = []
    /// Bonded devices on which ANCS was seen: they stay paired iPhones while their ANCS service
    /// is away (iOS withdraws it with Service Changed, e.g. while the phone re-registers it),
    /// so the advertisement they reconnect to is not withdrawn under them.
    var ancsSeen: Set<ObjectPath> = []
    var pairedPhoneKnown: Bool { !phoneAdapters.isEmpty }
    /// Devices connected without a bond, each with the number of its running grace
    /// (`Daemon+Strangers.swift`), and the last number given.
    var strangerGraces: [ObjectPath: UInt64] = [:]
    var nextStrangerGrace: UInt64 = 0
    /// "disconnected a device that is not bonded …": any device in range can make it happen.
    let strangerLog: RateLimitedLog
    var onReady: (@Sendable () -> Void)?
    let executor: DaemonExecutor
    /// What each phone has shown, for `seen_before` and `--replays`.
    let seen: SeenStore
    /// The lines a phone's bytes make its session say (malformed values, refused requests):
    /// each kind said once, then counted per minute, so a phone cannot flood the journal.
    let phoneLog: RateLimitedLogs

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    /// The loop that is this actor's executor (`executor`).
    public nonisolated var loop: EventLoop { executor }

    /// The link last found by `link(id:at:)`, while it is in `links`.
    var recentLink: PhoneLink?
    /// A request failed before it was sent (its completion ran inside `send`).
    var startingRequest = false

    /// The tasks the daemon starts beside its task group (calls to `presence`, a stranger's
    /// disconnection): cancelled when it stops (`spawn`).
    var tasks = OwnedTasks()

    /// Counters for status reports.
    public internal(set) var eventsEmitted = 0

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
        machine = LinkMachine(settings: Self.linkSettings(for: options))
        phoneLog = RateLimitedLogs(logger: logger, loop: executor)
        strangerLog = RateLimitedLog("disconnected a device that is not bonded", level: .info, logger: logger, loop: executor)
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
            link.ancs.actionWaiters[ANCSHandler.ActionKey(uid: uid, action: action.rawValue), default: []].append(continuation)
            link.ancs.performAction(action, on: uid, link.ancsContext, daemon: self)
        }
    }

    /// Fetches a notification's whole message again; the refreshed notification, or nil if it
    /// went away or the phone did not answer within 10 s.
    func fetchFullMessage(_ uid: UInt32, on link: PhoneLink) async -> PhoneNotification? {
        let linkID = link.id
        executor.after(.seconds(10), onLoop { daemon in
            guard let link = daemon.links.values.first(where: { $0.id == linkID }) else { return }
            for waiter in link.ancs.eventWaiters.removeValue(forKey: uid) ?? [] { waiter.resume(returning: link.session.notification(uid: uid)) }
        })
        return await withCheckedContinuation { continuation in
            link.ancs.eventWaiters[uid, default: []].append(continuation)
            link.ancs.fetchFullMessage(of: uid, link.ancsContext, daemon: self)
        }
    }

    /// A handler for the loop (a timer's, a descriptor's, a D-Bus reply's) that runs `body` on
    /// this actor, while it exists. The loop is the actor's executor, so a handler it runs is on
    /// the actor already: `assumeOnLoop` checks that rather than hopping (no task, no turn).
    nonisolated func onLoop(_ body: @escaping @Sendable (isolated Daemon) -> Void) -> @Sendable () -> Void {
        { [weak self] in self?.assumeOnLoop(body) }
    }

    /// `onLoop(_:)` for a handler that is given a value.
    nonisolated func onLoop<Value: Sendable>(
        _ body: @escaping @Sendable (isolated Daemon, Value) -> Void
    ) -> @Sendable (Value) -> Void {
        { [weak self] value in self?.assumeOnLoop { body($0, value) } }
    }

    /// Runs `work` in a task on the daemon's executor that belongs to the daemon: cancelled when
    /// the daemon stops if it is still running then.
    func spawn(_ work: @escaping @Sendable (isolated Daemon) async -> Void) {
        tasks.add { id in
            Task(executorPreference: executor) { [weak self] in await self?.runSpawned(id, work) }
        }
    }

    private func runSpawned(_ id: UInt64, _ work: @Sendable (isolated Daemon) async -> Void) async {
        await work(self)
        tasks.finished(id)
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
            spawn { _ in await presence.setAccessory(accessory) }
        }
        options = kept
        for link in links.values {
            link.ancs.update(kept, link.ancsContext, daemon: self)
        }
        feed(.reloaded(Self.linkSettings(for: kept)))
        if let newOutput, newOutput !== output {
            output.moveAttached(to: newOutput)
            output.stop(keeping: newOutput)
            output = newOutput
            newOutput.start(OutputContext(actions: self, executor: executor))
        }
        reconcile()
        scheduleStatus()
    }

    /// Sends the status line to systemd, at most once a second (only under systemd, and only
    /// after something changed: no wakeups otherwise).
    func scheduleStatus() {
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
        do {
            try await serve(on: connection)
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
    }

    private func serve(on connection: DBusConnection) async throws {
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
                watchStrangers()
                group.addTask { await presence.run() }
            }
            await group.next()  // the bus went away, or we were cancelled
            group.cancelAll()
        }
        presence = nil
        await shutdown(reason: Task.isCancelled ? "ancsd stopped" : "the bus went away")
        tasks.cancelAll()
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
            tree.clear()
            feed(.bluetoothdStopped)
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
            if change.interface == BlueZ.adapterInterface { watchStrangers() }  // someone began or ended pairing
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

}
