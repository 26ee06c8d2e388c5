import DBus
import Foundation
import JSON
import Testing
import TestSupport

private let ada = "AA:BB:CC:DD:EE:01"
private let stranger = "AA:BB:CC:DD:EE:66"

/// `ancsd run` keeps strangers out (issue 35, item 3): a device that connects without bonding
/// is dropped after `Daemon.strangerGrace` (10 s) unless someone is pairing, so it never keeps
/// the phone from coming back; a passkey-entry pairing, which bluetoothd runs whatever the agent
/// answers, is ended by dropping the link; and each kind of line is logged once, then counted.
@Suite(.serialized) struct StrangerTests {
    static func settings(_ extra: String = "") -> String {
        """
        {"scenario":"strangers"\(extra),"devices":[{"address":"\(ada)","name":"Ada's iPhone"},{"address":"\(stranger)","name":"Stranger","present":false}],"apps":{"com.apple.MobileSMS":"Messages"}}
        """
    }

    /// On a controller that stops advertising while a link is up, a stranger holding the link
    /// keeps the phone away; ancsd drops it after the grace, and the phone is back.
    @Test func aStrangerHoldingTheLinkIsDroppedAndThePhoneComesBack() throws {
        let run = try DaemonRun(text: Self.settings(#","advertise_while_connected":false"#) + """

            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Before","message":"x"}
            {"after":0.5,"do":"disconnect"}
            {"device":1,"do":"stranger_connect","timeout":10}
            {"do":"connect","timeout":20}
            {"device":1,"do":"wait_state","connected":false,"bonded":false,"paired":false,"timeout":5}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":2,"category":"social","app":"com.apple.MobileSMS","title":"After","message":"y"}
            {"after":0.5,"do":"end"}
            """, ancsdArguments: ["--replays", "all"])
        let events = try run.finish()
        #expect(events.sessions(of: ada).count == 2)
        #expect(events.titles("added").contains("After"))
        #expect(events.allSatisfy { ($0["device"]?.stringValue ?? ada) == ada }, "the stranger is no phone")
        let log = run.ancsd.standardError
        // The stranger shows under a resolvable private address of its own.
        #expect(log.contains("disconnected a device that is not bonded: ") && log.contains(" stayed connected 10 s without pairing"), "\(log)")
        // Dropped after the grace, not before.
        let phone = run.phone.standardError
        #expect(phone.contains("Stranger: a stranger connects"), "\(phone)")
        #expect(phone.contains("Ada's iPhone: reconnects to /org/ancsd/run/advertisement0"), "\(phone)")
    }

    /// While the adapter is discoverable someone is pairing (a desktop's Bluetooth settings, `ancsd
    /// pair`): the new device is not bonded yet, and is left alone; when pairing is over, it gets
    /// its grace.
    @Test func nobodyIsDroppedWhileSomeoneIsPairing() async throws {
        let run = try DaemonRun(text: Self.settings(#","adapter_discoverable":true"#) + """

            {"do":"wait_subscribed","timeout":30}
            {"device":1,"do":"stranger_connect","timeout":10}
            {"after":11,"device":1,"do":"wait_state","connected":true,"timeout":0.1}
            {"do":"wait_state","discoverable":false,"timeout":30}
            {"device":1,"do":"wait_state","connected":false,"timeout":15}
            {"after":0.5,"do":"end"}
            """)
        try run.phone.waitForStandardError(containing: "line 4: state reached", timeout: .seconds(40))
        let connection = try await DBusConnection.connect(to: .address(run.bus.address))
        try await connection.setProperty(
            destination: "org.bluez", path: "/org/bluez/hci0", interface: "org.bluez.Adapter1", name: "Discoverable",
            value: .bool(false), timeout: .seconds(5))
        await connection.close()
        _ = try run.finish()
        #expect(run.ancsd.standardError.contains("disconnected a device that is not bonded: "), "\(run.ancsd.standardError)")
    }

    /// Passkey entry asked by a stranger: bluetoothd goes on whatever the agent answers, so the
    /// agent's Rejected is followed by CancelPairing (DoesNotExist: the peer began it) and
    /// Disconnect, which ends it. Three attempts log one line.
    @Test func aPasskeyEntryPairingIsEndedByDroppingTheLink() throws {
        let run = try DaemonRun(text: Self.settings() + """

            {"do":"wait_subscribed","timeout":30}
            {"do":"wait_state","agents":1,"default_agent":true,"timeout":30}
            {"device":1,"do":"stranger_pair","passkey":111111,"expect":"cut","timeout":5}
            {"after":0.2,"device":1,"do":"stranger_pair","passkey":222222,"expect":"cut","timeout":5}
            {"after":0.2,"device":1,"do":"stranger_pair","passkey":333333,"expect":"cut","timeout":5}
            {"device":1,"do":"wait_state","bonded":false,"paired":false,"timeout":1}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Still here","message":"x"}
            {"after":0.5,"do":"end"}
            """)
        let events = try run.finish()
        #expect(events.titles("added") == ["Still here"], "the phone's session is untouched")
        let phone = run.phone.standardError
        #expect(phone.components(separatedBy: "Stranger: CancelPairing from").count - 1 == 3, "\(phone)")
        #expect(phone.components(separatedBy: "the stranger's pairing ended with the link").count - 1 == 3, "\(phone)")
        let log = run.ancsd.standardError
        #expect(log.components(separatedBy: "refused a pairing request from").count - 1 == 1, "one line, the rest counted:\n\(log)")
        #expect(log.contains(" (passkey entry): ancsd run never pairs; the link is dropped"), "\(log)")
    }
}
