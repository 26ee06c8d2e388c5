import ANCS
@testable import ANCSDaemon
import ANCSSession
import DBus
import LinkMachine
import PhoneSimulator
import Testing
import TestSupport

/// The daemon's reconnect, retry, alive-check and replay logic, in this process against the
/// simulated bluetoothd and iPhone, on a virtual clock: what would take minutes or hours of real
/// time (or be flaky on real timers) takes milliseconds, and nothing sleeps (`InProcessDaemon`).
@Suite("The daemon in-process on virtual time", .serialized)
struct DaemonOnVirtualTimeTests {
    typealias Harness = InProcessDaemon

    static let grace = NotificationSpec(
        uid: 1, category: .social, flags: [.positiveAction, .negativeAction],
        attributes: [.appIdentifier: "com.apple.MobileSMS", .title: "Grace Hopper", .message: "Found the bug in relay 70",
                     .date: "20261130T101200", .positiveActionLabel: "Reply", .negativeActionLabel: "Clear"])
    static let alan = NotificationSpec(
        uid: 2, category: .email, attributes: [.appIdentifier: "com.apple.mobilemail", .title: "Alan Turing", .message: "On computable numbers"])
    static let ada = NotificationSpec(
        uid: 3, category: .social, attributes: [.appIdentifier: "com.apple.MobileSMS", .title: "Ada Lovelace", .message: "Note G"])

    static let aliveCheck = SessionConfiguration().aliveCheckInterval ?? .seconds(900)
    static let requestTimeout = SessionConfiguration().requestTimeout
    static let sixHours = SessionConfiguration().resubscribeAfter ?? .seconds(21600)

    /// The daemon's options with notifications by AcquireNotify (sockets) or StartNotify (signals).
    static func delivery(acquire: Bool) -> DaemonOptions {
        var options = DaemonOptions()
        options.preferAcquireNotify = acquire
        return options
    }

    /// How many links the daemon has made, and whether the phone's failed.
    static func attempts(_ daemon: isolated Daemon) -> (made: UInt64, failed: Bool) {
        let made = daemon.machine.linksStarted
        guard let link = Harness.link(daemon) else { return (made, false) }
        return (made, daemon.machine.status(of: link.id, at: link.device.path.rawValue)?.failure != nil)
    }

    @Test(arguments: [true, false]) func aNotificationIsShownEndToEnd(acquire: Bool) async throws {
        try await Harness.with(options: Self.delivery(acquire: acquire)) { h in
            try await h.until("subscribed") { Harness.settled($0) }
            #expect(h.events.connections == 1)
            try await h.phone(.add(Self.grace))
            try await h.until("the notification is shown") { _ in !h.events.notifications.isEmpty }
            let shown = h.events.notifications.first
            #expect(shown?.kind == .added)
            #expect(shown?.notification.title == "Grace Hopper")
            #expect(shown?.notification.message == "Found the bug in relay 70")
            #expect(shown?.notification.appName == "Messages")
            #expect(shown?.notification.category == .social)
            #expect(shown?.notification.positiveAction == "Reply")
            try await h.phone(.remove(uid: 1))
            try await h.until("its removal is shown") { _ in h.events.shown(titled: "Grace Hopper") == [.added, .removed] }
        }
    }

    /// The subscription is refused three times: the daemon tries again after 0.5 s, 1 s and 2 s
    /// (not a millisecond earlier), and the fourth attempt subscribes.
    @Test func aRefusedSubscriptionIsRetriedAfterEachPauseAndNotBefore() async throws {
        try await Harness.with(phoneFirst: [.refuseSubscribe(count: 3)]) { h in
            try await h.until("the first subscription failed") { Self.attempts($0) == (1, true) }
            #expect(h.phoneSaid("refused") == 1)
            for (attempt, pause) in [(2, 500), (3, 1000), (4, 2000)] {
                await h.advance(by: .milliseconds(pause - 1))
                #expect(await h.read { Self.attempts($0) } == (UInt64(attempt - 1), true), "attempt \(attempt) waits its whole pause")
                await h.advance(by: .milliseconds(1))
                if attempt < 4 {
                    try await h.until("attempt \(attempt) failed") { Self.attempts($0) == (UInt64(attempt), true) }
                    #expect(h.phoneSaid("refused") == attempt)
                } else {
                    try await h.until("attempt 4 subscribed") { Harness.settled($0) && $0.machine.linksStarted == 4 }
                }
            }
            #expect(h.phoneSaid("refused") == 3)
            #expect(h.events.connections == 1)
            #expect(h.simulator.isSubscribed())
        }
    }

    /// Another program ends ancsd's acquired Notification Source socket (bluetoothd ends it for
    /// whoever asks) while the phone stays connected: no session for `socketClosedPause`, even
    /// when the phone's properties change meanwhile (each change makes the daemon look at the
    /// phone again), then one.
    @Test func aClosedSocketOnAConnectedPhoneWaitsItsPauseForANewSession() async throws {
        try await Harness.with(phoneFirst: [.add(Self.grace)]) { h in
            try await h.until("subscribed, the replay shown") { Harness.settled($0) && h.events.notifications.count == 1 }
            guard let source = await h.read({ Harness.link($0)?.ancsLink.path(of: ANCSSession.notificationSourceUUID) }) else {
                throw TestFailure("no link to the phone")
            }
            let other = try await DBusConnection.connect(to: .address(h.bus.address))
            _ = try await other.call(
                destination: "org.bluez", path: source, interface: "org.bluez.GattCharacteristic1", member: "StopNotify",
                timeout: .seconds(60))
            try await h.until("the link stopped") { Harness.link($0) == nil }
            #expect(await h.read { $0.tree.device(at: Harness.phonePath)?.connected } == true, "the phone is still connected")
            try await other.setProperty(
                destination: "org.bluez", path: Harness.phonePath, interface: "org.bluez.Device1", name: "Trusted", value: .bool(false))
            await other.close()
            try await h.until("the daemon saw the phone change") { $0.tree.device(at: Harness.phonePath)?.trusted == false }
            #expect(await h.read { Self.attempts($0) } == (1, false) && h.events.connections == 1, "no session at once")
            await h.advance(by: LinkMachine.socketClosedPause - .milliseconds(1))
            #expect(await h.read { Self.attempts($0) } == (1, false) && h.events.connections == 1, "no session within the pause")
            await h.advance(by: .milliseconds(1))
            try await h.until("a new session") { Harness.settled($0) && $0.machine.linksStarted == 2 }
            #expect(h.events.connections == 2)
            // The phone replayed its notification to the new session: not shown again (--replays unseen).
            #expect(h.events.shown(titled: "Grace Hopper") == [.added])
        }
    }

    /// Every 15 minutes the daemon probes the phone; a phone that answers keeps its
    /// subscriptions, one that answers nothing (`silent_drop_all`) has them renewed after the
    /// request timeout, and then shows what it sends again.
    @Test(arguments: [true, false]) func anUnansweredAliveCheckRenewsTheSubscriptions(acquire: Bool) async throws {
        try await Harness.with(options: Self.delivery(acquire: acquire)) { h in
            try await h.until("subscribed") { Harness.settled($0) }
            let writes = await h.read { Harness.link($0)?.session.writesIssued ?? 0 }
            await h.advance(by: Self.aliveCheck - .milliseconds(1))
            #expect(await h.read { Harness.link($0)?.session.writesIssued } == writes, "no probe before 15 min")
            await h.advance(by: .milliseconds(1))
            #expect(await h.read { Harness.link($0)?.session.writesIssued } == writes + 1, "the probe, at 15 min")
            try await h.until("the phone answered the probe") { Harness.settled($0) }
            #expect(h.phoneSaid("CP write 00ffffffff") == 1)
            #expect(await h.read { Harness.link($0)?.session.resubscriptions } == 0)

            try await h.phone(.silentDropAll)
            await h.advance(by: Self.aliveCheck)
            try await h.untilPhoneSaid("never answered")
            await h.advance(by: Self.requestTimeout - .milliseconds(1))
            #expect(await h.read { Harness.link($0)?.session.resubscriptions } == 0, "the probe has its whole timeout")
            await h.advance(by: .milliseconds(1))
            // The renewal's calls go on by themselves (it may be over by now): its count stays.
            #expect(await h.read { Harness.link($0)?.session.resubscriptions } == 1, "renewed once the probe timed out")
            try await h.until("subscribed again") { Harness.settled($0) && Harness.link($0)?.session.resubscriptions == 1 }
            #expect(h.phoneSaid("CCCD was rewritten") == 2, "both CCCDs written again")
            #expect(await h.read { $0.machine.linksStarted } == 1, "the same link, renewed")
            try await h.phone(.add(Self.grace))
            try await h.until("the phone's next notification is shown") { _ in h.events.shown(titled: "Grace Hopper") == [.added] }
        }
    }

    /// A phone whose Notification Source went dead while its Control Point still answers
    /// (`silent_drop`) passes every alive check; after 6 hours without Notification Source
    /// traffic the daemon renews the subscriptions anyway, and the notification that came
    /// meanwhile is shown.
    @Test(arguments: [true, false]) func sixHoursWithoutNotificationSourceTrafficForceARenewal(acquire: Bool) async throws {
        try await Harness.with(options: Self.delivery(acquire: acquire)) { h in
            try await h.until("subscribed") { Harness.settled($0) }
            try await h.phone(.silentDrop)
            try await h.phone(.add(Self.grace))
            let checks = Int(Self.sixHours / Self.aliveCheck)
            for check in 1..<checks {
                await h.advance(by: Self.aliveCheck)
                try await h.until("alive check \(check) answered") { Harness.settled($0) }
            }
            #expect(h.phoneSaid("CP write 00ffffffff") == checks - 1)
            #expect(await h.read { Harness.link($0)?.session.resubscriptions } == 0, "every alive check was answered")
            #expect(h.events.notifications.isEmpty, "the phone's push is dead")
            await h.advance(by: Self.aliveCheck - .milliseconds(1))
            #expect(await h.read { Harness.link($0)?.session.resubscriptions } == 0, "not before 6 hours")
            await h.advance(by: .milliseconds(1))
            #expect(await h.read { Harness.link($0)?.session.resubscriptions } == 1, "renewed at 6 hours")
            try await h.until("subscribed again, the notification shown") {
                Harness.settled($0) && h.events.shown(titled: "Grace Hopper") == [.added]
            }
            #expect(await h.read { Harness.link($0)?.session.resubscriptions } == 1)
        }
    }

    /// After a renewal the phone replays what it holds, under the same UIDs: what was shown
    /// before is not shown again, what came while the push was dead is shown, and what went
    /// away meanwhile is shown removed once the replay is over (1 s without a replayed event).
    @Test(arguments: [true, false]) func theReplayAfterARenewalShowsNothingTwice(acquire: Bool) async throws {
        try await Harness.with(options: Self.delivery(acquire: acquire), phoneFirst: [.add(Self.grace), .add(Self.alan)]) { h in
            try await h.until("subscribed, the replay shown") { Harness.settled($0) && h.events.notifications.count == 2 }
            try await h.phone(.silentDropAll)
            try await h.phone(.remove(uid: Self.alan.uid))
            try await h.phone(.add(Self.ada))
            await h.advance(by: Self.aliveCheck)
            try await h.untilPhoneSaid("never answered")
            await h.advance(by: Self.requestTimeout)
            try await h.until("subscribed again, the new notification shown") {
                Harness.settled($0) && Harness.link($0)?.session.resubscriptions == 1 && h.events.shown(titled: "Ada Lovelace") == [.added]
            }
            #expect(h.events.shown(titled: "Alan Turing") == [.added], "its removal waits for the end of the replay")
            await h.advance(by: ANCSSession.replayQuiet - .milliseconds(1))
            #expect(h.events.shown(titled: "Alan Turing") == [.added])
            await h.advance(by: .milliseconds(1))
            #expect(h.events.shown(titled: "Alan Turing") == [.added, .removed])
            #expect(h.events.shown(titled: "Grace Hopper") == [.added], "replayed, and not shown again")
            #expect(h.events.connections == 1)
        }
    }
}
