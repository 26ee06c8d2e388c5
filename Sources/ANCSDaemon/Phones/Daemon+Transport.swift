import ANCSRuntime
import BlueZ
import DBus
import EventLoop
import GattSession

/// The transport every GATT service on a link shares: subscribing to its notifying
/// characteristics (AcquireNotify, else StartNotify), the values that come back (a socket's
/// datagrams or PropertiesChanged signals), the requests a session asks for (writes and reads,
/// on this actor's loop, no task), the link's one timer, and the renewal of a service's
/// subscriptions. What a service does with its values is its `ServiceHandler`'s.
extension Daemon {
    // MARK: Subscribing

    /// Each service's notifying characteristics in its description's order (ANCS: the Data
    /// Source first, then the Notification Source: the phone answers requests on the Data
    /// Source, and starts sending Notification Source events, replaying its backlog, at once).
    func subscribe(linkID: UInt64, path: ObjectPath) async {
        guard let connection, let link = links[path], link.id == linkID else { return }
        let gatt = GattClient(connection: connection)
        for service in link.services {
            for characteristic in service.notifying {
                guard link.state == .subscribing else { return }
                do {
                    try await enableNotifications(characteristic, of: service, on: link, gatt: gatt)
                } catch {
                    guard link.state == .subscribing else { return }
                    link.state = .failed("\(error)")
                    retrySubscription(of: link, error: error)
                    return
                }
            }
        }
        guard link.state == .subscribing else { return }
        link.state = .running
        subscribeRetryMilliseconds[path] = nil
        // The services start now (ANCS: the alive check and the watch on the Notification
        // Source): never before a phone is connected and subscribed, so an idle daemon keeps no timer.
        defer {
            for service in link.services {
                service.handler.subscribed(to: Set(service.paths.keys), service: service, link: link, daemon: self)
            }
            updateExtraServices(of: link)
        }
        logger.info("\(link.device.address): connected (\(link.device.name ?? "unnamed"), \(link.deliveryName ?? "-"))")
        output.emit(.connected(device: link.device.address, name: link.device.name))
        link.recorder?.connected(at: link.now)
        scheduleStatus()
    }

    func enableNotifications(_ characteristic: ObjectPath, of service: ServiceLink, on link: PhoneLink, gatt: GattClient) async throws {
        var releasedStale = false
        acquiring: while options.preferAcquireNotify {
            do {
                let (fd, mtu) = try await gatt.acquireNotify(characteristic)
                acquiredBefore.insert(characteristic)
                guard link.state == .subscribing || (link.state == .running && (service.renewing || service.starting)),
                      let raw = fd.take()
                else { return }
                guard let uuid = service.uuid(of: characteristic) else { return }
                let id = link.id, path = link.device.path, number = service.number
                // The reader runs on the daemon's loop: each datagram goes straight into the
                // session, with no task or thread in between.
                let reader = try NotificationReader(
                    fd: raw, loop: executor,
                    onValue: onLoop { $0.received($1, from: uuid, service: number, linkID: id, path: path) },
                    onClose: onLoop { $0.socketClosed($1, service: number, linkID: id, path: path) })
                service.readers.append(reader)
                service.delivery[characteristic] = .acquired(mtu: mtu)
                return
            } catch is CancellationError {
                throw CancellationError()  // the link is going away: nothing to fall back to
            } catch let error as DBusError where Self.isNotifyAcquired(error) && !releasedStale && holdsStaleSocket(characteristic) {
                releasedStale = true
                logger.info("""
                    \(link.device.address): bluetoothd still holds the notification socket of \(characteristic) \
                    from a link that ended ("Notify acquired"); releasing it with StopNotify
                    """)
                try? await gatt.stopNotify(characteristic)
                continue acquiring
            } catch let error as DBusError where Self.startNotifyCannotHelp(error) {
                throw error
            } catch {
                logger.debug("\(link.device.address): AcquireNotify on \(characteristic) failed (\(error)); using StartNotify")
            }
            break
        }
        service.delivery[characteristic] = .signals  // before StartNotify: the first values may come at once
        do {
            try await gatt.startNotify(characteristic)
        } catch {
            service.delivery[characteristic] = nil  // nothing to stop later
            throw error
        }
    }

    /// bluetoothd's answer to AcquireNotify and StartNotify while a socket of the characteristic
    /// is acquired.
    static func isNotifyAcquired(_ error: DBusError) -> Bool {
        error.name == "org.bluez.Error.NotPermitted" && error.message == "Notify acquired"
    }

    /// Whether bluetoothd's acquired socket of `characteristic` can only be ancsd's own from a
    /// link that ended: ancsd acquired it before and no link of its holds it now. bluetoothd
    /// 5.82 kept such a socket registered for over a minute after a fast reconnection
    /// (docs/system-test.md); a `StopNotify` releases it. One another program holds is left alone.
    private func holdsStaleSocket(_ characteristic: ObjectPath) -> Bool {
        guard acquiredBefore.contains(characteristic) else { return false }
        return !links.values.contains { link in
            link.services.contains { service in
                if case .acquired = service.delivery[characteristic] { true } else { false }
            }
        }
    }

    /// AcquireNotify errors after which StartNotify is no way out: the link is gone (bluetoothd
    /// 5.66 says `Failed: Not connected`, later ones `NotConnected`), or a socket is still
    /// acquired (StartNotify refuses "Notify acquired" too). The session is retried instead.
    static func startNotifyCannotHelp(_ error: DBusError) -> Bool {
        switch (error.name, error.message) {
        case ("org.bluez.Error.Failed", "Not connected"), ("org.bluez.Error.NotConnected", _):
            true
        default:
            isNotifyAcquired(error)
        }
    }

    // MARK: Values from the phone

    /// A value signalled on the bus (StartNotify): to every link's service that subscribed to it so.
    func routeValue(_ value: [UInt8], from path: ObjectPath) {
        for link in links.values where link.state != .stopped {
            guard let service = link.service(for: path), service.receivesSignals(for: path), let uuid = service.uuid(of: path)
            else { continue }
            service.handler.received(value, from: uuid, signalled: true, service: service, link: link, daemon: self)
        }
    }

    /// A datagram from a link's socket, if the link is still the one that opened it.
    private func received(_ value: [UInt8], from uuid: CharacteristicUUID, service serviceNumber: Int, linkID: UInt64, path: ObjectPath) {
        guard let link = link(id: linkID, at: path), link.state != .stopped else { return }
        guard let service = link.service(number: serviceNumber) else { return }
        service.handler.received(value, from: uuid, signalled: false, service: service, link: link, daemon: self)
    }

    /// A link's socket closed. ANCS's: the link ends, and a phone still connected gets a new one
    /// after a pause. Another service's (the phone withdrew it, with Service Changed, or the link
    /// is going): that service ends, and starts again after the pause if the phone still offers it.
    private func socketClosed(_ reason: String, service number: Int, linkID: UInt64, path: ObjectPath) {
        guard let link = link(id: linkID, at: path), link.state != .stopped else { return }
        if number != 0 {
            guard let service = link.service(number: number) else { return }
            let name = service.description.name
            stopService(service, on: link, reason: "its notification socket closed (\(reason))")
            holdOff(name, on: link, for: Self.socketClosedPause)
            return
        }
        logger.info("\(link.device.address): notification socket closed (\(reason))")
        stopLink(at: path, reason: "disconnected")
        guard tree.device(at: path)?.connected == true else { return }
        pausedAfterSocketClosed.insert(path)
        executor.after(Self.socketClosedPause, onLoop { daemon in
            daemon.pausedAfterSocketClosed.remove(path)
            daemon.logger.debug("\(path.rawValue): the pause after its closed socket is over")
            daemon.reconcile()
        })
    }

    /// The link with this id, if it is still the one at `path`. The last one found is kept
    /// while it is in `links`: almost every input and result of a burst is one phone's, found
    /// again without hashing its path.
    func link(id: UInt64, at path: ObjectPath) -> PhoneLink? {
        if let recent = recentLink, recent.id == id { return recent }
        guard let link = links[path], link.id == id else { return nil }
        recentLink = link
        return link
    }

    // MARK: A session's actions

    /// Carries out what a service's session asked for; `events` gets its events, in order.
    ///
    /// Requests go out first, the rest in order after them: the phone then works on the next
    /// request while this formats and prints the notification that just completed.
    func perform<Events: ServiceEvents>(
        _ actions: [GattSessionAction<Events.Event>], on service: ServiceLink, of link: PhoneLink, events: Events
    ) {
        for case .request(let request) in actions { send(request, on: service, of: link) }
        for action in actions {
            switch action {
            case .request:
                break  // sent above
            case .emit(let event):
                events.handle(event, link: link, daemon: self)
            case .log(let level, let message):
                phoneLog.log(LogLevel(level), "\(link.device.address): \(message)", kind: "\(link.device.address): \(RateLimitedLogs.kind(of: message))")
                if level >= .warning { link.lastError = message }
            case .resubscribe(let reason):
                renewSubscriptions(of: service, on: link, reason: reason)
            }
        }
        armTimer(for: link)
    }

    /// Sends a request at once, on this actor's loop: no task, and the reply comes back as a
    /// callback on the same loop (`requestCompleted`).
    private func send(_ request: GattRequest, on service: ServiceLink, of link: PhoneLink) {
        service.requestsIssued += 1
        let number = service.requestsIssued, path = link.device.path, id = link.id, servicePath = service.servicePath
        service.handler.sending(request, number: number, link: link)
        guard let connection else { return }
        let gatt = GattClient(connection: connection)
        startingRequest = true
        defer { startingRequest = false }
        do {
            let call: DBusConnection.PendingCall
            switch request {
            case .write(let uuid, let bytes):
                guard let characteristic = service.path(of: uuid) else { throw GattRequestError.noCharacteristic(uuid) }
                call = try gatt.startWriteRequest(characteristic, bytes, completion: onLoop { daemon, result in
                    daemon.requestCompleted(result.map { nil }, number: number, service: servicePath, linkID: id, path: path)
                })
            case .read(let uuid):
                guard let characteristic = service.path(of: uuid) else { throw GattRequestError.noCharacteristic(uuid) }
                call = try gatt.startReadValue(characteristic, completion: onLoop { daemon, result in
                    daemon.requestCompleted(result.map { $0 }, number: number, service: servicePath, linkID: id, path: path)
                })
            }
            service.request = (call, connection, number)
        } catch {
            requestCompleted(.failure(error), number: number, service: servicePath, linkID: id, path: path)
        }
    }

    private func requestCompleted(
        _ outcome: Result<[UInt8]?, any Error>, number: UInt64, service servicePath: ObjectPath, linkID: UInt64, path: ObjectPath
    ) {
        let result: GattResult
        switch outcome {
        case .success(let value):
            result = value.map { .read($0) } ?? .written
        case .failure(let error as DBusError):
            result = attErrorCode(in: error).map { .attError($0) } ?? .failed(error.description)
        case .failure(let error as GattRequestError):
            result = .failed(error.description)
        case .failure:
            return  // cancelled with its link
        }
        // A request that failed before it was sent (its completion ran inside `send`): its
        // result is handled on a later turn, not in the middle of carrying out the actions.
        if startingRequest {
            executor.execute(onLoop { $0.requestFinished(result, number: number, service: servicePath, linkID: linkID, path: path) })
        } else {
            requestFinished(result, number: number, service: servicePath, linkID: linkID, path: path)
        }
    }

    private func requestFinished(_ result: GattResult, number: UInt64, service servicePath: ObjectPath, linkID: UInt64, path: ObjectPath) {
        guard let link = link(id: linkID, at: path), link.state != .stopped,
              let service = link.services.first(where: { $0.servicePath == servicePath })
        else { return }
        if number == service.requestsIssued { service.request = nil }
        service.handler.finished(result, request: number, service: service, link: link, daemon: self)
    }

    // MARK: The link's timer

    /// Keeps one timer per link armed for its services' earliest deadline, disarmed when idle.
    ///
    /// Sessions tolerate being called early, so a deadline later than the armed one keeps the
    /// armed one: while requests follow each other (each moves the deadline later) the timer is
    /// re-armed about once per quiet period instead of twice per request (each a timerfd_settime).
    func armTimer(for link: PhoneLink) {
        var deadline: Duration?
        for service in link.services {
            if let next = service.handler.nextDeadline { deadline = deadline.map { min($0, next) } ?? next }
        }
        guard let deadline else {
            if link.timerDeadline != nil {
                link.timerDeadline = nil
                link.timer?.cancel()
            }
            return
        }
        if let armed = link.timerDeadline, armed <= deadline { return }
        link.timerDeadline = deadline
        let timer: LoopTimer
        if let existing = link.timer {
            timer = existing
        } else {
            let id = link.id, path = link.device.path
            timer = executor.makeTimer(handler: onLoop { $0.timerFired(linkID: id, path: path) })
            link.timer = timer
        }
        timer.schedule(after: max(.zero, deadline - link.now))
    }

    private func timerFired(linkID: UInt64, path: ObjectPath) {
        guard let link = links[path], link.id == linkID, link.state != .stopped else { return }
        link.timerDeadline = nil
        let now = link.now
        for service in link.services {
            if let deadline = service.handler.nextDeadline, deadline <= now {
                service.handler.timerFired(service: service, link: link, daemon: self)
            }
        }
        armTimer(for: link)
    }

    // MARK: Renewing the subscriptions

    /// Unsubscribes from the service's notifying characteristics and subscribes again (in the
    /// description's order), so that bluetoothd writes the phone's CCCDs afresh: off when the
    /// last subscription of a characteristic goes, on when the first comes (docs/dbus.md,
    /// "Renewing the subscriptions"). What the phone sends from now on is a new session.
    ///
    /// At once: the service's sockets are closed and its signals no longer routed, the request
    /// in flight is forgotten and the session is told (`renewing`); then, in a task, StopNotify
    /// on each characteristic (waited for: a StopNotify that came after the new AcquireNotify
    /// would end the new socket) and the subscriptions again. A renewal that fails starts the
    /// link afresh, as a failed subscription does.
    func renewSubscriptions(of service: ServiceLink, on link: PhoneLink, reason: String) {
        guard link.state == .running, !service.renewing, let connection else { return }
        service.renewing = true
        logger.info("\(link.device.address): renewing the \(service.description.name) subscriptions (\(reason))")
        let previous = service.delivery
        service.dropSubscriptions()
        service.handler.renewing(service: service, link: link, daemon: self)
        let id = link.id, path = link.device.path, servicePath = service.servicePath
        let gatt = GattClient(connection: connection)
        link.tasks.append(Task(executorPreference: executor) {
            await self.resubscribe(service: servicePath, linkID: id, path: path, previous: previous, gatt: gatt)
        })
    }

    private func resubscribe(
        service servicePath: ObjectPath, linkID: UInt64, path: ObjectPath, previous: [ObjectPath: ServiceLink.Delivery], gatt: GattClient
    ) async {
        guard let link = link(id: linkID, at: path), let service = link.services.first(where: { $0.servicePath == servicePath })
        else { return }
        var shared: [String] = []
        for characteristic in service.notifying.reversed() {
            guard let delivery = previous[characteristic] else { continue }
            do {
                try await gatt.stopNotify(characteristic)
            } catch {
                // An acquired socket closed just before may already be gone: nothing to stop.
                logger.debug("\(link.device.address): StopNotify on \(characteristic): \(error)")
            }
            guard link.state == .running, service.renewing else { return }
            // With StartNotify, bluetoothd writes the CCCD only when the last notify session of
            // the characteristic goes: if another program holds one, Notifying stays true.
            if delivery == .signals, let connection,
               (try? await connection.getProperty(
                   destination: BlueZ.service, path: characteristic, interface: "org.bluez.GattCharacteristic1", name: "Notifying"))?
                .boolValue == true {
                shared.append(service.name(of: characteristic))
            }
            guard link.state == .running, service.renewing else { return }
        }
        if !shared.isEmpty {
            service.sharedNotifySession = shared.joined(separator: " and ")
            logger.warning("""
                \(link.device.address): another program holds notifications of the phone's \(shared.joined(separator: " and ")) \
                (bluetoothctl's "notify on", another \(service.description.name) client): bluetoothd writes the phone's CCCD \
                only when the last subscription goes, so renewing ancsd's own cannot reach the phone; close that program, or \
                turn Bluetooth off and on on the phone
                """)
        } else {
            service.sharedNotifySession = nil
        }
        for characteristic in service.notifying {
            do {
                try await enableNotifications(characteristic, of: service, on: link, gatt: gatt)
            } catch {
                guard link.state == .running, service.renewing else { return }
                service.renewing = false
                link.state = .failed("\(error)")
                retrySubscription(of: link, error: error)
                return
            }
            guard link.state == .running, service.renewing else { return }
        }
        service.renewing = false
        logger.info("\(link.device.address): subscribed again (\(service.deliveryName ?? "-"))")
        service.handler.subscribed(to: Set(service.paths.keys), service: service, link: link, daemon: self)
    }
}

/// A request a session asked for that the link cannot make.
enum GattRequestError: Error, CustomStringConvertible {
    case noCharacteristic(CharacteristicUUID)

    var description: String {
        switch self {
        case .noCharacteristic(let uuid): "the phone offers no characteristic \(uuid)"
        }
    }
}
