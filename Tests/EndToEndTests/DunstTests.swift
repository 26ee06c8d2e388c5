import Foundation
import JSON
import Testing
import TestSupport

private let phone = "AA:BB:CC:DD:EE:01"

/// What the phone sends as Ada's message: markup characters, an entity, an emoji and two links.
private let adaMessage = "<b>Tea?</b> &amp; scones 🍵 https://example.com/tea?a=1&b=2 <https://x.org/menu>"

private let dunstScenario = """
    {"scenario":"dunst","devices":[{"address":"\(phone)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages","com.apple.mobilemail":"Mail","com.apple.mobilecal":"Calendar","com.apple.mobilephone":"Phone","com.example.news":"News"}}
    {"do":"wait_subscribed","timeout":30}
    {"do":"add","uid":1,"category":"email","app":"com.apple.mobilemail","title":"Charles","message":"Invoice attached","flags":["negative_action"],"negative_action":"Trash"}
    {"do":"add","uid":2,"category":"schedule","app":"com.apple.mobilecal","title":"Standup","message":"10:00 in Room 4","flags":["negative_action"],"negative_action":"Dismiss"}
    {"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"Ada","subtitle":"Tea & cake","message":"\(adaMessage.replacingOccurrences(of: "\"", with: "\\\""))","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"add","uid":4,"category":"incoming_call","app":"com.apple.mobilephone","title":"Grace","flags":["positive_action","negative_action"],"positive_action":"Answer","negative_action":"Decline"}
    {"do":"add","uid":5,"category":"social","app":"com.apple.MobileSMS","title":"Bob","message":"ok","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"add","uid":6,"category":"social","app":"com.apple.MobileSMS","title":"Bob","message":"ok","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"add","uid":7,"category":"email","app":"com.apple.mobilemail","title":"Lovelace","message":"Loading…"}
    {"do":"add","uid":8,"category":"news","app":"com.example.news","title":"Fleeting","message":"gone soon"}
    {"after":1,"do":"modify","uid":7,"message":"The Analytical Engine weaves algebraic patterns"}
    {"after":0.5,"do":"remove","uid":8}
    {"do":"sleep","seconds":600}
    {"do":"end"}
    """

/// `ancsd desktop` on a real notification daemon: dunst 1.9 under Xvfb, with Debian's default
/// configuration. Part of the serialized DaemonTests suite.
extension DaemonTests {
    private func dunstDaemon(bus: PrivateBus, control: String) throws -> ChildProcess {
        try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", bus.address, "run", "--format", "json", "--log-level", "debug", "--control", control])
    }

    @Test func desktopOnDunst() throws {
        let desktop = try DunstDesktop()
        defer { desktop.stop() }
        let system = try PrivateBus()
        let control = system.directory + "/control"
        let scenario = system.directory + "/dunst.jsonl"
        try dunstScenario.write(toFile: scenario, atomically: true, encoding: .utf8)
        var daemon = try dunstDaemon(bus: system, control: control)
        defer { _ = try? daemon.stop(timeout: .seconds(5)) }
        try daemon.waitForStandardError(containing: "bluetoothd is not running")
        let companion = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["desktop", "--control", control, "--bus", desktop.bus.address, "--log-level", "debug", "--state-dir", system.directory])
        defer { _ = try? companion.stop(timeout: .seconds(5)) }
        try companion.waitForStandardError(containing: "connected to ancsd at \(control)")
        let sim = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", system.address, "--scenario", scenario])
        defer { _ = try? sim.stop(timeout: .seconds(5)) }

        // Every notification shows, the modified one replaced in place, the removed one closed.
        func latest(_ summary: String) -> DunstDesktop.Popup? { desktop.popups.last { $0.summary == summary } }
        let lovelace = try desktop.wait("the modified mail") { latest("Lovelace").flatMap { $0.body.hasPrefix("The Analytical") ? $0 : nil } }
        let fleeting = try desktop.wait("Fleeting closed") { () -> DunstDesktop.Popup? in
            guard let popup = latest("Fleeting") else { return nil }
            return try desktop.history().contains { $0["id"]?.intValue == popup.id } ? popup : nil
        }
        for summary in ["Charles", "Standup", "Ada — Tea & cake", "Grace", "Bob"] {
            try desktop.wait(summary) { latest(summary) }
        }
        let shown = try desktop.wait("six popups on screen") { () -> Set<Int>? in
            let ids = try desktop.displayedIDs()
            return ids.count == 6 ? ids : nil
        }
        // The screen as a person sees it, kept for looking at.
        let artifacts = repositoryRoot.appendingPathComponent(".build/artifacts").path
        try FileManager.default.createDirectory(atPath: artifacts, withIntermediateDirectories: true)
        try desktop.screenshot(to: artifacts + "/desktop-dunst.png")
        print("desktop on dunst: screenshot at \(artifacts)/desktop-dunst.png")

        // What each popup says, as dunst's script saw it.
        let charles = try #require(latest("Charles"))
        #expect(charles.appName == "Mail" && charles.body == "Invoice attached" && charles.urgency == "NORMAL")
        #expect(charles.iconPath.hasSuffix("/mail-unread-symbolic.svg"), "an icon that says what it is: \(charles.iconPath)")
        let ada = try #require(latest("Ada — Tea & cake"))
        #expect(ada.appName == "Messages" && ada.urgency == "NORMAL")
        #expect(ada.body == "&lt;b>Tea?&lt;/b> &amp;amp; scones 🍵 https://example.com/tea?a=1&b=2 &lt;https://x.org/menu>",
                "escaped for dunst's markup = full, links left whole")
        #expect(ada.urls == ["https://example.com/tea?a=1&b=2", "https://x.org/menu"], "the links as the phone sent them")
        let grace = try #require(latest("Grace"))
        #expect(grace.appName == "Phone" && grace.urgency == "CRITICAL" && grace.body == "")
        #expect(grace.iconPath.hasSuffix("/call-incoming-symbolic.svg"))
        let bobs = desktop.popups.filter { $0.summary == "Bob" }
        #expect(Set(bobs.map(\.id)).count == 1, "two identical messages share one popup")
        let bob = try #require(bobs.last)
        #expect(lovelace.id == desktop.popups.first { $0.summary == "Lovelace" }?.id, "modified: the same popup, replaced")
        let standup = try #require(latest("Standup"))
        #expect(shown == [charles.id, standup.id, ada.id, grace.id, bob.id, lovelace.id])
        #expect(!shown.contains(fleeting.id))

        // The action buttons, as dunst's context menu offers them; its link menu has the links whole.
        let menu = try desktop.contextMenu(choosing: "")
        for line in [
            "#Reply (Ada — Tea & cake) [\(ada.id),positive]", "#Clear (Ada — Tea & cake) [\(ada.id),negative]",
            "#Answer (Grace) [\(grace.id),positive]", "#Decline (Grace) [\(grace.id),negative]",
            "#Trash (Charles) [\(charles.id),negative]", "#Close (Charles) [\(charles.id),default]",
            "https://example.com/tea?a=1&b=2", "https://x.org/menu",
        ] {
            #expect(menu.contains(line), "\(line) in \(menu)")
        }
        #expect(!menu.contains { $0.contains("&amp;") || $0.contains("&gt;") || $0.contains("&lt;") }, "\(menu)")

        // An action chosen in dunst's menu reaches the phone, for the right UID.
        try desktop.contextMenu(choosing: "[\(ada.id),positive]")
        try sim.waitForStandardError(containing: "Perform Notification Action positive on UID 3")
        try desktop.contextMenu(choosing: "[\(grace.id),negative]")
        try sim.waitForStandardError(containing: "Perform Notification Action negative on UID 4")
        try desktop.wait("the declined call closed") { try desktop.displayedIDs().contains(grace.id) ? nil : true }

        // (a) A click on a popup with a single, destructive action (Mail's Trash, Calendar's
        // Dismiss) closes the popup and does nothing on the phone. (`dunstctl action N` of
        // dunst 1.9 takes only 0, the top popup: the call is gone, so the mail is on top.)
        let performed = sim.standardError.components(separatedBy: "Perform Notification Action").count
        for summary in ["Charles", "Standup"] {
            let popup = try #require(latest(summary))
            #expect(try desktop.position(of: popup.id) == 0)
            let click = try desktop.dunstctl(["action", "0"])
            #expect(click.status == 0, "\(click.text)")
            try desktop.wait("\(summary) closed by its click") { try desktop.displayedIDs().contains(popup.id) ? nil : true }
            try companion.waitForStandardError(containing: "popup \(popup.id) clicked: closing it, nothing sent to the phone")
        }
        #expect(companion.standardError.components(separatedBy: "action invoked on").count == 3, "Reply and Decline only:\n\(companion.standardError)")
        #expect(sim.standardError.components(separatedBy: "Perform Notification Action").count == performed, "\(sim.standardError)")
        #expect(!daemon.lines.contains { $0.text.contains("\"type\":\"removed\"") && ($0.text.contains("\"uid\":1,") || $0.text.contains("\"uid\":2,")) },
                "the mail and the event are still on the phone")

        // (c) Both identical messages stay known: Clear acts on the newer, the popup stays for
        // the older; Clear again removes that one too, and the popup closes.
        try desktop.contextMenu(choosing: "[\(bob.id),negative]")
        try sim.waitForStandardError(containing: "Perform Notification Action negative on UID 6")
        try daemon.waitForLine { $0.contains("\"type\":\"removed\"") && $0.contains("\"uid\":6") }
        try companion.waitForStandardError(containing: "removed \(phone) #6")
        #expect(try desktop.displayedIDs().contains(bob.id), "the older Bob is still on the phone")
        try desktop.contextMenu(choosing: "[\(bob.id),negative]")
        try sim.waitForStandardError(containing: "Perform Notification Action negative on UID 5")
        try desktop.wait("Bob closed") { try desktop.displayedIDs().contains(bob.id) ? nil : true }

        // (b) ancsd restarts: no popup closes or pops up again, and the dismissed Mail and
        // Calendar popups stay dismissed.
        let before = (popups: desktop.popups.count, displayed: try desktop.displayedIDs(), history: try desktop.history().count)
        #expect(before.displayed == [ada.id, lovelace.id])
        #expect(try daemon.stop() == 0)
        try companion.waitForStandardError(containing: "ancsd closed the control connection; reconnecting")
        daemon = try dunstDaemon(bus: system, control: control)
        for uid in [1, 2] {
            try companion.waitForStandardError(containing: "\(phone) #\(uid): shown before by this companion, not shown again")
        }
        for uid in [3, 7] {
            try companion.waitForStandardError(containing: "\(phone) #\(uid): found again")
        }
        Thread.sleep(forTimeInterval: 0.5)
        #expect(desktop.popups.count == before.popups, "nothing shown again: \(desktop.popups.dropFirst(before.popups))")
        #expect(try desktop.displayedIDs() == before.displayed)
        #expect(try desktop.history().count == before.history, "nothing closed")
        // And the popups still act on the phone through the new daemon.
        try desktop.contextMenu(choosing: "[\(ada.id),negative]")
        try sim.waitForStandardError(containing: "Perform Notification Action negative on UID 3")
        try desktop.wait("Ada closed after Clear") { try desktop.displayedIDs().contains(ada.id) ? nil : true }

        // dunst's own history: each notification with its app name, and its text shown as the
        // phone sent it (markup characters, the entity and the emoji as text).
        #expect(try companion.stop() == 0)
        try desktop.dunstctl(["close-all"])
        let history = try desktop.history()
        func entry(_ id: Int) -> [String: JSONValue]? { history.first { $0["id"]?.intValue == id } }
        let expected: [(Int, String, String, String)] = [
            (ada.id, "Messages", "Ada — Tea & cake", adaMessage),
            (grace.id, "Phone", "Grace", ""),
            (charles.id, "Mail", "Charles", "Invoice attached"),
            (bob.id, "Messages", "Bob", "ok"),
            (lovelace.id, "Mail", "Lovelace", "The Analytical Engine weaves algebraic patterns"),
            (fleeting.id, "News", "Fleeting", "gone soon"),
        ]
        for (id, app, summary, text) in expected {
            let popup = try #require(entry(id), "popup \(id) in dunstctl history")
            #expect(popup["appname"]?.stringValue == app && popup["summary"]?.stringValue == summary)
            #expect(shownText(popup["message"]?.stringValue ?? "") == (text.isEmpty ? summary : summary + "\n" + text), "\(popup)")
        }
    }
}
