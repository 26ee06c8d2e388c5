import ANCS
import Foundation
import PhoneSimulator
import Testing

@Suite("Scenario parsing")
struct ScenarioParsingTests {
    @Test("every shipped scenario parses")
    func shipped() throws {
        let directory = repositoryRoot.appendingPathComponent("scenarios")
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".jsonl") }.sorted()
        #expect(files == [
            "bluez-restart.jsonl", "burst.jsonl", "cp-errors.jsonl", "demo.jsonl", "deny-sharing.jsonl",
            "disconnect.jsonl", "media.jsonl", "music.jsonl", "omitted-tuple.jsonl", "pair-refused.jsonl", "pair-window-closes.jsonl",
            "pair.jsonl",
            "run-presence.jsonl", "two-phones.jsonl",
        ])
        for file in files {
            let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            let scenario = try Scenario(parsing: text)
            #expect(scenario.steps.last?.action == .end, "\(file) ends with an end step")
        }
    }

    @Test("pairing settings and steps")
    func pairing() throws {
        let text = """
            {"scenario":"p","adapter_pairable":false,"adapter_discoverable":true,"adapter_pairable_timeout":30,"adapter_discoverable_timeout":60,"devices":[{"address":"AA:BB:CC:DD:EE:01","present":false}]}
            {"do":"appear"}
            {"do":"pair","passkey":42,"expect":"rejected"}
            {"do":"pair"}
            {"do":"wait_state","pairable":true,"discoverable":false,"pairable_timeout":0,"discoverable_timeout":180,"agents":1,"default_agent":true,"advertisements":2,"discoverable_advertisements":1,"paired":true,"trusted":false,"timeout":5}
            {"do":"release_advertisement"}
            {"do":"rogue","error":"org.freedesktop.DBus.Error.AccessDenied"}
            {"do":"end"}
            """
        let scenario = try Scenario(parsing: text)
        let s = scenario.settings
        #expect(!s.adapterPairable && s.adapterDiscoverable && s.adapterPairableTimeout == 30 && s.adapterDiscoverableTimeout == 60)
        let d = try #require(s.devices.first)
        #expect(!d.present && !d.connected && !d.paired && !d.bonded && !d.trusted)
        var state = StateExpectation()
        state.pairable = true
        state.discoverable = false
        state.pairableTimeout = 0
        state.discoverableTimeout = 180
        state.agents = 1
        state.defaultAgent = true
        state.advertisements = 2
        state.discoverableAdvertisements = 1
        state.paired = true
        state.trusted = false
        #expect(scenario.steps.map(\.action) == [
            .appear, .pair(passkey: 42, expect: .rejected, timeout: 10), .pair(passkey: 123_456, expect: nil, timeout: 10), .waitState(state, timeout: 5),
            .releaseAdvertisements, .rogue(error: "org.freedesktop.DBus.Error.AccessDenied"), .end,
        ])
        for bad in [
            #"{"do":"pair","expect":"maybe"}"#, #"{"do":"pair","passkey":1000000}"#, #"{"do":"wait_state","agents":-1}"#,
            #"{"do":"wait_state","pairable":1}"#,
        ] {
            #expect(throws: ScenarioError.self) { try Scenario(parsing: #"{"scenario":"x"}"# + "\n" + bad) }
        }
        #expect(throws: ScenarioError.self) {
            try Scenario(parsing: #"{"scenario":"x","devices":[{"address":"AA:BB:CC:DD:EE:01","present":false,"paired":true}]}"#)
        }
    }

    @Test("settings, defaults and steps")
    func good() throws {
        let text = """
            {"scenario":"t","mtu":247,"acquire_notify":false,"devices":[{"address":"aa:bb:cc:dd:ee:01","name":"Ada","address_type":"public"},{"address":"AA:BB:CC:DD:EE:02","name":"Bob","connected":false,"mtu":23}],"apps":{"com.apple.MobileSMS":"Messages"}}
            # a comment

            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"T","subtitle":"S","message":"M","date":"20261130T101500","flags":["positive_action","silent"],"positive_action":"Reply","negative_action":"Clear"}
            {"after":0.5,"device":"AA:BB:CC:DD:EE:02","do":"modify","uid":1,"message":"N"}
            {"after":1,"device":1,"do":"remove","uid":1}
            {"do":"burst","count":1000,"start_uid":100,"rate":0}
            {"do":"cp_error","code":162,"count":2}
            {"do":"omit","attribute":"positive_action_label"}
            {"do":"restart_bluez"}
            {"do":"wait_subscribed"}
            {"do":"sleep","seconds":1}
            {"do":"end"}
            """
        let scenario = try Scenario(parsing: text)
        let s = scenario.settings
        #expect(s.name == "t" && s.mtu == 247 && !s.acquireNotify)
        #expect(s.devices.map(\.address) == ["AA:BB:CC:DD:EE:01", "AA:BB:CC:DD:EE:02"])
        #expect(s.devices[0].addressType == "public" && s.devices[0].mtu == 247 && s.devices[0].connected)
        #expect(s.devices[1].addressType == "random" && s.devices[1].mtu == 23 && !s.devices[1].connected)
        #expect(s.devices[0].pathElement == "dev_AA_BB_CC_DD_EE_01")
        #expect(s.apps == ["com.apple.MobileSMS": "Messages"])
        #expect(scenario.steps.map(\.line) == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13])
        let add = NotificationSpec(
            uid: 1, category: .social, flags: [.positiveAction, .silent],
            attributes: [.appIdentifier: "com.apple.MobileSMS", .title: "T", .subtitle: "S", .message: "M",
                         .date: "20261130T101500", .positiveActionLabel: "Reply", .negativeActionLabel: "Clear"])
        #expect(scenario.steps[0] == ScenarioStep(line: 4, action: .add(add)))
        #expect(scenario.steps[1] == ScenarioStep(line: 5, after: 0.5, device: 1, action: .modify(uid: 1, NotificationChange(attributes: [.message: "N"]))))
        #expect(scenario.steps[2] == ScenarioStep(line: 6, after: 1, device: 1, action: .remove(uid: 1)))
        #expect(scenario.steps[3].action == .burst(count: 1000, startUID: 100, rate: 0, category: .social, app: "com.apple.MobileSMS"))
        #expect(scenario.steps[4].action == .cpError(code: 0xA2, count: 2))
        #expect(scenario.steps[5].action == .omit(.positiveActionLabel))
        #expect(scenario.steps[6].action == .restartBlueZ(downtime: 1))
        #expect(scenario.steps[7].action == .waitSubscribed(timeout: 30))
        #expect(scenario.steps[8].action == .sleep(seconds: 1))
    }

    @Test("the soak's faults: cp_timeout and disconnect_on_write")
    func soakFaults() throws {
        let settings = try Scenario(parsing: "{\"scenario\":\"s\"}\n").settings
        #expect(try ScenarioStep(parsingLine: #"{"do":"cp_timeout"}"#, number: 2, settings: settings).action == .cpTimeout(count: 1))
        #expect(try ScenarioStep(parsingLine: #"{"do":"cp_timeout","count":3}"#, number: 2, settings: settings).action == .cpTimeout(count: 3))
        #expect(try ScenarioStep(parsingLine: #"{"do":"disconnect_on_write"}"#, number: 2, settings: settings).action == .disconnectOnWrite)
        #expect(try ScenarioStep(parsingLine: #"{"do":"heal","device":1}"#, number: 2, settings: try Scenario(parsing: """
            {"scenario":"s","devices":[{"address":"AA:BB:CC:DD:EE:01"},{"address":"AA:BB:CC:DD:EE:02"}]}
            """).settings) == ScenarioStep(line: 2, device: 1, action: .heal))
        #expect(throws: ScenarioError.self) { try ScenarioStep(parsingLine: #"{"do":"cp_timeout","count":0}"#, number: 2, settings: settings) }
    }

    @Test("garbage: seconds required, 0…86400; rate 1…10000, 1000 by default; seeded by its line")
    func garbage() throws {
        let settings = try Scenario(parsing: """
            {"scenario":"s","devices":[{"address":"AA:BB:CC:DD:EE:01"},{"address":"AA:BB:CC:DD:EE:02"}]}
            """).settings
        func parse(_ line: String, number: Int = 2) throws(ScenarioError) -> ScenarioStep {
            try ScenarioStep(parsingLine: line, number: number, settings: settings)
        }
        #expect(try parse(#"{"do":"garbage","device":1,"seconds":5,"rate":1000}"#, number: 7)
            == ScenarioStep(line: 7, device: 1, action: .garbage(seconds: 5, rate: 1000, seed: 7)))
        #expect(try parse(#"{"do":"garbage","seconds":2.5}"#).action == .garbage(seconds: 2.5, rate: 1000, seed: 2))
        #expect(try parse(#"{"do":"garbage","seconds":0}"#).action == .garbage(seconds: 0, rate: 1000, seed: 2))
        #expect(try parse(#"{"do":"garbage","seconds":86400,"rate":10000}"#).action == .garbage(seconds: 86_400, rate: 10_000, seed: 2))
        #expect(try parse(#"{"do":"garbage","seconds":1,"rate":1}"#).action == .garbage(seconds: 1, rate: 1, seed: 2))
        for (line, fragment) in [
            (#"{"do":"garbage"}"#, "\"seconds\" is required"),
            (#"{"do":"garbage","rate":100}"#, "\"seconds\" is required"),
            (#"{"do":"garbage","seconds":-1}"#, "between 0.0 and 86400.0"),
            (#"{"do":"garbage","seconds":86401}"#, "between 0.0 and 86400.0"),
            (#"{"do":"garbage","seconds":1,"rate":0}"#, "between 1 and 10000"),
            (#"{"do":"garbage","seconds":1,"rate":10001}"#, "between 1 and 10000"),
            (#"{"do":"garbage","seconds":1,"rate":2.5}"#, "\"rate\" must be an integer"),
            (#"{"do":"garbage","seconds":"5"}"#, "\"seconds\" must be a number"),
            (#"{"do":"garbage","seconds":1,"seed":3}"#, "unknown key \"seed\""),
        ] {
            do {
                _ = try parse(line)
                Issue.record("accepted: \(line)")
            } catch {
                #expect(error.description == "line 2: " + error.message && error.message.contains(fragment), "\(line): \(error)")
            }
        }
    }

    @Test("a minimal scenario gets one default phone")
    func defaults() throws {
        let scenario = try Scenario(parsing: "{\"scenario\":\"x\"}\n{\"do\":\"add\",\"uid\":3}\n")
        #expect(scenario.settings.devices.count == 1 && scenario.settings.mtu == 185 && scenario.settings.acquireNotify)
        guard case .add(let spec) = scenario.steps[0].action else { Issue.record("not an add"); return }
        #expect(spec.category == .other && spec.attributes[.date] == "20261130T101500")
        #expect(scenario.settings.ios == .strict, "every test phone is strict unless it says otherwise")
    }

    @Test("the iOS policy and its steps")
    func iosPolicy() throws {
        let scenario = try Scenario(parsing: """
            {"scenario":"x","ios":"lenient","temporary_timeout":0.5,"accessory":"remote"}
            {"do":"connect"}
            {"do":"connect","timeout":2,"expect":"away"}
            {"do":"pair","expect":"not_listed","timeout":3}
            {"do":"pair","expect":"not_paired"}
            {"do":"wait_state","connected":true,"bonded":false,"address":"aa:bb:cc:dd:ee:01","applications":1,"input_reports":0,"keyboard":false,"accessory_flagged":false,"report_subscribed":true}
            """)
        #expect(scenario.settings.ios == .lenient && scenario.settings.temporaryTimeout == 0.5)
        #expect(scenario.settings.accessory == .remote)
        #expect(try Scenario(parsing: #"{"scenario":"x"}"#).settings.accessory == .keyboard, "ancsd's default shape")
        var e = StateExpectation()
        e.connected = true
        e.bonded = false
        e.address = "AA:BB:CC:DD:EE:01"
        e.applications = 1
        e.inputReports = 0
        e.keyboard = false
        e.accessoryFlagged = false
        e.reportSubscribed = true
        #expect(scenario.steps.map(\.action) == [
            .connect(timeout: 10, expectAway: false), .connect(timeout: 2, expectAway: true),
            .pair(passkey: 123_456, expect: .notListed, timeout: 3), .pair(passkey: 123_456, expect: .notPaired, timeout: 10),
            .waitState(e, timeout: 30),
        ])
    }

    static let badLines: [(String, Int, String)] = [
        ("{\"scenario\":\"x\"}\n{\"do\":\"add\",\"uid\":1}\n{\"do\":\"dance\"}", 3, "unknown step \"dance\""),
        ("{\"scenario\":\"x\",\"ios\":\"android\"}", 1, "\"ios\" must be \"strict\" or \"lenient\""),
        ("{\"scenario\":\"x\",\"accessory\":\"hid\"}", 1, "\"accessory\" must be \"keyboard\" or \"remote\""),
        ("{\"scenario\":\"x\"}\n{\"do\":\"connect\",\"expect\":\"maybe\"}", 2, "\"expect\" must be \"connected\" or \"away\""),
        ("{\"scenario\":\"x\"}\n{\"do\":\"add\"", 2, "not valid JSON"),
        ("{\"scenario\":\"x\"}\n[1,2]", 2, "expected a JSON object"),
        ("{\"scenario\":\"x\"}\n{\"do\":\"add\"}", 2, "\"uid\" is required"),
        ("{\"scenario\":\"x\"}\n\n{\"do\":\"add\",\"uid\":1,\"titel\":\"typo\"}", 3, "unknown key \"titel\""),
        ("{\"scenario\":\"x\"}\n{\"do\":\"add\",\"uid\":1,\"category\":\"sports\"}", 2, "unknown category \"sports\""),
        ("{\"scenario\":\"x\"}\n{\"do\":\"add\",\"uid\":1,\"flags\":[\"loud\"]}", 2, "unknown flag"),
        ("{\"scenario\":\"x\"}\n{\"do\":\"add\",\"uid\":-1}", 2, "between 0 and"),
        ("{\"scenario\":\"x\"}\n{\"do\":\"remove\",\"uid\":1,\"device\":3}", 2, "there is no device 3"),
        ("{\"scenario\":\"x\"}\n{\"do\":\"sleep\"}", 2, "\"seconds\" is required"),
        ("{\"scenario\":\"x\"}\n{\"do\":\"cp_error\",\"code\":300}", 2, "between 1 and 255"),
        ("{\"scenario\":\"x\"}\n{\"do\":\"omit\",\"attribute\":\"colour\"}", 2, "unknown attribute \"colour\""),
        ("{\"scenario\":\"x\"}\n{\"after\":\"soon\",\"do\":\"end\"}", 2, "\"after\" must be a number"),
        ("{\"scenario\":\"x\",\"devices\":[{\"address\":\"AA:BB\"}]}", 1, "must look like AA:BB:CC:DD:EE:FF"),
        ("{\"scenario\":\"x\",\"mtu\":10}", 1, "\"mtu\" must be between 23 and 517"),
        ("{\"do\":\"add\",\"uid\":1}", 1, "the first line must hold the settings"),
        ("{\"scenario\":\"x\",\"devices\":[{\"address\":\"AA:BB:CC:DD:EE:01\"},{\"address\":\"aa:bb:cc:dd:ee:01\"}]}", 1, "appears twice"),
        ("", 0, "the scenario is empty"),
    ]

    @Test("bad lines are refused, naming the line", arguments: badLines.indices)
    func bad(index: Int) {
        let (text, line, fragment) = Self.badLines[index]
        do {
            _ = try Scenario(parsing: text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == line, "\(error)")
            #expect(error.description.contains(fragment), "\(error)")
            if line > 0 { #expect(error.description.hasPrefix("line \(line): ")) }
        }
    }
}
