import ANCSRuntime
import BlueZ
import DBus
import EventLoop
import GattSession
import LinkMachine

/// The daemon as the link machine's hands: every link decision is `LinkMachine`'s; this feeds
/// it what happened (the tree, the calls' results, closed sockets, its timer) and carries out
/// what it says, nothing more.
extension Daemon {
    /// The machine's clock: the daemon's loop, from the daemon's start.
    var linkTime: Duration { executor.now - started }

    /// Feeds the machine one input and carries out its commands.
    func feed(_ input: LinkMachine.Input) {
        let commands = machine.handle(input, now: linkTime)
        for command in commands { carryOut(command) }
        armLinkTimer()
    }

    private func carryOut(_ command: LinkMachine.Command) {
        switch command {
        case .call(let id, let call):
            start(call, id: id)
        case .startLink(let id, let view):
            startLink(id, view)
        case .linkUp(let id):
            guard let link = link(id: id) else { return }
            link.state = .running
            output.emit(.connected(device: link.device.address, name: link.device.name))
            link.recorder?.connected(at: link.now)
            scheduleStatus()
        case .endLink(let id, let reason):
            endLink(id, reason: reason)
        case .follow(let id, _):
            guard let link = link(id: id), let device = tree.device(at: link.device.path) else { return }
            follow(device, on: link)
        case .openService(let id, let number, let uuid, let objects):
            guard let link = link(id: id), let extra = Self.extraServices.first(where: { $0.description.uuid == uuid }) else { return }
            link.add(extra.make(options), service: objects, number: number)
        case .closeService(let id, let number):
            guard let link = link(id: id), let service = link.service(number: number) else { return }
            service.dropSubscriptions()
            service.handler.tearDown()
            link.remove(service)
            armTimer(for: link)
        case .keepSocket(let call, let id, let number, let uuid):
            keepSocket(from: call, for: uuid, service: number, link: id)
        case .dropSockets(let id, let number):
            link(id: id)?.service(number: number)?.dropSubscriptions()
        case .subscribed(let id, let number, let characteristics):
            guard let link = link(id: id), let service = link.service(number: number) else { return }
            service.ready = true
            service.handler.subscribed(to: characteristics, ServiceContext(service: service, link: link), daemon: self)
        case .renewing(let id, let number):
            guard let link = link(id: id), let service = link.service(number: number) else { return }
            service.handler.renewing(ServiceContext(service: service, link: link), daemon: self)
        case .log(let level, let message):
            logger.log(LogLevel(level), message)
        }
    }

    /// The link with this id, while it is one of `links`.
    func link(id: UInt64) -> PhoneLink? {
        if let recent = recentLink, recent.id == id { return recent }
        return links.values.first { $0.id == id }
    }

    private func startLink(_ id: UInt64, _ view: PhoneView) {
        guard let ancs = view.ancs, let path = ObjectPath(validating: view.path), let device = tree.device(at: path) else { return }
        let link = PhoneLink(
            id: id, device: device, service: ancs, configuration: options.session, replays: options.replays, clock: executor)
        links[path] = link
        link.recorder = SessionRecorder.start(device: device, options: options.recording, logger: logger)
    }

    private func endLink(_ id: UInt64, reason: String?) {
        guard let (path, link) = links.first(where: { $0.value.id == id }) else { return }
        links[path] = nil
        if recentLink === link { recentLink = nil }
        link.tearDown()
        link.recorder?.finish(at: link.now, reason: reason)
        guard let reason else { return }
        logger.info("\(link.device.address): \(reason) after \(link.notificationCount) notification event(s)")
        output.emit(.disconnected(device: link.device.address, reason: reason))
        scheduleStatus()
    }

    /// Hands the socket `call` acquired to a reader on the daemon's loop: each datagram goes
    /// straight into the service's session, with no task or thread in between.
    private func keepSocket(from call: LinkMachine.CallID, for uuid: CharacteristicUUID, service number: Int, link id: UInt64) {
        guard let socket = acquiredSocket, socket.call == call else { return }
        acquiredSocket = nil
        guard let link = link(id: id), let service = link.service(number: number), let raw = socket.fd.take() else { return }
        let path = link.device.path
        do {
            let reader = try NotificationReader(
                fd: raw, loop: executor,
                onValue: onLoop { $0.received($1, from: uuid, service: number, linkID: id, path: path) },
                onClose: onLoop { $0.feed(.socketClosed(id, service: number, reason: $1)) })
            service.readers.append(reader)
        } catch {
            executor.execute(onLoop { $0.feed(.socketClosed(id, service: number, reason: "it cannot be watched: \(error)")) })
        }
    }

    // MARK: Calls

    /// Makes a call the machine asked for, on this actor's loop without a task; its result
    /// comes back as an input. A call that cannot be made at all fails on the next turn.
    private func start(_ request: GattCall, id: LinkMachine.CallID) {
        guard let connection, let characteristic = ObjectPath(validating: request.characteristic) else {
            return executor.execute(onLoop { $0.feed(.callEnded(id, .cancelled)) })
        }
        let gatt = GattClient(connection: connection)
        do {
            switch request {
            case .acquireNotify:
                try gatt.startAcquireNotify(characteristic, completion: onLoop { daemon, result in
                    switch result {
                    case .success(let socket):
                        daemon.acquiredSocket = (id, socket.fd)
                        daemon.feed(.callEnded(id, .acquired(mtu: socket.mtu)))
                        daemon.acquiredSocket = nil  // not kept: closed
                    case .failure(let error):
                        daemon.feed(.callEnded(id, Self.outcome(of: error)))
                    }
                })
            case .startNotify, .stopNotify:
                let isStart = if case .startNotify = request { true } else { false }
                try gatt.startNotifyCall(characteristic, start: isStart, completion: onLoop { daemon, result in
                    daemon.feed(.callEnded(id, result.map { .done }.get(or: Self.outcome(of:))))
                })
            case .readNotifying:
                try gatt.startReadNotifying(characteristic, completion: onLoop { daemon, result in
                    daemon.feed(.callEnded(id, result.map { .notifying($0 == true) }.get(or: Self.outcome(of:))))
                })
            }
        } catch {
            executor.execute(onLoop { $0.feed(.callEnded(id, Self.outcome(of: error))) })
        }
    }

    /// A failed call as the machine reads it.
    static func outcome(of error: any Error) -> CallOutcome {
        switch error {
        case is CancellationError: .cancelled
        case let error as DBusError: .failed(CallError(name: error.name, message: error.message, description: error.description))
        default: .failed(CallError(name: "", message: "", description: "\(error)"))
        }
    }

    // MARK: The machine's timer

    /// Keeps one timer armed for the machine's next deadline, disarmed while nothing waits.
    private func armLinkTimer() {
        guard let deadline = machine.nextDeadline else {
            if linkTimerDeadline != nil {
                linkTimerDeadline = nil
                linkTimer?.cancel()
            }
            return
        }
        guard deadline != linkTimerDeadline else { return }
        linkTimerDeadline = deadline
        let timer = linkTimer ?? executor.makeTimer(handler: onLoop { daemon in
            daemon.linkTimerDeadline = nil
            daemon.feed(.timer)
        })
        linkTimer = timer
        timer.schedule(after: max(.zero, deadline - linkTime))
    }
}

extension Result where Failure == any Error {
    /// The success, or what `transform` makes of the error.
    fileprivate func get(or transform: (any Error) -> Success) -> Success {
        switch self {
        case .success(let value): value
        case .failure(let error): transform(error)
        }
    }
}
