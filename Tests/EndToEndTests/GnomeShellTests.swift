import Foundation
import Testing
import TestSupport

private let phone = "AA:BB:CC:DD:EE:01"

/// What the phone sends as Ada's message: markup characters, an entity, an emoji and a link.
private let adaMessage = "<b>Tea?</b> &amp; scones 🍵 https://example.com/tea?a=1&b=2"

private let gnomeScenario = """
    {"scenario":"gnome","devices":[{"address":"\(phone)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages","com.apple.mobilemail":"Mail","com.apple.mobilephone":"Phone","com.example.news":"News"},"ams":true,"media":{"player":"Music","title":"Clair de lune","artist":"Claude Debussy","album":"Suite bergamasque","duration":300,"state":"playing","volume":0.5,"queue":[{"title":"Rêverie","artist":"Claude Debussy","album":"Piano Works","duration":250}],"commands":["play","pause","toggle","next","previous"]}}
    {"do":"wait_subscribed","timeout":30}
    {"do":"add","uid":4,"category":"incoming_call","app":"com.apple.mobilephone","title":"Grace","flags":["positive_action","negative_action"],"positive_action":"Answer","negative_action":"Decline"}
    {"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"Ada","subtitle":"Tea & cake","message":"\(adaMessage.replacingOccurrences(of: "\"", with: "\\\""))","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"add","uid":1,"category":"email","app":"com.apple.mobilemail","title":"Charles","message":"Invoice attached","flags":["negative_action"],"negative_action":"Trash"}
    {"do":"add","uid":7,"category":"email","app":"com.apple.mobilemail","title":"Lovelace","message":"Loading…"}
    {"do":"add","uid":8,"category":"news","app":"com.example.news","title":"Fleeting","message":"gone soon"}
    {"do":"add","uid":9,"category":"social","app":"com.apple.MobileSMS","title":"Bob","message":"see you","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"after":2,"do":"modify","uid":7,"message":"The Analytical Engine weaves algebraic patterns"}
    {"after":2,"do":"remove","uid":8}
    {"do":"wait_state","media_commands_received":1,"timeout":120}
    {"do":"add","uid":10,"category":"social","app":"com.apple.MobileSMS","title":"Dana","message":"hello","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"add","uid":11,"category":"social","app":"com.apple.MobileSMS","title":"Eve","message":"read on the phone","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"wait_state","media_commands_received":2,"timeout":120}
    {"do":"remove","uid":11}
    {"do":"sleep","seconds":600}
    {"do":"end"}
    """

/// `ancsd desktop` on GNOME Shell (43 on Debian 12, 48 on Debian 13: whichever is installed,
/// `scripts/test-swiftlang` runs this in its Debian 13 root): the banner, the message list and
/// the media controls read and pressed through the shell's own objects. Part of the serialized
/// DaemonTests suite.
extension DaemonTests {
    @Test func desktopOnGnomeShell() throws {
        let desktop = try GnomeShellDesktop()
        defer { desktop.stop() }
        let shell = "GNOME Shell \(desktop.version)"
        let run = try DesktopRun(scenario: gnomeScenario, session: desktop.bus.address)
        defer { run.stop() }
        let (sim, control) = (run.phone, run.control)
        func performed(_ action: String, _ uid: Int) -> Int { run.performed(action, uid) }
        var actionsSoFar: Int { run.actionsPerformed }
        func listed(_ title: String) -> (GnomeShellDesktop.State) -> GnomeShellDesktop.Shown? {
            { state in state.list.first { $0.title == title } }
        }

        // Every notification is in the message list under the app's name and the desktop
        // entry's source; the modified one updated in place, the removed one gone.
        let lovelace = try desktop.wait("the modified mail") { state in
            listed("Mail · Lovelace")(state).flatMap { $0.body == "The Analytical Engine weaves algebraic patterns" ? $0 : nil }
        }
        try desktop.wait("the news removed on the phone") { state in
            state.list.contains { $0.title == "News · Fleeting" } || state.banner?.title == "News · Fleeting" ? nil : true
        }
        try run.companion.waitForStandardError(containing: "removed \(phone) #8")
        let state = try desktop.wait("five notifications") { $0.list.count == 5 ? $0 : nil }
        #expect(Set(state.list.map(\.title)) == ["Phone · Grace", "Messages · Ada — Tea & cake", "Mail · Charles", "Mail · Lovelace", "Messages · Bob"])
        #expect(state.list.filter { $0.title == "Mail · Lovelace" }.count == 1 && lovelace.source == "iPhone",
                "\(shell): modified in place, under the desktop entry's name")
        let ada = try #require(listed("Messages · Ada — Tea & cake")(state))
        #expect(ada.body == adaMessage, "\(shell) shows the markup characters as the phone sent them: \(ada.body ?? "")")
        #expect(ada.source == "iPhone" && ada.urgency == 1)
        #expect(ada.header == (desktop.version >= 45 ? "iPhone" : nil), "\(shell) draws the desktop entry's name (48) or none (43)")

        // The incoming call is the banner (critical: GNOME shows it first and never lets it
        // expire), with the phone's actions as its buttons.
        let call: GnomeShellDesktop.Shown
        do {
            call = try desktop.wait("the call's banner") { $0.banner?.title == "Phone · Grace" ? $0.banner : nil }
        } catch {
            throw TestFailure("\(error)\ncompanion:\n\(run.companion.standardError)\nphone:\n\(sim.standardError)")
        }
        #expect(call.buttons == ["Answer", "Decline"] && call.urgency == 3, "\(shell): \(call)")
        let artifacts = repositoryRoot.appendingPathComponent(".build/artifacts").path
        try FileManager.default.createDirectory(atPath: artifacts, withIntermediateDirectories: true)
        // The media controls show the phone's player (title and artist) before the screenshot.
        let player = try desktop.wait("the phone's player in the media controls") { $0.media.first { $0.title == "Clair de lune" } }
        #expect(player.artist == "Claude Debussy", "\(shell): \(player)")
        try desktop.screenshot(to: artifacts + "/desktop-gnome-\(desktop.version)-banner.png")
        Thread.sleep(forTimeInterval: 3)
        #expect(try desktop.state().banner?.title == "Phone · Grace", "\(shell): the call stays on screen")

        // A button pressed on the banner reaches the phone once (GNOME sends each ActionInvoked
        // twice: the shell broadcasts it and its helper sends it again), and the declined call
        // goes from the screen.
        let monitor = try desktop.monitorActions()
        defer { _ = try? monitor.stop(timeout: .seconds(5)) }
        try desktop.clickButton("Decline")
        try sim.waitForStandardError(containing: "Perform Notification Action negative on UID 4")
        try desktop.wait("the declined call gone") { state in
            state.list.contains { $0.title == "Phone · Grace" } || state.banner?.title == "Phone · Grace" ? nil : true
        }
        Thread.sleep(forTimeInterval: 1)
        #expect(performed("negative", 4) == 1, "\(shell): the phone got the click once:\n\(sim.standardError)")
        let invoked = monitor.lines.filter { $0.text.contains("string \"negative\"") }.count
        #expect(invoked == 2, "\(shell) sent ActionInvoked twice (the shell's broadcast, its helper's copy), not \(invoked):\n\(monitor.lines.map(\.text).joined(separator: "\n"))")

        // The banners that follow (GNOME 43 queues two behind the one shown; the rest go to the
        // message list only): Reply on Ada's reaches the phone once, a click on Charles's (its
        // lone action is Trash) does nothing there.
        var before = actionsSoFar
        var seen: [String] = []
        while true {
            try desktop.nudge()
            guard let banner = try? desktop.wait("a banner", timeout: .seconds(3), { $0.banner }), let title = banner.title else { break }
            seen.append(title)
            switch title {
            case "Messages · Ada — Tea & cake":
                #expect(banner.buttons == ["Reply", "Clear"], "\(shell): \(banner)")
                try desktop.clickButton("Reply")
                try sim.waitForStandardError(containing: "Perform Notification Action positive on UID 3")
            case "Mail · Charles":
                #expect(banner.buttons == ["Trash"], "\(shell): \(banner)")
                try desktop.clickBanner()
            default:
                try desktop.closeBanner()
            }
            try desktop.wait("the banner of \(title) gone") { $0.banner?.title == title ? nil : true }
        }
        Thread.sleep(forTimeInterval: 1)
        #expect(Array(seen.prefix(2)) == ["Messages · Ada — Tea & cake", "Mail · Charles"], "\(shell): banners \(seen)")
        #expect(actionsSoFar == before + 1 && performed("positive", 3) == 1, "\(shell): only Reply reached the phone:\n\(sim.standardError)")
        #expect(try !desktop.state().list.contains { $0.title == "Mail · Charles" }, "\(shell): a click closes the banner's notification")

        // The shell's media controls drive the phone: play/pause (after which the phone sends
        // Dana's and Eve's messages; Dana's banner is closed by its close button: nothing on
        // the phone).
        try desktop.mediaPlayPause()
        try sim.waitForStandardError(containing: "AMS Remote Command toggle")
        before = actionsSoFar
        try desktop.nudge()
        try desktop.wait("Dana's banner") { $0.banner?.title == "Messages · Dana" ? true : nil }
        try desktop.closeBanner()
        try desktop.wait("Dana gone") { state in
            state.banner?.title == "Messages · Dana" || state.list.contains { $0.title == "Messages · Dana" } ? nil : true
        }
        // Next (after which the phone removes Eve, whose banner shows now): gone from the banner
        // and the message list.
        try desktop.nudge()
        try desktop.wait("Eve's banner") { $0.banner?.title == "Messages · Eve" ? true : nil }
        try desktop.mediaNext()
        try sim.waitForStandardError(containing: "AMS Remote Command next")
        try desktop.wait("the next track") { $0.media.first { $0.title == "Rêverie" } }
        try desktop.wait("Eve removed on the phone") { state in
            state.banner?.title == "Messages · Eve" || state.list.contains { $0.title == "Messages · Eve" } ? nil : true
        }
        #expect(actionsSoFar == before, "\(shell): the close button did nothing on the phone:\n\(sim.standardError)")

        // What is left, in the message list, with the phone's player.
        try desktop.screenshot(to: artifacts + "/desktop-gnome-\(desktop.version).png", openingList: true)
        print("desktop on \(shell): screenshots at \(artifacts)/desktop-gnome-\(desktop.version)[-banner].png")

        // A daemon restart and a companion restart bring nothing back.
        let shown = try desktop.state().list
        #expect(try run.daemon.stop() == 0)
        try run.companion.waitForStandardError(containing: "ancsd closed the control connection; reconnecting")
        try run.startDaemon()
        try run.companion.waitForStandardError(containing: "connected to ancsd at \(control)", occurrences: 2, timeout: .seconds(30))
        try run.companion.waitForStandardError(containing: "ancsd has ")
        Thread.sleep(forTimeInterval: 2)
        #expect(try desktop.state().banner == nil, "\(shell): no banner after the daemon's restart")
        #expect(try desktop.state().list == shown, "\(shell): the same notifications after the daemon's restart")
        #expect(try run.companion.stop() == 0)
        try run.startCompanion()
        try run.companion.waitForStandardError(containing: "ancsd has ")
        Thread.sleep(forTimeInterval: 2)
        #expect(try desktop.state().banner == nil, "\(shell): no banner after the companion's restart:\n\(run.companion.standardError)")
    }
}
