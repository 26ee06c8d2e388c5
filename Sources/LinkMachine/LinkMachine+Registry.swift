import GattSession

/// Which devices get a link, and when a link ends. A bonded, connected device allowed by the
/// options that exposes the primary service (ANCS) gets one.
extension LinkMachine {
    /// Starts links for the devices that should have one, ends those that should not.
    mutating func reconcile() {
        for path in links.keys.sorted() {
            guard let link = links[path] else { continue }
            guard let view = phone(at: path), view.connected, let primary = eligible(view), primary == link.primary else {
                stopLink(at: path, reason: isConnected(path) ? "\(settings.primary.name) is gone" : "disconnected")
                continue
            }
            if view.address != link.address {
                links[path]?.address = view.address
                commands.append(.follow(link.id, address: view.address))
            }
        }
        for view in phones where view.connected && links[view.path] == nil {
            guard pausedUntil[view.path] == nil else {
                log(.debug, "\(view.address): connected, but its notification socket closed a moment ago: a new session waits")
                continue
            }
            guard let primary = eligible(view) else { continue }
            startLink(view, primary: primary)
        }
        for path in links.keys.sorted() { updateServices(of: path) }
    }

    /// The device's primary service if it may have a link; says once why a device may not.
    private mutating func eligible(_ view: PhoneView) -> ServiceObjects? {
        guard view.allowed, let primary = view.ancs else { return nil }
        guard view.bonded else {
            if ignored.insert(view.path).inserted {
                log(.warning, "ignoring \(view.address): it exposes \(settings.primary.name) but is not bonded")
            }
            return nil
        }
        ignored.remove(view.path)
        return primary
    }

    private mutating func startLink(_ view: PhoneView, primary: ServiceObjects) {
        nextLinkID += 1
        let service = Service(number: 0, description: settings.primary, objects: primary)
        links[view.path] = Link(id: nextLinkID, path: view.path, address: view.address, primary: primary, services: [service])
        commands.append(.startLink(nextLinkID, view))
        subscribeNext(on: view.path, service: 0, from: 0)
    }

    /// Ends the link at `path`; a device still connected has its StartNotify sessions released.
    mutating func stopLink(at path: String, reason: String) {
        guard var link = links.removeValue(forKey: path) else { return }
        let connected = isConnected(path)
        if !connected { retryDelays[path] = nil }
        let wasRunning = link.state == .running
        link.state = .stopped
        commands.append(.endLink(link.id, reason: wasRunning ? reason : nil))
        if connected { release(link.services.flatMap(\.signalled)) }
    }

    /// A socket of the link closed. The primary service's: the link ends, and a device still
    /// connected gets a new one after `socketClosedPause`. Another service's (the phone
    /// withdrew it with Service Changed, or the link is going): that service ends, and starts
    /// again after the pause if the phone still offers it.
    mutating func socketClosed(link id: LinkID, service number: Int, reason: String) {
        guard let path = path(of: id), let link = links[path] else { return }
        if number != 0 {
            guard let index = link.index(of: number) else { return }
            let uuid = link.services[index].description.uuid
            stopService(number, on: path, reason: "its notification socket closed (\(reason))")
            holdOff(uuid, on: path, for: Self.socketClosedPause)
            return
        }
        log(.info, "\(link.address): notification socket closed (\(reason))")
        stopLink(at: path, reason: "disconnected")
        guard isConnected(path) else { return }
        pausedUntil[path] = now + Self.socketClosedPause
    }

    /// Subscribing failed while the device is still connected (bluetoothd still held the
    /// notification socket of a link that had just dropped, the link flapped under the call):
    /// the link starts afresh after a pause (0.5 s, doubling up to 30 s while it keeps
    /// failing), rather than leaving a connected phone unwatched until it reconnects.
    mutating func linkFailed(at path: String, error: CallError) {
        guard var link = links[path] else { return }
        let delay = retryDelays[path] ?? Self.firstRetry
        retryDelays[path] = min(delay * 2, Self.longestRetry)
        link.state = .failed(error.description)
        link.retryAt = now + delay
        links[path] = link
        let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
        log(.warning, "\(link.address): cannot subscribe to \(settings.primary.name): \(error); trying again in \(seconds) s")
    }

    /// Ends the StartNotify sessions a failed link holds, one after the other, waiting for each
    /// answer (a StopNotify that came after the next link's AcquireNotify would end that link's
    /// socket: bluetoothd releases an acquired socket for whoever asks); then replaces the link.
    mutating func restartFailedLink(at path: String) {
        guard var link = links[path], case .failed = link.state else { return }
        link.releasing = link.services.flatMap(\.signalled)
        for index in link.services.indices { link.services[index].delivery = [:] }
        links[path] = link
        releaseNextFailed(at: path)
    }

    mutating func releaseNextFailed(at path: String) {
        guard var link = links[path], case .failed = link.state else { return }
        guard !link.releasing.isEmpty else {
            stopLink(at: path, reason: "subscribing failed")
            reconcile()
            return
        }
        let next = link.releasing.removeFirst()
        links[path] = link
        call(.stopNotify(next), for: PendingCall(path: path, link: link.id, step: .releaseFailed))
    }

    /// The path of the device whose link is `id`.
    func path(of id: LinkID) -> String? {
        links.first { $0.value.id == id }?.key
    }
}
