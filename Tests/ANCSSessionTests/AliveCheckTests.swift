import ANCS
import ANCSSession
import Testing

/// The alive check, the re-subscription requests and notification-sharing episodes.
@Suite struct AliveCheckTests {
    private static let probe: [UInt8] = [0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x00]

    private func harness(aliveCheck: Duration? = .seconds(900), resubscribeAfter: Duration? = nil) -> Harness {
        var h = Harness {
            $0.aliveCheckInterval = aliveCheck
            $0.resubscribeAfter = resubscribeAfter
        }
        h.record(h.session.subscribed(now: h.now))
        return h
    }

    @Test func aSessionNeverSubscribedKeepsNoTimer() {
        let h = Harness()
        #expect(h.session.nextDeadline == nil, "an idle session (and an idle daemon) needs no wakeup")
    }

    @Test func theCheckAsksForAUIDThatCannotExistAndA2MeansAlive() {
        var h = harness()
        #expect(h.session.nextDeadline == .seconds(900))
        h.fireTimer()
        #expect(h.writes == [Self.probe], "GetNotificationAttributes for 0xFFFFFFFF, AppIdentifier only")
        h.written(.attError(.invalidParameter))
        #expect(h.resubscriptions.isEmpty && h.events.isEmpty)
        #expect(h.session.nextDeadline == .seconds(1800), "the next check one interval later")
        #expect(!h.logs.contains { $0.0 >= .warning })
    }

    @Test func noAnswerWithinTheTimeoutAsksToSubscribeAgainAndTheCheckGoesOn() {
        var h = harness()
        h.fireTimer()
        #expect(h.writes.count == 1)
        h.advance(.seconds(5))
        #expect(h.resubscriptions == ["the alive check went unanswered"])
        #expect(h.logs.contains { $0.0 == .warning && $0.1.contains("alive check") })
        // The owner renews the subscriptions; the check keeps running after it.
        h.record(h.session.resubscribed(now: h.now))
        h.fireTimer()
        #expect(h.now == .seconds(1805) && h.writes.count == 2 && h.writes.last == Self.probe)
        h.advance(.seconds(5))
        #expect(h.resubscriptions.count == 2, "a renewal that did not help is tried again at the next check")
    }

    @Test func theCheckWaitsBehindRealWork() {
        var h = harness(aliveCheck: .seconds(10))
        h.advance(.seconds(9))
        h.ns(.notificationAdded, uid: 7)
        h.ns(.notificationAdded, uid: 8)
        h.advance(.seconds(1))  // the check is due, but a fetch is in flight
        #expect(h.writes.count == 1 && h.lastRequest == .getNotificationAttributes(uid: 7, attributes: h.lastRequestAttributes))
        h.answer(notificationResponse(uid: 7, [(.appIdentifier, ""), (.title, "T"), (.subtitle, ""), (.message, "M"), (.messageSize, "1"), (.date, "")]))
        #expect(h.writes.count == 2)
        guard case .getNotificationAttributes(8, _)? = h.lastRequest else {
            Issue.record("uid 8 goes before the check: \(String(describing: h.lastRequest))")
            return
        }
        h.answer(notificationResponse(uid: 8, [(.appIdentifier, ""), (.title, "T"), (.subtitle, ""), (.message, "M"), (.messageSize, "1"), (.date, "")]))
        #expect(h.writes.last == Self.probe, "the check last")
        h.written(.attError(.invalidParameter))
        #expect(h.events.map(\.notification.uid) == [7, 8], "the check's 0xA2 is not a notification's")
        #expect(h.resubscriptions.isEmpty)
    }

    @Test func aRetractedNotificationsA2DropsOnlyThatOne() {
        var h = harness()
        h.ns(.notificationAdded, uid: 1)
        h.ns(.notificationAdded, uid: 2)
        h.ns(.notificationAdded, uid: 3)
        #expect(h.writes.count == 1)
        h.written(.attError(.invalidParameter))  // uid 1 was retracted before its fetch
        #expect(h.writes.count == 2)
        for uid: UInt32 in [2, 3] {
            guard case .getNotificationAttributes(uid, _)? = h.lastRequest else {
                Issue.record("expected the fetch of \(uid), got \(String(describing: h.lastRequest))")
                return
            }
            h.answer(notificationResponse(uid: uid, [(.appIdentifier, ""), (.title, "T\(uid)"), (.subtitle, ""), (.message, "M"), (.messageSize, "1"), (.date, "")]))
        }
        #expect(h.events.map(\.notification.uid) == [2, 3])
        #expect(h.events.allSatisfy { $0.kind == .added && $0.notification.attributesComplete })
        #expect(h.session.notification(uid: 1) == nil && h.session.queuedFetchCount == 0)
        #expect(h.resubscriptions.isEmpty && h.sharingChanges.isEmpty)
    }

    @Test func aSilentNotificationSourceAsksToSubscribeAgainOncePerPeriod() {
        var h = harness(aliveCheck: nil, resubscribeAfter: .seconds(100))
        h.advance(.seconds(60))
        h.ns(.notificationAdded, uid: 1)
        h.answer(notificationResponse(uid: 1, [(.appIdentifier, ""), (.title, "T"), (.subtitle, ""), (.message, "M"), (.messageSize, "1"), (.date, "")]))
        h.fireTimer()
        #expect(h.now == .seconds(100) && h.resubscriptions.isEmpty, "traffic at 60 s: not yet")
        h.fireTimer()
        #expect(h.now == .seconds(160) && h.resubscriptions.count == 1)
        #expect(h.resubscriptions.first?.contains("no Notification Source traffic") == true)
        h.fireTimer()
        #expect(h.now == .seconds(260) && h.resubscriptions.count == 2, "and again after another such period")
    }

    @Test func twoRefusalsInARowAreASharingEpisodeAndAnAcceptedWriteEndsIt() {
        var h = harness()
        h.ns(.notificationAdded, uid: 1)
        h.written(.attError(.writeNotPermitted))
        #expect(h.sharingChanges.isEmpty, "one refusal is not yet an episode")
        #expect(h.writes.last == Self.probe, "the check confirms at once")
        h.written(.attError(.writeNotPermitted))
        #expect(h.sharingChanges == [false])
        #expect(h.session.notificationSharingAllowed == false && h.session.sharingOff)
        #expect(h.logs.filter { $0.1.contains("Share System Notifications") }.count == 1)
        #expect(h.session.nextDeadline == .seconds(60), "checked every minute while sharing is off")
        h.fireTimer()
        h.written(.attError(.writeNotPermitted))
        #expect(h.sharingChanges == [false] && h.logs.filter { $0.1.contains("Share System Notifications") }.count == 1, "once per episode")
        h.fireTimer()
        h.written(.attError(.invalidParameter))  // sharing is back: the phone looks at requests again
        #expect(h.sharingChanges == [false, true])
        #expect(h.session.notificationSharingAllowed == true && !h.session.sharingOff)
        #expect(h.resubscriptions.isEmpty, "no renewal of its own (see sharingAccepted)")
    }

    @Test func renewingStartsANewSessionKeepingTheWriteNumbering() {
        var h = harness()
        h.ns(.notificationAdded, uid: 1)
        h.record(h.session.performAction(.negative, on: 1, now: h.now))
        let issued = h.session.writesIssued
        h.record(h.session.resubscribed(now: h.now))
        #expect(h.session.notificationCount == 0 && h.session.writesIssued == issued)
        #expect(h.actionOutcomes.count == 1, "the queued action ends as failed")
        h.written(.accepted, write: issued)  // a late answer of the old session is ignored
        #expect(h.events.isEmpty)
        h.ns(.notificationAdded, uid: 1, flags: .preExisting)
        #expect(h.session.writesIssued == issued + 1)
    }

    private static func attributes(_ title: String) -> [(NotificationAttributeID, String)] {
        [(.appIdentifier, ""), (.title, title), (.subtitle, ""), (.message, "M"), (.messageSize, "1"), (.date, "")]
    }

    private func harnessShowing(_ titles: [UInt32: String]) -> Harness {
        var h = harness()
        for uid in titles.keys.sorted() {
            h.ns(.notificationAdded, uid: uid)
            h.answer(notificationResponse(uid: uid, Self.attributes(titles[uid] ?? "")))
        }
        #expect(h.events.map(\.kind) == Array(repeating: .added, count: titles.count))
        return h
    }

    /// After a renewal the phone replays what it still holds under the same UIDs: shown
    /// already, unchanged, so not shown again; what it no longer holds was removed meanwhile.
    @Test func afterARenewalWhatThePhoneNoLongerHoldsIsRemoved() {
        var h = harnessShowing([1: "Kept", 2: "Gone"])
        h.record(h.session.resubscribed(now: h.now))
        h.ns(.notificationAdded, uid: 1, flags: .preExisting)
        h.answer(notificationResponse(uid: 1, Self.attributes("Kept")))
        #expect(h.events.count == 2, "uid 1 says what it said: not shown again")
        #expect(h.session.nextDeadline == h.now + ANCSSession.replayQuiet)
        h.advance(ANCSSession.replayQuiet)
        #expect(h.events.count == 3 && h.events.last?.kind == .removed && h.events.last?.notification.uid == 2)
        #expect(h.events.last?.notification.title == "Gone", "the removal carries what was shown")
        h.ns(.notificationRemoved, uid: 1)
        #expect(h.events.last?.kind == .removed && h.events.last?.notification.uid == 1, "the replayed one is known again")
    }

    /// Replayed with other content (shown before without its attributes, or changed
    /// meanwhile): a modification, never a second `added`.
    @Test func afterARenewalAChangedNotificationIsModifiedNotAddedAgain() {
        var h = harnessShowing([1: "Before"])
        h.record(h.session.resubscribed(now: h.now))
        h.ns(.notificationAdded, uid: 1, flags: .preExisting)
        h.answer(notificationResponse(uid: 1, Self.attributes("After")))
        #expect(h.events.map(\.kind) == [.added, .modified] && h.events.last?.notification.title == "After")
        h.advance(ANCSSession.replayQuiet)
        #expect(h.events.count == 2, "nothing removed: it was replayed")
    }

    /// A new notification ends the replay at once (the phone replays first); without any
    /// Notification Source traffic nothing is concluded, since a dead push tells nothing.
    @Test func afterARenewalANewNotificationEndsTheReplayAndSilenceConcludesNothing() {
        var h = harnessShowing([1: "One", 2: "Two"])
        h.record(h.session.resubscribed(now: h.now))
        h.advance(.seconds(60))
        #expect(h.events.count == 2, "no traffic: nothing concluded")
        h.ns(.notificationAdded, uid: 3)
        #expect(h.events.map(\.kind) == [.added, .added, .removed, .removed])
        #expect(h.events.suffix(2).map(\.notification.uid) == [1, 2])
        h.answer(notificationResponse(uid: 3, Self.attributes("Three")))
        #expect(h.events.last?.kind == .added && h.events.last?.notification.uid == 3)
    }

    /// A value with a reserved EventID (a phone's noise) is no event: it neither ends the
    /// replay, as a new notification would (the notifications still to be replayed were shown
    /// as removed, then added again when replayed), nor is it taken as part of the replay.
    @Test func afterARenewalAReservedEventEndsNoReplay() {
        var h = harnessShowing([1: "One", 2: "Two"])
        h.record(h.session.resubscribed(now: h.now))
        h.ns(.notificationAdded, uid: 1, flags: .preExisting)
        h.answer(notificationResponse(uid: 1, Self.attributes("One")))
        let ends = h.session.nextDeadline
        h.advance(.milliseconds(500))
        h.ns(EventID(rawValue: 7), uid: 2)
        h.ns(EventID(rawValue: 200), uid: 9, flags: .preExisting)
        #expect(h.events.count == 2, "nothing removed: \(h.events.map(\.kind))")
        #expect(h.session.nextDeadline == ends, "the replay's end is not moved")
        h.ns(.notificationAdded, uid: 2, flags: .preExisting)
        h.answer(notificationResponse(uid: 2, Self.attributes("Two")))
        h.advance(ANCSSession.replayQuiet)
        #expect(h.events.map(\.kind) == [.added, .added], "both replayed: nothing shown again, nothing removed")
        #expect(!h.logs.contains { $0.0 >= .warning }, "\(h.logs)")
    }

    /// Removed by the phone during the replay: one removal, with what was shown.
    @Test func afterARenewalARemovalOfACarriedNotificationIsShownOnce() {
        var h = harnessShowing([1: "One"])
        h.record(h.session.resubscribed(now: h.now))
        h.ns(.notificationRemoved, uid: 1, flags: .preExisting)
        h.advance(ANCSSession.replayQuiet)
        #expect(h.events.map(\.kind) == [.added, .removed] && h.events.last?.notification.title == "One")
    }
}

extension Harness {
    /// The attributes a first fetch of a notification without actions asks for.
    var lastRequestAttributes: [NotificationAttributeRequest] {
        [.init(.appIdentifier), .init(.title, maxLength: 128), .init(.subtitle, maxLength: 128), .init(.message, maxLength: 2048), .init(.messageSize), .init(.date)]
    }
}
