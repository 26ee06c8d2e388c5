import AMS
import ANCSSession
import GattSession
import LinkMachine
import Testing

/// The link machine's decisions, one table per fault the daemon has had on real bluetoothd
/// (docs/history, issues 33 to 36), each at the level of `SessionTests`: no bus, no clock.
@Suite("The link machine")
struct LinkMachineTests {
    typealias H = LinkHarness

    // MARK: Subscribing

    /// The Data Source first, then the Notification Source: the phone answers requests on the
    /// Data Source, and replays its backlog on the Notification Source at once.
    @Test func aBondedConnectedPhoneIsSubscribedDataSourceFirst() {
        var h = H()
        #expect(h.tree() == [.startLink(1, h.phone), .call(1, .acquireNotify(H.ds))])
        #expect(h.answer(.acquired(mtu: 185)) == [
            .keepSocket(1, 1, service: 0, characteristic: ANCSSession.dataSourceUUID), .call(2, .acquireNotify(H.ns)),
        ])
        let up = h.answer(.acquired(mtu: 185))
        #expect(up == [
            .keepSocket(2, 1, service: 0, characteristic: ANCSSession.notificationSourceUUID),
            .log(.info, "AA:BB:CC:DD:EE:01: connected (iPhone, AcquireNotify)"), .linkUp(1),
            .subscribed(1, service: 0, characteristics: Set(H.ancsObjects.characteristics.keys)),
        ])
        #expect(h.status?.running == true && h.status?.delivery == "AcquireNotify" && h.status?.renewing == false)
        #expect(h.machine.nextDeadline == nil, "an idle link keeps no timer")
    }

    @Test func withoutAcquireNotifyItIsStartNotifyAndSignalsAreRouted() {
        var h = H(acquire: false)
        #expect(H.calls(h.tree()).map(\.call) == [.startNotify(H.ds)])
        #expect(h.machine.signalled(at: H.ds)?.characteristic == ANCSSession.dataSourceUUID, "values may come before the answer")
        #expect(H.calls(h.answer(.done)).map(\.call) == [.startNotify(H.ns)])
        h.answer(.done)
        #expect(h.status?.delivery == "StartNotify")
        #expect(h.machine.signalled(at: H.ns)?.service == 0)
        #expect(h.machine.signalled(at: "/elsewhere") == nil)
    }

    @Test func anAcquireNotifyRefusalFallsBackToStartNotify() {
        var h = H()
        h.tree()
        let fallback = h.answer(H.notSupported)
        #expect(H.calls(fallback).map(\.call) == [.startNotify(H.ds)])
        #expect(H.logs(fallback, atLeast: .debug) == [
            "AA:BB:CC:DD:EE:01: AcquireNotify on \(H.ds) failed (org.bluez.Error.NotSupported: Operation is not supported); using StartNotify",
        ])
        h.answer(.done)
        #expect(H.calls(h.said).last?.call == .acquireNotify(H.ns), "each characteristic tries AcquireNotify first")
    }

    @Test func aPhoneWithoutABondIsIgnoredAndSaidOnce() {
        var h = H()
        h.phone.bonded = false
        #expect(h.tree() == [.log(.warning, "ignoring AA:BB:CC:DD:EE:01: it exposes ANCS but is not bonded")])
        #expect(h.tree() == [])
        h.phone.bonded = true
        #expect(H.calls(h.tree()).count == 1, "bonded now: a link")
    }

    @Test func aPhoneTheOptionsLeaveOutGetsNoLink() {
        var h = H()
        h.phone.allowed = false
        #expect(h.tree() == [])
    }

    /// bluetoothd 5.66 answers AcquireNotify "Failed: Not connected" on a link that dropped,
    /// later ones `NotConnected`; with a socket of the characteristic acquired it says "Notify
    /// acquired". StartNotify after any of them only queued on a dead link (the last issue's
    /// fault): the link fails, and starts afresh after its pause.
    @Test(arguments: [H.notConnected, H.failed("org.bluez.Error.NotConnected", "Not Connected"), H.notifyAcquired])
    func errorsStartNotifyCannotHelpFailTheLink(error: CallOutcome) {
        var h = H()
        h.tree()
        let failed = h.answer(error)
        #expect(H.calls(failed).isEmpty, "no StartNotify on a dead link")
        #expect(H.logs(failed, atLeast: .warning).first?.hasSuffix("trying again in 0.5 s") == true)
        #expect(h.status?.failure != nil)
        #expect(h.machine.nextDeadline == .milliseconds(500))
        let again = h.advance(.milliseconds(500))
        #expect(again == [.endLink(1, reason: nil), .startLink(2, h.phone), .call(2, .acquireNotify(H.ds))])
    }

    /// Reconnects that flooded: while subscribing keeps failing on a connected phone, the pause
    /// doubles from 0.5 s to 30 s; a success, or the phone going, starts it at 0.5 s again.
    @Test func failedSubscriptionsBackOffDoublingUpTo30Seconds() {
        var h = H()
        h.tree()
        var pauses: [Duration] = []
        for _ in 0..<9 {
            let failedAt = h.now
            h.answer(H.notConnected)
            guard let deadline = h.machine.nextDeadline else { break }
            pauses.append(deadline - failedAt)
            h.advance(deadline - failedAt)
        }
        #expect(pauses == [0.5, 1, 2, 4, 8, 16, 30, 30, 30].map { .milliseconds(Int($0 * 1000)) })
        h.answerAll([.call(H.calls(h.said).last!.id, .acquireNotify(H.ds))])
        #expect(h.status?.running == true)
        h.dropAndReturn()
        h.answer(H.notConnected)
        #expect(h.machine.nextDeadline == h.now + .milliseconds(500), "the back-off starts over")
    }

    /// bluetoothd 5.82 kept ancsd's own acquired socket registered for over a minute after a
    /// fast reconnection: AcquireNotify says "Notify acquired". A characteristic ancsd acquired
    /// before and no link holds is released with StopNotify, once, and acquired again.
    @Test func aStaleSocketOfAncsdsOwnIsReleasedOnceAndAcquiredAgain() {
        var h = H()
        h.connect()
        h.dropAndReturn()
        let release = h.answer(H.notifyAcquired)
        #expect(H.calls(release).map(\.call) == [.stopNotify(H.ds)])
        #expect(H.logs(release).first?.contains("releasing it with StopNotify") == true)
        #expect(H.calls(h.answer(.done)).map(\.call) == [.acquireNotify(H.ds)])
        let second = h.answer(H.notifyAcquired)
        #expect(H.calls(second).isEmpty, "released once: the second refusal fails the link")
        #expect(h.status?.failure != nil)
    }

    /// An AcquireNotify bluetoothd never answered (the phone left its CCC write unanswered after
    /// a fast reconnection) keeps the characteristic "Notify acquired" in bluetoothd 5.82 while
    /// its write is pending, or after it failed. A StopNotify then frees the request's session,
    /// and bluetoothd crashed (SIGSEGV) when the write ended: seen in a trixie boot. Such a
    /// characteristic is left alone, though ancsd acquired it on an earlier link; the link fails
    /// and is tried again after its pause. An answered AcquireNotify makes it releasable again.
    @Test func anAcquireNeverAnsweredIsNotReleasedWithStopNotify() {
        var h = H()
        h.connect()
        h.dropAndReturn()
        let fallback = h.answer(H.failed("org.freedesktop.DBus.Error.Timeout", "no reply within the timeout"))
        #expect(H.calls(fallback).map(\.call) == [.startNotify(H.ds)])
        h.answer(H.notifyAcquired)
        #expect(h.status?.failure != nil)
        let retry = h.advance(.milliseconds(500))
        #expect(H.calls(retry).map(\.call) == [.acquireNotify(H.ds)])
        let refused = h.answer(H.notifyAcquired)
        #expect(H.calls(refused).isEmpty, "no StopNotify on an acquire still out: \(refused)")
        #expect(H.logs(refused).first?.contains("never answered") == true, "\(H.logs(refused))")
        #expect(h.status?.failure != nil)
        // Answered at last: ancsd's own again, so a later stale socket of it is released.
        h.advance(.seconds(1))
        h.answerAll([.call(h.lastCall!.id, .acquireNotify(H.ds))])
        #expect(h.status?.running == true)
        h.dropAndReturn()
        #expect(H.calls(h.answer(H.notifyAcquired)).map(\.call) == [.stopNotify(H.ds)])
    }

    /// A socket another program acquired (ancsd never had it) is left alone.
    @Test func aSocketAnotherProgramHoldsIsNotReleased() {
        var h = H()
        h.tree()
        #expect(H.calls(h.answer(H.notifyAcquired)).isEmpty)
        #expect(h.status?.failure != nil)
    }

    /// A failed link's StartNotify sessions are ended one after the other, each answer waited
    /// for, before the next link's AcquireNotify (a StopNotify that came after it would end the
    /// new link's socket: bluetoothd releases an acquired socket for whoever asks).
    @Test func aFailedLinkReleasesItsStartNotifySessionsBeforeTheNextLink() {
        var h = H()
        h.tree()
        h.answer(H.notSupported)  // Data Source on StartNotify
        h.answer(.done)
        h.answer(H.notConnected)  // the Notification Source fails
        let restart = h.advance(.milliseconds(500))
        #expect(restart.map(\.kind) == ["call"])
        #expect(H.calls(restart).map(\.call) == [.stopNotify(H.ds)])
        #expect(h.answer(.done) == [.endLink(1, reason: nil), .startLink(2, h.phone), .call(5, .acquireNotify(H.ds))])
    }

    @Test func resultsForALinkThatEndedAreDropped() {
        var h = H()
        h.tree()
        h.phone.connected = false
        #expect(h.tree() == [.endLink(1, reason: nil)])
        #expect(h.answer(.acquired(mtu: 185)) == [], "the socket is not kept: the daemon closes it")
        h.phone.connected = true
        h.tree()
        #expect(H.calls(h.answer(H.notifyAcquired)).map(\.call) == [.stopNotify(H.ds)], "but it was ancsd's: it may be stale")
    }

    /// The phone dropped and came back while AcquireNotify was on its way: the earlier link's
    /// answer, coming late, is not taken for the new link's (whose own call is still out).
    @Test func aLateAnswerForAnEarlierLinkIsNotTakenForTheNext() {
        var h = H()
        h.tree()
        let first = h.lastCall!.id
        h.dropAndReturn()
        #expect(h.feed(.callEnded(first, .acquired(mtu: 185))) == [])
        #expect(h.answer(.acquired(mtu: 185)).first == .keepSocket(2, 2, service: 0, characteristic: ANCSSession.dataSourceUUID))
    }

    // MARK: Links that end

    /// bluetoothd closes the sockets a moment before `Connected` turns false: a link started in
    /// that gap subscribed on a link that was gone. After the primary socket closes on a phone
    /// still connected, no link starts for `socketClosedPause`, whatever the tree says meanwhile.
    @Test func aClosedSocketOnAConnectedPhoneWaitsItsPause() {
        var h = H()
        h.connect()
        let closed = h.feed(.socketClosed(1, service: 0, reason: "end of file"))
        #expect(closed == [
            .log(.info, "AA:BB:CC:DD:EE:01: notification socket closed (end of file)"), .endLink(1, reason: "disconnected"),
        ])
        h.now += .milliseconds(100)
        h.phone.name = "Grace's iPhone"
        #expect(h.tree() == [.log(.debug, "AA:BB:CC:DD:EE:01: connected, but its notification socket closed a moment ago: a new session waits")])
        let after = h.advance(.milliseconds(400))
        #expect(after.contains(.startLink(2, h.phone)))
        #expect(H.calls(after).map(\.call) == [.acquireNotify(H.ds)])
    }

    @Test func aClosedSocketOnADisconnectedPhoneWaitsForNothing() {
        var h = H()
        h.connect()
        h.phone.connected = false
        h.tree()
        h.feed(.socketClosed(1, service: 0, reason: "end of file"))
        #expect(h.machine.nextDeadline == nil)
    }

    @Test func aRunningLinkEndsWhenThePhoneGoesOrANCSChanges() {
        var h = H()
        h.connect()
        h.phone.ancs = nil
        #expect(h.tree() == [.endLink(1, reason: "ANCS is gone")])
        h.phone.ancs = H.ancsObjects
        h.answerAll(h.tree())
        h.phone.connected = false
        #expect(h.tree() == [.endLink(2, reason: "disconnected")], "AcquireNotify only: nothing to stop")
    }

    @Test func aLinkEndedWhileConnectedReleasesItsStartNotifySessions() {
        var h = H(acquire: false)
        h.connect()
        h.phone.ancs = nil
        #expect(h.tree().map(\.kind) == ["endLink", "call", "call"])
        #expect(Set(H.calls(h.said.suffix(2)).map(\.call)) == [.stopNotify(H.ds), .stopNotify(H.ns)])
    }

    @Test func bluetoothdStoppingEndsEveryLinkAndCallsNothing() {
        var h = H(acquire: false)
        h.connect()
        #expect(h.feed(.bluetoothdStopped) == [.endLink(1, reason: "bluetoothd stopped")])
    }

    @Test func theIdentityAddressIsFollowed() {
        var h = H()
        h.connect()
        h.phone.address = "F0:00:00:00:00:01"
        #expect(h.tree() == [.follow(1, address: "F0:00:00:00:00:01")])
        #expect(h.tree() == [])
    }

    // MARK: Renewing

    /// StopNotify on each characteristic, the last first, each answer waited for; then
    /// subscribed again in the description's order, on the same link.
    @Test func aRenewalUnsubscribesLastFirstThenSubscribesAgain() {
        var h = H(media: false)
        h.connect()
        let begin = h.feed(.renew(1, service: 0, reason: "no answer to the alive check"))
        #expect(begin == [
            .log(.info, "AA:BB:CC:DD:EE:01: renewing the ANCS subscriptions (no answer to the alive check)"),
            .dropSockets(1, service: 0), .renewing(1, service: 0), .call(3, .stopNotify(H.ns)),
        ])
        #expect(h.status?.renewing == true)
        #expect(h.feed(.renew(1, service: 0, reason: "again")) == [], "one renewal at a time")
        #expect(H.calls(h.answer(.done)).map(\.call) == [.stopNotify(H.ds)])
        #expect(H.calls(h.answer(H.failed("org.bluez.Error.Failed", "No notify session started"))).map(\.call) == [.acquireNotify(H.ds)])
        h.answer(.acquired(mtu: 185))
        let done = h.answer(.acquired(mtu: 185))
        #expect(done.suffix(2) == [
            .log(.info, "AA:BB:CC:DD:EE:01: subscribed again (AcquireNotify)"),
            .subscribed(1, service: 0, characteristics: Set(H.ancsObjects.characteristics.keys)),
        ])
        #expect(h.status?.renewing == false)
        #expect(h.machine.linksStarted == 1)
    }

    /// With StartNotify, bluetoothd writes the CCCD only when the last notify session goes:
    /// `Notifying` still true after ancsd's StopNotify means another program holds one.
    @Test func aRenewalFindsAnotherProgramsNotifySession() {
        var h = H(acquire: false, media: false)
        h.connect()
        h.feed(.renew(1, service: 0, reason: "six hours without traffic"))
        #expect(H.calls(h.answer(.done)).map(\.call) == [.readNotifying(H.ns)])
        #expect(H.calls(h.answer(.notifying(true))).map(\.call) == [.stopNotify(H.ds)])
        h.answer(.done)
        let subscribing = h.answer(.notifying(false))
        #expect(H.logs(subscribing, atLeast: .warning).first?.contains("another program holds notifications of the phone's Notification Source") == true)
        h.answerAll([subscribing.last!])
        #expect(h.status?.sharedNotifySession == "Notification Source")
    }

    @Test func aRenewalThatCannotSubscribeStartsTheLinkAfresh() {
        var h = H(media: false)
        h.connect()
        h.feed(.renew(1, service: 0, reason: "test"))
        h.answer(.done)
        h.answer(.done)
        h.answer(H.notConnected)
        #expect(h.status?.failure != nil)
        #expect(h.advance(.milliseconds(500)) == [.endLink(1, reason: nil), .startLink(2, h.phone), .call(6, .acquireNotify(H.ds))])
    }
}

extension LinkMachine.Command {
    /// The command's case, for tables that only care about the order.
    var kind: String {
        switch self {
        case .call: "call"
        case .startLink: "startLink"
        case .linkUp: "linkUp"
        case .endLink: "endLink"
        case .follow: "follow"
        case .openService: "openService"
        case .closeService: "closeService"
        case .keepSocket: "keepSocket"
        case .dropSockets: "dropSockets"
        case .subscribed: "subscribed"
        case .renewing: "renewing"
        case .log: "log"
        }
    }
}
