import DBus
import Foundation
import JSON
import Testing
import TestSupport

private let ada = "AA:BB:CC:DD:EE:01"

/// `ancsd pair` and `ancsd run` against the strict simulated iPhone (docs/simulator.md, "The iOS
/// policy"): listed only thanks to the HID advertisement, bonded only because the accessory
/// demands it, known by its identity address, back after a link loss only thanks to `ancsd
/// run`'s HID advertisement, and never sent an input report.
@Suite(.serialized) struct StrictPhoneTests {
    /// The pair window's scenario: `pair` expecting `outcome`; `advertisements` counts what stays
    /// registered by others once ancsd is done.
    static func pairScenario(_ outcome: String, otherAdvertisements: Int = 0, accessory: String = "keyboard", after: String = "") -> String {
        """
        {"scenario":"strict-pair","accessory":"\(accessory)","adapter_pairable":false,"devices":[{"address":"\(ada)","name":"Ada's iPhone","address_type":"public","present":false}]}
        {"do":"wait_state","discoverable_advertisements":\(1 + otherAdvertisements),"agents":1,"pairable":true,"timeout":30}
        {"do":"appear"}
        {"after":0.2,"do":"pair","passkey":482913,"expect":"\(outcome)","timeout":5}
        \(after)
        {"do":"end"}
        """
    }

    final class Run {
        let bus: PrivateBus
        let phone: ChildProcess
        let ancsd: ChildProcess

        init(
            _ scenario: String, ancsd arguments: [String], environment: [String: String]? = nil,
            before: ((PrivateBus) async throws -> Void)? = nil
        ) async throws {
            bus = try PrivateBus()
            let file = URL(fileURLWithPath: bus.directory).appendingPathComponent("scenario.jsonl")
            try scenario.write(to: file, atomically: true, encoding: .utf8)
            phone = try ChildProcess(
                builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", bus.address, "--scenario", file.path])
            try phone.waitForStandardError(containing: "owns org.bluez")
            try await before?(bus)
            ancsd = try ChildProcess(
                builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address] + arguments, environment: environment)
        }

        deinit {
            _ = try? ancsd.stop(timeout: .seconds(5))
            _ = try? phone.stop(timeout: .seconds(5))
            bus.stop()
        }
    }

    /// Each shape, the phone told which was asked for: it reads the Report Map once bonded, a
    /// keyboard's Keyboard usage is expected, the remote has none; nothing is flagged.
    @Test(arguments: [("keyboard", true), ("remote", false)])
    func pairsThroughTheAccessoryAndKnowsTheIdentityAddress(shape: String, keyboard: Bool) async throws {
        let run = try await Run(Self.pairScenario("paired", accessory: shape, after: """
            {"do":"wait_state","bonded":true,"address":"\(ada)","keyboard":\(keyboard),"accessory_flagged":false,"report_subscribed":true,"input_reports":0,"timeout":10}
            {"do":"wait_state","trusted":true,"agents":0,"advertisements":0,"applications":0,"pairable":false,"timeout":30}
            """), ancsd: ["pair", "--yes", "--timeout", "30", "--accessory", shape])
        #expect(try run.phone.wait(timeout: .seconds(60)) == 0, "\(run.phone.standardError)\n\(run.ancsd.standardError)")
        #expect(try run.ancsd.wait(timeout: .seconds(30)) == 0, "\(run.ancsd.standardError)")
        let phone = run.phone.standardError
        let output = run.ancsd.lines.map(\.text).joined(separator: "\n")
        // Listed: the pair window's advertisement carries HID 0x1812 and the solicitation.
        #expect(phone.contains("lists /org/ancsd/pair/advertisement0"), "\(phone)")
        #expect(phone.contains("RegisterApplication /org/ancsd/accessory"), "\(phone)")
        // Bonded because the phone read an attribute that needs encryption.
        #expect(phone.contains("pairing starts: reading /org/ancsd/accessory/hid/"), "\(phone)")
        // The request came from a resolvable private address; ancsd reports the identity.
        let request = output.split(separator: "\n").first { $0.contains("Pairing request from Ada's iPhone (") } ?? ""
        let shown = request.split(separator: "(").dropFirst().first?.prefix(2) ?? ""
        #expect(UInt8(shown, radix: 16).map { (0x40...0x7F).contains($0) } == true, "\(request)")
        #expect(output.contains("Paired with Ada's iPhone (\(ada)) and marked it trusted"), "\(output)")
        #expect(phone.contains("keyboard usage: \(keyboard ? "yes" : "no") (\(shape) asked for)"), "\(phone)")
        #expect(!phone.contains("FLAGGED"), "\(phone)")
    }

    /// The strict phone catches a keyboard where a remote was asked for.
    @Test func aKeyboardWhereARemoteWasAskedIsFlagged() async throws {
        let run = try await Run(Self.pairScenario("paired", accessory: "remote", after: """
            {"do":"wait_state","bonded":true,"keyboard":true,"accessory_flagged":true,"timeout":10}
            """), ancsd: ["pair", "--yes", "--timeout", "30", "--accessory", "keyboard"])
        #expect(try run.phone.wait(timeout: .seconds(60)) == 0, "\(run.phone.standardError)\n\(run.ancsd.standardError)")
        #expect(run.phone.standardError.contains("FLAGGED, a keyboard where a remote was asked for"), "\(run.phone.standardError)")
    }

    @Test func withoutTheAccessoryThePhoneDoesNotListIt() async throws {
        let run = try await Run(Self.pairScenario("not_listed"), ancsd: ["pair", "--yes", "--timeout", "20", "--accessory", "none"])
        #expect(try run.phone.wait(timeout: .seconds(60)) == 0, "\(run.phone.standardError)\n\(run.ancsd.standardError)")
        #expect(run.phone.standardError.contains("nothing to list"))
    }

    /// `--accessory none`: no application, so only ancsd's Device1.Pair() can start the pairing.
    /// Something else on the machine advertises HID (the test), so the phone lists it. The phone
    /// reads nothing, so the security request comes, once, after the delay (1 s here, 5 s by
    /// default), measured from the link's coming up on the phone's side.
    @Test func bondsThroughPairAloneAfterTheDelay() async throws {
        let advertiser = Advertiser()
        let run = try await Run(Self.pairScenario("paired", otherAdvertisements: 1, after: """
            {"do":"wait_state","bonded":true,"address":"\(ada)","applications":0,"security_requests":1,"timeout":10}
            {"do":"wait_state","trusted":true,"agents":0,"advertisements":1,"pairable":false,"timeout":30}
            """), ancsd: ["pair", "--yes", "--timeout", "30", "--accessory", "none"], environment: shortSecurityRequestDelay(1)) { bus in
            try await advertiser.register(on: bus)
        }
        #expect(try run.phone.wait(timeout: .seconds(60)) == 0, "\(run.phone.standardError)\n\(run.ancsd.standardError)")
        #expect(try run.ancsd.wait(timeout: .seconds(30)) == 0, "\(run.ancsd.standardError)")
        let phone = run.phone.standardError
        #expect(phone.contains("pairing starts: a security request (Device1.Pair())"), "\(phone)")
        let line = phone.split(separator: "\n").first { $0.contains("Device1.Pair() from") } ?? ""
        let milliseconds = line.split(separator: ", ").last?.split(separator: " ").first.flatMap { Int($0) }
        let waited = try #require(milliseconds, "\(line)")
        #expect(waited >= 1000 && waited < 2500, "the security request came \(waited) ms after the link came up")
        await advertiser.close()
    }

    /// The strict phone reads the HID service's encrypted attribute as it connects, and so begins
    /// pairing itself: the passkey question waits for the user well past the delay (0.3 s here),
    /// and ancsd sends no security request, the agent having seen the pairing begin.
    @Test func aPhoneThatBeginsPairingIsNeverSentASecurityRequest() async throws {
        let terminal = try PseudoTerminal()
        let scenario = Self.pairScenario("paired", after: """
            {"do":"wait_state","bonded":true,"address":"\(ada)","security_requests":0,"timeout":10}
            {"do":"wait_state","trusted":true,"agents":0,"advertisements":0,"pairable":false,"security_requests":0,"timeout":30}
            """)
        let bus = try PrivateBus()
        defer { bus.stop() }
        let file = URL(fileURLWithPath: bus.directory).appendingPathComponent("scenario.jsonl")
        try scenario.write(to: file, atomically: true, encoding: .utf8)
        let phone = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", bus.address, "--scenario", file.path])
        try phone.waitForStandardError(containing: "owns org.bluez")
        let ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "pair", "--timeout", "30"],
            environment: shortSecurityRequestDelay(0.3), standardInput: terminal.child)
        try ancsd.waitForLine(timeout: .seconds(30)) { $0.contains("Pairing request from Ada's iPhone") }
        try await Task.sleep(for: .seconds(1))  // the user looks at the passkey; the delay passes
        terminal.type("y\n")
        #expect(try phone.wait(timeout: .seconds(60)) == 0, "\(phone.standardError)\n\(ancsd.standardError)")
        #expect(try ancsd.wait(timeout: .seconds(30)) == 0, "\(ancsd.standardError)")
        #expect(!phone.standardError.contains("Device1.Pair() from"), "\(phone.standardError)")
        #expect(ancsd.standardError.contains("began pairing by itself: no security request needed"), "\(ancsd.standardError)")
        #expect(phone.standardError.contains("pairing starts: reading /org/ancsd/accessory/hid/"), "\(phone.standardError)")
    }

    /// The phone comes back after a link loss because `ancsd run` advertises HID; it subscribes
    /// to the input report again, and never gets one.
    @Test func reconnectsThanksToTheRunAdvertisement() throws {
        let run = try DaemonRun(text: """
            {"scenario":"strict-reconnect","devices":[{"address":"\(ada)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages"}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Before","message":"x"}
            {"after":0.5,"do":"disconnect"}
            {"after":0.5,"do":"connect","timeout":10}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":2,"category":"social","app":"com.apple.MobileSMS","title":"After","message":"y"}
            {"do":"wait_state","keyboard":true,"accessory_flagged":false,"report_subscribed":true,"input_reports":0,"timeout":10}
            {"after":0.5,"do":"end"}
            """, ancsdArguments: ["--replays", "all"])
        let events = try run.finish()
        #expect(events.sessions(of: ada).count == 2)
        #expect(events.titles("added").contains("After"))
        #expect(run.phone.standardError.contains("reconnects to /org/ancsd/run/advertisement"), "\(run.phone.standardError)")
    }

    /// Paired from a resolvable private address while `ancsd run` waits for a phone: the running
    /// daemon serves the phone under its identity address (JSON `device`, the state file), never
    /// under the private address of the temporary device object it was found at.
    @Test func runKnowsThePairedPhoneByItsIdentity() throws {
        let state = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("strict-state-\(getpid())")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: state) }
        let run = try DaemonRun(text: """
            {"scenario":"strict-identity","adapter_pairable":false,"devices":[{"address":"\(ada)","name":"Ada's iPhone","present":false}],"apps":{"com.apple.MobileSMS":"Messages"}}
            {"do":"appear"}
            {"do":"wait_state","discoverable_advertisements":1,"agents":1,"pairable":true,"timeout":30}
            {"after":0.2,"do":"pair","passkey":482913,"expect":"paired"}
            {"do":"wait_state","advertisements":1,"discoverable_advertisements":0,"agents":1,"address":"\(ada)","timeout":30}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Hello","message":"First"}
            {"after":1,"do":"end"}
            """, ancsdArguments: ["--state-dir", state.path])
        try run.phone.waitForStandardError(containing: "appeared")
        let pair = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", run.bus.address, "pair", "--yes"])
        #expect(try pair.wait(timeout: .seconds(60)) == 0, "\(pair.standardError)")
        let events = try run.finish()
        #expect(events.titles("added") == ["Hello"])
        #expect(events.of("added").allSatisfy { $0["device"]?.stringValue == ada }, "\(events.map(\.serialized))")
        #expect(run.phone.standardError.contains("(resolvable private address)"))
        let files = try FileManager.default.contentsOfDirectory(atPath: state.path)
        #expect(files == ["AA_BB_CC_DD_EE_01.seen"], "\(files)")
    }

    /// Without the HID advertisement (`--accessory none`, `--no-advertise`) the phone stays away.
    @Test(arguments: [["--accessory", "none"], ["--no-advertise"]])
    func staysAwayWithoutTheHIDAdvertisement(arguments: [String]) throws {
        let run = try DaemonRun(text: """
            {"scenario":"strict-away","devices":[{"address":"\(ada)","name":"Ada's iPhone"}]}
            {"do":"wait_subscribed","timeout":30}
            {"after":0.5,"do":"disconnect"}
            {"do":"connect","timeout":3,"expect":"away"}
            {"do":"end"}
            """, ancsdArguments: arguments)
        let events = try run.finish()
        #expect(events.sessions(of: ada).count == 1)
        #expect(run.phone.standardError.contains("stays away"), "\(run.phone.standardError)")
    }
}

/// A discoverable HID advertisement with the ANCS solicitation, registered by the test.
final actor Advertiser {
    private var connection: DBusConnection?

    func register(on bus: PrivateBus) async throws {
        let c = try await DBusConnection.connect(to: .address(bus.address))
        connection = c
        let path: ObjectPath = "/test/hid_advertisement"
        try await c.export(ExportedObject(ExportedInterface(
            "org.bluez.LEAdvertisement1", methods: [.immediate("Release") { _ in [] }],
            properties: [
                ExportedProperty("Type", value: .string("peripheral")),
                ExportedProperty("ServiceUUIDs", value: .stringArray(["1812"])),
                ExportedProperty("SolicitUUIDs", value: .stringArray(["7905f431-b5ce-4e99-a40f-4b1e122d00d0"])),
                ExportedProperty("Discoverable", value: .bool(true)),
            ])), at: path)
        _ = try await c.call(
            destination: "org.bluez", path: "/org/bluez/hci0", interface: "org.bluez.LEAdvertisingManager1",
            member: "RegisterAdvertisement", arguments: [.objectPath(path), .variantDictionary([:])], timeout: .seconds(5))
    }

    func close() async {
        await connection?.close()
        connection = nil
    }
}
