import ANCSRuntime
import BlueZ
import BluetoothUUIDs
import DBus
import GattSession

/// The services a link speaks beside ANCS. Each is found in bluetoothd's tree under the phone,
/// started on a running link when it appears (the phone may offer it only later, with Service
/// Changed), and stopped when it goes; a service that cannot be subscribed to stays off until
/// the link starts again. Adding a service is one entry in `extraServices`.
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

    /// Every service a link may speak beside ANCS.
    static let extraServices: [ExtraService] = [MediaService.extra]

    /// Starts the extra services the phone offers now on a running link, and stops those it
    /// no longer offers (or the options turned off).
    func updateExtraServices(of link: PhoneLink) {
        guard link.state == .running else { return }
        for extra in Self.extraServices {
            let current = link.services.first { $0.description.uuid == extra.description.uuid }
            let found = extra.enabled(options) ? offered(extra.description, on: link) : nil
            if let current, current.servicePath != found?.path || current.paths != found.map({ paths(of: $0, extra.description) }) {
                let reason = !extra.enabled(options) ? "turned off" : found == nil ? "the phone no longer offers it" : "the phone changed it"
                stopService(current, on: link, reason: reason)
            }
            guard let found, !link.services.contains(where: { $0.description.uuid == extra.description.uuid }),
                  !link.failedServices.contains(extra.description.name)
            else { continue }
            startService(extra.make(options), objects: found, on: link)
        }
    }

    /// The first instance of the service under the phone with at least one of its characteristics.
    private func offered(_ description: GattServiceDescription, on link: PhoneLink) -> GattServiceObjects? {
        guard let uuid = BluetoothUUID(description.uuid.rawValue) else { return nil }
        return tree.gattServices(uuid, of: link.device.path).first { !paths(of: $0, description).isEmpty }
    }

    private func paths(of objects: GattServiceObjects, _ description: GattServiceDescription) -> [CharacteristicUUID: ObjectPath] {
        var found: [CharacteristicUUID: ObjectPath] = [:]
        for (uuid, path) in objects.characteristics {
            let id = CharacteristicUUID(uuid.description)
            if description.characteristic(id) != nil { found[id] = path }
        }
        return found
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
                logger.warning("""
                    \(link.device.address): cannot subscribe to \(service.description.name)'s \(service.name(of: characteristic)): \
                    \(error); \(service.description.name) stays off until the phone connects again
                    """)
                link.failedServices.insert(service.description.name)
                stopService(service, on: link, reason: nil)
                return
            }
            guard link.state == .running, service.starting else { return }
        }
        service.starting = false
        logger.info("\(link.device.address): subscribed to \(service.description.name) (\(service.deliveryName ?? "no notifications"))")
        service.handler.subscribed(to: Set(service.paths.keys), service: service, link: link, daemon: self)
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
