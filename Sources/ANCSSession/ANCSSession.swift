public import ANCS

/// The per-phone ANCS state machine, without I/O.
///
/// Feed it what the phone sends (Notification Source and Data Source values), how each Control
/// Point write ended, and the passage of time; it returns what to do: Control Point writes to
/// send, notification events to show, action outcomes and log lines. One request is in flight at
/// a time. New notifications are fetched before the backlog the phone replays on connection; a
/// removal cancels pending work; a modification fetches again; app display names are fetched once
/// per session. Time is any monotonic `Duration` the owner chooses; `nextDeadline` says when to
/// call `handleTimer` (nil: nothing to wait for, so an idle session needs no wakeups).
///
/// A session lives for one connection: notification UIDs mean nothing in the next one.
public struct ANCSSession: Sendable {
    public private(set) var configuration: SessionConfiguration

    /// True once the phone accepted a Control Point write, false once it refused two in a row
    /// with "write not permitted" (the user has not allowed notification sharing, or turned it
    /// off) or refused one for want of authentication; nil before either.
    public private(set) var notificationSharingAllowed: Bool?
    /// True from the second Control Point write in a row the phone refused with ATT 0x03 until
    /// it accepts one again: an episode of sharing turned off (`.sharingChanged` tells both ends).
    public private(set) var sharingOff = false
    /// How many times the session asked its owner to subscribe again.
    public private(set) var resubscriptions = 0

    /// Which notifications are kept (starts as the configuration's).
    public private(set) var filter: NotificationFilter
    /// How many notifications the filter dropped in this session.
    public private(set) var filteredCount = 0
    /// How many notifications each filter rule matched in this session (rules that matched
    /// nothing are absent), for `ancsd doctor`.
    public private(set) var ruleMatches: [NotificationFilter.Rule: Int] = [:]

    private struct Record: Sendable {
        var notification: PhoneNotification
        var emitted = false
        /// What was shown of it before a renewal, while its fetch after the renewal runs: the
        /// fetch shows it again only if it says something else.
        var shownBeforeRenewal: PhoneNotification?
        var attempts = 0
        var refetchAfterCurrent = false
        /// The app filter has seen the notification's AppIdentifier (or given up on it).
        var appChecked = false
    }

    private enum Work: Hashable, Sendable {
        case notification(UInt32)
        case app(String)
        case action(UInt32, ActionID)
        /// The alive check: a request for a UID no notification has.
        case probe
    }

    /// The UID the alive check asks for: no notification has it, so a live phone answers 0xA2.
    public static let probeUID: UInt32 = 0xFFFF_FFFF

    private struct InFlight: Sendable {
        var work: Work
        /// A notification request for its AppIdentifier alone (the app filter decides first).
        var appOnly = false
        var sentAt: Duration
        var lastDataAt: Duration?
        var writeDone = false
        /// Which Control Point write of the session this request sent (1, 2, …).
        var writeNumber: UInt64 = 0
        var response: FetchedResponse?
        /// A Data Source error happened: drop bytes until the phone falls quiet, then move on.
        var draining = false
    }

    private var reassembler: DataSourceReassembler
    private var records: [UInt32: Record] = [:]
    private var recordOrder = FIFO<UInt32>()
    private var freshQueue = FIFO<UInt32>()
    private var backlogQueue = FIFO<UInt32>()
    private var queued: Set<UInt32> = []
    private var appQueue = FIFO<String>()
    private var actionQueue = FIFO<(UInt32, ActionID)>()
    private var appNames: [String: String?] = [:]
    private var appRequested: Set<String> = []
    private var waitingForApp: [String: [UInt32]] = [:]
    private var inFlight: InFlight? {
        didSet { updateDeadline() }  // no `oldValue`: changes through `inFlight?.…` stay in place
    }
    /// When the next alive check is due (nil: checks off, not subscribed yet, or one is due and
    /// waits behind other work: `probeWanted`).
    private var aliveCheckAt: Duration?
    /// An alive check waits for the queue to empty.
    private var probeWanted = false
    /// When the next look at the Notification Source's silence is due (`resubscribeAfter`).
    private var resubscribeAt: Duration?
    /// The last Notification Source value (or the subscription), for `resubscribeAfter`.
    private var lastNotificationSourceAt: Duration = .zero
    /// Control Point writes refused with ATT 0x03 in a row.
    private var consecutiveRefusals = 0
    /// Notifications shown without attributes in the current backlog overflow (0: none).
    private var shownWithoutAttributes = 0
    /// What was shown before a renewal of the subscriptions, by UID, until the phone's replay
    /// accounts for it. After a renewal the phone replays what it still holds under the same
    /// UIDs; what it replays is shown as `.modified` if its content changed (never `.added` a
    /// second time), and what it does not replay was removed meanwhile: `.removed` once the
    /// replay is over (`replayEndsAt`).
    private var carriedOver: [UInt32: PhoneNotification] = [:]
    /// When the replay after a renewal counts as over: `replayQuiet` after its last
    /// pre-existing Notification Source event. A new (not pre-existing) event ends it at once,
    /// since the phone replays before it sends anything new. Without any Notification Source
    /// traffic nothing is concluded: a phone whose push is still dead tells nothing.
    private var replayEndsAt: Duration?
    /// How long the Notification Source stays quiet before a replay counts as over.
    public static let replayQuiet = Duration.seconds(1)

    /// Keeps `nextDeadline` the earliest of the request in flight's, the next alive check's and
    /// the next look at the Notification Source's silence.
    private mutating func updateDeadline() {
        var deadline: Duration?
        if let sentAt = inFlight?.sentAt {
            let timeout = sentAt + configuration.requestTimeout
            if let flight = inFlight, let last = flight.lastDataAt, silenceEnds(flight) {
                deadline = min(last + configuration.quietPeriod, timeout)
            } else {
                deadline = timeout
            }
        }
        if !probeWanted, let at = aliveCheckAt { deadline = deadline.map { min($0, at) } ?? at }
        if let at = resubscribeAt { deadline = deadline.map { min($0, at) } ?? at }
        if let at = replayEndsAt { deadline = deadline.map { min($0, at) } ?? at }
        nextDeadline = deadline
    }
    /// Control Point writes asked for so far: the number of the latest `.writeControlPoint`
    /// action (at most one is in flight, so an action list holds at most one). A notification
    /// request ends when its response is complete (which proves the write was accepted), so the
    /// next write may go out before the previous one's result arrives; results name their
    /// write (`handleWriteResult(_:write:now:)`), and a late one is ignored.
    public private(set) var writesIssued: UInt64 = 0
    private var deniedReported = false
    private var fullMessageWanted: Set<UInt32> = []
    /// Notifications the filter dropped (their modifications are ignored), oldest first, bounded
    /// like the records.
    private var filteredUIDs: Set<UInt32> = []
    private var filteredOrder = FIFO<UInt32>()
    /// Notifications whose app was kept by the filter: their other attributes come next.
    private var appKeptQueue = FIFO<UInt32>()

    public init(configuration: SessionConfiguration = SessionConfiguration()) {
        self.configuration = configuration
        filter = configuration.filter
        reassembler = DataSourceReassembler(limits: configuration.dataSourceLimits)
    }

    /// Applies a new filter to the notifications that arrive from now on (SIGHUP); what was
    /// shown stays, and the counts start again.
    public mutating func updateFilter(_ newFilter: NotificationFilter) {
        guard newFilter != filter else { return }
        filter = newFilter
        ruleMatches = [:]
    }

    // MARK: Introspection

    /// The notifications the session knows, oldest first, with their latest attributes.
    public var notifications: [PhoneNotification] {
        records.values.map(\.notification).sorted { $0.uid < $1.uid }
    }

    /// How many notifications the session knows: `notifications.count` without building and
    /// sorting them (the MQTT count and the status line ask for it on every event).
    public var notificationCount: Int { records.count }

    /// The notification with this UID, if the session knows it.
    public func notification(uid: UInt32) -> PhoneNotification? { records[uid]?.notification }

    /// How many notifications wait for their attributes.
    public var queuedFetchCount: Int { queued.count }

    /// When `handleTimer` must be called next, or nil if nothing is waiting on time.
    /// (Stored, and kept up to date as the request in flight changes: reading it from a session
    /// held in a class then copies nothing, where a computed property would copy the session.)
    public private(set) var nextDeadline: Duration?

    // MARK: Inputs

    /// Takes new alive-check and re-subscription periods (SIGHUP); a subscribed session
    /// counts the new periods from now (the silence from the last Notification Source value).
    public mutating func updateChecks(aliveCheckInterval: Duration?, resubscribeAfter: Duration?, now: Duration) -> [SessionAction] {
        guard aliveCheckInterval != configuration.aliveCheckInterval || resubscribeAfter != configuration.resubscribeAfter else { return [] }
        configuration.aliveCheckInterval = aliveCheckInterval
        configuration.resubscribeAfter = resubscribeAfter
        guard isSubscribed else { return [] }
        resubscribeAt = resubscribeAfter.map { max(now, lastNotificationSourceAt + $0) }
        if !probeWanted, inFlight?.work != .probe { aliveCheckAt = aliveCheckInterval.map { now + $0 } }
        if aliveCheckInterval == nil {
            aliveCheckAt = nil
            probeWanted = false
        }
        updateDeadline()
        return []
    }

    /// True once `subscribed(now:)` was called.
    private var isSubscribed = false
    /// True once `subscribed(now:)` was called (again after `resubscribed(now:)`).
    public var hasSubscribed: Bool { isSubscribed }

    /// The subscriptions are in place: the alive check and the watch on the Notification
    /// Source's silence start (a session never subscribed keeps no timer).
    public mutating func subscribed(now: Duration) -> [SessionAction] {
        var actions: [SessionAction] = []
        isSubscribed = true
        lastNotificationSourceAt = now
        resubscribeAt = configuration.resubscribeAfter.map { now + $0 }
        if case .probe? = inFlight?.work {
            aliveCheckAt = nil
        } else {
            scheduleProbe(now: now)  // at once if a refusal waits for its confirmation
        }
        pump(now: now, into: &actions)
        updateDeadline()
        return actions
    }

    /// The owner unsubscribed and subscribed again after `.resubscribe`: what the phone sends
    /// from now on is a new ANCS session (it replays what it holds, marked pre-existing), so
    /// everything known of notifications is forgotten, as at a reconnection; app names, the
    /// filter and its counts, the sharing state and the write numbering stay. Actions waiting
    /// for an answer end as failed. Call between unsubscribing and subscribing again.
    public mutating func resubscribed(now: Duration) -> [SessionAction] {
        var actions: [SessionAction] = []
        let why = ActionOutcome.failed("the subscriptions to the phone were renewed")
        if case .action(let uid, let action)? = inFlight?.work { actions.append(.actionCompleted(uid: uid, action: action, outcome: why)) }
        while let (uid, action) = actionQueue.pop() { actions.append(.actionCompleted(uid: uid, action: action, outcome: why)) }
        var fresh = ANCSSession(configuration: configuration)
        fresh.filter = filter
        fresh.filteredCount = filteredCount
        fresh.ruleMatches = ruleMatches
        fresh.appNames = appNames
        fresh.writesIssued = writesIssued
        fresh.notificationSharingAllowed = notificationSharingAllowed
        fresh.sharingOff = sharingOff
        fresh.consecutiveRefusals = consecutiveRefusals
        fresh.deniedReported = deniedReported
        fresh.resubscriptions = resubscriptions
        fresh.carriedOver = carriedOver
        for record in records.values where record.emitted { fresh.carriedOver[record.notification.uid] = record.notification }
        self = fresh
        actions += subscribed(now: now)
        return actions
    }

    /// A Notification Source value from the phone.
    public mutating func handleNotificationSource(_ value: [UInt8], now: Duration) -> [SessionAction] {
        var actions: [SessionAction] = []
        lastNotificationSourceAt = now
        let event: NotificationSourceEvent
        do {
            event = try NotificationSourceEvent(decoding: value)
        } catch {
            return [.log(.warning, "ignored a Notification Source value: \(error)")]
        }
        let uid = event.notificationUID
        // Dropped before it can count as part of a replay, or as the new event that ends one
        // (which would show the notifications still to be replayed as removed).
        guard !event.eventID.isReserved else {
            return [.log(.debug, "ignored Notification Source event with reserved ID \(event.eventID.rawValue) for \(uid)")]
        }
        if !carriedOver.isEmpty {
            if event.flags.contains(.preExisting) {
                replayEndsAt = now + Self.replayQuiet
            } else {
                endReplay(into: &actions)
            }
        }
        switch event.eventID {
        case .notificationAdded, .notificationModified:
            // (`carriedOver` and `filteredUIDs` are looked at only when not empty: hashing costs.)
            if !carriedOver.isEmpty, let shown = carriedOver.removeValue(forKey: uid), records[uid] == nil,
                filteredUIDs.isEmpty || !filteredUIDs.contains(uid)
            {
                // Shown before the renewal and still on the phone: fetched again, and shown
                // only if what it says changed.
                var notification = shown
                notification.flags = event.flags
                notification.category = event.categoryID
                notification.categoryCount = event.categoryCount
                remember(notification, into: &actions)
                records[uid]?.emitted = true
                records[uid]?.shownBeforeRenewal = shown
                enqueueFetch(uid, preExisting: event.flags.contains(.preExisting), into: &actions)
            } else if var record = records[uid] {
                record.notification.flags = event.flags
                record.notification.category = event.categoryID
                record.notification.categoryCount = event.categoryCount
                record.attempts = 0
                if case .notification(uid)? = inFlight?.work { record.refetchAfterCurrent = true }
                records[uid] = record
                if !record.refetchAfterCurrent { enqueueFetch(uid, preExisting: false, into: &actions) }
            } else if !filteredUIDs.isEmpty, filteredUIDs.contains(uid) {
                actions.append(.log(.debug, "ignored a modification of notification \(uid): the filter dropped it"))
            } else if let rule = filter.rule(droppingCategory: event.categoryID) {
                ruleMatches[.ignoreCategory(rule), default: 0] += 1
                dropFiltered(uid, why: "ignore-category \(rule.name)", into: &actions)
            } else {
                remember(PhoneNotification(uid: uid, flags: event.flags, category: event.categoryID, categoryCount: event.categoryCount), into: &actions)
                enqueueFetch(uid, preExisting: event.flags.contains(.preExisting), into: &actions)
            }
        case .notificationRemoved:
            if let shown = carriedOver.removeValue(forKey: uid) {
                var gone = shown
                gone.categoryCount = event.categoryCount
                actions.append(.emit(NotificationEvent(kind: .removed, notification: gone)))
            }
            queued.remove(uid)  // an answer in flight for it finds no record and is dropped
            fullMessageWanted.remove(uid)
            filteredUIDs.remove(uid)
            if let record = records.removeValue(forKey: uid) {
                var gone = record.notification
                gone.categoryCount = event.categoryCount
                if record.emitted { actions.append(.emit(NotificationEvent(kind: .removed, notification: gone))) }
                else { actions.append(.log(.debug, "notification \(uid) removed before it was shown")) }
            }
        default:
            break  // reserved: dropped above
        }
        pump(now: now, into: &actions)
        return actions
    }

    /// A Data Source value from the phone.
    public mutating func handleDataSource(_ value: [UInt8], now: Duration) -> [SessionAction] {
        // An empty value carries no byte of any answer: taken as data, it would start the quiet
        // period that ends a response early, and an awaited answer would be given up on.
        guard !value.isEmpty else { return [.log(.debug, "ignored an empty Data Source value")] }
        var actions: [SessionAction] = []
        // `inFlight` is changed in place (`inFlight?.…`): a copy would retain what it holds.
        guard let draining = inFlight?.draining, inFlight?.response == nil else {
            return [.log(.debug, "ignored \(value.count) Data Source bytes with no request waiting for them")]
        }
        if draining {
            inFlight?.lastDataAt = now
            return []
        }
        let awaited = reassembler.bytesReceived == 0 ? reassembler.pendingRequest : nil
        // A completed response is read in place, as the session keeps it (no copy of each value).
        var response: FetchedResponse?
        let error = value.withUnsafeBufferPointer { bytes in
            reassembler.feed(bytes) { response = FetchedResponse($0) }
        }
        if let error, error.isAnotherResponse, response == nil, let awaited {
            // A whole value that does not begin the awaited answer (another request's late answer,
            // or a phone's noise): the answer may still come, so it is awaited as before.
            try? reassembler.expect(awaited)
            return [.log(.debug, "ignored a Data Source value that is not the answer awaited: \(error)")]
        }
        inFlight?.lastDataAt = now
        if let error {
            if let work = inFlight?.work { actions.append(.log(.warning, "Data Source error for \(describe(work)): \(error)")) }
            if response == nil {
                inFlight?.draining = true
                return actions
            }
        }
        if let response {
            inFlight?.response = response
            finishIfDone(now: now, into: &actions)
        }
        return actions
    }

    /// How a Control Point write ended: `write` is its number, counting the session's
    /// `.writeControlPoint` actions from 1 (nil: the latest). The result of an earlier write
    /// (whose response already came, or whose request timed out) is ignored.
    public mutating func handleWriteResult(_ result: WriteResult, write: UInt64? = nil, now: Duration) -> [SessionAction] {
        var actions: [SessionAction] = []
        let number = write ?? writesIssued
        guard var flight = inFlight, !flight.writeDone, flight.writeNumber == number else {
            // A request ends when its response is complete, so the acknowledgement of its write
            // usually comes after it: expected, and not worth a message.
            if case .accepted = result, number >= 1, number <= writesIssued { return [] }
            guard inFlight != nil else { return [.log(.debug, "ignored a Control Point write result with no write in flight")] }
            return [.log(.debug, "ignored the result of an earlier Control Point write: \(result)")]
        }
        flight.writeDone = true
        inFlight = flight
        switch result {
        case .accepted:
            sharingAccepted(now: now, into: &actions)
            finishIfDone(now: now, into: &actions)
        case .attError(let code):
            if code != .writeNotPermitted, code != .insufficientAuthentication, code != .insufficientEncryption {
                sharingAccepted(now: now, into: &actions)  // the phone looked at the request
            }
            failCurrent(reason: code, message: nil, now: now, into: &actions)
        case .failed(let message):
            failCurrent(reason: nil, message: message, now: now, into: &actions)
        }
        return actions
    }

    /// The time passed; call at `nextDeadline` (calling early or late is harmless).
    public mutating func handleTimer(now: Duration) -> [SessionAction] {
        var actions: [SessionAction] = []
        if let at = resubscribeAt, now >= at, let period = configuration.resubscribeAfter {
            let due = lastNotificationSourceAt + period
            if now >= due {
                resubscribeAt = now + period  // and again after another such period
                requestResubscription("no Notification Source traffic for \(period)", into: &actions)
            } else {
                resubscribeAt = due
            }
        }
        if !probeWanted, let at = aliveCheckAt, now >= at {
            aliveCheckAt = nil
            probeWanted = true
        }
        if let at = replayEndsAt, now >= at { endReplay(into: &actions) }
        handleFlightTimer(now: now, into: &actions)
        pump(now: now, into: &actions)
        updateDeadline()
        return actions
    }

    /// The replay after a renewal is over: what was shown before it and not replayed is gone
    /// from the phone.
    private mutating func endReplay(into actions: inout [SessionAction]) {
        replayEndsAt = nil
        for uid in carriedOver.keys.sorted() {
            guard let gone = carriedOver.removeValue(forKey: uid) else { continue }
            actions.append(.emit(NotificationEvent(kind: .removed, notification: gone)))
        }
    }

    /// Whether the phone falling quiet (`quietPeriod` after its last Data Source value) ends
    /// `flight`: not while the answer stops inside a tuple, whose rest must come, so only the
    /// request timeout ends it (a slow link pauses mid-value: under emulation a long message
    /// lost its last attributes to the quiet period, which then came as stray values).
    private func silenceEnds(_ flight: InFlight) -> Bool {
        if case .probe = flight.work { return true }
        return flight.draining || flight.response != nil || !reassembler.isCutShort
    }

    private mutating func handleFlightTimer(now: Duration, into actions: inout [SessionAction]) {
        guard var flight = inFlight else { return }
        let timedOut = now >= flight.sentAt + configuration.requestTimeout
        let quiet = silenceEnds(flight) && flight.lastDataAt.map { now >= $0 + configuration.quietPeriod } ?? false
        guard timedOut || quiet else { return }
        if case .probe = flight.work {
            // A live phone answers the check at once (ATT 0xA2); data without an answer is an answer too.
            reassembler.reset()
            inFlight = nil
            if flight.writeDone || flight.lastDataAt != nil { return probeAnswered(now: now) }
            actions.append(.log(.warning, """
                the phone did not answer the alive check within \(configuration.requestTimeout): it has probably dropped \
                ancsd's ANCS subscriptions without telling; subscribing again
                """))
            scheduleProbe(now: now)
            requestResubscription("the alive check went unanswered", into: &actions)
            return
        }
        if flight.draining {
            reassembler.reset()
            retryOrGiveUp(flight.work, into: &actions)
            inFlight = nil
        } else if flight.response != nil {
            // The response is complete but the write's acknowledgement never came: use it.
            flight.writeDone = true
            inFlight = flight
            finishIfDone(now: now, into: &actions)
        } else if flight.lastDataAt != nil, let partial = finishEarly() {
            let missing = partial.missingAttributeIDs.map(String.init).joined(separator: ", ")
            actions.append(.log(.info, "the phone sent no more of \(describe(flight.work)); ended it early without attributes [\(missing)]"))
            flight.response = partial
            flight.writeDone = true
            inFlight = flight
            finishIfDone(now: now, into: &actions)
        } else {
            reassembler.reset()
            actions.append(.log(.warning, "no answer from the phone to \(describe(flight.work)) within \(configuration.requestTimeout)"))
            inFlight = nil
            giveUp(flight.work, into: &actions)
        }
    }

    // MARK: Alive check and sharing

    private mutating func requestResubscription(_ reason: String, into actions: inout [SessionAction]) {
        resubscriptions += 1
        actions.append(.resubscribe(reason))
    }

    /// The next alive check, after the usual interval (sooner while sharing is off; at once
    /// after a single refused write, to confirm it).
    private mutating func scheduleProbe(now: Duration) {
        defer { updateDeadline() }
        guard var interval = configuration.aliveCheckInterval else { return }
        if consecutiveRefusals == 1, !sharingOff {
            probeWanted = true
            aliveCheckAt = nil
            return
        }
        if sharingOff { interval = min(interval, configuration.sharingOffCheckInterval) }
        probeWanted = false
        aliveCheckAt = now + interval
    }

    /// The phone answered the alive check (its answer says nothing about notifications).
    private mutating func probeAnswered(now: Duration) {
        scheduleProbe(now: now)
    }

    /// The phone looked at a Control Point write: sharing is on.
    private mutating func sharingAccepted(now: Duration, into actions: inout [SessionAction]) {
        consecutiveRefusals = 0
        notificationSharingAllowed = true
        guard sharingOff else { return }
        sharingOff = false
        deniedReported = false
        actions.append(.log(.info, "the iPhone shares its notifications again"))
        actions.append(.sharingChanged(allowed: true))
        // No renewal of its own here: after one the phone replays under the same UIDs, and a
        // notification shown before it and removed before its fetch again would never be shown
        // removed (the soak, seed 22). A Notification Source left dead is found by the alive
        // check's schedule and --resubscribe-after.
    }

    /// The phone refused a Control Point write with ATT 0x03: the second in a row starts an
    /// episode of sharing turned off; the first asks for an alive check at once to confirm.
    private mutating func sharingRefused(into actions: inout [SessionAction]) {
        consecutiveRefusals += 1
        if consecutiveRefusals == 1, !sharingOff, configuration.aliveCheckInterval != nil, aliveCheckAt != nil {
            probeWanted = true  // confirm at once, behind the other work
            aliveCheckAt = nil
            updateDeadline()
        }
        guard consecutiveRefusals >= 2, !sharingOff else { return }
        sharingOff = true
        notificationSharingAllowed = false
        actions.append(.sharingChanged(allowed: false))
        reportDenied(code: .writeNotPermitted, into: &actions)
    }

    /// Says once per episode how to let this computer read notifications.
    private mutating func reportDenied(code: ATTErrorCode, into actions: inout [SessionAction]) {
        guard !deniedReported else { return }
        deniedReported = true
        actions.append(.log(.error, """
            the iPhone does not let this computer read notifications (ATT \(code.description)). \
            On the iPhone open Settings > Bluetooth, tap (i) next to this computer and turn on \
            "Share System Notifications"; if it is not listed, forget the device on both sides and pair again
            """))
    }

    /// Asks the phone to perform a notification's positive or negative action; the outcome comes
    /// back as `.actionCompleted`. Actions go before every fetch.
    public mutating func performAction(_ action: ActionID, on uid: UInt32, now: Duration) -> [SessionAction] {
        var actions: [SessionAction] = []
        actionQueue.push((uid, action))
        pump(now: now, into: &actions)
        return actions
    }

    /// Fetches a notification's attributes again with the largest max length (65535) for Title,
    /// Subtitle and Message, for a message the phone cut short; the result comes as a `.modified` event. Returns
    /// nothing to do when the session does not know the notification.
    public mutating func fetchFullMessage(of uid: UInt32, now: Duration) -> [SessionAction] {
        var actions: [SessionAction] = []
        guard records[uid] != nil else { return actions }
        fullMessageWanted.insert(uid)
        if case .notification(uid)? = inFlight?.work {
            records[uid]?.refetchAfterCurrent = true
        } else {
            enqueueFetch(uid, preExisting: false, into: &actions)
        }
        pump(now: now, into: &actions)
        return actions
    }

    // MARK: Work

    private mutating func remember(_ notification: PhoneNotification, into actions: inout [SessionAction]) {
        while records.count >= configuration.maxKnownNotifications, let oldest = recordOrder.pop() {
            guard let record = records[oldest] else { continue }
            if !record.emitted { emit(oldest, into: &actions) }  // nothing is lost: show what is known
            records.removeValue(forKey: oldest)
            queued.remove(oldest)
            actions.append(.log(.debug, "forgot notification \(oldest): more than \(configuration.maxKnownNotifications) are known"))
        }
        records[notification.uid] = Record(notification: notification)
        recordOrder.push(notification.uid)
    }

    private mutating func enqueueFetch(_ uid: UInt32, preExisting: Bool, into actions: inout [SessionAction]) {
        guard queued.insert(uid).inserted else { return }
        if preExisting { backlogQueue.push(uid) } else { freshQueue.push(uid) }
        // Bound the work: past the limit, show the oldest backlog with what the Notification Source told.
        while queued.count > configuration.maxQueuedFetches, let victim = backlogQueue.pop() ?? freshQueue.pop() {
            guard queued.remove(victim) != nil else { continue }
            // Said once per episode (a burst of thousands would say it thousands of times), and
            // how many it took once the backlog has drained.
            if shownWithoutAttributes == 0 {
                actions.append(.log(.warning, """
                    more than \(configuration.maxQueuedFetches) notifications wait for attributes: the oldest are shown \
                    without them until the backlog drains
                    """))
            }
            shownWithoutAttributes += 1
            actions.append(.log(.debug, "showing \(victim) without its attributes (backlog)"))
            emit(victim, into: &actions)
        }
    }

    /// Starts the next request if none is in flight.
    private mutating func pump(now: Duration, into actions: inout [SessionAction]) {
        defer {
            if shownWithoutAttributes > 0, queued.isEmpty {
                actions.append(.log(.info, "the backlog drained: \(shownWithoutAttributes) notification(s) were shown without their attributes"))
                shownWithoutAttributes = 0
            }
        }
        while inFlight == nil, let work = nextWork() {
            let request: ControlPointRequest
            var appOnly = false
            switch work {
            case .probe:
                request = .getNotificationAttributes(uid: Self.probeUID, attributes: [.init(.appIdentifier)])
            case .action(let uid, let action):
                request = .performNotificationAction(uid: uid, action: action)
            case .app(let identifier):
                request = .getAppAttributes(appIdentifier: identifier, attributes: [.displayName])
            case .notification(let uid):
                // One lookup, the two fields read in place (through the in-place access: a copy of
                // the record would retain and release every string in it).
                var appChecked: Bool?
                var flags: EventFlags = []
                if let index = records.index(forKey: uid) {
                    func read(_ record: inout Record) { (appChecked, flags) = (record.appChecked, record.notification.flags) }
                    read(&records.values[index])
                }
                if filter.filtersApps, appChecked == false {
                    appOnly = true
                    request = .getNotificationAttributes(uid: uid, attributes: [.init(.appIdentifier)])
                } else {
                    request = .getNotificationAttributes(
                        uid: uid, attributes: attributeRequests(
                            for: flags, fullMessage: !fullMessageWanted.isEmpty && fullMessageWanted.contains(uid),
                            appIdentifier: !(filter.filtersApps && appChecked == true)))
                }
            }
            do {
                let bytes = try request.encoded()
                try reassembler.expect(request)
                writesIssued += 1
                inFlight = InFlight(work: work, appOnly: appOnly, sentAt: now, writeNumber: writesIssued)
                actions.append(.writeControlPoint(bytes))
            } catch {
                actions.append(.log(.warning, "cannot ask for \(describe(work)): \(error)"))
                giveUp(work, into: &actions)
            }
        }
    }

    private mutating func nextWork() -> Work? {
        if let (uid, action) = actionQueue.pop() { return .action(uid, action) }
        if let app = appQueue.pop() { return .app(app) }
        while let uid = appKeptQueue.pop() ?? freshQueue.pop() ?? backlogQueue.pop() {
            if queued.remove(uid) != nil, records.index(forKey: uid) != nil { return .notification(uid) }
        }
        // Behind everything else: the check never delays real work.
        if probeWanted {
            probeWanted = false
            return .probe
        }
        return nil
    }

    private func attributeRequests(for flags: EventFlags, fullMessage: Bool, appIdentifier: Bool) -> [NotificationAttributeRequest] {
        var requests: [NotificationAttributeRequest] = []
        requests.reserveCapacity(8)
        if appIdentifier { requests.append(.init(.appIdentifier)) }
        // A full fetch asks every text attribute for all that a 16-bit length can carry.
        requests.append(.init(.title, maxLength: fullMessage ? UInt16.max : configuration.titleMaxLength))
        requests.append(.init(.subtitle, maxLength: fullMessage ? UInt16.max : configuration.subtitleMaxLength))
        requests.append(.init(.message, maxLength: fullMessage ? UInt16.max : configuration.messageMaxLength))
        requests.append(.init(.messageSize))
        requests.append(.init(.date))
        // Ask for action labels only when the phone says there are actions: iOS has been seen
        // to omit a label tuple it was asked for.
        if flags.contains(.positiveAction) { requests.append(.init(.positiveActionLabel)) }
        if flags.contains(.negativeAction) { requests.append(.init(.negativeActionLabel)) }
        return requests
    }

    /// Finishes the request in flight once both its write result and its response are in; a
    /// complete response alone is enough for a request that has one (the phone answered, so it
    /// accepted the write), which keeps the write's D-Bus reply off the path of a burst.
    private mutating func finishIfDone(now: Duration, into actions: inout [SessionAction]) {
        guard let flight = inFlight, flight.writeDone || flight.response != nil else { return }
        // Usually an event and the next request follow: room for both at once.
        actions.reserveCapacity(actions.count + 2)
        if !flight.writeDone { sharingAccepted(now: now, into: &actions) }
        switch flight.work {
        case .probe:
            inFlight = nil
            reassembler.reset()
            probeAnswered(now: now)
        case .action(let uid, let action):
            inFlight = nil
            actions.append(.actionCompleted(uid: uid, action: action, outcome: .performed))
        case .notification(let uid):
            guard let response = flight.response else { return }
            inFlight = nil
            if flight.appOnly {
                applyAppIdentifier(response, to: uid, into: &actions)
            } else {
                apply(response, to: uid, into: &actions)
            }
        case .app(let identifier):
            guard let response = flight.response else { return }
            inFlight = nil
            learnAppName(identifier, response.displayName.flatMap { $0.isEmpty ? nil : $0 }, into: &actions)
        }
        pump(now: now, into: &actions)
    }

    private mutating func apply(_ response: FetchedResponse, to uid: UInt32, into actions: inout [SessionAction]) {
        guard let index = records.index(forKey: uid) else {
            actions.append(.log(.debug, "dropped the attributes of notification \(uid): it was removed meanwhile"))
            return
        }
        // The record is updated in place: a copy would retain (and later release) every string in it.
        let filtersApps = filter.filtersApps
        func update(_ record: inout Record) -> (refetch: Bool, checkApp: Bool, app: String?) {
            record.notification.takeAttributes(of: response)
            let refetch = record.refetchAfterCurrent
            record.refetchAfterCurrent = false
            return (refetch, filtersApps && !record.appChecked && !record.emitted, record.notification.appIdentifier)
        }
        let (refetch, checkApp, app) = update(&records.values[index])
        if !refetch, !fullMessageWanted.isEmpty { fullMessageWanted.remove(uid) }
        if refetch { enqueueFetch(uid, preExisting: false, into: &actions) }
        if checkApp {
            records[uid]?.appChecked = true
            if filterApp(of: uid, into: &actions) { return }
        }

        guard let app, !app.isEmpty else { return emit(uid, into: &actions) }
        // Not valid UTF-8 as the phone sent it (repaired with U+FFFD): asking with the repaired
        // text would name an app the phone does not have.
        guard !app.unicodeScalars.contains("\u{FFFD}") else {
            actions.append(.log(.debug, "the app identifier of notification \(uid) is not valid UTF-8: its display name is not asked for"))
            return emit(uid, into: &actions)
        }
        if let cached = appNames[app] {
            emit(uid, appName: cached, into: &actions)
        } else {
            waitingForApp[app, default: []].append(uid)
            if appRequested.insert(app).inserted { appQueue.push(app) }
        }
    }

    /// The answer to an AppIdentifier-only request: the app filter drops the notification, or
    /// its other attributes are asked for next.
    private mutating func applyAppIdentifier(_ response: FetchedResponse, to uid: UInt32, into actions: inout [SessionAction]) {
        guard var record = records[uid] else {
            actions.append(.log(.debug, "dropped the app of notification \(uid): it was removed meanwhile"))
            return
        }
        if let app = response.appIdentifier { record.notification.appIdentifier = app }
        record.appChecked = true
        record.refetchAfterCurrent = false  // the whole notification is fetched next anyway
        records[uid] = record
        if filterApp(of: uid, into: &actions) { return }
        if queued.insert(uid).inserted { appKeptQueue.push(uid) }
    }

    /// Lets the app filter decide on a notification whose AppIdentifier is known (or will not
    /// be); true if it was dropped.
    private mutating func filterApp(of uid: UInt32, into actions: inout [SessionAction]) -> Bool {
        guard let record = records[uid] else { return true }
        let app = record.notification.appIdentifier.flatMap { $0.isEmpty ? nil : $0 }
        let (dropped, matched) = filter.decide(app: app)
        for rule in matched { ruleMatches[rule, default: 0] += 1 }
        guard dropped else { return false }
        records.removeValue(forKey: uid)
        queued.remove(uid)
        fullMessageWanted.remove(uid)
        dropFiltered(uid, why: app == nil ? "its app is unknown" : "app filter", into: &actions)
        return true
    }

    /// Counts and remembers a notification the filter dropped; it is never shown.
    private mutating func dropFiltered(_ uid: UInt32, why: String, into actions: inout [SessionAction]) {
        filteredCount += 1
        while filteredUIDs.count >= configuration.maxKnownNotifications, let oldest = filteredOrder.pop() {
            filteredUIDs.remove(oldest)
        }
        if filteredUIDs.insert(uid).inserted { filteredOrder.push(uid) }
        actions.append(.log(.debug, "notification \(uid) filtered out (\(why))"))
    }

    private mutating func learnAppName(_ identifier: String, _ name: String?, into actions: inout [SessionAction]) {
        if appNames.count >= configuration.maxCachedApps, let evicted = appNames.keys.first {
            appNames.removeValue(forKey: evicted)
            appRequested.remove(evicted)
        }
        appNames[identifier] = .some(name)
        for uid in waitingForApp.removeValue(forKey: identifier) ?? [] where records[uid] != nil {
            emit(uid, appName: name, into: &actions)
        }
    }

    /// Shows a notification: `.added` the first time, `.modified` after. An `appName` that is
    /// not `.none` becomes the notification's app name first (`.some(nil)`: none).
    private mutating func emit(_ uid: UInt32, appName: String?? = .none, into actions: inout [SessionAction]) {
        guard let index = records.index(forKey: uid) else { return }
        // The record is read and changed in place (see `apply`).
        let filtersApps = filter.filtersApps
        func prepare(_ record: inout Record) -> Bool {  // true: the app filter must decide first
            if let appName { record.notification.appName = appName }
            // Shown without its attributes (the phone did not answer, too much work): the app
            // filter decides on what is known.
            guard !record.emitted && filtersApps && !record.appChecked else { return false }
            record.appChecked = true
            return true
        }
        if prepare(&records.values[index]), filterApp(of: uid, into: &actions) { return }
        func markEmitted(_ record: inout Record) -> NotificationEvent? {
            let kind: NotificationEvent.Kind = record.emitted ? .modified : .added
            record.emitted = true
            let before = record.shownBeforeRenewal
            record.shownBeforeRenewal = nil
            if let before, before.sameContent(as: record.notification) { return nil }
            return NotificationEvent(kind: kind, notification: record.notification)
        }
        // `index` still holds: a `filterApp` that keeps the notification changes no record.
        if let event = markEmitted(&records.values[index]) { actions.append(.emit(event)) }
    }

    /// The phone refused or the link failed the write in flight.
    private mutating func failCurrent(reason code: ATTErrorCode?, message: String?, now: Duration, into actions: inout [SessionAction]) {
        guard let flight = inFlight else { return }
        inFlight = nil
        reassembler.reset()
        let denied = code == .writeNotPermitted || code == .insufficientAuthentication || code == .insufficientEncryption
        if code == .writeNotPermitted {
            sharingRefused(into: &actions)
        } else if let code, denied {
            notificationSharingAllowed = false
            reportDenied(code: code, into: &actions)
        }
        let why = code.map { "ATT error \($0)" } ?? message ?? "unknown error"
        switch flight.work {
        case .probe:
            if code == nil { actions.append(.log(.debug, "the alive check failed: \(why)")) }
            probeAnswered(now: now)
        case .action(let uid, let action):
            let outcome: ActionOutcome = switch code {
            case .invalidParameter?: .notificationGone
            case .actionFailed?: .actionFailed
            default: .failed(why)
            }
            actions.append(.actionCompleted(uid: uid, action: action, outcome: outcome))
        case .notification(let uid) where code == .invalidParameter:
            actions.append(.log(.debug, "notification \(uid) is gone from the phone (ATT 0xa2)"))
            if let record = records[uid], !record.emitted { records.removeValue(forKey: uid) }
        case .notification, .app:
            if !denied { actions.append(.log(.warning, "the phone did not answer \(describe(flight.work)): \(why)")) }
            giveUp(flight.work, into: &actions)
        }
        pump(now: now, into: &actions)
    }

    /// After a broken response: try a notification once more, else give up on it.
    private mutating func retryOrGiveUp(_ work: Work, into actions: inout [SessionAction]) {
        if case .notification(let uid) = work, var record = records[uid], record.attempts == 0 {
            record.attempts += 1
            records[uid] = record
            if queued.insert(uid).inserted { freshQueue.push(uid) }
            return
        }
        giveUp(work, into: &actions)
    }

    /// Shows what is known without the attributes that could not be fetched.
    private mutating func giveUp(_ work: Work, into actions: inout [SessionAction]) {
        switch work {
        case .notification(let uid):
            emit(uid, into: &actions)
        case .app(let identifier):
            learnAppName(identifier, nil, into: &actions)
        case .action(let uid, let action):
            actions.append(.actionCompleted(uid: uid, action: action, outcome: .failed("no answer from the phone")))
        case .probe:
            break  // the phone sent something: it is alive (the next check is scheduled by the caller)
        }
    }

    private func describe(_ work: Work) -> String {
        switch work {
        case .notification(let uid): "the attributes of notification \(uid)"
        case .app: "an app's display name"
        case .action(let uid, let action): "the \(action) action on notification \(uid)"
        case .probe: "the alive check"
        }
    }
}

extension ANCSSession {
    /// Ends the response in progress early (`DataSourceReassembler.finishEarly`), as the session
    /// keeps it; nil when none is pending.
    fileprivate mutating func finishEarly() -> FetchedResponse? {
        var response: FetchedResponse?
        reassembler.finishEarly { response = FetchedResponse($0) }
        return response
    }
}
