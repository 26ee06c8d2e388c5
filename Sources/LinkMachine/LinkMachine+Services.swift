import GattSession

/// The services a link speaks beside the primary one. Each is found in the device's view,
/// started on a running link when the phone offers it (it may offer it only later, with
/// Service Changed) and its objects have settled, and stopped when it goes; a service that
/// cannot be subscribed to stays off for `serviceRetry`.
extension LinkMachine {
    /// Starts the services the phone offers now on a running link, and stops those it no
    /// longer offers (or the options turned off).
    mutating func updateServices(of path: String) {
        guard let link = links[path], link.state == .running, let view = phone(at: path) else { return }
        for description in settings.services {
            let uuid = description.uuid
            let enabled = settings.enabled.contains(uuid)
            let found = enabled ? view.services[uuid] : nil
            if let current = links[path]?.services.first(where: { $0.description.uuid == uuid }), current.objects != found {
                let reason = !enabled ? "turned off" : found == nil ? "the phone no longer offers it" : "the phone changed it"
                stopService(current.number, on: path, reason: reason)
                // bluetoothd adds and removes a changed service's objects one by one: start
                // again once they have settled, not at each.
                holdOff(uuid, on: path, for: Self.socketClosedPause)
            }
            guard let found else {
                links[path]?.settled.remove(uuid)
                continue
            }
            guard let link = links[path], !link.services.contains(where: { $0.description.uuid == uuid }), link.heldOff[uuid] == nil
            else { continue }
            // A service that appears has its objects added one by one: it starts once they settled.
            guard link.settled.contains(uuid) else {
                links[path]?.settled.insert(uuid)
                holdOff(uuid, on: path, for: Self.socketClosedPause)
                continue
            }
            startService(description, objects: found, on: path)
        }
    }

    private mutating func startService(_ description: GattServiceDescription, objects: ServiceObjects, on path: String) {
        guard var link = links[path] else { return }
        let number = link.nextServiceNumber
        link.nextServiceNumber += 1
        link.services.append(Service(number: number, description: description, objects: objects))
        links[path] = link
        log(.info, "\(link.address): the phone offers \(description.name); subscribing")
        commands.append(.openService(link.id, service: number, uuid: description.uuid, objects: objects))
        subscribeNext(on: path, service: number, from: 0)
    }

    /// Keeps the service `uuid` off the link for `pause`, then looks again whether to start it.
    mutating func holdOff(_ uuid: CharacteristicUUID, on path: String, for pause: Duration) {
        guard links[path]?.heldOff[uuid] == nil else { return }
        links[path]?.heldOff[uuid] = now + pause
    }

    /// Ends a service beside the primary one: its sockets, its request, its subscriptions.
    mutating func stopService(_ number: Int, on path: String, reason: String?) {
        guard var link = links[path], number != 0, let position = link.index(of: number) else { return }
        let service = link.services.remove(at: position)
        links[path] = link
        if let reason { log(.info, "\(link.address): \(service.description.name) stopped: \(reason)") }
        commands.append(.closeService(link.id, service: number))
        if isConnected(path) { release(service.signalled) }
    }
}
