import ANCSRuntime
import BlueZ
import BluetoothUUIDs
import DBus
import EventLoop

/// The registry: which of bluetoothd's devices get a link, and when a link ends. A bonded,
/// connected phone allowed by the options that exposes ANCS gets one; the advertisement
/// (`Presence`) follows the adapters that hold a paired iPhone's bond.
extension Daemon {
    /// Works out on which adapters a paired iPhone is known and tells `presence` when that changed.
    func updatePresence() {
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
    func tellPresence() {
        guard let presence else { return }
        Task(executorPreference: executor) { await presence.setPhoneAdapters(self.phoneAdapters) }
    }

    /// Starts sessions for the phones that should have one, stops those that should not.
    func reconcile() {
        updatePresence()
        watchStrangers()
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
        for link in links.values { updateExtraServices(of: link) }
    }

    /// The phone's `Address` changed under a running link: BlueZ resolved the resolvable
    /// private address the phone connected with to its identity address (at bonding, the object
    /// path unchanged). Everything from now on is keyed on the new address — outputs, the seen
    /// store, `list`, `status`, MQTT topics — and a recording goes on in a file of its own named
    /// after it (the old one ends with the reason), so no file carries a private address beyond
    /// the moment BlueZ resolved it.
    func follow(_ device: BlueZDevice, on link: PhoneLink) {
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
    func eligible(_ device: BlueZDevice) -> ANCSCharacteristics? {
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

    func startLink(_ device: BlueZDevice, _ characteristics: ANCSCharacteristics) {
        nextLinkID += 1
        let service = GattServiceObjects(
            path: characteristics.service,
            characteristics: [
                ANCSUUID.notificationSource: characteristics.notificationSource, ANCSUUID.controlPoint: characteristics.controlPoint,
                ANCSUUID.dataSource: characteristics.dataSource,
            ])
        let link = PhoneLink(
            id: nextLinkID, device: device, characteristics: characteristics, service: service, configuration: options.session,
            replays: options.replays, clock: executor)
        links[device.path] = link
        link.recorder = SessionRecorder.start(device: device, options: options.recording, logger: logger)
        let id = link.id, path = device.path
        link.tasks.append(Task(executorPreference: executor) { await self.subscribe(linkID: id, path: path) })
    }

    /// Subscribing failed while the phone is still connected — bluetoothd still held the
    /// notification socket of a link that had just dropped ("Notify acquired"), the link flapped
    /// under the call: the link is started afresh after a pause (0.5 s, doubling up to 30 s while
    /// it keeps failing), rather than leaving a connected phone unwatched until it reconnects.
    func retrySubscription(of link: PhoneLink, error: any Error) {
        let path = link.device.path, linkID = link.id
        let delay = subscribeRetryMilliseconds[path] ?? 500
        subscribeRetryMilliseconds[path] = min(delay * 2, 30_000)
        logger.warning("\(link.device.address): cannot subscribe to ANCS: \(error); trying again in \(Double(delay) / 1000) s")
        executor.after(.milliseconds(delay), onLoop { $0.restartFailedLink(path: path, linkID: linkID) })
    }

    /// Ends the StartNotify sessions a failed link holds, waiting for bluetoothd's answers (a
    /// StopNotify that came after the next link's AcquireNotify would end that link's socket:
    /// bluetoothd releases an acquired socket for whoever asks), then starts the link afresh.
    func restartFailedLink(path: ObjectPath, linkID: UInt64) {
        guard let link = links[path], link.id == linkID, case .failed = link.state else { return }
        var stale: [ObjectPath] = []
        for service in link.services {
            stale += service.delivery.compactMap { $0.value == .signals ? $0.key : nil }
            service.delivery = [:]
        }
        let gatt = connection.map { GattClient(connection: $0) }
        Task(executorPreference: executor) {
            for characteristic in stale { try? await gatt?.stopNotify(characteristic) }
            await self.replaceFailedLink(path: path, linkID: linkID)
        }
    }

    func replaceFailedLink(path: ObjectPath, linkID: UInt64) {
        guard let link = links[path], link.id == linkID, case .failed = link.state else { return }
        stopLink(at: path, reason: "subscribing failed")
        reconcile()
    }

    func stopLink(at path: ObjectPath, reason: String) {
        guard let link = links.removeValue(forKey: path) else { return }
        if recentLink === link { recentLink = nil }
        if tree.device(at: path)?.connected != true { subscribeRetryMilliseconds[path] = nil }
        let wasRunning = link.state == .running
        link.tearDown()
        link.recorder?.finish(at: link.now, reason: wasRunning ? reason : nil)
        if let connection, tree.device(at: path)?.connected == true {
            // Still connected (the link was stopped for another reason): release the subscriptions.
            let gatt = GattClient(connection: connection)
            for service in link.services {
                for (characteristic, delivery) in service.delivery where delivery == .signals {
                    Task(executorPreference: executor) { try? await gatt.stopNotify(characteristic) }
                }
            }
        }
        if wasRunning {
            logger.info("\(link.device.address): \(reason) after \(link.notificationCount) notification event(s)")
            output.emit(.disconnected(device: link.device.address, reason: reason))
            scheduleStatus()
        }
    }

    func shutdown(reason: String) async {
        for path in Array(links.keys) { stopLink(at: path, reason: reason) }
    }
}
