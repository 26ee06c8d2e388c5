import ANCSRuntime
import ANCSSession
import BlueZ
import BluetoothUUIDs
import DBus
import EventLoop
import GattSession
import LinkMachine

/// The registry: bluetoothd's tree as the link machine sees it (a `PhoneView` per device),
/// and the advertisement (`Presence`), which follows the adapters that hold a paired iPhone's bond.
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

    /// Hands `phoneAdapters` to `presence`, in a task of the daemon's (`spawn`) that reads the
    /// latest set when it runs (tasks that run out of order leave the last one in force).
    func tellPresence() {
        guard let presence else { return }
        spawn { daemon in await presence.setPhoneAdapters(daemon.phoneAdapters) }
    }

    /// Tells the link machine what bluetoothd's tree says now, and carries out its answer.
    func reconcile() {
        updatePresence()
        watchStrangers()
        scheduleStatus()
        feed(.devices(tree.devices.map(view)))
    }

    /// A device as the link machine sees it. A device that is not connected needs no services.
    private func view(_ device: BlueZDevice) -> PhoneView {
        var view = PhoneView(
            path: device.path.rawValue, address: device.address, name: device.name, connected: device.connected,
            bonded: device.isBonded, allowed: options.allows(address: device.address, adapterName: device.adapterName), ancs: nil)
        guard device.connected else { return view }
        if let ancs = tree.ancsCharacteristics(of: device.path) {
            view.ancs = ServiceObjects(path: ancs.service.rawValue, characteristics: [
                ANCSSession.notificationSourceUUID: ancs.notificationSource.rawValue, ANCSSession.controlPointUUID: ancs.controlPoint.rawValue,
                ANCSSession.dataSourceUUID: ancs.dataSource.rawValue,
            ])
        }
        for extra in Self.extraServices {
            if let objects = offered(extra.description, by: device.path) { view.services[extra.description.uuid] = objects }
        }
        return view
    }

    /// The first instance of the service under the device with at least one of its characteristics.
    private func offered(_ description: GattServiceDescription, by device: ObjectPath) -> ServiceObjects? {
        guard let uuid = BluetoothUUID(description.uuid.rawValue) else { return nil }
        for service in tree.gattServices(uuid, of: device) {
            let objects = ServiceLink.objects(of: service, in: description)
            if !objects.characteristics.isEmpty { return objects }
        }
        return nil
    }

    /// What the link machine must know of the options.
    static func linkSettings(for options: DaemonOptions) -> LinkMachine.Settings {
        LinkMachine.Settings(
            primary: ANCSSession.service, services: extraServices.map(\.description),
            enabled: Set(extraServices.filter { $0.enabled(options) }.map(\.description.uuid)),
            preferAcquireNotify: options.preferAcquireNotify)
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

    func shutdown(reason: String) async {
        feed(.shutdown(reason: reason))
    }
}
