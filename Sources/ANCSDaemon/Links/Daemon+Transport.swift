import ANCSRuntime
import BlueZ
import DBus
import EventLoop
import GattSession

/// The transport every GATT service on a link shares, once subscribed (`LinkMachine` decides
/// that): the values that come back (a socket's datagrams or PropertiesChanged signals), the
/// requests a session asks for (writes and reads, on this actor's loop, no task) and the link's
/// one timer. What a service does with its values is its `ServiceHandler`'s.
extension Daemon {
    // MARK: Values from the phone

    /// A value signalled on the bus (StartNotify): to the link's service that subscribed to it so.
    func routeValue(_ value: [UInt8], from path: ObjectPath) {
        guard let target = machine.signalled(at: path.rawValue), let link = link(id: target.link), link.state != .stopped,
              let service = link.service(number: target.service)
        else { return }
        service.handler.received(value, from: target.characteristic, signalled: true, ServiceContext(service: service, link: link), daemon: self)
    }

    /// A datagram from a link's socket, if the link is still the one that opened it.
    func received(_ value: [UInt8], from uuid: CharacteristicUUID, service serviceNumber: Int, linkID: UInt64, path: ObjectPath) {
        guard let link = link(id: linkID, at: path), link.state != .stopped else { return }
        guard let service = link.service(number: serviceNumber) else { return }
        service.handler.received(value, from: uuid, signalled: false, ServiceContext(service: service, link: link), daemon: self)
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
        _ actions: [GattSessionAction<Events.Event>], in context: ServiceContext, events: Events
    ) {
        let (service, link) = (context.service, context.link)
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
                feed(.renew(link.id, service: service.number, reason: reason))
            }
        }
        armTimer(for: link)
    }

    /// Sends a request at once, on this actor's loop: no task, and the reply comes back as a
    /// callback on the same loop (`requestCompleted`).
    private func send(_ request: GattRequest, on service: ServiceLink, of link: PhoneLink) {
        service.requestsIssued += 1
        let number = service.requestsIssued, path = link.device.path, id = link.id, serviceNumber = service.number
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
                    daemon.requestCompleted(result.map { nil }, number: number, service: serviceNumber, linkID: id, path: path)
                })
            case .read(let uuid):
                guard let characteristic = service.path(of: uuid) else { throw GattRequestError.noCharacteristic(uuid) }
                call = try gatt.startReadValue(characteristic, completion: onLoop { daemon, result in
                    daemon.requestCompleted(result.map { $0 }, number: number, service: serviceNumber, linkID: id, path: path)
                })
            }
            service.request = (call, connection, number)
        } catch {
            requestCompleted(.failure(error), number: number, service: serviceNumber, linkID: id, path: path)
        }
    }

    private func requestCompleted(
        _ outcome: Result<[UInt8]?, any Error>, number: UInt64, service serviceNumber: Int, linkID: UInt64, path: ObjectPath
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
            executor.execute(onLoop { $0.requestFinished(result, number: number, service: serviceNumber, linkID: linkID, path: path) })
        } else {
            requestFinished(result, number: number, service: serviceNumber, linkID: linkID, path: path)
        }
    }

    private func requestFinished(_ result: GattResult, number: UInt64, service serviceNumber: Int, linkID: UInt64, path: ObjectPath) {
        guard let link = link(id: linkID, at: path), link.state != .stopped, let service = link.service(number: serviceNumber)
        else { return }
        if number == service.requestsIssued { service.request = nil }
        service.handler.finished(result, request: number, ServiceContext(service: service, link: link), daemon: self)
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
                service.handler.timerFired(ServiceContext(service: service, link: link), daemon: self)
            }
        }
        armTimer(for: link)
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
