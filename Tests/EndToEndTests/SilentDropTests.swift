import Foundation
import JSON
import Testing
import TestSupport

private let ada = "AA:BB:CC:DD:EE:01"

/// What iPhones do without telling (PebbleOS's reports), against the built ancsd: the
/// simulator's `silent_drop`, `silent_drop_all`, `sharing_off` and `sharing_on`. Part of the
/// serialized DaemonTests suite, so that daemon runs do not overlap.
extension DaemonTests {
    private static let header = #"{"scenario":"silence","apps":{"com.apple.MobileSMS":"Messages"},"devices":[{"address":"\#(ada)","name":"Ada's iPhone"}]}"#

    /// The phone answers nothing and sends nothing: the alive check goes unanswered, ancsd
    /// unsubscribes and subscribes again (AcquireNotify: the sockets closed, acquired again),
    /// the rewritten CCCDs bring the phone back and it replays what it holds.
    @Test func aSilentDropOfEverythingIsRecoveredByTheAliveCheck() throws {
        let run = try DaemonRun(text: """
            \(Self.header)
            {"do":"wait_subscribed","timeout":30}
            {"after":0.3,"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Before"}
            {"after":0.4,"do":"silent_drop_all"}
            {"after":0.2,"do":"add","uid":2,"category":"social","app":"com.apple.MobileSMS","title":"While deaf"}
            {"after":10,"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"After"}
            {"after":1,"do":"end"}
            """, ancsdArguments: ["--alive-check", "2"])
        let events = try run.finish()
        let stderr = run.ancsd.standardError
        #expect(events.titles("added") == ["Before", "While deaf", "After"], "\(events.map(\.serialized))\n\(stderr)")
        #expect(events.first("added", title: "While deaf")?["pre_existing"] == true, "replayed after the renewal")
        #expect(events.first("added", title: "After")?["complete"] == true)
        #expect(events.of("connected").count == 1 && events.of("disconnected").count == 1, "the link stayed up")
        #expect(stderr.contains("did not answer the alive check"), "\(stderr)")
        #expect(stderr.contains("renewing the ANCS subscriptions (the alive check went unanswered)"), "\(stderr)")
        #expect(stderr.contains("subscribed again (AcquireNotify)"), "\(stderr)")
    }

    /// The Notification Source push is dead while the Control Point still answers: the alive
    /// check is answered (0xA2), and `--resubscribe-after` renews the subscriptions anyway
    /// (StartNotify: ancsd's StopNotify ends the last notify session, bluetoothd writes the CCCD).
    @Test func aSilentDropIsRecoveredByResubscribeAfter() throws {
        let run = try DaemonRun(text: """
            \(Self.header)
            {"do":"wait_subscribed","timeout":30}
            {"after":0.3,"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Before"}
            {"after":0.3,"do":"silent_drop"}
            {"after":0.2,"do":"add","uid":2,"category":"social","app":"com.apple.MobileSMS","title":"Missed"}
            {"after":5,"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"After"}
            {"after":1,"do":"end"}
            """, ancsdArguments: ["--no-acquire-notify", "--alive-check", "1", "--resubscribe-after", "3"])
        let events = try run.finish()
        let stderr = run.ancsd.standardError
        #expect(events.titles("added") == ["Before", "Missed", "After"], "\(events.map(\.serialized))\n\(stderr)")
        #expect(!stderr.contains("did not answer the alive check"), "the Control Point answered every check:\n\(stderr)")
        #expect(stderr.contains("renewing the ANCS subscriptions (no Notification Source traffic for 3"), "\(stderr)")
        #expect(stderr.contains("subscribed again (StartNotify)"), "\(stderr)")
        #expect(!stderr.contains("another program holds notifications"), "\(stderr)")
    }

    /// Sharing turned off on the phone: two refused writes in a row make the `sharing` event
    /// off, `status` and `doctor` say so with the fix; turned on again, the event on, and the
    /// renewed subscriptions bring the silent Notification Source back.
    @Test func sharingOffAndOnAreEventsAndStatusAndDoctorSaySo() throws {
        let socketPath = NSTemporaryDirectory() + "ancsd-control-\(UUID().uuidString.prefix(8))"
        let run = try DaemonRun(text: """
            \(Self.header)
            {"do":"wait_subscribed","timeout":30}
            {"after":0.3,"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Before"}
            {"after":0.3,"do":"sharing_off"}
            {"after":0.2,"do":"add","uid":2,"category":"social","app":"com.apple.MobileSMS","title":"Hidden"}
            {"after":5,"do":"sharing_on"}
            {"after":3,"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"Back"}
            {"after":1,"do":"end"}
            """, ancsdArguments: ["--alive-check", "1", "--resubscribe-after", "2", "--control", socketPath])
        _ = try run.ancsd.waitForLine(timeout: .seconds(20)) { $0.contains(#""type":"sharing""#) }
        let status = try AncsdProcess.run(["status", "--control", socketPath])
        #expect(status.status == 0 && status.stdout.contains("notification sharing: OFF"), "\(status.stdout)")
        #expect(status.stdout.contains("Share System Notifications"), "\(status.stdout)")
        let json = try AncsdProcess.run(["status", "--json", "--control", socketPath])
        let device = try JSONValue(parsing: json.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["devices"]?.arrayValue?.first
        #expect(device?["sharing_allowed"] == false, "\(json.stdout)")
        let doctor = try AncsdProcess.run(["--bus", run.bus.address, "doctor", "--control", socketPath])
        #expect(doctor.stdout.contains("FAIL notification sharing is off on \(ada)"), "\(doctor.stdout)")
        #expect(doctor.stdout.contains("Settings > Bluetooth > (i) next to this computer > turn on Share System Notifications"), "\(doctor.stdout)")

        let events = try run.finish()
        let stderr = run.ancsd.standardError
        let sharing = events.of("sharing")
        #expect(sharing == [
            ["v": 1, "type": "sharing", "device": .string(ada), "state": "off"],
            ["v": 1, "type": "sharing", "device": .string(ada), "state": "on"],
        ], "\(events.map(\.serialized))\n\(stderr)")
        let advice = stderr.split(separator: "\n").filter { !$0.contains("debug:") && $0.contains("Share System Notifications") }
        #expect(advice.count == 1, "logged once per episode:\n\(stderr)")
        #expect(events.titles("added") == ["Before", "Hidden", "Back"], "\(events.map(\.serialized))\n\(stderr)")
        // The Notification Source the strict phone left dead is renewed by --resubscribe-after.
        #expect(stderr.contains("renewing the ANCS subscriptions (no Notification Source traffic for"), "\(stderr)")
    }
}
