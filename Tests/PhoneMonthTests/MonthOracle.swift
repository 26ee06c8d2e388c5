import AMS
import ANCS
import ANCSSession
import GattSession
import LinkMachine

/// Judges what the daemon model shows against the phone, which it knows whole, and counts the
/// month for the report. Its rules (docs/soak.md, "The soak and the month in a minute"):
///
/// 1. Nothing twice: no content is shown (`added` or `modified`) twice; a `modified` changes what
///    was shown; a notification is shown removed at most once per link.
/// 2. As the policy says (`unseen`): what is held back was shown before; what is shown removed
///    the phone no longer holds; at each checkpoint where the link has been up and healthy (the
///    phone's CCCDs on, nothing silenced, sharing on) and quiet for `quiet`, every notification
///    the phone holds has been shown in its current content, and every one shown on the link that
///    the phone no longer holds has been shown removed there; nothing is shown without its
///    attributes, and no request times out, while the phone is healthy.
/// 3. The alive check and the renewals at their documented times (`SessionConfiguration`):
///    see `aliveCheck`, `renewing` and `tick`.
/// 4. The player as the phone's at each quiet checkpoint; commands answered once each.
final class MonthOracle {
    /// How long the phone must have been healthy and quiet before a checkpoint judges it.
    static let quiet = Duration.seconds(30)
    /// How long the alive check may wait behind other work (the queue).
    static let queue = Duration.seconds(60)
    /// The phone's answer reaches the session this much after the phone sent it, at most.
    static let air = Duration.milliseconds(60)

    struct LinkRecord {
        let id: LinkMachine.LinkID
        let phoneSession: UInt64
        let upAt: Duration
        var ancsSubscribed: Duration?
        /// When the session last started its alive-check schedule (subscription, renewal, a check answered).
        var scheduleStart: Duration?
        /// The session's last Notification Source value (or its subscription, or a renewal).
        var lastNotificationSource = Duration.zero
        /// Control Point writes the phone refused with 0x03 in a row, and the last one's time.
        var refusalsInARow = 0
        var refusedSinceSchedule = false
        var lastRefusal: Duration?
        /// An alive check the phone left unanswered (it answers nothing), and when.
        var unansweredProbe: Duration?
        /// Notifications shown on this link (not shown removed yet).
        var printed: Set<UInt64> = []
        var removedShown: Set<UInt64> = []
        /// The last renewal's start: an alive check that reaches the phone within a second of it
        /// was sent before it, and its answer is dropped with the renewal.
        var renewedAt: Duration?
        /// A Notification Source value came since the last renewal (or there was none): the
        /// session concludes what the phone no longer holds only from its replay, and an empty
        /// replay says nothing (`ANCSSession.replayEndsAt`).
        var notificationSourceSinceRenewal = true
        /// A checkpoint found a removal waiting for that traffic.
        var removalWaiting = false
    }

    let seed: UInt64
    let clock: VirtualClock
    let phone: MonthPhone
    let configuration: SessionConfiguration
    private(set) var failures: [String] = []
    private var failureCount = 0

    private(set) var links: [LinkMachine.LinkID: LinkRecord] = [:]
    private var current: LinkMachine.LinkID?
    /// Every content shown, with when.
    private(set) var shownContents: [Content: Duration] = [:]
    /// The phone is healthy since (nil: not healthy now).
    private(set) var healthySince: Duration?
    /// The phone's last notification activity, its player's last change.
    var lastPhoneActivity = Duration.zero {
        didSet { changes += 1 }
    }
    /// Counts what may change a checkpoint's verdict on the notifications (the phone's activity,
    /// what the daemon showed or held back, the links): an unchanged one is not judged again.
    private var changes = 0
    private var judged: (link: LinkMachine.LinkID, changes: Int)?
    var lastPlayerChange = Duration.zero
    /// A silent drop or a sharing-off episode the phone has not recovered from yet.
    struct Trouble {
        enum Kind: String {
            case silentDrop = "silent drop"
            case silentDropAll = "silent drop (nothing answered)"
            case sharingOff = "sharing off"
        }

        var kind: Kind
        var start: Duration
        /// The session's last Notification Source value when it began.
        var lastNotificationSource: Duration?
    }

    private var trouble: Trouble?

    // The report's counts.
    var created = 0, modifications = 0, removals = 0
    private(set) var shownAdded = 0, shownModified = 0, shownRemoved = 0, shownIncomplete = 0, heldBackCount = 0
    private(set) var connections = 0, disconnections = 0
    private(set) var renewals: [String: Int] = [:]
    private(set) var aliveChecks = 0, aliveChecksUnanswered = 0
    private(set) var sharingEpisodes = 0, sharingNoticed = 0
    private(set) var silentDrops = 0, silentDropsFound = 0
    private(set) var longestRecovery: [String: Duration] = [:]
    private(set) var checkpoints = 0, checkpointsJudged = 0, mediaJudged = 0
    private(set) var warnings = 0, errors = 0
    private(set) var mediaStates = 0
    private(set) var commandsAsked = 0, commandsOK = 0, commandsFailed = 0, commandsRefused = 0
    private(set) var copiesDropped = 0
    /// How the calls of the link machine ended, by outcome.
    private(set) var callOutcomes: [String: Int] = [:]
    /// Checkpoints that found a removal waiting for Notification Source traffic after an empty
    /// replay, and the longest such wait (from the renewal to the next value).
    private(set) var removalsAwaitingTraffic = 0
    private(set) var longestEmptyReplay = Duration.zero
    var walkAways = 0, flaps = 0, bluetoothdRestarts = 0, trackChanges = 0, mediaWithdrawals = 0

    init(seed: UInt64, clock: VirtualClock, phone: MonthPhone, configuration: SessionConfiguration) {
        self.seed = seed
        self.clock = clock
        self.phone = phone
        self.configuration = configuration
    }

    func fail(_ message: String) {
        failureCount += 1
        if failures.count < 20 {
            failures.append("seed \(seed), \(clock.now.monthTime): \(message)")
        }
        if failureCount == tracedFailure { tracedEvents = recent + ["\(clock.now.monthTime) VIOLATION \(message)"] }
    }

    /// Keeps the last events (`ANCSD_MONTH_TRACE=n`), to print those before the nth violation.
    var tracedFailure = 0
    private var tracing: Bool { tracedFailure > 0 }
    private var recent: [String] = []
    /// The events before the violation traced.
    private(set) var tracedEvents: [String] = []

    func trace(_ text: @autoclosure () -> String) {
        guard tracing else { return }
        if recent.count >= 400 { recent.removeFirst(100) }
        recent.append("\(clock.now.monthTime) \(text())")
    }

    var failureTotal: Int { failureCount }

    // MARK: The link

    func connected(_ link: LinkModel) {
        trace("daemon: link \(link.id) up (phone session \(phone.session))")
        connections += 1
        current = link.id
        links[link.id] = LinkRecord(id: link.id, phoneSession: phone.session, upAt: clock.now)
        if !phone.connected { fail("link \(link.id) came up with the phone not connected") }
    }

    func disconnected(_ link: LinkModel, reason: String) {
        trace("daemon: link \(link.id) down: \(reason)")
        disconnections += 1
        links[link.id] = nil
        if current == link.id { current = nil }
    }

    func subscribed(_ link: LinkModel, service: Int) {
        guard service == 0, var record = links[link.id], record.ancsSubscribed == nil else { return }
        record.ancsSubscribed = clock.now
        record.scheduleStart = clock.now
        record.lastNotificationSource = clock.now
        links[link.id] = record
    }

    /// A renewal begins. ANCS's must be due: 6 h after the session's last Notification Source
    /// value (to the millisecond), or `requestTimeout` after an alive check the phone left
    /// unanswered (within the air's latency).
    func renewing(_ link: LinkModel, service: Int, reason: String) {
        let kind = reason.hasPrefix("no Notification Source traffic") ? "6 h without Notification Source"
            : reason.hasPrefix("the alive check") ? "alive check unanswered" : reason
        renewals[service == 0 ? kind : "AMS: \(kind)", default: 0] += 1
        trace("daemon: link \(link.id) renews service \(service): \(reason)")
        guard service == 0, var record = links[link.id] else {
            if service != 0 { fail("AMS renewed its subscriptions (\(reason)): the phone never refuses them") }
            return
        }
        let now = clock.now
        let sixHours = record.lastNotificationSource + (configuration.resubscribeAfter ?? .seconds(0))
        let afterProbe = record.unansweredProbe.map { now - $0 }
        let timeout = configuration.requestTimeout
        if abs((now - sixHours).seconds) <= 0.001 {
            if kind != "6 h without Notification Source" { fail("renewal at the 6-hour mark said \"\(reason)\"") }
        } else if let afterProbe, afterProbe <= timeout, afterProbe >= timeout - Self.air {
            if kind != "alive check unanswered" { fail("renewal after an unanswered alive check said \"\(reason)\"") }
        } else {
            fail("""
                renewal of link \(link.id) (\(reason)) at no documented time: the last Notification Source value \
                \((now - record.lastNotificationSource).seconds) s ago, the last unanswered alive check \
                \(afterProbe.map { "\($0.seconds) s" } ?? "never") ago
                """)
        }
        record.lastNotificationSource = now
        record.scheduleStart = now
        record.refusedSinceSchedule = false
        record.unansweredProbe = nil
        record.renewedAt = now
        record.notificationSourceSinceRenewal = false
        links[link.id] = record
    }

    func notificationSourceDelivered(_ value: [UInt8], link: LinkModel) {
        changes += 1
        if let record = links[link.id], !record.notificationSourceSinceRenewal, record.removalWaiting, let renewed = record.renewedAt {
            longestEmptyReplay = max(longestEmptyReplay, clock.now - renewed)
        }
        links[link.id]?.removalWaiting = false
        links[link.id]?.notificationSourceSinceRenewal = true
        trace("daemon: NS \((try? NotificationSourceEvent(decoding: value)).map { "\($0.eventID) uid \($0.notificationUID) \($0.flags)" } ?? "?")")
        links[link.id]?.lastNotificationSource = clock.now
    }

    func log(_ level: ServiceLogLevel, _ message: String) {
        trace("log \(level): \(message)")
        // A request the phone answered is never given up on.
        if message.hasPrefix("no answer from the phone"), let since = healthySince,
           clock.now - since > configuration.requestTimeout + .seconds(1) {
            fail("a request timed out on a phone healthy for \((clock.now - since).seconds) s: \(message)")
        }
        if level == .warning { warnings += 1 }
        if level == .error { errors += 1 }
    }

    func copyDropped(_ value: [UInt8], dataSource: Bool) { copiesDropped += 1 }

    func callEnded(_ outcome: CallOutcome) {
        let name = switch outcome {
        case .done: "done"
        case .acquired: "acquired"
        case .notifying: "Notifying read"
        // A message that names an object ("Unknown object '/org/…'") is counted without it.
        case .failed(let error): error.message.isEmpty ? error.name : String(error.message.split(separator: " '").first ?? "")
        case .cancelled: "cancelled"
        }
        callOutcomes[name, default: 0] += 1
    }

    func sharingChanged(allowed: Bool, link: LinkModel) {
        if !allowed { sharingNoticed += 1 }
    }

    // MARK: What is shown

    func shown(_ event: NotificationEvent, seenBefore: Bool, link: LinkModel) {
        changes += 1
        trace("daemon: SHOWN \(event.kind) uid \(event.notification.uid) \(event.notification.message ?? "-")")
        guard var record = links[link.id] else { return fail("an event shown on link \(link.id), which is not up") }
        let n = event.notification
        let uidKey = record.phoneSession == phone.session ? phone.key(ofUID: n.uid) : nil
        if seenBefore { fail("\(event.kind) \(n.uid) shown as seen before under --replays unseen") }
        guard n.attributesComplete else {
            if event.kind != .removed {
                shownIncomplete += 1
                if let since = healthySince, clock.now - since > .seconds(15) {
                    fail("notification \(n.uid) shown without its attributes from a phone healthy for \((clock.now - since).seconds) s")
                }
            }
            judgeRemovalOrPrint(event.kind, key: uidKey, uid: n.uid, record: &record)
            links[link.id] = record
            return
        }
        let content = Content(n)
        guard let version = phone.contents[content] else {
            fail("\(event.kind) \(n.uid) shows content the phone never had: \(n.title ?? "-") / \(n.message ?? "-")")
            return
        }
        if let uidKey, uidKey != version.key {
            fail("\(event.kind) \(n.uid) shows the content of notification \(version.key), but the phone's UID \(n.uid) is \(uidKey)")
        }
        if event.kind != .removed {
            if let before = shownContents[content] {
                fail("\(event.kind) \(n.uid) (notification \(version.key) version \(version.version)) shown twice: first at \(before.monthTime)")
            }
            shownContents[content] = clock.now
            if event.kind == .added { shownAdded += 1 } else { shownModified += 1 }
            checkAttributes(n, key: version.key)
        }
        judgeRemovalOrPrint(event.kind, key: version.key, uid: n.uid, record: &record)
        links[link.id] = record
    }

    private func judgeRemovalOrPrint(_ kind: NotificationEvent.Kind, key: UInt64?, uid: UInt32, record: inout LinkRecord) {
        guard let key else {
            if kind == .removed { shownRemoved += 1 }
            return
        }
        switch kind {
        case .added, .modified:
            record.printed.insert(key)
        case .removed:
            shownRemoved += 1
            if phone.held[key] != nil { fail("notification \(key) (UID \(uid)) shown removed while the phone still holds it") }
            if record.printed.remove(key) == nil { fail("notification \(key) shown removed on link \(record.id), which never showed it") }
            if !record.removedShown.insert(key).inserted { fail("notification \(key) shown removed twice on link \(record.id)") }
        }
    }

    /// The fields beside the content: the app's name, the category, the action labels, the size.
    private func checkAttributes(_ n: PhoneNotification, key: UInt64) {
        guard let held = phone.held[key] else { return }  // removed meanwhile: its last version was checked by content
        let app = MonthPhone.apps.first { $0.identifier == held.app }
        if held.shown.message == n.message, n.messageSize != held.message.utf8.count {
            fail("notification \(key) shown with message size \(n.messageSize.map(String.init) ?? "nil"), not \(held.message.utf8.count)")
        }
        if n.appName != app?.name { fail("notification \(key) shown with app name \(n.appName ?? "nil"), not \(app?.name ?? "nil")") }
        if n.category != held.category { fail("notification \(key) shown in category \(n.category)") }
        if (n.positiveAction != nil) != held.flags.contains(.positiveAction) || (n.negativeAction != nil) != held.flags.contains(.negativeAction) {
            fail("notification \(key) shown with action labels \(n.positiveAction ?? "-") / \(n.negativeAction ?? "-")")
        }
    }

    /// Held back: it must have been shown before (a replay of what the outputs saw).
    func heldBack(_ event: NotificationEvent, link: LinkModel) {
        trace("daemon: held back \(event.kind) uid \(event.notification.uid) \(event.notification.message ?? "-")")
        guard event.kind != .removed else { return }
        heldBackCount += 1
        let n = event.notification
        guard n.attributesComplete, shownContents[Content(n)] != nil else {
            return fail("\(event.kind) \(n.uid) held back, but its content was never shown")
        }
    }

    // MARK: The phone's side

    /// The phone's health changed (or may have): CCCDs on, nothing silenced, sharing on.
    func phoneChanged() {
        trace("phone: healthy \(phone.ancsHealthy), CCCDs \(phone.cccd.map(\.rawValue).sorted())")
        let healthy = phone.ancsHealthy
        if healthy, healthySince == nil {
            healthySince = clock.now
            if let trouble { recovered(from: trouble) }
            trouble = nil
        } else if !healthy {
            healthySince = nil
        }
    }

    /// A silent drop or a sharing-off episode begins while the link is up.
    func troubleBegins(_ kind: Trouble.Kind) {
        if kind == .sharingOff { sharingEpisodes += 1 } else { silentDrops += 1 }
        let last = current.flatMap { links[$0]?.lastNotificationSource }
        if trouble == nil { trouble = Trouble(kind: kind, start: clock.now, lastNotificationSource: last) }
        phoneChanged()
    }

    /// The phone is healthy again: by a renewal within its window, or by a new link.
    private func recovered(from trouble: Trouble) {
        let took = clock.now - trouble.start
        if trouble.kind != .sharingOff { silentDropsFound += 1 }
        trace("oracle: \(trouble.kind.rawValue) over after \(took.seconds) s")
        longestRecovery[trouble.kind.rawValue] = max(longestRecovery[trouble.kind.rawValue] ?? .zero, took)
    }

    /// The link was lost: a silence ends with it. bluetoothd's ATT timeout ends a silent drop
    /// that answers nothing once a request (the alive check's) waits for the phone: found.
    func linkLost(reason: String) {
        if let trouble, trouble.kind == .silentDropAll, reason == "ATT timeout" { recovered(from: trouble) }
        trouble = nil
        healthySince = nil
    }

    /// The phone received a Control Point write and answered it (nil: not at all).
    func controlPointWrite(_ request: ControlPointRequest?, answer: ATTAnswer?) {
        trace("phone: CP \(request.map { "\($0)" } ?? "?") -> \(answer.map { "\($0)" } ?? "no answer")")
        guard let id = current, var record = links[id], record.phoneSession == phone.session else { return }
        let now = clock.now
        let dropped = record.renewedAt.map { now - $0 < .seconds(1) } ?? false
        if case .getNotificationAttributes(ANCSSession.probeUID, _)? = request, !dropped {
            aliveChecks += 1
            aliveCheck(&record, now: now)
            if answer == nil {
                aliveChecksUnanswered += 1
                record.unansweredProbe = now
            }
            if case .error(ATTErrorCode.writeNotPermitted.rawValue)? = answer {} else { record.scheduleStart = now }
        }
        switch answer {
        case .error(ATTErrorCode.writeNotPermitted.rawValue)?:
            record.refusalsInARow += 1
            record.lastRefusal = now
            record.refusedSinceSchedule = true
            if case .getNotificationAttributes(ANCSSession.probeUID, _)? = request { record.scheduleStart = now }
        case .written?, .error?:
            record.refusalsInARow = 0
        case .value?, nil:
            break
        }
        links[id] = record
    }

    /// An alive check reaches the phone: `aliveCheckInterval` (900 s) after the schedule began
    /// (the subscription, a renewal, the last check answered), and at most the queue later;
    /// while sharing is known off (two writes refused in a row), every `sharingOffCheckInterval`
    /// (60 s); at once (within the queue) after a single refused write, to confirm it.
    private func aliveCheck(_ record: inout LinkRecord, now: Duration) {
        guard let start = record.scheduleStart else { return fail("an alive check before the session was subscribed") }
        let gap = now - start
        let interval = record.refusalsInARow >= 2 ? configuration.sharingOffCheckInterval : configuration.aliveCheckInterval ?? .zero
        if record.refusedSinceSchedule {
            if record.refusalsInARow == 1, let refused = record.lastRefusal, now - refused > Self.queue {
                fail("the alive check that confirms a refused write came \((now - refused).seconds) s after it")
            } else if record.refusalsInARow >= 2, gap > interval + Self.queue {
                fail("alive check \(gap.seconds) s after the last, with sharing off (every \(interval.seconds) s)")
            }
        } else if gap < interval || gap > interval + Self.queue {
            fail("alive check \(gap.seconds) s after the schedule began (expected \(interval.seconds) s, within \(Self.queue.seconds) s more)")
        }
        record.refusedSinceSchedule = false
    }

    // MARK: Checkpoints

    /// Every two minutes: the checks that need time to pass (a missing alive check, a missing
    /// 6-hour renewal, a silence outlasting its window) and, when the phone has been healthy
    /// and quiet, the state checks.
    func tick(daemon: DaemonModel) {
        checkpoints += 1
        let now = clock.now
        if let id = current, let record = links[id], let link = daemon.links[id], link.state == .running, record.ancsSubscribed != nil {
            if let sixHours = configuration.resubscribeAfter, now > record.lastNotificationSource + sixHours + .milliseconds(1) {
                fail("no renewal \((now - record.lastNotificationSource).seconds) s after the last Notification Source value")
            }
            if let start = record.scheduleStart, !record.refusedSinceSchedule, let interval = configuration.aliveCheckInterval,
               now - start > interval + Self.queue + configuration.requestTimeout {
                fail("no alive check for \((now - start).seconds) s")
            }
        }
        if let trouble, trouble.kind != .sharingOff, phone.connected {
            let window: Duration
            if trouble.kind == .silentDropAll {
                // The check finds it (900 s + the queue), its write blocks the link: ATT timeout, reconnection.
                window = (configuration.aliveCheckInterval ?? .zero) + Self.queue + MonthBluetoothd.attTimeout + .seconds(60)
            } else {
                // The Control Point still answers: the 6-hour renewal finds it.
                window = (trouble.lastNotificationSource.map { $0 - trouble.start } ?? .zero) + (configuration.resubscribeAfter ?? .zero)
                    + .seconds(5)
            }
            if now - trouble.start > window {
                fail("a \(trouble.kind.rawValue) \((now - trouble.start).seconds) s old is not found (window \(window.seconds) s)")
                self.trouble = nil
            }
        }
        guard let id = current, let record = links[id], let link = daemon.links[id], link.state == .running,
              let healthy = healthySince, now - healthy >= Self.quiet, now - lastPhoneActivity >= Self.quiet,
              now - record.upAt >= Self.quiet, record.phoneSession == phone.session
        else { return }
        checkpointsJudged += 1
        defer { judgeMedia(link) }
        if let judged, judged.link == id, judged.changes == changes { return }
        judged = (id, changes)
        for key in phone.order {
            guard let n = phone.held[key] else { continue }
            if shownContents[n.shown] == nil {
                fail("notification \(key) (version \(n.version), UID \(n.uid)) held by the phone for \(Self.quiet.seconds) s of health is not shown")
            }
        }
        for key in record.printed where phone.held[key] == nil {
            // Gone while the push was dead, and the renewal's replay was empty: the session shows
            // it removed at the next Notification Source value (documented; counted).
            if !record.notificationSourceSinceRenewal {
                removalsAwaitingTraffic += 1
                links[id]?.removalWaiting = true
                continue
            }
            fail("notification \(key), shown on link \(id), is gone from the phone but not shown removed")
        }
    }

    private func judgeMedia(_ link: LinkModel) {
        guard let media = link.media, link.services.contains(where: { $0.ready && $0.handler === media }),
              clock.now - lastPlayerChange >= Self.quiet, media.session.characteristics.count == 3
        else { return }
        mediaJudged += 1
        let state = media.session.lastEmitted, player = phone.player, track = player.track
        func text(_ s: String) -> String? { s.isEmpty ? nil : s }
        let expected: (String?, String?, String?, Double?, Int?, Bool) = (
            text(track.artist), text(track.album), text(track.title), Double(track.duration), player.index, player.playing)
        let got = (state.artist, state.album, state.title, state.duration, state.queueIndex, state.playbackState == .playing)
        if got != expected { fail("the player shows \(got), the phone's is \(expected)") }
        if state.supportedCommands.map(\.rawValue) != player.supportedCommands {
            fail("the player shows commands \(state.supportedCommands), the phone takes \(player.supportedCommands)")
        }
        if let position = state.position(at: link.now), abs(position - player.position(at: clock.now)) > 1 {
            fail("the player shows position \(position), the phone's is \(player.position(at: clock.now))")
        }
    }

    // MARK: Media

    func mediaState(_ state: MediaState, link: LinkModel) { mediaStates += 1 }
    func commandAsked(_ command: RemoteCommand) { commandsAsked += 1 }
    func commandRefused(_ command: RemoteCommand, why: String) { commandsRefused += 1 }
    func commandReplied(_ command: RemoteCommand, ok: Bool, why: String) {
        if ok { commandsOK += 1 } else { commandsFailed += 1 }
    }
    func commandFailed(_ command: RemoteCommand, _ failure: MediaCommandFailure) {}
}
