import ANCS
import ANCSCapture
import ANCSRuntime
import ANCSSession
import GattSession

/// ANCS on a phone's link: the session, and what the daemon does with its events: the replay
/// gate and the seen store before the outputs, the control socket's waiters, the copies
/// bluetoothd makes of signalled values, the recorder.
///
/// Owned and used only by the `Daemon` actor.
final class ANCSHandler: ServiceHandler, ServiceEvents {
    var session: ANCSSession
    /// Decides which notification events reach the outputs (`--replays`).
    var gate: ReplayGate
    /// Replayed notifications held back by the replay policy in this session.
    var heldBack = 0
    /// Notification events shown.
    var notificationCount = 0
    /// True from the phone's `sharing off` event to its `sharing on` (for `status`).
    var sharingOff = false
    /// Drops the copies bluetoothd makes of signalled values when other clients subscribed too.
    var copyFilter = SignalCopyFilter()
    /// Control-socket requests waiting for an action's outcome, oldest first per UID and action.
    var actionWaiters: [ActionKey: [CheckedContinuation<ActionOutcome, Never>]] = [:]
    /// Control-socket requests waiting for a notification's next event.
    var eventWaiters: [UInt32: [CheckedContinuation<PhoneNotification?, Never>]] = [:]

    struct ActionKey: Hashable {
        var uid: UInt32
        var action: UInt8
    }

    init(configuration: SessionConfiguration, replays: ReplayPolicy) {
        session = ANCSSession(configuration: configuration)
        gate = ReplayGate(policy: replays)
    }

    var description: GattServiceDescription { ANCSSession.service }
    var nextDeadline: Duration? { session.nextDeadline }

    func subscribed(to characteristics: Set<CharacteristicUUID>, _ context: ServiceContext, daemon: isolated Daemon) {
        run(session.subscribed(to: characteristics, now: context.now), context, daemon: daemon)
    }

    func received(
        _ value: [UInt8], from characteristic: CharacteristicUUID, signalled: Bool, _ context: ServiceContext, daemon: isolated Daemon
    ) {
        let isDataSource = characteristic == ANCSSession.dataSourceUUID
        if signalled {
            let copies = copyFilter.copies
            let admitted = isDataSource
                ? copyFilter.admitDataSource(value) : copyFilter.admitNotificationSource(value, now: context.now)
            if copyFilter.copies != copies { reportCopies(link: context.link, daemon: daemon) }
            guard admitted else { return }
        } else if isDataSource {
            copyFilter.dataSourceArrived()
        }
        context.link.recorder?.received(isDataSource ? .ds : .ns, value, at: context.now)
        let actions = isDataSource
            ? session.handleDataSource(value, now: context.now) : session.handleNotificationSource(value, now: context.now)
        run(ANCSSession.gattActions(actions), context, daemon: daemon)
    }

    func sending(_ request: GattRequest, number: UInt64, link: PhoneLink) {
        guard case .write(_, let bytes) = request else { return }
        copyFilter.expectResponse(to: bytes)
        link.recorder?.wroteControlPoint(bytes, at: link.now)
    }

    /// Every write's result is recorded; the session is told each with its number, and ignores
    /// those of writes it no longer waits for (the link counts the writes as the session does).
    func finished(_ result: GattResult, request number: UInt64, _ context: ServiceContext, daemon: isolated Daemon) {
        let write = ANCSSession.writeResult(result)
        context.link.recorder?.writeFinished(write, at: context.now)
        run(ANCSSession.gattActions(session.handleWriteResult(write, write: number, now: context.now)), context, daemon: daemon)
    }

    func timerFired(_ context: ServiceContext, daemon: isolated Daemon) {
        run(session.handleTimer(now: context.now) as [GattSessionAction<ANCSSessionEvent>], context, daemon: daemon)
    }

    func renewing(_ context: ServiceContext, daemon: isolated Daemon) {
        copyFilter = SignalCopyFilter()
        run(session.renewing(now: context.now), context, daemon: daemon)
    }

    /// Asks the phone to perform an action (the outcome comes as `.actionCompleted`).
    func performAction(_ action: ActionID, on uid: UInt32, _ context: ServiceContext, daemon: isolated Daemon) {
        run(ANCSSession.gattActions(session.performAction(action, on: uid, now: context.now)), context, daemon: daemon)
    }

    /// Fetches a notification's whole message again.
    func fetchFullMessage(of uid: UInt32, _ context: ServiceContext, daemon: isolated Daemon) {
        run(ANCSSession.gattActions(session.fetchFullMessage(of: uid, now: context.now)), context, daemon: daemon)
    }

    /// Applies reloaded options: the filter, the replay policy and the checks' intervals.
    func update(_ options: DaemonOptions, _ context: ServiceContext, daemon: isolated Daemon) {
        session.updateFilter(options.session.filter)
        gate.policy = options.replays
        let actions = session.updateChecks(
            aliveCheckInterval: options.session.aliveCheckInterval, resubscribeAfter: options.session.resubscribeAfter, now: context.now)
        run(ANCSSession.gattActions(actions), context, daemon: daemon)
    }

    func tearDown() {
        for waiters in actionWaiters.values { for waiter in waiters { waiter.resume(returning: .failed("the phone disconnected")) } }
        actionWaiters = [:]
        for waiters in eventWaiters.values { for waiter in waiters { waiter.resume(returning: nil) } }
        eventWaiters = [:]
    }

    private func run(
        _ actions: [GattSessionAction<ANCSSessionEvent>], _ context: ServiceContext, daemon: isolated Daemon
    ) {
        daemon.perform(actions, in: context, events: self)
    }

    func handle(_ event: ANCSSessionEvent, link: PhoneLink, daemon: isolated Daemon) {
        switch event {
        case .notification(let event):
            if !eventWaiters.isEmpty {
                let n = event.notification
                for waiter in eventWaiters.removeValue(forKey: n.uid) ?? [] {
                    waiter.resume(returning: event.kind == .removed ? nil : n)
                }
            }
            show(event, link: link, daemon: daemon)
        case .actionCompleted(let uid, let action, let outcome):
            daemon.logger.info("\(link.device.address): \(action) action on \(uid): \(outcome)")
            let key = ActionKey(uid: uid, action: action.rawValue)
            if var waiters = actionWaiters[key], !waiters.isEmpty {
                waiters.removeFirst().resume(returning: outcome)
                actionWaiters[key] = waiters.isEmpty ? nil : waiters
            }
        case .sharingChanged(let allowed):
            guard sharingOff == allowed else { break }
            sharingOff = !allowed
            daemon.output.emit(.sharing(device: link.device.address, allowed: allowed))
        }
    }

    /// Prints a session's event unless the replay policy holds it back, and remembers what was
    /// shown (`seen_before`).
    private func show(_ event: NotificationEvent, link: PhoneLink, daemon: isolated Daemon) {
        let n = event.notification, address = link.device.address
        let admitted = gate.admit(event, device: address, store: daemon.seen)
        if gate.seenBefore.count > daemon.options.session.maxKnownNotifications + 1024 {
            gate.retain(only: Set(session.notifications.map(\.uid)))
        }
        guard let (shown, seenBefore) = admitted else {
            if event.kind != .removed { heldBack += 1 }
            daemon.logger.debug("\(address): \(event.kind.rawValue) \(n.uid) held back (replayed, --replays \(gate.policy.rawValue))")
            return
        }
        daemon.eventsEmitted += 1
        notificationCount += 1
        // What happened, never what it says: the journal is readable by more people than the phone's owner.
        // Built only when the log takes the line (at --log-level warning, never).
        func what() -> String { "\(shown.kind.rawValue) (\(n.category)\(seenBefore ? ", seen before" : ""))" }
        daemon.phoneLog.log(.info, "\(address): notification \(n.uid) \(what())", kind: "\(address): notification # \(what())")
        daemon.logger.debug("\(address): \(shown.kind.rawValue) \(n.uid) \(n.appName ?? n.appIdentifier ?? "-"): \(n.title ?? "") / \(n.message ?? "")\(seenBefore ? " (seen before)" : "")")
        daemon.output.emit(.notification(shown, device: address, seenBefore: seenBefore))
        daemon.scheduleStatus()
    }

    /// Through the phone's rate-limited log: what the phone sends changes the count.
    private func reportCopies(link: PhoneLink, daemon: isolated Daemon) {
        let copies = copyFilter.copies
        let address = link.device.address
        if copies > 1 {
            daemon.phoneLog.log(.warning, """
                \(address): bluetoothd delivers every notification \(copies) times: another program has \
                notifications of the phone's ANCS characteristics turned on (bluetoothctl's "notify on", another ANCS \
                client); ancsd drops the copies, but closing that program is safer
                """, kind: "\(address): bluetoothd delivers every notification # times")
        } else {
            daemon.phoneLog.log(.info, "\(address): bluetoothd delivers every notification once again",
                                kind: "\(address): bluetoothd delivers every notification once again")
        }
    }
}
