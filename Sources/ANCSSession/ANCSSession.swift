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
    public internal(set) var notificationSharingAllowed: Bool?
    /// True from the second Control Point write in a row the phone refused with ATT 0x03 until
    /// it accepts one again: an episode of sharing turned off (`.sharingChanged` tells both ends).
    public internal(set) var sharingOff = false
    /// How many times the session asked its owner to subscribe again.
    public internal(set) var resubscriptions = 0

    /// Which notifications are kept (starts as the configuration's).
    public private(set) var filter: NotificationFilter
    /// How many notifications the filter dropped in this session.
    public internal(set) var filteredCount = 0
    /// How many notifications each filter rule matched in this session (rules that matched
    /// nothing are absent), for `ancsd doctor`.
    public internal(set) var ruleMatches: [NotificationFilter.Rule: Int] = [:]

    struct Record: Sendable {
        var notification: PhoneNotification
        var emitted = false
        /// What was last shown of it (after a renewal, what was shown before it): a fetch again
        /// shows it again only if it says something else. The phone's answer to one fetch may
        /// already carry the change that a modification then asks to fetch (the modification
        /// came while the fetch ran, or its event arrived after the answer, which a Data Source
        /// value from a socket can overtake): the same content is not shown twice. Boxed: a
        /// record is stored inline in the table, whose room a burst of a thousand doubles.
        var shownBefore: Shown?
        /// The phone announced a change that no emitted event has carried yet.
        var changeUnshown = false
        var attempts = 0
        var refetchAfterCurrent = false
        /// The app filter has seen the notification's AppIdentifier (or given up on it).
        var appChecked = false
    }

    /// A notification as it was last shown (`Record.shownBefore`).
    final class Shown: Sendable {
        let notification: PhoneNotification
        init(_ notification: PhoneNotification) { self.notification = notification }
    }

    enum Work: Hashable, Sendable {
        case notification(UInt32)
        case app(String)
        case action(UInt32, ActionID)
        /// The alive check: a request for a UID no notification has.
        case probe
    }

    /// The UID the alive check asks for: no notification has it, so a live phone answers 0xA2.
    public static let probeUID: UInt32 = 0xFFFF_FFFF

    struct InFlight: Sendable {
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
        /// The notification asked about was removed while the request ran: what comes back,
        /// answer or error, is of the one removed and is dropped, even when the phone has added
        /// another under the same UID meanwhile (a UID the phone reuses: the answer names the UID
        /// alone).
        var notificationRemoved = false
    }

    var reassembler: DataSourceReassembler
    var records: [UInt32: Record] = [:]
    var recordOrder = FIFO<UInt32>()
    var freshQueue = FIFO<UInt32>()
    var backlogQueue = FIFO<UInt32>()
    var queued: Set<UInt32> = []
    var appQueue = FIFO<String>()
    var actionQueue = FIFO<(UInt32, ActionID)>()
    var appNames: [String: String?] = [:]
    var appRequested: Set<String> = []
    var waitingForApp: [String: [UInt32]] = [:]
    var inFlight: InFlight? {
        didSet { updateDeadline() }  // no `oldValue`: changes through `inFlight?.…` stay in place
    }
    /// When the next alive check is due (nil: checks off, not subscribed yet, or one is due and
    /// waits behind other work: `probeWanted`).
    var aliveCheckAt: Duration?
    /// An alive check waits for the queue to empty.
    var probeWanted = false
    /// When the next look at the Notification Source's silence is due (`resubscribeAfter`).
    private var resubscribeAt: Duration?
    /// The last Notification Source value (or the subscription), for `resubscribeAfter`.
    private var lastNotificationSourceAt: Duration = .zero
    /// Control Point writes refused with ATT 0x03 in a row.
    var consecutiveRefusals = 0
    /// Notifications shown without attributes in the current backlog overflow (0: none).
    var shownWithoutAttributes = 0
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
    mutating func updateDeadline() {
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
    public internal(set) var writesIssued: UInt64 = 0
    var deniedReported = false
    var fullMessageWanted: Set<UInt32> = []
    /// Notifications the filter dropped (their modifications are ignored), oldest first, bounded
    /// like the records.
    var filteredUIDs: Set<UInt32> = []
    var filteredOrder = FIFO<UInt32>()
    /// Notifications whose app was kept by the filter: their other attributes come next.
    var appKeptQueue = FIFO<UInt32>()

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

    /// The sizes of the session's tables, for tests that prove nothing grows with time.
    public var tableSizes: [(name: String, count: Int)] {
        [("notifications", records.count), ("notification order", recordOrder.count), ("fresh queue", freshQueue.count),
         ("backlog queue", backlogQueue.count), ("queued", queued.count), ("app queue", appQueue.count),
         ("action queue", actionQueue.count), ("app names", appNames.count), ("apps asked", appRequested.count),
         ("waiting for an app", waitingForApp.count), ("full message wanted", fullMessageWanted.count),
         ("filtered", filteredUIDs.count), ("filtered order", filteredOrder.count), ("app kept queue", appKeptQueue.count),
         ("carried over", carriedOver.count), ("rule matches", ruleMatches.count)]
    }

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
                records[uid]?.shownBefore = Shown(shown)
                enqueueFetch(uid, preExisting: event.flags.contains(.preExisting), into: &actions)
            } else if var record = records[uid] {
                record.changeUnshown = true
                record.notification.flags = event.flags
                record.notification.category = event.categoryID
                record.notification.categoryCount = event.categoryCount
                record.attempts = 0
                if isFetching(uid) { record.refetchAfterCurrent = true }
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
            queued.remove(uid)
            if isFetching(uid) { inFlight?.notificationRemoved = true }
            fullMessageWanted.remove(uid)
            if !filteredUIDs.isEmpty, filteredUIDs.remove(uid) != nil { compactOrders() }
            if let record = records.removeValue(forKey: uid) {
                var gone = record.notification
                gone.categoryCount = event.categoryCount
                if record.emitted { actions.append(.emit(NotificationEvent(kind: .removed, notification: gone))) }
                else { actions.append(.log(.debug, "notification \(uid) removed before it was shown")) }
                compactOrders()
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
            if !flight.notificationRemoved { retryOrGiveUp(flight.work, into: &actions) }
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
            if !flight.notificationRemoved { giveUp(flight.work, into: &actions) }
        }
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
        if isFetching(uid) {
            records[uid]?.refetchAfterCurrent = true
        } else {
            enqueueFetch(uid, preExisting: false, into: &actions)
        }
        pump(now: now, into: &actions)
        return actions
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
