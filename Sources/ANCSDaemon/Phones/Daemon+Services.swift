import ANCSRuntime
import BlueZ
import BluetoothUUIDs
import DBus
import GattSession

/// The services a link speaks beside ANCS. Each is found in bluetoothd's tree under the phone,
/// started on a running link when it appears (the phone may offer it only later, with Service
/// Changed), and stopped when it goes; a service that cannot be subscribed to stays off for
/// `extraServiceRetry`. Adding a service is one entry in `extraServices`.
extension Daemon {
    /// A service a link may speak beside ANCS.
    struct ExtraService: Sendable {
        /// Its description: the UUIDs to look for.
        var description: GattServiceDescription
        /// Whether the options turn it on.
        var enabled: @Sendable (DaemonOptions) -> Bool
        /// Its handler for a new link.
        var make: @Sendable (DaemonOptions) -> any ServiceHandler
    }

    /// How long a service beside ANCS that could not be subscribed to stays off.
    static let extraServiceRetry = Duration.seconds(30)

    /// Every service a link may speak beside ANCS.
    static let extraServices: [ExtraService] = [MediaHandler.extra]

    /// Starts the extra services the phone offers now on a running link, and stops those it
    /// no longer offers (or the options turned off).
    func updateExtraServices(of link: PhoneLink) {
        guard link.state == .running else { return }
        for extra in Self.extraServices {
            let current = link.services.first { $0.description.uuid == extra.description.uuid }
            let found = extra.enabled(options) ? offered(extra.description, on: link) : nil
            let foundPaths = found.map { paths(of: $0, extra.description) }
            if let current, current.servicePath != found?.path || current.paths != foundPaths {
                let reason = !extra.enabled(options) ? "turned off" : found == nil ? "the phone no longer offers it" : "the phone changed it"
                stopService(current, on: link, reason: reason)
                // bluetoothd adds and removes a changed service's objects one by one: start
                // again once they have settled, not at each.
                holdOff(extra.description.name, on: link, for: Self.socketClosedPause)
            }
            guard let found else {
                link.settledServices.remove(extra.description.name)
                continue
            }
            guard !link.services.contains(where: { $0.description.uuid == extra.description.uuid }),
                  !link.failedServices.contains(extra.description.name)
            else { continue }
            // A service that appears has its objects added one by one: it starts once they settled.
            guard link.settledServices.contains(extra.description.name) else {
                link.settledServices.insert(extra.description.name)
                holdOff(extra.description.name, on: link, for: Self.socketClosedPause)
                continue
            }
            startService(extra.make(options), objects: found, on: link)
        }
    }

    /// The first instance of the service under the phone with at least one of its characteristics.
    private func offered(_ description: GattServiceDescription, on link: PhoneLink) -> GattServiceObjects? {
        guard let uuid = BluetoothUUID(description.uuid.rawValue) else { return nil }
        return tree.gattServices(uuid, of: link.device.path).first { !paths(of: $0, description).isEmpty }
    }

    private func paths(of objects: GattServiceObjects, _ description: GattServiceDescription) -> [CharacteristicUUID: ObjectPath] {
        Dictionary(ServiceLink.characteristics(of: objects, in: description).map { ($0.uuid, $0.path) }, uniquingKeysWith: { first, _ in first })
    }

    private func startService(_ handler: any ServiceHandler, objects: GattServiceObjects, on link: PhoneLink) {
        guard let connection else { return }
        let service = link.add(handler, service: objects)
        service.starting = true
        logger.info("\(link.device.address): the phone offers \(handler.description.name); subscribing")
        let gatt = GattClient(connection: connection), id = link.id, path = link.device.path, number = service.number
        link.tasks.append(Task(executorPreference: executor) { await self.subscribeService(number, linkID: id, path: path, gatt: gatt) })
    }

    private func subscribeService(_ number: Int, linkID: UInt64, path: ObjectPath, gatt: GattClient) async {
        guard let link = link(id: linkID, at: path), let service = link.service(number: number) else { return }
        for characteristic in service.notifying {
            do {
                try await enableNotifications(characteristic, of: service, on: link, gatt: gatt)
            } catch {
                guard link.state == .running, service.starting else { return }
                let name = service.description.name
                logger.warning("""
                    \(link.device.address): cannot subscribe to \(name)'s \(service.name(of: characteristic)): \(error); \
                    trying again in \(Int(Self.extraServiceRetry.components.seconds)) s
                    """)
                stopService(service, on: link, reason: nil)
                holdOff(name, on: link, for: Self.extraServiceRetry)
                return
            }
            guard link.state == .running, service.starting else { return }
        }
        service.starting = false
        logger.info("\(link.device.address): subscribed to \(service.description.name) (\(service.deliveryName ?? "no notifications"))")
        service.handler.subscribed(to: Set(service.paths.keys), service: service, link: link, daemon: self)
    }

    /// Keeps the service `name` off the link for `pause`, then looks again whether to start it.
    func holdOff(_ name: String, on link: PhoneLink, for pause: Duration) {
        guard link.failedServices.insert(name).inserted else { return }
        let id = link.id, path = link.device.path
        executor.after(pause, onLoop { daemon in
            guard let link = daemon.link(id: id, at: path) else { return }
            link.failedServices.remove(name)
            daemon.updateExtraServices(of: link)
        })
    }

    /// Ends a service on a running link: its sockets, its request, its subscriptions, its waiters.
    func stopService(_ service: ServiceLink, on link: PhoneLink, reason: String?) {
        if let reason { logger.info("\(link.device.address): \(service.description.name) stopped: \(reason)") }
        service.starting = false
        service.renewing = false
        let signalled = service.delivery.compactMap { $0.value == .signals ? $0.key : nil }
        service.dropSubscriptions()
        service.handler.tearDown()
        link.remove(service)
        if let connection, tree.device(at: link.device.path)?.connected == true, !signalled.isEmpty {
            let gatt = GattClient(connection: connection)
            Task(executorPreference: executor) { for characteristic in signalled { try? await gatt.stopNotify(characteristic) } }
        }
        armTimer(for: link)
    }
}
