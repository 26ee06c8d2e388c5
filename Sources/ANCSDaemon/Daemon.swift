import ANCS
import ANCSSession
import BlueZ
import DBus
import Dispatch

/// The long-running part of `ancsd run`: follows bluetoothd's object tree, runs an ANCS session
/// for every bonded, connected phone that exposes ANCS, and sends what they say to the outputs.
///
/// It survives phones walking away and coming back and bluetoothd restarting; it ends when its
/// task is cancelled (SIGTERM) or the bus goes away.
public actor Daemon {
    public private(set) var options: DaemonOptions
    private var output: OutputRouter
    private let logger: Logger
    private let notifier: SystemdNotifier
    private var statusPending = false
    private var connection: DBusConnection?
    private var tree = BlueZObjectTree()
    private var links: [ObjectPath: PhoneLink] = [:]
    private var nextLinkID: UInt64 = 0
    private var ignoredDevices: Set<ObjectPath> = []
    private var onReady: (@Sendable () -> Void)?
    private let readerQueue = DispatchQueue(label: "ancsd.notifications")

    /// Counters for status reports.
    public private(set) var eventsEmitted = 0

    public init(
        options: DaemonOptions, output: OutputRouter, logger: Logger, notifier: SystemdNotifier = SystemdNotifier(),
        onReady: (@Sendable () -> Void)? = nil
    ) {
        self.options = options
        self.output = output
        self.logger = logger
        self.notifier = notifier
        self.onReady = onReady
    }

    /// A line for `systemctl status`: "2 phones connected, 14 notifications".
    public var statusLine: String {
        let phones = links.values.filter { $0.state == .running }
        let notifications = phones.reduce(0) { $0 + $1.session.notifications.count }
        let phoneText = phones.count == 1 ? "1 phone connected" : "\(phones.count) phones connected"
        let notificationText = notifications == 1 ? "1 notification" : "\(notifications) notifications"
        return phones.isEmpty && tree.adapters.isEmpty && connection != nil ? "waiting for bluetoothd" : "\(phoneText), \(notificationText)"
    }

    /// Answers the watchdog: proves the daemon's executor is not wedged.
    public func ping() -> Bool { true }

    /// Applies new settings without dropping the phones it may keep (SIGHUP).
    public func update(options newOptions: DaemonOptions, output newOutput: OutputRouter?) {
        if newOptions.bus != options.bus { logger.warning("a new bus address takes effect only after a restart") }
        var kept = newOptions
        kept.bus = options.bus
        options = kept
        if let newOutput { output = newOutput }
        ignoredDevices = []
        reconcile()
        scheduleStatus()
    }

    /// Sends the status line to systemd, at most once a second.
    private func scheduleStatus() {
        guard notifier.isActive, !statusPending else { return }
        statusPending = true
        Task {
            try? await Task.sleep(for: .seconds(1))
            self.sendStatus()
        }
    }

    private func sendStatus() {
        statusPending = false
        notifier.status(statusLine)
    }

    /// The phones with a running session, by address.
    public var connectedPhones: [String] {
        links.values.filter { $0.state == .running }.map(\.device.address).sorted()
    }

    /// Runs until cancelled; throws if the bus cannot be reached or goes away.
    public func run() async throws {
        let connection = try await DBusConnection.connect(to: options.bus)
        self.connection = connection
        logger.debug("connected to the bus as \(connection.uniqueName)")
        defer { Task { await connection.close() } }

        // Matches first, then the tree: nothing said in between is lost.
        let bluezSignals = try await connection.signals(matching: MatchRule(type: .signal, sender: BlueZ.service))
        let ownerChanges = try await connection.signals(matching: .nameOwnerChanged(name: BlueZ.service))
        await refresh()
        notifier.ready(status: statusLine)
        onReady?()
        onReady = nil

        await withTaskGroup(of: Void.self) { group in
            group.addTask { for await signal in bluezSignals { await self.handleBlueZSignal(signal) } }
            group.addTask { for await signal in ownerChanges { await self.handleOwnerChange(signal) } }
            group.addTask { await connection.waitUntilDisconnected() }
            await group.next()  // the bus went away, or we were cancelled
            group.cancelAll()
        }
        await shutdown(reason: Task.isCancelled ? "ancsd stopped" : "the bus went away")
        if !Task.isCancelled { throw DBusError.disconnected }
    }

    // MARK: bluetoothd's tree

    /// Reads the whole tree again and reconciles the sessions with it.
    private func refresh() async {
        guard let connection else { return }
        do {
            tree = BlueZObjectTree(try await connection.getManagedObjects(destination: BlueZ.service))
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
            for path in Array(links.keys) { stopLink(at: path, reason: "bluetoothd stopped") }
            tree.clear()
            ignoredDevices = []
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

    /// Starts sessions for the phones that should have one, stops those that should not.
    private func reconcile() {
        for (path, link) in links {
            guard let device = tree.device(at: path), device.connected, eligible(device) != nil,
                  tree.ancsCharacteristics(of: path) == link.characteristics
            else {
                stopLink(at: path, reason: tree.device(at: path)?.connected == true ? "ANCS is gone" : "disconnected")
                continue
            }
        }
        for device in tree.devices where device.connected && links[device.path] == nil {
            guard let characteristics = eligible(device) else { continue }
            startLink(device, characteristics)
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
        let link = PhoneLink(id: nextLinkID, device: device, characteristics: characteristics, configuration: options.session)
        links[device.path] = link
        link.recorder = SessionRecorder.start(device: device, options: options.recording, logger: logger)
        let (stream, continuation) = AsyncStream<PhoneLink.Input>.makeStream()
        link.inputs = continuation
        link.tasks.append(Task { await self.consume(stream, linkID: link.id, path: device.path) })
        link.tasks.append(Task { await self.subscribe(link) })
    }

    /// Data Source first, then Notification Source: the phone answers requests on the Data
    /// Source, and starts sending Notification Source events (replaying its backlog) at once.
    private func subscribe(_ link: PhoneLink) async {
        guard let connection else { return }
        let gatt = GattClient(connection: connection)
        for characteristic in [link.characteristics.dataSource, link.characteristics.notificationSource] {
            guard link.state == .subscribing else { return }
            do {
                try await enableNotifications(characteristic, on: link, gatt: gatt)
            } catch {
                guard link.state == .subscribing else { return }
                link.state = .failed("\(error)")
                logger.warning("\(link.device.address): cannot subscribe to ANCS: \(error)")
                return
            }
        }
        guard link.state == .subscribing else { return }
        link.state = .running
        let how = link.delivery.values.contains(.signals) ? "StartNotify" : "AcquireNotify"
        logger.info("\(link.device.address): connected (\(link.device.name ?? "unnamed"), \(how))")
        output.emit(.connected(device: link.device.address, name: link.device.name))
        link.recorder?.connected(at: link.now)
        scheduleStatus()
    }

    private func enableNotifications(_ characteristic: ObjectPath, on link: PhoneLink, gatt: GattClient) async throws {
        if options.preferAcquireNotify {
            do {
                let (fd, mtu) = try await gatt.acquireNotify(characteristic)
                guard link.state == .subscribing, let raw = fd.take() else { return }
                let isDataSource = characteristic == link.characteristics.dataSource
                let inputs = link.inputs
                let reader = NotificationReader(
                    fd: raw, queue: readerQueue,
                    onValue: { value in inputs?.yield(isDataSource ? .dataSource(value) : .notificationSource(value)) },
                    onClose: { reason in inputs?.yield(.closed(reason)) })
                link.readers.append(reader)
                link.delivery[characteristic] = .acquired(mtu: mtu)
                return
            } catch {
                logger.debug("\(link.device.address): AcquireNotify on \(characteristic) failed (\(error)); using StartNotify")
            }
        }
        link.delivery[characteristic] = .signals  // before StartNotify: the first values may come at once
        try await gatt.startNotify(characteristic)
    }

    private func routeValue(_ value: [UInt8], from path: ObjectPath) {
        for link in links.values where link.receivesSignals(for: path) {
            let input: PhoneLink.Input = path == link.characteristics.dataSource ? .dataSource(value) : .notificationSource(value)
            link.inputs?.yield(input)
        }
    }

    private func consume(_ stream: AsyncStream<PhoneLink.Input>, linkID: UInt64, path: ObjectPath) async {
        for await input in stream {
            guard let link = links[path], link.id == linkID, link.state != .stopped else { return }
            switch input {
            case .notificationSource(let value):
                link.recorder?.received(.ns, value, at: link.now)
                perform(link.session.handleNotificationSource(value, now: link.now), on: link)
            case .dataSource(let value):
                link.recorder?.received(.ds, value, at: link.now)
                perform(link.session.handleDataSource(value, now: link.now), on: link)
            case .closed(let reason):
                logger.info("\(link.device.address): notification socket closed (\(reason))")
                stopLink(at: path, reason: "disconnected")
                return
            }
        }
    }

    /// Carries out what a session asked for.
    private func perform(_ actions: [SessionAction], on link: PhoneLink) {
        for action in actions {
            switch action {
            case .writeControlPoint(let bytes):
                write(bytes, on: link)
            case .emit(let event):
                eventsEmitted += 1
                link.notificationCount += 1
                let n = event.notification
                logger.debug("\(link.device.address): \(event.kind.rawValue) \(n.uid) \(n.appName ?? n.appIdentifier ?? "-"): \(n.title ?? "") / \(n.message ?? "")")
                output.emit(.notification(event, device: link.device.address))
                scheduleStatus()
            case .actionCompleted(let uid, let action, let outcome):
                logger.info("\(link.device.address): \(action) action on \(uid): \(outcome)")
            case .log(let level, let message):
                logger.log(level, "\(link.device.address): \(message)")
            }
        }
        armTimer(for: link)
    }

    private func write(_ bytes: [UInt8], on link: PhoneLink) {
        guard let connection else { return }
        link.recorder?.wroteControlPoint(bytes, at: link.now)
        let gatt = GattClient(connection: connection)
        let path = link.device.path, id = link.id, characteristic = link.characteristics.controlPoint
        link.write = Task {
            let result: WriteResult
            do {
                try await gatt.writeRequest(characteristic, bytes)
                result = .accepted
            } catch let error as DBusError {
                result = attErrorCode(in: error).map { .attError(ATTErrorCode(rawValue: $0)) } ?? .failed(error.description)
            } catch {
                return  // cancelled with its link
            }
            self.writeFinished(result, linkID: id, path: path)
        }
    }

    private func writeFinished(_ result: WriteResult, linkID: UInt64, path: ObjectPath) {
        guard let link = links[path], link.id == linkID, link.state != .stopped else { return }
        link.recorder?.writeFinished(result, at: link.now)
        perform(link.session.handleWriteResult(result, now: link.now), on: link)
    }

    /// Keeps one sleeping task per link for the session's next deadline, none when idle.
    private func armTimer(for link: PhoneLink) {
        let deadline = link.session.nextDeadline
        guard deadline != link.timerDeadline else { return }
        link.timer?.cancel()
        link.timerDeadline = deadline
        guard let deadline else {
            link.timer = nil
            return
        }
        let path = link.device.path, id = link.id, instant = link.start + deadline
        link.timer = Task {
            do { try await Task.sleep(until: instant, clock: .continuous) } catch { return }
            self.timerFired(linkID: id, path: path)
        }
    }

    private func timerFired(linkID: UInt64, path: ObjectPath) {
        guard let link = links[path], link.id == linkID, link.state != .stopped else { return }
        link.timerDeadline = nil
        perform(link.session.handleTimer(now: link.now), on: link)
    }

    private func stopLink(at path: ObjectPath, reason: String) {
        guard let link = links.removeValue(forKey: path) else { return }
        let wasRunning = link.state == .running
        link.tearDown()
        link.recorder?.finish(at: link.now, reason: wasRunning ? reason : nil)
        if let connection, tree.device(at: path)?.connected == true {
            // Still connected (the link was stopped for another reason): release the subscriptions.
            let gatt = GattClient(connection: connection)
            for (characteristic, delivery) in link.delivery where delivery == .signals {
                Task { try? await gatt.stopNotify(characteristic) }
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
