import AMS
import ANCSSession
import GattSession
import LinkMachine
import Testing

/// The services a link speaks beside ANCS (Apple Media Service), decided by the link machine
/// as ANCS's link is: when one starts, stops and starts again.
@Suite("The link machine: services beside ANCS")
struct ServicesBesideANCSTests {
    typealias H = LinkHarness

    /// A phone connected with AMS offered, its ANCS subscribed.
    static func runningWithMedia(acquire: Bool = true) -> H {
        var h = H(acquire: acquire)
        h.phone.services = [MediaSession.service.uuid: H.amsObjects]
        h.connect()
        return h
    }

    /// bluetoothd adds a service's objects one by one: it starts once they have settled
    /// (`socketClosedPause`), subscribed in its description's order, then its session starts.
    @Test func amsStartsOnceItsObjectsSettle() {
        var h = Self.runningWithMedia()
        #expect(!h.said.contains { $0.kind == "openService" }, "not at once")
        let start = h.advance(.milliseconds(500))
        #expect(start == [
            .log(.info, "AA:BB:CC:DD:EE:01: the phone offers AMS; subscribing"),
            .openService(1, service: 1, uuid: MediaSession.service.uuid, objects: H.amsObjects),
            .call(3, .acquireNotify(H.remoteCommand)),
        ])
        #expect(H.calls(h.answer(.acquired(mtu: 185))).map(\.call) == [.acquireNotify(H.entityUpdate)])
        let done = h.answer(.acquired(mtu: 185))
        #expect(done.suffix(2) == [
            .log(.info, "AA:BB:CC:DD:EE:01: subscribed to AMS (AcquireNotify)"),
            .subscribed(1, service: 1, characteristics: Set(H.amsObjects.characteristics.keys)),
        ])
        #expect(h.status?.delivery == "AcquireNotify", "status shows ANCS's")
    }

    @Test func amsThatCannotBeSubscribedStaysOffThirtySeconds() {
        var h = Self.runningWithMedia()
        h.advance(.milliseconds(500))
        let failed = h.answer(H.notConnected)
        #expect(H.logs(failed, atLeast: .warning) == [
            "AA:BB:CC:DD:EE:01: cannot subscribe to AMS's Remote Command: org.bluez.Error.Failed: Not connected; trying again in 30 s",
        ])
        #expect(failed.contains(.closeService(1, service: 1)))
        #expect(h.status?.running == true, "ANCS goes on")
        #expect(h.advance(.seconds(29)) == [])
        #expect(h.advance(.seconds(1)).contains(.openService(1, service: 2, uuid: MediaSession.service.uuid, objects: H.amsObjects)))
    }

    @Test func amsWithdrawnStopsReleasesItsSessionsAndComesBackAfterSettling() {
        var h = Self.runningWithMedia(acquire: false)
        h.answerAll(h.advance(.milliseconds(500)))
        h.phone.services = [:]
        let gone = h.tree()
        #expect(gone.prefix(2) == [.log(.info, "AA:BB:CC:DD:EE:01: AMS stopped: the phone no longer offers it"), .closeService(1, service: 1)])
        #expect(Set(H.calls(gone).map(\.call)) == [.stopNotify(H.remoteCommand), .stopNotify(H.entityUpdate)])
        h.phone.services = [MediaSession.service.uuid: H.amsObjects]
        #expect(h.tree() == [])
        // The hold-off after it stopped, then its objects settle: a second pause.
        #expect(!h.advance(.milliseconds(500)).contains { $0.kind == "openService" })
        #expect(h.advance(.milliseconds(500)).contains { $0.kind == "openService" })
    }

    @Test func amsTurnedOffByAReloadStops() {
        var h = Self.runningWithMedia()
        h.answerAll(h.advance(.milliseconds(500)))
        h.feed(.reloaded(H.settings(media: false)))
        #expect(h.tree() == [.log(.info, "AA:BB:CC:DD:EE:01: AMS stopped: turned off"), .closeService(1, service: 1)])
        #expect(h.advance(.seconds(60)).allSatisfy { $0.kind != "openService" })
    }

    @Test func amsWhoseSocketClosedStopsAndStartsAgainAfterThePause() {
        var h = Self.runningWithMedia()
        h.answerAll(h.advance(.milliseconds(500)))
        let closed = h.feed(.socketClosed(1, service: 1, reason: "end of file"))
        #expect(closed == [
            .log(.info, "AA:BB:CC:DD:EE:01: AMS stopped: its notification socket closed (end of file)"), .closeService(1, service: 1),
        ])
        #expect(h.status?.running == true)
        #expect(h.advance(.milliseconds(500)).contains(.openService(1, service: 2, uuid: MediaSession.service.uuid, objects: H.amsObjects)))
    }

    @Test func amsRenewsItsOwnSubscriptionsOnly() {
        var h = Self.runningWithMedia()
        h.answerAll(h.advance(.milliseconds(500)))
        let renew = h.feed(.renew(1, service: 1, reason: "test"))
        #expect(H.calls(renew).map(\.call) == [.stopNotify(H.entityUpdate)])
        #expect(h.status?.renewing == false, "ANCS is not renewing")
    }

    /// A renewal of AMS that cannot subscribe fails the link, as ANCS's does.
    @Test func aFailedAMSRenewalStartsTheLinkAfresh() {
        var h = Self.runningWithMedia()
        h.answerAll(h.advance(.milliseconds(500)))
        h.feed(.renew(1, service: 1, reason: "test"))
        h.answer(.done)
        h.answer(.done)
        h.answer(H.notConnected)
        #expect(h.status?.failure != nil)
    }

    @Test func aServiceChangedByThePhoneStopsAndStartsAgain() {
        var h = Self.runningWithMedia()
        h.answerAll(h.advance(.milliseconds(500)))
        var moved = H.amsObjects
        moved.path = "\(H.phonePath)/service0040"
        h.phone.services = [MediaSession.service.uuid: moved]
        #expect(H.logs(h.tree()) == ["AA:BB:CC:DD:EE:01: AMS stopped: the phone changed it"])
        #expect(h.advance(.milliseconds(500)).contains(.openService(1, service: 2, uuid: MediaSession.service.uuid, objects: moved)))
    }

    /// Nothing a phone's life leaves behind stays in the machine's tables once it has gone.
    @Test func thePhoneGoneLeavesOnlyWhatIsBounded() {
        var h = Self.runningWithMedia(acquire: false)
        h.answerAll(h.advance(.milliseconds(500)))
        h.phone.connected = false
        h.answerAll(h.tree())
        h.advance(.seconds(60))
        let sizes = Dictionary(uniqueKeysWithValues: h.machine.tableSizes.map { ($0.name, $0.count) })
        #expect(sizes["links"] == 0 && sizes["calls in flight"] == 0 && sizes["pauses"] == 0 && sizes["retry delays"] == 0)
        #expect(h.machine.nextDeadline == nil)
    }
}
