import ANCS

/// The session's work: the notifications it knows, the queue of Control Point requests, and
/// what each answer (or its failure) does to them.
extension ANCSSession {
    mutating func remember(_ notification: PhoneNotification, into actions: inout [SessionAction]) {
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

    /// Keeps each order at most twice its set plus 64: a removal leaves its UID in the order,
    /// which would otherwise grow for as long as the session lasts (a phone that stays
    /// connected for days: the month in a minute, seed 20270301).
    mutating func compactOrders() {
        if recordOrder.count > 2 * records.count + 64 {
            let records = self.records
            Self.compact(&recordOrder) { records.index(forKey: $0) != nil }
        }
        if filteredOrder.count > 2 * filteredUIDs.count + 64 {
            let current = filteredUIDs
            Self.compact(&filteredOrder) { current.contains($0) }
        }
    }

    /// Keeps the entries of `order` for which `isCurrent` holds, the latest of each UID only,
    /// in their order.
    private static func compact(_ order: inout FIFO<UInt32>, isCurrent: (UInt32) -> Bool) {
        var entries: [UInt32] = []
        entries.reserveCapacity(order.count)
        while let uid = order.pop() { entries.append(uid) }
        var kept = Set<UInt32>()
        var latestFirst: [UInt32] = []
        for uid in entries.reversed() where isCurrent(uid) && kept.insert(uid).inserted { latestFirst.append(uid) }
        for uid in latestFirst.reversed() { order.push(uid) }
    }

    /// Whether the request in flight asks for the attributes of the notification `uid` is now
    /// (not of one removed under that UID).
    func isFetching(_ uid: UInt32) -> Bool {
        guard let flight = inFlight, case .notification(uid) = flight.work else { return false }
        return !flight.notificationRemoved
    }

    mutating func enqueueFetch(_ uid: UInt32, preExisting: Bool, into actions: inout [SessionAction]) {
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
    mutating func pump(now: Duration, into actions: inout [SessionAction]) {
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
    mutating func finishIfDone(now: Duration, into actions: inout [SessionAction]) {
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
            if flight.notificationRemoved {
                actions.append(.log(.debug, "dropped the attributes of notification \(uid): it was removed while they were asked for"))
            } else if flight.appOnly {
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
        // The whole message asked for (`fetchFullMessage`) is shown even if it says the same.
        let fullMessage = !refetch && !fullMessageWanted.isEmpty && fullMessageWanted.remove(uid) != nil
        if refetch { enqueueFetch(uid, preExisting: false, into: &actions) }
        if checkApp {
            records[uid]?.appChecked = true
            if filterApp(of: uid, into: &actions) { return }
        }

        guard let app, !app.isEmpty else { return emit(uid, evenIfUnchanged: fullMessage, into: &actions) }
        // Not valid UTF-8 as the phone sent it (repaired with U+FFFD): asking with the repaired
        // text would name an app the phone does not have.
        guard !app.unicodeScalars.contains("\u{FFFD}") else {
            actions.append(.log(.debug, "the app identifier of notification \(uid) is not valid UTF-8: its display name is not asked for"))
            return emit(uid, evenIfUnchanged: fullMessage, into: &actions)
        }
        if let cached = appNames[app] {
            emit(uid, appName: cached, evenIfUnchanged: fullMessage, into: &actions)
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
    mutating func dropFiltered(_ uid: UInt32, why: String, into actions: inout [SessionAction]) {
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

    /// Shows a notification: `.added` the first time, `.modified` after when it says something
    /// else (or `evenIfUnchanged`). An `appName` that is not `.none` becomes the notification's
    /// app name first (`.some(nil)`: none).
    mutating func emit(_ uid: UInt32, appName: String?? = .none, evenIfUnchanged: Bool = false, into actions: inout [SessionAction]) {
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
            record.changeUnshown = false
            if !evenIfUnchanged, let before = record.shownBefore, before.notification.sameContent(as: record.notification) { return nil }
            record.shownBefore = Shown(record.notification)
            return NotificationEvent(kind: kind, notification: record.notification)
        }
        // `index` still holds: a `filterApp` that keeps the notification changes no record.
        if let event = markEmitted(&records.values[index]) { actions.append(.emit(event)) }
    }

    /// The phone refused or the link failed the write in flight.
    mutating func failCurrent(reason code: ATTErrorCode?, message: String?, now: Duration, into actions: inout [SessionAction]) {
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
        case .notification(let uid) where flight.notificationRemoved:
            actions.append(.log(.debug, "the request for notification \(uid), removed meanwhile, failed: \(why)"))
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
    mutating func retryOrGiveUp(_ work: Work, into actions: inout [SessionAction]) {
        if case .notification(let uid) = work, var record = records[uid], record.attempts == 0 {
            record.attempts += 1
            records[uid] = record
            if queued.insert(uid).inserted { freshQueue.push(uid) }
            return
        }
        giveUp(work, into: &actions)
    }

    /// Shows what is known without the attributes that could not be fetched. A change the phone
    /// announced that no answer has shown yet is shown even when what is known is what was
    /// shown: the outputs learn that it changed (the soak's oracle owes that event, seed 22).
    mutating func giveUp(_ work: Work, into actions: inout [SessionAction]) {
        switch work {
        case .notification(let uid):
            emit(uid, evenIfUnchanged: records[uid]?.changeUnshown ?? false, into: &actions)
        case .app(let identifier):
            learnAppName(identifier, nil, into: &actions)
        case .action(let uid, let action):
            actions.append(.actionCompleted(uid: uid, action: action, outcome: .failed("no answer from the phone")))
        case .probe:
            break  // the phone sent something: it is alive (the next check is scheduled by the caller)
        }
    }

    func describe(_ work: Work) -> String {
        switch work {
        case .notification(let uid): "the attributes of notification \(uid)"
        case .app: "an app's display name"
        case .action(let uid, let action): "the \(action) action on notification \(uid)"
        case .probe: "the alive check"
        }
    }
}
