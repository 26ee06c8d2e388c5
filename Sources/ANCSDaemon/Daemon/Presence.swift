#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import BlueZ
import DBus
import EventLoop

/// What `ancsd run` keeps registered with bluetoothd so bonded phones come back by themselves:
/// a connectable (not discoverable) LE advertisement that solicits ANCS, the HID accessory
/// (`Accessory`, in the shape `--accessory` names, unless `none`) on the adapter it advertises on, with the HID UUID
/// in the advertisement — iOS reconnects by itself to a bonded HID accessory that advertises
/// connectable — and a pairing agent that refuses every request: `ancsd run` never pairs;
/// `ancsd pair` opens a window for that. A passkey-entry request, which bluetoothd carries on
/// whatever the agent answers, is ended by disconnecting the device (`endPairing`); refusals
/// are logged once, then counted (`RateLimitedLog`).
///
/// All are registered only while a paired iPhone is known (a bonded device on which BlueZ has
/// seen ANCS, `setPhoneAdapters`): on a machine with no phone yet, ancsd changes nothing (the desktop's
/// own pairing agent stays the default one, nothing is advertised or served). They are registered
/// again when bluetoothd calls `Release` and when bluetoothd restarts. Every object answers only
/// the current owner of `org.bluez`.
///
/// The actor runs on the daemon's loop (its executor), which its retry timer shares.
actor Presence: LoopActor {
    static let agentPath: ObjectPath = "/org/ancsd/run/agent"
    static let advertisementPath: ObjectPath = "/org/ancsd/run/advertisement0"

    private let connection: DBusConnection
    let loop: EventLoop
    private let adapterName: String?
    private let logger: Logger
    /// What the advertisement and the GATT application show the phone (`--accessory`).
    private var accessory: AccessoryKind
    /// The shape whose objects are exported on the connection, nil while none is.
    private var exported: Accessory.Shape?
    /// Where the accessory's application is registered, nil while it is not.
    private var applicationOn: ObjectPath?
    private var owner: BlueZOwner?
    /// Where the advertisement is registered, nil while it is not.
    private var advertisedOn: ObjectPath?
    private var agentRegistered = false
    private var registering = false
    private var again = false
    /// Registers again after a failure or a release; made on the first.
    private var retry: LoopTimer?
    /// The registrations a retry starts and the pairings being ended: cancelled when `run` ends.
    private var tasks = OwnedTasks()
    private var failures = 0
    private var saidNoAdapter = false
    /// The adapters that hold a paired iPhone's bond: only while there is one is anything
    /// registered, and the advertisement goes on one of them (the phone comes back to the
    /// adapter it bonded with, not to another radio of the machine).
    private var phoneAdapters: Set<ObjectPath> = []
    private var wanted: Bool { !phoneAdapters.isEmpty }
    private var saidNotWanted = false
    /// "refused a pairing request …": any device in range can ask as often as it likes.
    private let refusedLog: RateLimitedLog

    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    init(connection: DBusConnection, loop: EventLoop, adapter: String?, accessory: AccessoryKind = .keyboard, logger: Logger) {
        self.connection = connection
        self.loop = loop
        self.adapterName = adapter
        self.accessory = accessory
        self.logger = logger
        refusedLog = RateLimitedLog("refused a pairing request", logger: logger, loop: loop)
    }

    /// Registers, keeps registered until cancelled, then unregisters.
    func run() async {
        do {
            let owner = try await BlueZOwner.track(on: connection)
            self.owner = owner
            let agent = PairingAgent(owner: owner) { [weak self] request in
                guard let self else { throw AgentError.rejected }
                return try await self.answer(request)
            }
            try await connection.export(agent.object, at: Self.agentPath)
            let ownerChanges = try await connection.signals(matching: .nameOwnerChanged(name: BlueZ.service))
            let added = try await connection.signals(matching: .interfacesAdded(sender: BlueZ.service))
            await register()
            await withTaskGroup(of: Void.self) { group in
                group.addTask { for await signal in ownerChanges { await self.ownerChanged(signal) } }
                group.addTask {
                    for await signal in added {
                        guard let a = try? InterfacesAdded(signal), a.interfaces[BlueZ.advertisingManagerInterface] != nil else { continue }
                        await self.register()
                    }
                }
                await group.next()
                group.cancelAll()
            }
        } catch is CancellationError {
        } catch {
            logger.warning("cannot keep an advertisement and agent registered: \(error)")
            // Wait for cancellation without a timer (a sleep on Swift's clock would start libdispatch's 1 Hz
            // workqueue monitor: see DaemonExecutor): a stream that never yields ends when the
            // task is cancelled.
            let (never, continuation) = AsyncStream<Never>.makeStream()
            for await _ in never {}
            continuation.finish()
        }
        tasks.cancelAll()
        retry?.cancel()
        // Unregister from a task that is not cancelled: D-Bus calls of a cancelled task fail at
        // once, and Swift 6.0 has no way to shield structured code from cancellation. The task
        // runs on the loop, and is awaited here.
        await Task(executorPreference: loop) { await self.unregister() }.value
    }

    private func ownerChanged(_ signal: Signal) async {
        guard let change = try? NameOwnerChanged(signal), change.name == BlueZ.service.rawValue else { return }
        // A new bluetoothd knows nothing of what we registered with the old one.
        advertisedOn = nil
        applicationOn = nil
        agentRegistered = false
        failures = 0
        if change.newOwner != nil {
            logger.info("bluetoothd is back: registering the advertisement and agent again")
            await register()
        }
    }

    /// The adapters on which a paired iPhone is known (bonded, BlueZ has seen ANCS on it); none:
    /// nothing is wanted registered.
    func setPhoneAdapters(_ adapters: Set<ObjectPath>) async {
        guard adapters != phoneAdapters else { return }
        let wasWanted = wanted
        phoneAdapters = adapters
        if !wanted {
            logger.info("no paired iPhone: no advertisement and no pairing agent until one is paired ('ancsd pair')")
            saidNotWanted = true
            await withdraw()
            return
        }
        if !wasWanted { saidNotWanted = false }
        if let advertisedOn, !adapters.contains(advertisedOn) { await withdrawAdvertisement() }
        await register()
    }

    /// Shows the phone `kind` from now on (SIGHUP): the advertisement and the application are
    /// withdrawn and registered again as `kind` asks.
    func setAccessory(_ kind: AccessoryKind) async {
        guard kind != accessory else { return }
        accessory = kind
        logger.info("accessory is now \(kind.rawValue): registering the advertisement again")
        await withdrawAdvertisement()
        if let shape = exported, shape != kind.shape {
            exported = nil
            await Accessory.unexport(shape, on: connection)
        }
        await register()
    }

    /// The shape asked for (`--accessory`) and the adapter its application is registered on
    /// now (`hci0`), nil while it is not (or for `none`): what `status` reports.
    var accessoryRegistration: (kind: AccessoryKind, adapter: String?) {
        (accessory, applicationOn.map { $0.rawValue.split(separator: "/").last.map(String.init) ?? $0.rawValue })
    }

    /// Registers whatever is not registered. Calls while one is running make it run once more.
    func register() async {
        guard !registering else {
            again = true
            return
        }
        registering = true
        defer { registering = false }
        repeat {
            again = false
            await registerOnce()
        } while again
    }

    private func registerOnce() async {
        guard let owner else { return }
        guard wanted else {
            if !saidNotWanted {
                saidNotWanted = true
                logger.info("no paired iPhone yet: no advertisement and no pairing agent until one is paired ('ancsd pair')")
            }
            return
        }
        if owner.current == nil {
            guard let running = try? await connection.nameOwner(BlueZ.service), !running.isEmpty else { return }
        }
        do {
            if !agentRegistered {
                let manager = AgentManager(connection: connection)
                do {
                    try await manager.register(Self.agentPath, capability: "DisplayYesNo")
                } catch let error as DBusError where error.name == "org.bluez.Error.AlreadyExists" {}
                try await manager.requestDefault(Self.agentPath)
                agentRegistered = true
                logger.info("registered pairing agent \(Self.agentPath): it refuses every pairing request (pair with 'ancsd pair')")
            }
            if advertisedOn == nil {
                guard let (adapter, name) = try await findAdapter() else {
                    if !saidNoAdapter {
                        saidNoAdapter = true
                        logger.info("no adapter can advertise yet\(adapterName.map { " (\($0))" } ?? ""); waiting for one")
                    }
                    return
                }
                saidNoAdapter = false
                await registerApplication(on: adapter, owner: owner)
                let advert = Advertisement(localName: name, discoverable: false, accessory: accessory)
                await connection.unexport(Self.advertisementPath)
                try await connection.export(
                    advert.object(owner: owner) { [weak self] in await self?.advertisementReleased() }, at: Self.advertisementPath)
                try await AdvertisingManager(connection: connection, adapter: adapter).register(Self.advertisementPath)
                advertisedOn = adapter
                let what = accessory.shape == nil ? "solicits ANCS" : "HID service, solicits ANCS"
                logger.info("registered LE advertisement \(Self.advertisementPath) on \(adapter.rawValue.split(separator: "/").last ?? ""): connectable, not discoverable, \(what), name \"\(name)\"")
            }
            failures = 0
        } catch {
            failures += 1
            let delay = min(60, 1 << min(failures - 1, 6))
            logger.warning("cannot register with bluetoothd (\(error)); trying again in \(delay) s")
            scheduleRetry(after: .seconds(delay))
        }
    }

    /// Exports the accessory if it is not, and registers it on `adapter` (the adapter the
    /// advertisement goes on). bluetoothd tells nobody when it forgets an application (its
    /// adapter went away, it restarted), so this runs before every advertisement registration:
    /// `AlreadyExists` means it is still there. A failure is logged and the advertisement goes
    /// on without it (the bonded phone still reconnects to it).
    private func registerApplication(on adapter: ObjectPath, owner: BlueZOwner) async {
        guard let shape = accessory.shape else { return }
        do {
            if exported == nil {
                try await Accessory.export(shape, on: connection, owner: owner)
                exported = shape
            }
            do {
                try await GattManager(connection: connection, adapter: adapter).register(Accessory.root)
                logger.info("registered the HID accessory \(Accessory.root) on \(adapter.rawValue.split(separator: "/").last ?? ""): \(shape.listing) that never sends a report")
            } catch let error as DBusError where error.name == "org.bluez.Error.AlreadyExists" {
                logger.debug("the HID accessory is still registered on \(adapter)")
            }
            applicationOn = adapter
        } catch {
            logger.warning("cannot register the HID accessory on \(adapter): \(error); advertising without it")
        }
    }

    /// Runs `work` in a task on the loop that belongs to `Presence`: cancelled when `run` ends.
    private func spawn(_ work: @escaping @Sendable (isolated Presence) async -> Void) {
        tasks.add { id in
            Task(executorPreference: loop) { [weak self] in await self?.runSpawned(id, work) }
        }
    }

    private func runSpawned(_ id: UInt64, _ work: @Sendable (isolated Presence) async -> Void) async {
        await work(self)
        tasks.finished(id)
    }

    /// Calls `register` after `delay` (a loop timer: nothing runs meanwhile); replaces a retry
    /// already scheduled.
    private func scheduleRetry(after delay: Duration) {
        let timer = retry ?? loop.makeTimer { [weak self] in
            guard let self else { return }
            assumeOnLoop { $0.spawn { await $0.register() } }
        }
        retry = timer
        timer.schedule(after: delay)
    }

    /// The adapter to advertise on and the name to show: the first adapter holding a paired
    /// iPhone's bond (within `--adapter`) that offers LEAdvertisingManager1; its Alias, else the
    /// host name. Nil while none does yet (an adapter's interfaces appear as it powers up).
    private func findAdapter() async throws -> (ObjectPath, String)? {
        let objects = try await connection.getManagedObjects(destination: BlueZ.service)
        for path in objects.keys.sorted() {
            guard let interfaces = objects[path], let adapter = interfaces[BlueZ.adapterInterface],
                  interfaces[BlueZ.advertisingManagerInterface] != nil
            else { continue }
            if let adapterName, path.rawValue.split(separator: "/").last.map(String.init) != adapterName { continue }
            guard phoneAdapters.contains(path) else { continue }
            return (path, Advertisement.recognisableName(alias: adapter["Alias"]?.unwrapped.stringValue ?? "", hostName: hostName()))
        }
        return nil
    }

    private func advertisementReleased() {
        guard advertisedOn != nil else { return }
        advertisedOn = nil
        logger.info("bluetoothd released the advertisement; registering it again")
        scheduleRetry(after: .milliseconds(500))
    }

    /// The run agent's answers: no to everything that would pair or authorize.
    private func answer(_ request: AgentRequest) async throws -> AgentAnswer {
        switch request {
        case .release:
            agentRegistered = false
            logger.info("bluetoothd released the pairing agent; registering it again")
            scheduleRetry(after: .milliseconds(500))
            return .accepted
        case .cancel:
            return .accepted
        case .displayPasskey(let device, _, _), .displayPinCode(let device, _):
            // Passkey entry on the other side: bluetoothd shows the key through the agent and goes
            // on without waiting for the answer, so a Rejected alone does not stop the pairing
            // (the peer may go on guessing). It is ended here.
            refusedLog("refused a pairing request from \(deviceLabel(device)) (passkey entry): ancsd run never pairs; the link is dropped")
            endPairing(device)
            throw AgentError.rejected
        default:
            let device = request.device.map(deviceLabel) ?? "a device"
            refusedLog("refused a pairing request from \(device): ancsd run never pairs; to add a phone, run 'ancsd pair'")
            throw AgentError.rejected
        }
    }

    /// Ends a pairing the agent cannot stop by answering: `CancelPairing`, then `Disconnect`.
    /// bluetoothd cancels only a pairing its own side started (`Pair()`); one the peer started
    /// gets `DoesNotExist` (BlueZ src/device.c, `cancel_pairing`), and only the disconnection
    /// ends it. Runs apart from the agent's answer, which bluetoothd does not wait for.
    private func endPairing(_ device: ObjectPath) {
        let calls = DeviceCalls(connection: connection), logger = logger
        spawn { _ in
            do {
                try await calls.cancelPairing(device)
            } catch {
                logger.debug("\(deviceLabel(device)): CancelPairing: \(error) (expected for a pairing the peer started)")
            }
            do {
                try await calls.disconnect(device)
            } catch {
                logger.debug("\(deviceLabel(device)): Disconnect: \(error)")
            }
        }
    }

    /// Unregisters the advertisement and the accessory from bluetoothd.
    private func withdrawAdvertisement() async {
        if let adapter = applicationOn {
            applicationOn = nil
            do {
                try await GattManager(connection: connection, adapter: adapter).unregister(Accessory.root)
                logger.info("unregistered the HID accessory")
            } catch {
                logger.debug("UnregisterApplication: \(error)")
            }
        }
        if let adapter = advertisedOn {
            advertisedOn = nil
            do {
                try await AdvertisingManager(connection: connection, adapter: adapter).unregister(Self.advertisementPath)
                logger.info("unregistered the LE advertisement")
            } catch {
                logger.debug("UnregisterAdvertisement: \(error)")
            }
        }
    }

    private func unregister() async {
        await withdraw()
        await connection.unexport(Self.advertisementPath)
        await connection.unexport(Self.agentPath)
        if let shape = exported {
            exported = nil
            await Accessory.unexport(shape, on: connection)
        }
        await owner?.stop()
    }

    /// Unregisters the advertisement and the agent from bluetoothd; the objects stay exported.
    private func withdraw() async {
        retry?.cancel()
        await withdrawAdvertisement()
        if agentRegistered {
            agentRegistered = false
            do {
                try await AgentManager(connection: connection).unregister(Self.agentPath)
                logger.info("unregistered the pairing agent")
            } catch {
                logger.debug("UnregisterAgent: \(error)")
            }
        }
    }
}
