import AMS
import ANCSRuntime
import ControlProtocol
import GattSession

/// Apple Media Service on a phone's link: what the phone's player says (`media` events) and
/// its remote commands (`ancsd media`, MQTT, the desktop's MPRIS player).
///
/// Owned and used only by the `Daemon` actor.
final class MediaHandler: ServiceHandler, ServiceEvents {
    var session: MediaSession
    /// Control requests waiting for their command's write, in the order they were made, until
    /// the session sends it (`sending`); then by request number until its result.
    /// A request made while the same command still waited joins it (`join`): all get its reply.
    private var queued: [(command: RemoteCommand, waiters: [Waiter])] = []
    private var sent: [UInt64: [Waiter]] = [:]
    typealias Waiter = CheckedContinuation<Result<ControlAnswer, ControlError>, Never>

    init(configuration: MediaSession.Configuration = MediaSession.Configuration()) {
        session = MediaSession(configuration: configuration)
    }

    /// AMS in the daemon's list of services beside ANCS (`--media`).
    static let extra = Daemon.ExtraService(
        description: MediaSession.service, enabled: { $0.media }, make: { _ in MediaHandler() })

    var description: GattServiceDescription { MediaSession.service }
    var nextDeadline: Duration? { session.nextDeadline }

    func subscribed(to characteristics: Set<CharacteristicUUID>, _ context: ServiceContext, daemon: isolated Daemon) {
        run(session.subscribed(to: characteristics, now: context.now), context, daemon: daemon)
    }

    func received(
        _ value: [UInt8], from characteristic: CharacteristicUUID, signalled: Bool, _ context: ServiceContext, daemon: isolated Daemon
    ) {
        run(session.handleNotification(value, from: characteristic, now: context.now), context, daemon: daemon)
    }

    func sending(_ request: GattRequest, number: UInt64, link: PhoneLink) {
        guard case .write(let uuid, let bytes) = request, uuid == AMSUUID.remoteCommand, bytes.count == 1,
              let index = queued.firstIndex(where: { $0.command.rawValue == bytes[0] })
        else { return }
        sent[number] = queued.remove(at: index).waiters
    }

    /// Only the latest request's result reaches the session (it keeps one in flight); a
    /// command's also answers the control request that sent it.
    func finished(_ result: GattResult, request number: UInt64, _ context: ServiceContext, daemon: isolated Daemon) {
        if let waiters = sent.removeValue(forKey: number) {
            let reply: Result<ControlAnswer, ControlError> = switch result {
            case .written, .read: .success(.sent)
            case .attError(let code): .failure(ControlError(.failed, "the phone refused the command (ATT error \(AMSErrorCode(rawValue: code)))"))
            case .failed(let message): .failure(ControlError(.failed, "the command was not sent: \(message)"))
            }
            for waiter in waiters { waiter.resume(returning: reply) }
        }
        guard number == context.service.requestsIssued else { return }
        run(session.handleResult(result, now: context.now), context, daemon: daemon)
    }

    func timerFired(_ context: ServiceContext, daemon: isolated Daemon) {
        run(session.handleTimer(now: context.now), context, daemon: daemon)
    }

    func renewing(_ context: ServiceContext, daemon: isolated Daemon) {
        failWaiters("the subscriptions to the phone's player were renewed")
        run(session.renewing(now: context.now), context, daemon: daemon)
    }

    func tearDown() {
        failWaiters("the phone's player went away")
    }

    /// Asks the session to send `command`: its actions, or the refusal of a command the player
    /// does not support now (with those it does). `waiter` gets the reply once the phone
    /// acknowledged the write.
    func send(_ command: RemoteCommand, now: Duration) -> Result<[GattSessionAction<MediaEvent>], ControlError> {
        do {
            return .success(try session.send(command, now: now))
        } catch {
            let code: ControlErrorCode = switch error {
            case .unsupported: .unsupportedCommand
            case .noRemoteCommand: .notAvailable
            case .tooManyPending, .tooFast: .busy
            }
            return .failure(ControlError(code, error.description))
        }
    }

    /// Whether `command` waits to be written already: a request for it now joins that one.
    func isWaiting(_ command: RemoteCommand) -> Bool {
        queued.contains { $0.command == command }
    }

    /// `waiter` gets the reply of the waiting `command` (a run of the same command while one
    /// waits is one command); false when none waits.
    func join(_ command: RemoteCommand, waiter: Waiter) -> Bool {
        guard let index = queued.firstIndex(where: { $0.command == command }) else { return false }
        queued[index].waiters.append(waiter)
        return true
    }

    /// Carries out the actions of `send(_:now:)`; `waiter` gets the command's reply.
    func start(
        _ command: RemoteCommand, _ actions: [GattSessionAction<MediaEvent>], waiter: Waiter, _ context: ServiceContext, daemon: isolated Daemon
    ) {
        queued.append((command, [waiter]))
        run(actions, context, daemon: daemon)
    }

    /// The player's state as the `media` command answers it: what the last `media` event said
    /// (a change still being gathered into one event is not in it yet), its position now.
    func control(device: String, now: Duration) -> ControlMedia {
        MediaOutput.control(session.lastEmitted, device: device, now: now)
    }

    private func failWaiters(_ why: String) {
        for (_, waiters) in queued {
            for waiter in waiters { waiter.resume(returning: .failure(ControlError(.failed, "the command was not sent: \(why)"))) }
        }
        queued = []
        for waiter in sent.values.joined() { waiter.resume(returning: .failure(ControlError(.failed, "no answer to the command: \(why)"))) }
        sent = [:]
    }

    private func run(_ actions: [GattSessionAction<MediaEvent>], _ context: ServiceContext, daemon: isolated Daemon) {
        daemon.perform(actions, in: context, events: self)
        // A command the session dropped (its characteristic went away) is never sent.
        if !queued.isEmpty, !session.hasRemoteCommand { failWaiters("the phone no longer offers remote commands") }
    }

    func handle(_ event: MediaEvent, link: PhoneLink, daemon: isolated Daemon) {
        switch event {
        case .state(let state):
            let media = MediaOutput.control(state, device: link.device.address, now: link.now)
            // What plays is content: its title only at debug.
            let line = "\(link.device.address): media \(media.state ?? "state unknown")\(media.player.map { " (\($0))" } ?? "")"
            daemon.phoneLog.log(.info, line, kind: line)
            daemon.logger.debug("\(link.device.address): media: \(media.artist ?? "-") / \(media.album ?? "-") / \(media.title ?? "-")")
            daemon.output.emit(.service(MediaOutput.output(media)))
        case .commandFailed(let command, let failure):
            daemon.phoneLog.log(.warning, "\(link.device.address): the \(command) media command failed: \(failure)",
                                kind: "\(link.device.address): the \(command) media command failed")
        }
    }
}
