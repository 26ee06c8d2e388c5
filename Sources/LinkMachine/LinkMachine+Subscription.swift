import GattSession

/// Subscribing to a service's notifying characteristics, in its description's order (ANCS: the
/// Data Source first, then the Notification Source: the phone answers requests on the Data
/// Source, and starts sending Notification Source events, replaying its backlog, at once);
/// and renewing them. One path for a link's first service, a service added later and a renewal.
extension LinkMachine {
    /// Subscribes to the service's notifying characteristic `index`, or finishes.
    mutating func subscribeNext(on path: String, service number: Int, from index: Int) {
        guard let link = links[path], let position = link.index(of: number) else { return }
        let service = link.services[position]
        guard index < service.notifying.count else { return subscribed(on: path, service: position) }
        let characteristic = service.notifying[index].path
        let purpose = PendingCall(
            path: path, link: link.id, service: number, step: .acquire(index: index, releasedStale: false))
        if settings.preferAcquireNotify {
            call(.acquireNotify(characteristic), for: purpose)
        } else {
            startNotify(characteristic, on: path, service: position, index: index)
        }
    }

    /// StartNotify; the characteristic counts as signalled at once (its first values may come
    /// before the answer).
    private mutating func startNotify(_ characteristic: String, on path: String, service position: Int, index: Int) {
        guard let link = links[path] else { return }
        links[path]?.services[position].delivery[characteristic] = .signals
        let service = link.services[position]
        call(.startNotify(characteristic), for: PendingCall(
            path: path, link: link.id, service: service.number, step: .start(index: index)))
    }

    /// A call ended: carries on with what it was for, if that is still going on.
    mutating func ended(_ pending: PendingCall, id: CallID, _ outcome: CallOutcome) {
        if case .acquire = pending.step {
            switch outcome {
            case .acquired:
                acquiredBefore.insert(pending.characteristic)
                unanswered.remove(pending.characteristic)
            case .failed(let error) where error.isNoAnswer:
                unanswered.insert(pending.characteristic)
            default:
                break
            }
        }
        switch pending.step {
        case .release:
            return
        case .releaseFailed:
            if links[pending.path]?.id == pending.link { releaseNextFailed(at: pending.path) }
            return
        default:
            break
        }
        guard let link = links[pending.path], link.id == pending.link, !link.isFailed, let position = link.index(of: pending.service)
        else { return }
        let service = link.services[position]
        switch (pending.step, outcome) {
        case (_, .cancelled):
            return  // ancsd is stopping
        case (.acquire(let index, _), .acquired):
            let characteristic = service.notifying[index]
            links[pending.path]?.services[position].delivery[characteristic.path] = .acquired
            commands.append(.keepSocket(id, link.id, service: service.number, characteristic: characteristic.uuid))
            subscribeNext(on: pending.path, service: service.number, from: index + 1)
        case (.acquire(let index, let releasedStale), .failed(let error)):
            acquireFailed(error, on: pending.path, service: position, index: index, releasedStale: releasedStale)
        case (.releaseStale(let index), _):
            // Whatever bluetoothd answered, AcquireNotify once more (a second "Notify acquired" falls back).
            call(.acquireNotify(service.notifying[index].path), for: PendingCall(
                path: pending.path, link: link.id, service: service.number,
                step: .acquire(index: index, releasedStale: true)))
        case (.start(let index), .failed(let error)):
            links[pending.path]?.services[position].delivery[service.notifying[index].path] = nil  // nothing to stop later
            subscribingFailed(error, on: pending.path, service: position)
        case (.start(let index), _):
            subscribeNext(on: pending.path, service: service.number, from: index + 1)
        case (.unsubscribe, let outcome):
            unsubscribed(outcome, on: pending.path, service: position)
        case (.readNotifying, let outcome):
            if case .notifying(true) = outcome, let (path, _) = service.unsubscribing.first {
                links[pending.path]?.services[position].shared.append(service.name(of: path))
            }
            links[pending.path]?.services[position].unsubscribing.removeFirst()
            unsubscribeNext(on: pending.path, service: position)
        case (.acquire, _), (.release, _), (.releaseFailed, _):
            return
        }
    }

    private mutating func acquireFailed(_ error: CallError, on path: String, service position: Int, index: Int, releasedStale: Bool) {
        guard let link = links[path] else { return }
        let service = link.services[position]
        let characteristic = service.notifying[index].path
        if error.isNotifyAcquired && !releasedStale && holdsStaleSocket(characteristic) {
            log(.info, """
                \(link.address): bluetoothd still holds the notification socket of \(characteristic) \
                from a link that ended ("Notify acquired"); releasing it with StopNotify
                """)
            call(.stopNotify(characteristic), for: PendingCall(
                path: path, link: link.id, service: service.number, step: .releaseStale(index: index)))
        } else if error.isNotifyAcquired && unanswered.contains(characteristic) {
            log(.info, """
                \(link.address): bluetoothd still holds an AcquireNotify of ancsd's on \(characteristic) \
                that it never answered ("Notify acquired"); left alone until it ends (StopNotify on it \
                crashes bluetoothd 5.82)
                """)
            subscribingFailed(error, on: path, service: position)
        } else if error.startNotifyCannotHelp {
            subscribingFailed(error, on: path, service: position)
        } else {
            log(.debug, "\(link.address): AcquireNotify on \(characteristic) failed (\(error)); using StartNotify")
            startNotify(characteristic, on: path, service: position, index: index)
        }
    }

    /// Whether bluetoothd's acquired socket of `characteristic` can only be ancsd's own from a
    /// link that ended: ancsd acquired it before and no link holds it now. bluetoothd 5.82 kept
    /// such a socket registered for over a minute after a fast reconnection
    /// (docs/system-test.md); a `StopNotify` releases it. One another program holds is left alone.
    private func holdsStaleSocket(_ characteristic: String) -> Bool {
        guard acquiredBefore.contains(characteristic), !unanswered.contains(characteristic) else { return false }
        return !links.values.contains { link in link.services.contains { $0.delivery[characteristic] == .acquired } }
    }

    /// Every notifying characteristic of the service is subscribed.
    private mutating func subscribed(on path: String, service position: Int) {
        guard var link = links[path] else { return }
        var service = link.services[position]
        let characteristics = Set(service.objects.characteristics.keys)
        let wasRenewing = service.phase == .renewing
        service.phase = .running
        link.services[position] = service
        links[path] = link
        if link.state == .subscribing {
            links[path]?.state = .running
            retryDelays[path] = nil
            let name = phone(at: path)?.name ?? "unnamed"
            log(.info, "\(link.address): connected (\(name), \(service.deliveryName ?? "-"))")
            commands.append(.linkUp(link.id))
            // The services start now: never before a phone is connected and subscribed.
            for started in link.services {
                commands.append(.subscribed(link.id, service: started.number, characteristics: Set(started.objects.characteristics.keys)))
            }
            updateServices(of: path)
        } else if wasRenewing {
            log(.info, "\(link.address): subscribed again (\(service.deliveryName ?? "-"))")
            commands.append(.subscribed(link.id, service: service.number, characteristics: characteristics))
        } else {
            log(.info, "\(link.address): subscribed to \(service.description.name) (\(service.deliveryName ?? "no notifications"))")
            commands.append(.subscribed(link.id, service: service.number, characteristics: characteristics))
        }
    }

    /// Subscribing failed. On the primary service, or in a renewal, the link fails and starts
    /// afresh after a pause; a service beside it stops and stays off for `serviceRetry`.
    private mutating func subscribingFailed(_ error: CallError, on path: String, service position: Int) {
        guard let link = links[path] else { return }
        let service = link.services[position]
        if link.state == .subscribing || service.phase == .renewing {
            links[path]?.services[position].phase = .running
            return linkFailed(at: path, error: error)
        }
        let characteristic = service.notifying.first { service.delivery[$0.path] == nil }?.path ?? ""
        log(.warning, """
            \(link.address): cannot subscribe to \(service.description.name)'s \(service.name(of: characteristic)): \(error); \
            trying again in \(Self.serviceRetry.components.seconds) s
            """)
        stopService(service.number, on: path, reason: nil)
        holdOff(service.description.uuid, on: path, for: Self.serviceRetry)
    }

    // MARK: Renewing

    /// Unsubscribes from the service's notifying characteristics and subscribes again (in the
    /// description's order), so that bluetoothd writes the phone's CCCDs afresh: off when the
    /// last subscription of a characteristic goes, on when the first comes (docs/dbus.md,
    /// "Renewing the subscriptions"). What the phone sends from now on is a new session.
    ///
    /// At once: the service's sockets are closed, its signals no longer routed, its request in
    /// flight forgotten and its session told; then StopNotify on each characteristic, last
    /// first, each answer waited for (a StopNotify that came after the new AcquireNotify would
    /// end the new socket), and the subscriptions again.
    mutating func renew(link id: LinkID, service number: Int, reason: String) {
        guard let path = path(of: id), var link = links[path], link.state == .running, let position = link.index(of: number),
              link.services[position].phase == .running
        else { return }
        var service = link.services[position]
        log(.info, "\(link.address): renewing the \(service.description.name) subscriptions (\(reason))")
        service.unsubscribing = service.notifying.reversed().compactMap { target in service.delivery[target.path].map { (target.path, $0) } }
        service.shared = []
        service.delivery = [:]
        service.phase = .renewing
        link.services[position] = service
        links[path] = link
        commands.append(.dropSockets(id, service: number))
        commands.append(.renewing(id, service: number))
        unsubscribeNext(on: path, service: position)
    }

    private mutating func unsubscribeNext(on path: String, service position: Int) {
        guard let link = links[path] else { return }
        var service = link.services[position]
        let purpose = PendingCall(path: path, link: link.id, service: service.number, step: .unsubscribe)
        if let (characteristic, _) = service.unsubscribing.first {
            return call(.stopNotify(characteristic), for: purpose)
        }
        if service.shared.isEmpty {
            service.sharedNotifySession = nil
        } else {
            let names = service.shared.joined(separator: " and ")
            service.sharedNotifySession = names
            log(.warning, """
                \(link.address): another program holds notifications of the phone's \(names) \
                (bluetoothctl's "notify on", another \(service.description.name) client): bluetoothd writes the phone's CCCD \
                only when the last subscription goes, so renewing ancsd's own cannot reach the phone; close that program, or \
                turn Bluetooth off and on on the phone
                """)
        }
        links[path]?.services[position] = service
        subscribeNext(on: path, service: service.number, from: 0)
    }

    /// A renewal's StopNotify ended. With StartNotify, bluetoothd writes the CCCD only when the
    /// last notify session of the characteristic goes: if another program holds one,
    /// `Notifying` stays true, which is read next.
    private mutating func unsubscribed(_ outcome: CallOutcome, on path: String, service position: Int) {
        guard let link = links[path], let (characteristic, delivery) = link.services[position].unsubscribing.first else { return }
        let service = link.services[position]
        if case .failed(let error) = outcome {
            // An acquired socket closed just before may already be gone: nothing to stop.
            log(.debug, "\(link.address): StopNotify on \(characteristic): \(error)")
        }
        if delivery == .signals {
            return call(.readNotifying(characteristic), for: PendingCall(
                path: path, link: link.id, service: service.number, step: .readNotifying))
        }
        links[path]?.services[position].unsubscribing.removeFirst()
        unsubscribeNext(on: path, service: position)
    }
}
