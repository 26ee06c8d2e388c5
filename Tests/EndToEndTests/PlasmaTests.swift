import DBus
import Foundation
import Testing
import TestSupport

private let phone = "AA:BB:CC:DD:EE:01"

private let adaMessage = "<b>Tea?</b> &amp; scones 🍵"

private let plasmaScenario = """
    {"scenario":"plasma","devices":[{"address":"\(phone)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages","com.apple.mobilemail":"Mail","com.apple.mobilephone":"Phone","com.example.news":"News"},"ams":true,"media":{"player":"Music","title":"Clair de lune","artist":"Claude Debussy","album":"Suite bergamasque","duration":300,"state":"playing","volume":0.5,"commands":["play","pause","toggle","next","previous"]}}
    {"do":"wait_subscribed","timeout":30}
    {"do":"add","uid":4,"category":"incoming_call","app":"com.apple.mobilephone","title":"Grace","flags":["positive_action","negative_action"],"positive_action":"Answer","negative_action":"Decline"}
    {"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"Ada","subtitle":"Tea & cake","message":"\(adaMessage)","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"add","uid":1,"category":"email","app":"com.apple.mobilemail","title":"Charles","message":"Invoice attached","flags":["negative_action"],"negative_action":"Trash"}
    {"do":"add","uid":5,"category":"social","app":"com.apple.MobileSMS","title":"Bob","message":"ok","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"add","uid":6,"category":"social","app":"com.apple.MobileSMS","title":"Bob","message":"ok","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
    {"do":"add","uid":7,"category":"email","app":"com.apple.mobilemail","title":"Lovelace","message":"Loading…"}
    {"do":"add","uid":8,"category":"news","app":"com.example.news","title":"Fleeting","message":"gone soon"}
    {"after":1.5,"do":"modify","uid":7,"message":"The Analytical Engine"}
    {"after":0.2,"do":"modify","uid":7,"message":"The Analytical Engine weaves algebraic patterns"}
    {"after":0.2,"do":"modify","uid":7,"message":"The Analytical Engine"}
    {"after":0.5,"do":"remove","uid":8}
    {"do":"wait_state","media_commands_received":2,"timeout":120}
    {"do":"add","uid":10,"category":"missed_call","app":"com.apple.mobilephone","title":"Dana","message":"Missed Call","flags":["positive_action","negative_action"],"positive_action":"Call Back","negative_action":"Clear"}
    {"do":"sleep","seconds":600}
    {"do":"end"}
    """

/// `ancsd desktop` on KDE Plasma's notification server (plasmashell under Xvfb): what the server
/// accepted, as its registered watcher hears it; buttons pressed through its own
/// `InvokeAction`. Part of the serialized DaemonTests suite.
extension DaemonTests {
    @Test func desktopOnPlasma() async throws {
        let desktop = try PlasmaDesktop()
        defer { desktop.stop() }
        let shell = desktop.version
        let watcher = try await DBusConnection.connect(to: .address(desktop.bus.address))
        try await desktop.watch(on: watcher)
        let run = try DesktopRun(scenario: plasmaScenario, session: desktop.bus.address)
        defer { run.stop() }
        let (sim, control) = (run.phone, run.control)
        func performed(_ action: String, _ uid: Int) -> Int { run.performed(action, uid) }
        var actionsSoFar: Int { run.actionsPerformed }

        // The modifications 0.2 s apart all reach the server (none refused as a repeat), the
        // last one shown, in place; the removed news closed.
        let lovelace = try desktop.wait("Lovelace's last modification") { () -> PlasmaDesktop.Shown? in
            guard let shown = desktop.showing("Lovelace"), shown.body == "The Analytical Engine",
                  desktop.accepted.contains(where: { $0.body == "The Analytical Engine weaves algebraic patterns" }) else { return nil }
            return shown
        }
        #expect(Set(desktop.accepted.filter { $0.summary == "Lovelace" }.map(\.id)) == [lovelace.id], "\(shell): replaced in place")
        try desktop.wait("the news closed") { () -> Bool? in
            desktop.accepted.contains { $0.summary == "Fleeting" } && desktop.showing("Fleeting") == nil ? true : nil
        }
        let open = try desktop.wait("five notifications") { desktop.open.count == 5 ? desktop.open : nil }
        #expect(Set(open.values.map(\.summary)) == ["Grace", "Ada — Tea & cake", "Charles", "Bob", "Lovelace"], "\(shell): \(open.values.map(\.summary))")
        #expect(!run.companion.standardError.contains("cannot show a notification"), "\(shell): \(run.companion.standardError)")

        // What Plasma shows of Ada's: the app's name (x-kde-display-appname, in place of the
        // desktop entry's), the phone's name as its origin, the text as the phone sent it.
        let ada = try #require(desktop.showing("Ada — Tea & cake"))
        #expect(ada.appName == "Messages" && ada.hints["x-kde-display-appname"]?.stringValue == "Messages")
        #expect(ada.hints["desktop-entry"]?.stringValue == "ancsd" && ada.hints["x-kde-origin-name"]?.stringValue == "Ada's iPhone", "\(ada.hints)")
        #expect(ada.body == "&lt;b>Tea?&lt;/b> &amp;amp; scones 🍵", "\(shell) takes markup: escaped, to show as sent")
        #expect(ada.actions == ["default", "Close", "positive", "Reply", "negative", "Clear"])
        // The call: critical, which Plasma keeps on screen (its timeout 0: never expires).
        let grace = try #require(desktop.showing("Grace"))
        #expect(grace.hints["urgency"]?.unwrapped.byteValue == 2 && grace.timeout == 0, "\(shell): \(grace.hints) \(grace.timeout)")

        // Two identical messages 0 s apart: one notification, both remembered (Plasma refuses
        // the second Notify as a repeat; it shows that content already).
        let bobs = desktop.accepted.filter { $0.summary == "Bob" }
        #expect(Set(bobs.map(\.id)).count == 1, "\(shell): \(bobs.map(\.id))")

        let artifacts = repositoryRoot.appendingPathComponent(".build/artifacts").path
        try FileManager.default.createDirectory(atPath: artifacts, withIntermediateDirectories: true)
        try desktop.screenshot(to: artifacts + "/desktop-plasma.png")
        print("desktop on \(shell): screenshot at \(artifacts)/desktop-plasma.png")

        // Buttons: Reply and Decline reach the phone once each; a click on Charles's popup
        // (its lone action is Trash) closes it and does nothing on the phone.
        try desktop.invoke(ada.id, "positive")
        try sim.waitForStandardError(containing: "Perform Notification Action positive on UID 3")
        try desktop.invoke(grace.id, "negative")
        try sim.waitForStandardError(containing: "Perform Notification Action negative on UID 4")
        try desktop.wait("the declined call closed") { desktop.showing("Grace") == nil ? true : nil }
        let before = actionsSoFar
        let charles = try #require(desktop.showing("Charles"))
        try desktop.invoke(charles.id, "default")
        try desktop.wait("Charles closed by its click") { desktop.showing("Charles") == nil ? true : nil }
        // Plasma's signals come in order: by the click, the companion has had any repeat of
        // the two buttons' ActionInvoked, and sends an action only where it says so.
        try run.companion.waitForStandardError(containing: "popup \(charles.id) clicked: closing it, nothing sent to the phone")
        let invoked = run.companion.standardError.split(separator: "\n").filter { $0.contains(" action invoked on ") }
        #expect(invoked.count == 2 && invoked[0].hasSuffix("positive action invoked on \(phone) #3")
                && invoked[1].hasSuffix("negative action invoked on \(phone) #4"), "\(shell): \(invoked)")
        #expect(actionsSoFar == before && performed("positive", 3) == 1 && performed("negative", 4) == 1, "\(shell):\n\(sim.standardError)")

        // The phone's player in the system tray's media controller, with its title and artist as
        // drawn; Plasma's media keys (its own player multiplexer) reach the phone.
        try desktop.toggleMediaController()
        let player = try desktop.wait("the media controller showing the track") { () -> (PlasmaDesktop.Popup, String)? in
            for popup in try desktop.popups() {
                let text = try desktop.text(of: popup)
                if text.contains("Clair de lune") { return (popup, text) }
            }
            return nil
        }
        #expect(player.1.contains("Claude Debussy"), "\(shell): the media controller shows \(player.1)")
        try desktop.screenshot(to: artifacts + "/desktop-plasma-media.png")
        try desktop.toggleMediaController()
        try desktop.invokeShortcut(component: "mediacontrol", "playpausemedia")
        try sim.waitForStandardError(containing: "AMS Remote Command pause (1) performed")
        try desktop.invokeShortcut(component: "mediacontrol", "nextmedia")
        try sim.waitForStandardError(containing: "AMS Remote Command next (3) performed")

        // Dana's popup, closed with its close button: gone from the screen, nothing on the phone.
        // A missed call, critical, which Plasma never lets expire: a message's popup expires after
        // Plasma's 5 s, which reading the popups by OCR under load can outlast (a CI run clicked
        // at a window already gone).
        let dana = try desktop.wait("Dana's popup") { try desktop.popup(showing: "Dana") }
        let danaID = try #require(desktop.showing("Dana")).id
        let beforeClose = actionsSoFar
        try desktop.clickClose(dana)
        try desktop.wait("Dana's popup gone") { try desktop.popups().contains(dana) ? nil : true }
        try run.companion.waitForStandardError(containing: "popup \(danaID) closed on the desktop")
        // Anything Plasma sent for the button came before the close: the companion sent nothing.
        #expect(!run.companion.standardError.contains("action invoked on \(phone) #10"), "\(shell): \(run.companion.standardError)")
        #expect(actionsSoFar == beforeClose, "\(shell): the close button did something on the phone:\n\(sim.standardError)")

        // A daemon restart and a companion restart bring nothing back.
        let count = desktop.accepted.count
        #expect(try run.daemon.stop() == 0)
        try run.companion.waitForStandardError(containing: "ancsd closed the control connection; reconnecting")
        try run.startDaemon()
        try run.companion.waitForStandardError(containing: "connected to ancsd at \(control)", occurrences: 2, timeout: .seconds(30))
        try run.companion.waitForStandardError(containing: "ancsd has ")
        try await Task.sleep(for: .seconds(2))
        #expect(desktop.accepted.count == count, "\(shell): nothing shown again after the daemon's restart")
        #expect(try run.companion.stop() == 0)
        try run.startCompanion()
        try run.companion.waitForStandardError(containing: "ancsd has ")
        try await Task.sleep(for: .seconds(2))
        #expect(desktop.accepted.count == count, "\(shell): nothing shown again after the companion's restart")
        await watcher.close()
    }
}
