#if canImport(Glibc)
import Glibc
#endif
import ANCSControl
public import ANCSRuntime
public import DBus
public import EventLoop

/// `ancsd desktop`: shows the phones' notifications as desktop notifications.
///
/// A client of the daemon's control socket (docs/control.md) and of the session bus's
/// `org.freedesktop.Notifications`. It `subscribe`s to the daemon's events and `list`s what the
/// phones have now; each notification becomes one desktop notification (`Notify`), replaced
/// in place when modified and closed when removed or when its phone stays away. The action
/// buttons a user clicks (`ActionInvoked`) go back to the phone as `action` requests; a click
/// on the popup itself (`default`) never does anything on the phone.
///
/// Identical notifications (same app, title, message: two "ok"s) share one popup, which
/// remembers every one behind it and closes when the last is gone; servers such as dunst
/// would merge them anyway, and the companion would lose track of the older.
///
/// When a phone disconnects, the daemon stops or the connection to it breaks, the popups stay:
/// the companion reconnects (backing off from 0.5 s to 10 s), finds each again in the new
/// `list` or among the phone's replays (by its content: UIDs may change) and keeps showing it
/// without a second pop-up; what is still not found `replaySettle` after the phone came back
/// (or did not) is closed.
/// A replayed notification is never popped up again when the daemon marks it `seen_before`
/// or when this companion showed it before (the user saw it, or dismissed it).
///
/// Each phone with a player (Apple Media Service) is also an MPRIS player on the session bus
/// (`MPRISPlayer`, `DesktopCompanion+Media.swift`): its name comes with the phone's first `media`
/// state and goes when the phone disconnects or the daemon does.
///
/// Everything runs on the executor's one serial queue (the D-Bus connections' too); no task
/// runs on Swift's global executor.
public actor DesktopCompanion {
    public struct Options: Sendable {
        /// The daemon's control socket.
        public var controlPath: String
        /// Where the notification server is: the session bus by default.
        public var bus: BusAddress
        /// How long after the daemon or a phone comes back its replays may take: popups not
        /// found again by then are closed.
        public var replaySettle: Duration
        /// Whether each phone's player is an MPRIS player on the bus (`--no-mpris`: not).
        public var mpris: Bool
        /// The file of what was popped up (`ShownRecord`), kept across restarts; nil: in memory.
        public var shownRecord: String?

        public init(
            controlPath: String = DesktopCompanion.defaultControlPath, bus: BusAddress = .session,
            replaySettle: Duration = DesktopCompanion.defaultReplaySettle, mpris: Bool = true, shownRecord: String? = nil
        ) {
            self.controlPath = controlPath
            self.bus = bus
            self.replaySettle = replaySettle
            self.mpris = mpris
            self.shownRecord = shownRecord
        }
    }

    /// Where `ancsd run` listens under systemd.
    public static let defaultControlPath = ControlSocket.defaultPath
    /// A phone replays a few dozen notifications in a second or two; ten leaves room.
    public static let defaultReplaySettle: Duration = .seconds(10)
    /// The first and the longest wait before connecting to the daemon again.
    static let firstRetry: Duration = .milliseconds(500)
    static let longestRetry: Duration = .seconds(10)
    /// The `disconnected` reason the daemon gives for every phone when it stops.
    static let daemonStopped = "ancsd stopped"
    /// The name of the file of what was popped up, in the state directory (`--state-dir`).
    public static let shownRecordName = "desktop-shown"

    static let server: BusName = "org.freedesktop.Notifications"
    static let serverPath: ObjectPath = "/org/freedesktop/Notifications"
    static let serverInterface: InterfaceName = "org.freedesktop.Notifications"
    static let callTimeout: Duration = .seconds(10)

    struct Key: Hashable {
        var device: String
        var uid: UInt32
    }

    /// A popup on the desktop: what it shows and the phone notifications behind it, the newest
    /// last (the one its buttons act on); `stale`, those it showed under an earlier session of
    /// the phone or connection to the daemon, not found again yet (their UIDs may name other
    /// notifications now, so they answer to nothing but their content).
    struct Popup {
        var content: DesktopNotification.Content
        var members: [Key]
        var stale: [Key] = []

        var isEmpty: Bool { members.isEmpty && stale.isEmpty }
    }

    /// A notification as shown once: the phone, what it said, and when.
    struct Fingerprint: Hashable {
        var device: String
        var appName: String
        var summary: String
        var body: String
        var date: String

        init(_ notification: DesktopNotification) {
            device = notification.device
            appName = notification.content.appName
            summary = notification.content.summary
            body = notification.content.body
            date = notification.date
        }

        /// The same in every run of the companion (`ShownRecord`).
        var stableHash: UInt64 { ShownRecord.fingerprint([device, appName, summary, body, date]) }
    }

    enum Request {
        case subscribe
        case list
        /// The `list` after the replays settled: what is still stale goes.
        case sweep
        case action(device: String, uid: UInt32, ControlAction)
        /// What the phones' players say now.
        case media
        /// A remote command of an MPRIS client; its answer goes to `mediaWaiters`.
        case mediaCommand(device: String, ControlMediaCommand)
    }

    let options: Options
    let logger: Logger
    let executor: DaemonExecutor
    var bus: DBusConnection?
    var link: ControlClient?
    /// Server ID → popup.
    var popups: [UInt32: Popup] = [:]
    /// Phone notification (of the current session) → the ID of its popup.
    var popupOf: [Key: UInt32] = [:]
    /// What was popped up, kept across restarts.
    let record: ShownRecord
    private var sweepTimer: LoopTimer?
    var pending: [Int: Request] = [:]
    /// What the notification server does with markup and app names, once known.
    var server: ServerTraits?
    var serverFailing = false
    /// The phones' MPRIS players, by device.
    var players: [String: MPRISPlayer] = [:]
    /// The phones' Bluetooth names, for the players' `Identity`.
    var phoneNames: [String: String] = [:]
    /// The `media_command`s sent and not answered yet, by request id.
    var mediaWaiters: [Int: MediaWaiter] = [:]
    /// Whether the last attempt to put a player on the bus failed (warned once).
    var mprisFailing = false
    /// What desktop programs make the companion say (clicks on popups it cannot act on, media
    /// commands ancsd refused): each kind said once, then counted per minute.
    let desktopLog: RateLimitedLogs

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    public init(options: Options, logger: Logger, executor: DaemonExecutor) {
        self.options = options
        self.logger = logger
        self.executor = executor
        desktopLog = RateLimitedLogs(logger: logger, loop: executor)
        record = ShownRecord(path: options.shownRecord)
        if let failure = record.failure { logger.warning("\(failure); what was shown is remembered only while running") }
    }

    /// Runs until cancelled (then closes the notifications it shows) or until the bus goes away.
    /// - Throws: when the bus cannot be reached or goes away.
    public func run() async throws {
        let bus = try await DBusConnection.connect(to: options.bus, loop: executor)
        self.bus = bus
        let signals: AsyncStream<Signal>
        do {
            signals = try await bus.signals(
                matching: MatchRule(sender: Self.server, interface: Self.serverInterface, path: Self.serverPath))
        } catch {
            await bus.close()
            throw error
        }
        logger.info("showing notifications through \(Self.server) on the bus as \(bus.uniqueName)")
        var failure: (any Error)?
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await signal in signals { await self.handle(signal: signal) }
                    if !Task.isCancelled { throw DesktopError("the D-Bus bus went away") }
                }
                group.addTask { await self.controlLoop() }
                _ = try await group.next()
                group.cancelAll()
            }
        } catch {
            failure = error
        }
        sweepTimer?.cancel()
        sweepTimer = nil
        // Cleaning up must not be cancelled with the caller: a task of its own.
        await Task(executorPreference: executor) { await self.closeEverything() }.value
        await bus.close()
        self.bus = nil
        if let failure { throw failure }
    }

    // MARK: The daemon's socket

    /// Connects to the daemon and follows it; when it goes, connects again with backoff.
    private func controlLoop() async {
        var delay = Self.firstRetry
        var failures = 0
        while !Task.isCancelled {
            switch ControlClient.connect(path: options.controlPath, loop: executor) {
            case .failure(let error):
                failures += 1
                let reason = if case .unreachable(_, let reason) = error { reason } else { error.description }
                if failures == 1 {
                    let hint = reason.contains("ermission") ? " (is this user in the socket's group?)" : ""
                    logger.warning("cannot connect to ancsd at \(options.controlPath): \(reason)\(hint); retrying")
                } else {
                    logger.debug("cannot connect to ancsd at \(options.controlPath): \(reason); retrying in \(delay)")
                }
            case .success(let link):
                logger.info("connected to ancsd at \(options.controlPath)")
                failures = 0
                let subscribed = await session(link)
                if Task.isCancelled { return }
                logger.warning("ancsd closed the control connection; reconnecting")
                if subscribed { delay = Self.firstRetry }
            }
            await pause(delay, on: executor)
            delay = min(delay * 2, Self.longestRetry)
        }
    }

    /// One connection: subscribe, list, then every event and reply until it closes. True if
    /// the daemon confirmed the subscription.
    private func session(_ link: ControlClient) async -> Bool {
        self.link = link
        pending = [:]
        markStale { _ in true }
        send(.subscribe, .subscribe)
        send(.list, .list(device: nil))
        if options.mpris { send(.media, .media(device: nil)) }
        var subscribed = false
        for await message in link.incoming {
            switch message {
            case .reply(let reply):
                if await handle(reply) { subscribed = true }
            case .event(let event):
                await handle(event)
            case .unreadable(let error):
                // A reply: its request is answered, unread. An event (a later daemon's?): passed over.
                if let id = error.requestID?.integerValue, pending.removeValue(forKey: id) != nil {
                    logger.warning("\(error); ignored")
                    finishMediaCommand(id, ControlError(.failed, "ancsd's answer could not be read: \(error)"))
                } else {
                    logger.debug("\(error); ignored")
                }
            }
        }
        link.close()
        self.link = nil
        pending = [:]
        markStale { _ in true }
        let reason = Task.isCancelled ? "ancsd desktop is stopping" : "the connection to ancsd closed"
        failMediaCommands(reason)
        await removePlayers(because: reason)
        return subscribed
    }

    /// Sends a request, remembering what it was for by the `id` it was given; that id, or nil
    /// when it could not be sent.
    @discardableResult
    func send(_ request: Request, _ command: ControlCommand) -> Int? {
        guard let link else { return nil }
        guard let id = link.send(command) else {
            logger.warning("cannot write to ancsd's control socket")
            return nil
        }
        pending[id] = request
        return id
    }

    /// A reply; true if it confirms the subscription.
    private func handle(_ reply: ControlReply) async -> Bool {
        guard let id = reply.id?.integerValue, let request = pending.removeValue(forKey: id) else { return false }
        let answer: ControlAnswer
        switch reply.result {
        case .success(let value):
            answer = value
        case .failure(let error):
            switch request {
            case .subscribe: logger.error("ancsd refused the subscription: \(error)")
            case .list, .sweep: logger.warning("ancsd refused to list the notifications: \(error)")
            case .action(let device, let uid, let action): logger.warning("\(action.rawValue) action on \(device) #\(uid) failed: \(error)")
            case .media: logger.info("ancsd gives no media players (\(error)): no MPRIS player until a phone's media event")
            case .mediaCommand: finishMediaCommand(id, error)
            }
            return false
        }
        switch (request, answer) {
        case (.subscribe, .subscribed):
            return true
        case (.media, .media(let players)):
            await showPlayers(players)
        case (.mediaCommand, _):
            finishMediaCommand(id, nil)
        case (.list, .list(let phones)), (.sweep, .list(let phones)):
            var count = 0
            for phone in phones {
                await learnName(phone.name, of: phone.device)
                for entry in phone.notifications {
                    count += 1
                    await show(DesktopNotification(entry), why: "listed")
                }
            }
            if case .list = request { logger.info("ancsd has \(count) notification(s)") }
            if case .sweep = request {
                await closeStale()
            } else if hasStale {
                scheduleSweep()
            }
        case (.action(let device, let uid, let action), _):
            logger.info("\(action.rawValue) action on \(device) #\(uid): performed")
        default:
            break  // an answer of another shape: the client reads each as its command's
        }
        return false
    }

    private func handle(_ event: ControlEvent) async {
        let device = event.device
        switch event {
        case .added(let entry), .modified(let entry):
            await show(DesktopNotification(entry), why: event.type)
        case .removed(let entry):
            logger.debug("removed \(device) #\(entry.uid)")
            await close(Key(device: device, uid: entry.uid))
        case .connected(_, let name):
            logger.info("\(device) connected")
            await learnName(name, of: device)
            // It replays what it holds now: give that time before closing what is not found.
            if popups.values.contains(where: { $0.stale.contains { $0.device == device } }) { scheduleSweep() }
        case .disconnected(_, let reason):
            // The popups stay until the phone (or the daemon) is back and has replayed; what it
            // no longer has, or all of it if it does not come back, closes after that.
            let count = popupOf.keys.filter { $0.device == device }.count
            if reason == Self.daemonStopped {
                logger.info("ancsd stopped; keeping \(device)'s \(count) notification(s) until it is back")
            } else {
                logger.info("\(device) disconnected; keeping its \(count) notification(s) for \(options.replaySettle) in case it comes back")
            }
            markStale { $0.device == device }
            scheduleSweep()
            await removePlayer(device, because: "it disconnected")
        case .media(let media):
            await showPlayer(media)
        case .sharing:
            break
        }
    }

    /// In `replaySettle`, lists again and closes what is still stale; again restarts the wait.
    private func scheduleSweep() {
        if sweepTimer == nil {
            sweepTimer = executor.makeTimer { [weak self] in
                guard let self else { return }
                Task(executorPreference: self.executor) { await self.sweep() }
            }
        }
        sweepTimer?.schedule(after: options.replaySettle)
    }

    private func sweep() {
        guard hasStale, link != nil else { return }
        send(.sweep, .list(device: nil))
    }

    private var hasStale: Bool { popups.values.contains { !$0.stale.isEmpty } }

    /// The notifications of the current session that `which` picks become stale.
    private func markStale(_ which: (Key) -> Bool) {
        for (key, id) in popupOf where which(key) {
            popupOf[key] = nil
            popups[id]?.members.removeAll { $0 == key }
            popups[id]?.stale.append(key)
        }
    }

    /// The replays are over: what was not found again is gone from the phones.
    private func closeStale() async {
        let count = popups.values.reduce(0) { $0 + $1.stale.count }
        guard count > 0 else { return }
        logger.info("closing \(count) notification(s) the phones no longer have")
        for id in Array(popups.keys) {
            popups[id]?.stale = []
            if popups[id]?.isEmpty == true {
                popups[id] = nil
                await closePopup(id)
            }
        }
    }
}
