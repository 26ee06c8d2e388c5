import ANCSDaemon
import JSON
import MQTT
import Testing
import TestSupport

@Suite struct MQTTOutputTests {
    let discovery = HomeAssistantDiscovery(topics: MQTTTopics(prefix: "ancsd"), discoveryPrefix: "homeassistant", version: "1.0")

    @Test("discovery: one device per phone with the five entities Home Assistant's schema accepts")
    func discoveryMatchesTheSchema() throws {
        let configs = discovery.configs(address: "AA:BB:CC:DD:EE:01", name: "Ada's iPhone")
        #expect(configs.map(\.topic) == [
            "homeassistant/binary_sensor/ancsd_aabbccddee01/connected/config",
            "homeassistant/binary_sensor/ancsd_aabbccddee01/sharing/config",
            "homeassistant/sensor/ancsd_aabbccddee01/notifications/config",
            "homeassistant/sensor/ancsd_aabbccddee01/latest/config",
            "homeassistant/event/ancsd_aabbccddee01/notification/config",
        ])
        let published: Set<String> = [
            "ancsd/status", "ancsd/aabbccddee01/state", "ancsd/aabbccddee01/count", "ancsd/aabbccddee01/latest",
            "ancsd/aabbccddee01/latest/attributes", "ancsd/aabbccddee01/notification", "ancsd/aabbccddee01/sharing",
        ]
        #expect(HomeAssistantSchema.problems(configs, published: published) == [])
        // One device for all five, named after the phone, with its Bluetooth address.
        let devices = Set(configs.compactMap { $0.payload["device"] })
        #expect(devices.count == 1)
        #expect(devices.first?["name"] == "Ada's iPhone")
        #expect(devices.first?["connections"] == [["bluetooth", "aa:bb:cc:dd:ee:01"]])
        let event = try #require(configs.last?.payload)
        #expect(event["event_types"]?.arrayValue?.count == 13)
        #expect(event["event_types"]?.arrayValue?.contains("incoming_call") == true)
        // A second phone: its own unique ids.
        let both = configs + discovery.configs(address: "AA:BB:CC:DD:EE:02", name: nil)
        #expect(HomeAssistantSchema.problems(both) == [])
        #expect(both.last?.payload["device"]?["name"] == "iPhone AA:BB:CC:DD:EE:02")
    }

    @Test("the schema check catches what Home Assistant would reject")
    func schemaCheckBites() {
        var bad: JSONObject = ["name": "x", "unique_id": "u", "state_topic": "a/+/b", "colour": "red"]
        bad.append("availability", [["topic": "s", "payload_online": "x"]])
        let problems = HomeAssistantSchema.problems([
            ("homeassistant/sensor/n/o/config", .object(bad)),
            ("homeassistant/event/n/e/config", ["unique_id": "u", "state_topic": "t"]),
            ("homeassistant/binary_sensor/n/b/config", ["unique_id": "b", "state_topic": "t", "device_class": "phone"]),
        ])
        #expect(problems.contains { $0.contains("unknown key 'colour'") })
        #expect(problems.contains { $0.contains("wildcard") })
        #expect(problems.contains { $0.contains("unknown availability key") })
        #expect(problems.contains { $0.contains("missing required 'event_types'") })
        #expect(problems.contains { $0.contains("used twice") })
        #expect(problems.contains { $0.contains("device_class 'phone'") })
    }

    @Test("latest notification state: app and title, sanitized, at most 255 characters; event payload")
    func latestAndEvent() {
        let event: JSONValue = ["type": "added", "uid": 7, "category": "social", "app_name": "Messages", "title": "Ada\u{202E}\nLovelace"]
        #expect(HomeAssistantDiscovery.latestState(event) == "Messages: Ada Lovelace")
        #expect(HomeAssistantDiscovery.latestState(["app_id": "com.x", "title": ""]) == "com.x")
        let long = HomeAssistantDiscovery.latestState(["app_name": "A", "title": .string(String(repeating: "é", count: 400))])
        #expect(long.unicodeScalars.count == 255 && long.hasSuffix("…"))
        let payload = HomeAssistantDiscovery.eventPayload(event)
        #expect(payload.objectValue?.keys == ["event_type", "type", "uid", "category", "app_name", "title"])
        #expect(payload["event_type"] == "social")
    }

    @Test("topics and prefixes")
    func topics() {
        #expect(MQTTTopics.device("AA:BB:CC:DD:EE:0F") == "aabbccddee0f")
        #expect(MQTTTopics.address("aabbccddee0f") == "AA:BB:CC:DD:EE:0F")
        #expect(MQTTTopics.address("aabbccddee0") == nil && MQTTTopics.address("aabbccddee0g") == nil)
        #expect(MQTTTopics.isValidPrefix("home/ancsd") && !MQTTTopics.isValidPrefix("a/+") && !MQTTTopics.isValidPrefix("/a")
            && !MQTTTopics.isValidPrefix("a//b") && !MQTTTopics.isValidPrefix(""))
    }

    @Test("settings: the mqtt keys, with errors that say what is wrong")
    func settings() throws {
        var settings = RunSettings()
        try settings.apply(configuration: """
            mqtt = mqtts://ha@broker.lan
            mqtt-password-file = /etc/ancsd/mqtt-password
            mqtt-ca = /etc/ancsd/ca.crt
            mqtt-prefix = home/phones
            mqtt-discovery-prefix = none
            mqtt-actions = yes
            """, path: "test.conf")
        let mqtt = try #require(settings.mqtt)
        #expect(mqtt.endpoint == MQTTEndpoint(host: "broker.lan", port: 8883, tls: true, username: "ha"))
        #expect(mqtt.passwordFile == "/etc/ancsd/mqtt-password" && mqtt.caFile == "/etc/ancsd/ca.crt")
        #expect(mqtt.prefix == "home/phones" && mqtt.discoveryPrefix == nil && mqtt.actions)
        #expect(RunSettings().mqtt == nil)
        for (key, value, message) in [
            ("mqtt", "mqtt://u:pw@h", "password-file"), ("mqtt-prefix", "a/#", "mqtt-prefix"),
            ("mqtt-password-file", "relative", "absolute"), ("mqtt-actions", "maybe", "yes or no"),
        ] {
            var fresh = RunSettings()
            #expect(throws: SettingError.self) { try fresh.set(key, value) }
            do { try fresh.set(key, value) } catch { #expect(error.description.contains(message), "\(error)") }
        }
    }
}
