import DBus
import Foundation
import JSON
import Synchronization
import Testing
import TestSupport

/// A desktop notification server (org.freedesktop.Notifications) on a private session bus,
/// in the test process: it records every call, keeps the notifications open, and emits
/// `ActionInvoked` and `NotificationClosed` as a real server would.
final class FakeNotificationServer: Sendable {
    struct Shown: Sendable {
        var id: UInt32
        var appName: String
        var replacesID: UInt32
        var icon: String
        var summary: String
        var body: String
        var actions: [String]
        var hints: [String: DBusValue]
        var timeout: Int32

        var device: String? { hints["x-ancsd-device"]?.stringValue }
        var uid: UInt32? { hints["x-ancsd-uid"]?.uint32Value }
    }

    struct State {
        var notifies: [Shown] = []
        var closes: [UInt32] = []
        var open: [UInt32: Shown] = [:]
        var nextID: UInt32 = 100
    }

    static let path: ObjectPath = "/org/freedesktop/Notifications"
    static let interface: InterfaceName = "org.freedesktop.Notifications"

    let connection: DBusConnection
    private let state = Mutex(State())

    private init(connection: DBusConnection) {
        self.connection = connection
    }

    static func start(address: String) async throws -> FakeNotificationServer {
        let connection = try await DBusConnection.connect(to: .address(address))
        let server = FakeNotificationServer(connection: connection)
        try await connection.export(ExportedObject(ExportedInterface(interface, methods: [
            .immediate("GetCapabilities", output: "as") { _ in [.stringArray(["body", "body-markup", "actions"])] },
            .immediate("GetServerInformation", output: "ssss") { _ in
                [.string("fake"), .string("ancsd tests"), .string("1.0"), .string("1.2")]
            },
            .immediate("Notify", input: "susssasa{sv}i", output: "u") { call in
                [.uint32(try server.notify(call.arguments))]
            },
            ExportedMethod("CloseNotification", input: "u") { call in
                let id = call.arguments[0].uint32Value ?? 0
                if server.close(id) { try await server.emitClosed(id, reason: 3) }
                return []
            },
        ], signals: [
            ExportedSignal("ActionInvoked", signature: "us", argumentNames: ["id", "action_key"]),
            ExportedSignal("NotificationClosed", signature: "uu", argumentNames: ["id", "reason"]),
        ])), at: path)
        guard try await connection.requestName("org.freedesktop.Notifications", flags: .doNotQueue) == .primaryOwner else {
            throw TestFailure("org.freedesktop.Notifications is taken")
        }
        return server
    }

    private func notify(_ arguments: [DBusValue]) throws -> UInt32 {
        guard arguments.count == 8, let appName = arguments[0].stringValue, let replacesID = arguments[1].uint32Value,
              let icon = arguments[2].stringValue, let summary = arguments[3].stringValue,
              let body = arguments[4].stringValue, let actions = arguments[5].stringArray,
              let hints = arguments[6].stringKeyedDictionary, let timeout = arguments[7].int32Value
        else { throw DBusError.invalidArgument("bad Notify arguments") }
        return state.withLock { state in
            let id: UInt32
            if replacesID != 0, state.open[replacesID] != nil {
                id = replacesID
            } else {
                state.nextID += 1
                id = state.nextID
            }
            let shown = Shown(
                id: id, appName: appName, replacesID: replacesID, icon: icon, summary: summary, body: body,
                actions: actions, hints: hints, timeout: timeout)
            state.notifies.append(shown)
            state.open[id] = shown
            return id
        }
    }

    /// Records a CloseNotification; true if the notification was open.
    private func close(_ id: UInt32) -> Bool {
        state.withLock { state in
            state.closes.append(id)
            return state.open.removeValue(forKey: id) != nil
        }
    }

    private func emitClosed(_ id: UInt32, reason: UInt32) async throws {
        try await connection.emitSignal(
            path: Self.path, interface: Self.interface, member: "NotificationClosed", arguments: [.uint32(id), .uint32(reason)])
    }

    /// The user clicked a button.
    func invoke(_ id: UInt32, action: String) async throws {
        try await connection.emitSignal(
            path: Self.path, interface: Self.interface, member: "ActionInvoked", arguments: [.uint32(id), .string(action)])
    }

    /// The user dismissed a notification.
    func dismiss(_ id: UInt32) async throws {
        guard close(id) else { return }
        try await emitClosed(id, reason: 2)
    }

    var snapshot: State { state.withLock { $0 } }

    /// Waits until `predicate` holds for the server's state; fails after `timeout`.
    @discardableResult
    func wait<T>(
        _ what: String, timeout: Duration = .seconds(30), _ predicate: (State) -> T?
    ) throws -> T {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let value = predicate(snapshot) { return value }
            Thread.sleep(forTimeInterval: 0.02)
        }
        let state = snapshot
        throw TestFailure("""
            the notification server never saw \(what); Notify calls:
            \(state.notifies.map { "#\($0.id) replaces \($0.replacesID): \($0.summary) | \($0.body)" }.joined(separator: "\n"))
            closes: \(state.closes); open: \(state.open.keys.sorted())
            """)
    }
}

private let adaPhone = "AA:BB:CC:DD:EE:01"

private let desktopScenario = """
    {"scenario":"desktop","devices":[{"address":"\(adaPhone)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages","com.apple.mobilemail":"Mail","com.apple.mobilephone":"Phone"}}
    {"do":"wait_subscribed","timeout":30}
    {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Ada","subtitle":"Tea","message":"Tea at <five> & scones?","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"add","uid":2,"category":"incoming_call","app":"com.apple.mobilephone","title":"Grace","date":"","flags":["positive_action","negative_action"],"positive_action":"Answer","negative_action":"Decline"}
    {"do":"add","uid":3,"category":"email","app":"com.apple.mobilemail","title":"Charles","message":"Loading…"}
    {"do":"add","uid":4,"category":"news","app":"com.example.unnamed","title":"Fleeting","message":"gone soon"}
    {"after":0.7,"do":"modify","uid":3,"message":"The Analytical Engine weaves algebraic patterns"}
    {"after":0.5,"do":"remove","uid":4}
    {"do":"sleep","seconds":300}
    {"do":"end"}
    """

/// `ancsd desktop` end to end: the daemon against the simulated phone on one private bus, the
/// companion against a simulated notification server on another. Part of the serialized
/// DaemonTests suite, so that daemon runs do not overlap.
extension DaemonTests {
    private func startDaemon(bus: PrivateBus, control: String, _ arguments: [String] = []) throws -> ChildProcess {
        try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", bus.address, "run", "--format", "json", "--log-level", "debug", "--control", control] + arguments)
    }

    private func events(_ daemon: ChildProcess) -> [JSONValue] {
        daemon.lines.compactMap { try? JSONValue(parsing: $0.text) }
    }

    @Test func desktopShowsActsAndFollowsTheDaemon() async throws {
        let system = try PrivateBus()
        let session = try PrivateBus()
        let server = try await FakeNotificationServer.start(address: session.address)
        let control = system.directory + "/control"
        let scenario = system.directory + "/desktop.jsonl"
        try desktopScenario.write(toFile: scenario, atomically: true, encoding: .utf8)

        // The companion starts first: no daemon yet, so it retries.
        let desktop = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["desktop", "--control", control, "--bus", session.address, "--log-level", "debug", "--state-dir", session.directory])
        defer { _ = try? desktop.stop(timeout: .seconds(5)) }
        try desktop.waitForStandardError(containing: "cannot connect to ancsd at \(control)")

        var daemon = try startDaemon(bus: system, control: control)
        defer { _ = try? daemon.stop(timeout: .seconds(5)) }
        try daemon.waitForStandardError(containing: "bluetoothd is not running")
        try desktop.waitForStandardError(containing: "connected to ancsd at \(control)")
        let phone = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", system.address, "--scenario", scenario])
        defer { _ = try? phone.stop(timeout: .seconds(5)) }

        // added: one Notify each, as the specification wants it.
        let ada = try server.wait("Ada") { $0.notifies.first { $0.summary == "Ada — Tea" } }
        #expect(ada.appName == "Messages" && ada.replacesID == 0 && ada.icon == "chat-message-new-symbolic" && ada.timeout == -1)
        #expect(ada.body == "Tea at &lt;five> &amp; scones?", "escaped: the server takes body markup")
        #expect(ada.actions == ["default", "Close", "positive", "Reply", "negative", "Clear"])
        #expect(ada.hints["urgency"] == .byte(1) && ada.hints["category"] == .string("im"))
        #expect(ada.hints["desktop-entry"] == .string("ancsd"))
        #expect(ada.device == adaPhone && ada.uid == 1)

        let grace = try server.wait("Grace") { $0.notifies.first { $0.summary == "Grace" } }
        #expect(grace.appName == "Phone" && grace.body == "")
        #expect(grace.actions == ["default", "Close", "positive", "Answer", "negative", "Decline"])
        #expect(grace.hints["urgency"] == .byte(2) && grace.hints["category"] == .string("call.incoming"))

        // modified: the same notification, replaced in place.
        let engine = try server.wait("the modified mail") { $0.notifies.first { $0.body.hasPrefix("The Analytical Engine") } }
        let loading = try #require(server.snapshot.notifies.first { $0.summary == "Charles" })
        #expect(loading.body == "Loading…" && loading.appName == "Mail" && loading.actions.isEmpty)
        #expect(engine.replacesID == loading.id && engine.id == loading.id && engine.summary == "Charles")
        #expect(engine.hints["category"] == .string("email"))

        // removed: closed.
        let fleeting = try server.wait("Fleeting") { $0.notifies.first { $0.summary == "Fleeting" } }
        #expect(fleeting.appName == "com.example.unnamed", "no app name: the app's identifier")
        try server.wait("Fleeting closed") { $0.closes.contains(fleeting.id) ? true : nil }
        #expect(server.snapshot.notifies.filter { $0.summary != "Charles" }.count == 3, "each shown once")

        // A button: the action reaches the phone, which answers; declining a call removes it.
        try await server.invoke(ada.id, action: "positive")
        try desktop.waitForStandardError(containing: "positive action on \(adaPhone) #1: performed")
        try await server.invoke(grace.id, action: "negative")
        try desktop.waitForStandardError(containing: "negative action on \(adaPhone) #2: performed")
        try server.wait("the declined call closed") { $0.closes.contains(grace.id) ? true : nil }
        #expect(events(daemon).contains { $0["type"] == "removed" && $0["uid"] == 2 })
        #expect(server.snapshot.open.values.map(\.summary).sorted() == ["Ada — Tea", "Charles"])

        // Content stays out of the logs except at debug level.
        let undebugged = desktop.standardError.split(separator: "\n").filter { !$0.contains("debug:") }
        #expect(!undebugged.contains { $0.contains("Tea") || $0.contains("Ada") || $0.contains("Grace") })

        // The daemon restarts: the companion reconnects and keeps showing what the phone has:
        // nothing closes, nothing pops up again.
        let (notifies, closes) = (server.snapshot.notifies.count, server.snapshot.closes)
        #expect(try daemon.stop() == 0)
        try desktop.waitForStandardError(containing: "ancsd stopped; keeping \(adaPhone)'s 2 notification(s) until it is back")
        try desktop.waitForStandardError(containing: "ancsd closed the control connection; reconnecting")
        daemon = try startDaemon(bus: system, control: control)
        try daemon.waitForLine { $0.contains("\"type\":\"added\"") && $0.contains("\"uid\":3") }
        let current = try server.wait("the notifications still shown") { state -> [FakeNotificationServer.Shown]? in
            let open = state.open.values.sorted { $0.summary < $1.summary }
            return open.map(\.summary) == ["Ada — Tea", "Charles"] && open.map(\.uid) == [1, 3] ? open : nil
        }
        // Still shown since before: the companion has them again once it reconnected and found them.
        try desktop.waitForStandardError(containing: "connected to ancsd at", occurrences: 2)
        for uid in [1, 3] { try desktop.waitForStandardError(containing: "\(adaPhone) #\(uid): found again") }
        #expect(current.allSatisfy { $0.device == adaPhone })

        // And its buttons reach the phone through the new daemon: clearing Ada removes it.
        let adaAgain = try #require(current.first { $0.summary == "Ada — Tea" })
        try await server.invoke(adaAgain.id, action: "negative")
        try server.wait("Ada closed after Clear") { $0.closes.contains(adaAgain.id) ? true : nil }
        // The daemon's own line for the removal may reach its standard output after the
        // companion, a control client, had the event: waited for, not read at once.
        try daemon.waitForLine { $0.contains("\"type\":\"removed\"") && ($0.contains("\"uid\":1,") || $0.contains("\"uid\":1}")) }
        #expect(events(daemon).contains { $0["type"] == "removed" && $0["uid"] == 1 })
        // The companion takes the daemon's events one after another: by this removal it has
        // handled every replay the new daemon sent before it, and none popped up or closed.
        #expect(server.snapshot.notifies.count == notifies, "nothing shown again: \(server.snapshot.notifies.dropFirst(notifies).map(\.summary))")
        #expect(server.snapshot.closes == closes + [adaAgain.id], "nothing closed but Ada: no flicker")
        #expect(server.snapshot.open.values.map(\.summary) == ["Charles"], "no duplicates")

        // The user dismisses Charles; the companion forgets it (no close for it on stop).
        let charles = try #require(server.snapshot.open.values.first { $0.summary == "Charles" })
        try await server.dismiss(charles.id)
        try desktop.waitForStandardError(containing: "popup \(charles.id) closed on the desktop: dismissed by the user")
        let closesNow = server.snapshot.closes.count
        #expect(try desktop.stop() == 0)
        #expect(server.snapshot.closes.count == closesNow, "nothing left to close: \(server.snapshot.closes)")
        #expect(desktop.standardError.contains("stopping (SIGTERM)"))
    }

    /// A phone that walks away and comes back: its popups stay (no flicker), what it replays is
    /// never popped up again (held back by the daemon, or marked seen_before), and when it stays
    /// away, they close once --replay-settle has passed. Whatever the daemon's --replays.
    @Test(arguments: [[], ["--replays", "all"]])
    func desktopKeepsAPhonesNotificationsThroughAReconnectAndClosesThemWhenItStaysAway(daemonArguments: [String]) async throws {
        let run = try await desktopRun("""
            {"scenario":"walk-away","devices":[{"address":"\(adaPhone)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages"}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"One","message":"1"}
            {"do":"add","uid":2,"category":"missed_call","app":"com.apple.mobilephone","title":"Two","flags":["silent"]}
            {"after":1.5,"do":"disconnect"}
            {"after":1,"do":"connect"}
            {"do":"wait_subscribed","timeout":30}
            {"after":4,"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"Three","message":"3"}
            {"after":1,"do":"disconnect"}
            {"do":"sleep","seconds":300}
            {"do":"end"}
            """, daemonArguments: daemonArguments, desktopArguments: ["--replay-settle", "3"])
        defer { for process in [run.phone, run.desktop, run.daemon] { _ = try? process.stop(timeout: .seconds(5)) } }
        let server = run.server
        let first = try server.wait("both notifications") { $0.open.count == 2 ? $0.open : nil }
        let two = try #require(first.values.first { $0.summary == "Two" })
        #expect(two.appName == "com.apple.mobilephone" && two.hints["urgency"] == .byte(2))
        #expect(two.hints["category"] == .string("call.unanswered") && two.hints["suppress-sound"] == .bool(true))
        // The phone walks away and comes back (with new UIDs): its popups stay, once each.
        try run.desktop.waitForStandardError(containing: "\(adaPhone) disconnected; keeping its 2 notification(s)")
        let three = try server.wait("the next new notification") { state in state.open.values.first { $0.summary == "Three" } }
        #expect(server.snapshot.closes.isEmpty, "no flicker: \(server.snapshot.closes)")
        #expect(server.snapshot.notifies.count == 3, "the replayed One and Two did not pop up again: \(server.snapshot.notifies.map(\.summary))")
        #expect(run.desktop.standardError.contains("found again (#1 before)") && run.desktop.standardError.contains("found again (#2 before)"))
        if daemonArguments.isEmpty {
            #expect(!events(run.daemon).contains { $0["type"] == "added" && $0["title"] == "One" && $0["pre_existing"] == true })
        } else {
            #expect(events(run.daemon).contains { $0["type"] == "added" && $0["title"] == "One" && $0["seen_before"] == true })
        }
        // It walks away for good: after --replay-settle, its popups close.
        try server.wait("the phone's notifications closed") { state in
            Set(first.keys).union([three.id]).isSubset(of: Set(state.closes)) ? true : nil
        }
        #expect(run.desktop.standardError.contains("closing 3 notification(s) the phones no longer have"))
        #expect(server.snapshot.open.isEmpty && server.snapshot.closes.count == 3)
        #expect(try run.desktop.stop() == 0)
        #expect(server.snapshot.closes.count == 3, "nothing left to close")
    }

    /// Stopping closes what it shows: nobody would answer their buttons.
    @Test func desktopClosesEverythingWhenItStops() async throws {
        let run = try await desktopRun("""
            {"scenario":"stop","devices":[{"address":"\(adaPhone)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages"}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"One","message":"1"}
            {"do":"sleep","seconds":300}
            {"do":"end"}
            """)
        defer { for process in [run.phone, run.daemon] { _ = try? process.stop(timeout: .seconds(5)) } }
        let one = try run.server.wait("One") { $0.open.values.first { $0.summary == "One" } }
        #expect(try run.desktop.stop() == 0)
        #expect(run.server.snapshot.closes == [one.id] && run.server.snapshot.open.isEmpty)
    }

    /// The companion and its daemon on private buses, the phone playing `scenario`.
    private func desktopRun(
        _ scenario: String, daemonArguments: [String] = [], desktopArguments: [String] = []
    ) async throws -> (system: PrivateBus, session: PrivateBus, server: FakeNotificationServer, daemon: ChildProcess, desktop: ChildProcess, phone: ChildProcess) {
        let system = try PrivateBus()
        let session = try PrivateBus()
        let server = try await FakeNotificationServer.start(address: session.address)
        let control = system.directory + "/control"
        let path = system.directory + "/scenario.jsonl"
        try scenario.write(toFile: path, atomically: true, encoding: .utf8)
        let daemon = try startDaemon(bus: system, control: control, daemonArguments)
        try daemon.waitForStandardError(containing: "bluetoothd is not running")
        let desktop = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["desktop", "--control", control, "--bus", session.address, "--log-level", "debug", "--state-dir", session.directory] + desktopArguments)
        try desktop.waitForStandardError(containing: "connected to ancsd at \(control)")
        let phone = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", system.address, "--scenario", path])
        return (system, session, server, daemon, desktop, phone)
    }

    /// (a) A click on a popup (its `default` action) closes it and never acts on the phone,
    /// even when the phone offers one action only, and that one destructive.
    @Test func desktopClickNeverActsOnThePhone() async throws {
        let run = try await desktopRun("""
            {"scenario":"click","devices":[{"address":"\(adaPhone)","name":"Ada's iPhone"}],"apps":{"com.apple.mobilemail":"Mail","com.apple.mobilecal":"Calendar"}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"email","app":"com.apple.mobilemail","title":"Charles","message":"Invoice","flags":["negative_action"],"negative_action":"Trash"}
            {"do":"add","uid":2,"category":"schedule","app":"com.apple.mobilecal","title":"Standup","flags":["negative_action"],"negative_action":"Dismiss"}
            {"do":"add","uid":3,"category":"email","app":"com.apple.mobilemail","title":"Quiet","message":"no actions"}
            {"do":"sleep","seconds":300}
            {"do":"end"}
            """)
        defer { for process in [run.phone, run.desktop, run.daemon] { _ = try? process.stop(timeout: .seconds(5)) } }
        let mail = try run.server.wait("the mail") { $0.notifies.first { $0.summary == "Charles" } }
        let event = try run.server.wait("the event") { $0.notifies.first { $0.summary == "Standup" } }
        let quiet = try run.server.wait("the mail without actions") { $0.notifies.first { $0.summary == "Quiet" } }
        #expect(mail.actions == ["default", "Close", "negative", "Trash"], "a click is not the lone Trash")
        #expect(event.actions == ["default", "Close", "negative", "Dismiss"])
        #expect(quiet.actions.isEmpty, "no actions: nothing to click for")
        for popup in [mail, event] {
            try await run.server.invoke(popup.id, action: "default")
            try run.server.wait("the clicked popup closed") { $0.closes.contains(popup.id) ? true : nil }
            try run.desktop.waitForStandardError(containing: "popup \(popup.id) clicked: closing it, nothing sent to the phone")
        }
        #expect(!run.desktop.standardError.contains("action invoked on"), "\(run.desktop.standardError)")
        #expect(!run.phone.standardError.contains("Perform Notification Action"), "\(run.phone.standardError)")
        #expect(!events(run.daemon).contains { $0["type"] == "removed" })
        let list = try AncsdProcess.run(["list", "--control", run.system.directory + "/control"])
        #expect(list.stdout.contains("Charles") && list.stdout.contains("Standup"), "still on the phone: \(list.stdout)")
    }

    /// (b) A daemon restart keeps the popups (no flicker), pops up nothing the user saw or
    /// dismissed, and closes, once the replays settled, what the phone no longer has.
    @Test func desktopKeepsItsPopupsAcrossADaemonRestart() async throws {
        let scenario = """
            {"scenario":"restart","devices":[{"address":"\(adaPhone)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages","com.example.news":"News"}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Keep","message":"still here"}
            {"do":"add","uid":2,"category":"social","app":"com.apple.MobileSMS","title":"Dismissed","message":"seen"}
            {"do":"add","uid":3,"category":"news","app":"com.example.news","title":"Ignored","message":"filtered after the restart"}
            {"do":"sleep","seconds":300}
            {"do":"end"}
            """
        var run = try await desktopRun(scenario, desktopArguments: ["--replay-settle", "3"])
        defer { for process in [run.phone, run.desktop, run.daemon] { _ = try? process.stop(timeout: .seconds(5)) } }
        let shown = try run.server.wait("three popups") { $0.open.count == 3 ? $0.open.values : nil }
        let keep = try #require(shown.first { $0.summary == "Keep" })
        let dismissed = try #require(shown.first { $0.summary == "Dismissed" })
        let ignored = try #require(shown.first { $0.summary == "Ignored" })
        try await run.server.dismiss(dismissed.id)
        try run.desktop.waitForStandardError(containing: "popup \(dismissed.id) closed on the desktop: dismissed by the user")
        let (notifies, closes) = (run.server.snapshot.notifies.count, run.server.snapshot.closes.count)

        #expect(try run.daemon.stop() == 0)
        try run.desktop.waitForStandardError(containing: "ancsd closed the control connection; reconnecting")
        #expect(run.server.snapshot.closes.count == closes, "no popup closed when ancsd stopped")
        // Back without the news app (a filter): its popup goes once the replay settled.
        run.daemon = try startDaemon(bus: run.system, control: run.system.directory + "/control", ["--ignore-app", "com.example.news"])
        try run.daemon.waitForLine { $0.contains("\"type\":\"added\"") && $0.contains("\"uid\":2,") }
        // Closed by the sweep once the replays settled: the replays came before it, and
        // the companion takes its daemon's answers and events one after another.
        try run.server.wait("the filtered popup closed") { $0.closes.contains(ignored.id) ? true : nil }
        #expect(run.server.snapshot.notifies.count == notifies, "nothing popped up again: \(run.server.snapshot.notifies.dropFirst(notifies).map(\.summary))")
        #expect(run.server.snapshot.closes.count == closes + 1)
        #expect(Array(run.server.snapshot.open.keys) == [keep.id])
        #expect(run.desktop.standardError.contains("closing 1 notification(s) the phones no longer have"))
    }

    /// (c) Two identical messages share a popup that remembers both; a link in the body keeps
    /// its `&`.
    @Test func desktopIdenticalMessagesAndLinks() async throws {
        let run = try await desktopRun("""
            {"scenario":"same","devices":[{"address":"\(adaPhone)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages"}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Bob","message":"ok","flags":["negative_action"],"negative_action":"Clear"}
            {"do":"add","uid":2,"category":"social","app":"com.apple.MobileSMS","title":"Bob","message":"ok","flags":["negative_action"],"negative_action":"Clear"}
            {"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"Link","message":"see https://example.com/?a=1&b=2 & <https://x.org> &amp;"}
            {"do":"sleep","seconds":300}
            {"do":"end"}
            """)
        defer { for process in [run.phone, run.desktop, run.daemon] { _ = try? process.stop(timeout: .seconds(5)) } }
        let link = try run.server.wait("the link") { $0.notifies.first { $0.summary == "Link" } }
        #expect(link.body == "see https://example.com/?a=1&b=2 &amp; &lt;https://x.org> &amp;amp;")
        let bobs = try run.server.wait("both Bobs") { state in
            state.notifies.filter { $0.summary == "Bob" }.count == 2 ? state.notifies.filter { $0.summary == "Bob" } : nil
        }
        #expect(bobs[1].replacesID == bobs[0].id && bobs[1].id == bobs[0].id, "the second shows again in the first's popup")
        #expect(bobs[1].uid == 2)
        #expect(run.server.snapshot.open.count == 2)
        // Clear acts on the newer; the popup stays for the older, and goes with it.
        try await run.server.invoke(bobs[0].id, action: "negative")
        try run.phone.waitForStandardError(containing: "Perform Notification Action negative on UID 2")
        try run.daemon.waitForLine { $0.contains("\"type\":\"removed\"") && $0.contains("\"uid\":2,") }
        try run.desktop.waitForStandardError(containing: "removed \(adaPhone) #2")
        #expect(run.server.snapshot.open[bobs[0].id] != nil, "uid 1 is still on the phone")
        // The popup stayed: Clear again reaches uid 1, and closes it, once.
        try await run.server.invoke(bobs[0].id, action: "negative")
        try run.phone.waitForStandardError(containing: "Perform Notification Action negative on UID 1")
        try run.server.wait("Bob closed") { $0.closes.contains(bobs[0].id) ? true : nil }
        #expect(run.server.snapshot.closes.filter { $0 == bobs[0].id }.count == 1)
    }

    @Test func desktopUsage() throws {
        let help = try AncsdProcess.run(["desktop", "--help"])
        #expect(help.status == 0 && help.stdout.contains("Usage: ancsd desktop"))
        let bad = try AncsdProcess.run(["desktop", "--frobnicate"])
        #expect(bad.status == 2 && bad.stderr.contains("unknown option --frobnicate"))
        let noBus = try AncsdProcess.run(["desktop", "--bus", "unix:path=/nonexistent/bus", "--control", "/nonexistent/control"])
        #expect(noBus.status == 1 && noBus.stderr.contains("cannot connect to the D-Bus session bus"))
        let top = try AncsdProcess.run(["--help"])
        #expect(top.stdout.contains("desktop"))
    }
}
