import ControlProtocol
@testable import ANCSDaemon
import JSON
import MQTT
import Testing
import TestSupport

@Suite struct MQTTOutputTests {
    let discovery = HomeAssistantDiscovery(topics: MQTTTopics(prefix: "ancsd"), discoveryPrefix: "homeassistant", version: "1.0")

    /// The player's entity configs, every one present (each command supported).
    func mediaConfigs(address: String, name: String?) -> [(topic: String, payload: JSONValue)] {
        let media = ControlMedia(device: address, commands: ControlMediaCommand.allCases.map(\.rawValue))
        return MediaOutput.output(media).entities.map { discovery.serviceConfig(address: address, name: name, type: "media", entity: $0) }
    }

    @Test("discovery: one device per phone with the five entities, and the player's, Home Assistant's schema accepts")
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
        // With the player's sensors and buttons, whose commands reach ancsd's subscriptions.
        let media = mediaConfigs(address: "AA:BB:CC:DD:EE:01", name: "Ada's iPhone")
        #expect(media.count == 4 + 14)
        let subscribed = ["ancsd/+/action", "ancsd/+/media/command"]
        #expect(HomeAssistantSchema.problems(configs + media, published: published.union(["ancsd/aabbccddee01/media"]), subscribed: subscribed) == [])
        #expect(HomeAssistantSchema.problems(media, subscribed: ["ancsd/+/action"]).count == 14, "each button's topic must be subscribed")
        // One device for all, named after the phone, with its Bluetooth address.
        let devices = Set((configs + media).compactMap { $0.payload["device"] })
        #expect(devices.count == 1)
        #expect(devices.first?["name"] == "Ada's iPhone")
        #expect(devices.first?["connections"] == [["bluetooth", "aa:bb:cc:dd:ee:01"]])
        let event = try #require(configs.last?.payload)
        #expect(event["event_types"]?.arrayValue?.count == 13)
        #expect(event["event_types"]?.arrayValue?.contains("incoming_call") == true)
        // A second phone: its own unique ids.
        let both = configs + media + discovery.configs(address: "AA:BB:CC:DD:EE:02", name: nil)
            + mediaConfigs(address: "AA:BB:CC:DD:EE:02", name: nil)
        #expect(HomeAssistantSchema.problems(both, subscribed: subscribed) == [])
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
        let buttons = HomeAssistantSchema.problems([
            ("homeassistant/button/n/a/config", ["unique_id": "a", "payload_press": "play"]),
            ("homeassistant/button/n/b/config", ["unique_id": "b", "command_topic": "x/#", "device_class": "play"]),
            ("homeassistant/button/n/c/config", ["unique_id": "c", "command_topic": "other/topic", "value_template": ""]),
        ], subscribed: ["x/+"])
        #expect(buttons.contains { $0.contains("missing required 'command_topic'") })
        #expect(buttons.contains { $0.contains("command topic 'x/#' has a wildcard") })
        #expect(buttons.contains { $0.contains("button device_class 'play'") })
        #expect(buttons.contains { $0.contains("'other/topic' reaches no subscriber") })
        #expect(buttons.contains { $0.contains("unknown key 'value_template' for button") })
        #expect(HomeAssistantSchema.matches(filter: "a/+/m/c", topic: "a/d/m/c") && HomeAssistantSchema.matches(filter: "a/#", topic: "a/b/c")
            && !HomeAssistantSchema.matches(filter: "a/+/m/c", topic: "a/d/m/c/result") && !HomeAssistantSchema.matches(filter: "a/+", topic: "a"))
    }

    @Test("the player's entities: sensors read members of the retained media state, a button per command, present while supported")
    func mediaEntities() throws {
        let media = ControlMedia(device: "AA:BB:CC:DD:EE:01", player: "Music", state: "playing", title: "Bohemian Rhapsody", commands: ["play", "volume-up"])
        let output = MediaOutput.output(media)
        let state = try JSONValue(parsing: try #require(output.retained.first { $0.topic == "media" }).payload)
        #expect(state["type"] == "media" && state["title"] == "Bohemian Rhapsody")
        let sensors = output.entities.filter { $0.component == "sensor" }
        #expect(sensors.map(\.object) == ["title", "artist", "album", "state"])
        for sensor in sensors {
            #expect(sensor.present && !sensor.takesCommands && sensor.config["state_topic"] == "media")
            // The template reads the member of that name, which the state always has (null when unknown).
            let template = try #require(sensor.config["value_template"]?.stringValue)
            #expect(template.contains("value_json.\(sensor.object)[:255]") && state[sensor.object] != nil, "\(template)")
        }
        #expect(sensors.first?.config["json_attributes_topic"] == "media")
        let buttons = output.entities.filter { $0.component == "button" }
        #expect(buttons.map(\.object) == ControlMediaCommand.allCases.map { $0.rawValue.replacing("-", with: "_") })
        #expect(buttons.allSatisfy { $0.takesCommands && $0.config["command_topic"] == "media/command" })
        #expect(buttons.filter(\.present).compactMap { $0.config["payload_press"]?.stringValue } == ["play", "volume-up"])
        let config = discovery.serviceConfig(address: media.device, name: "Ada's iPhone", type: "media", entity: buttons[5])
        #expect(config.topic == "homeassistant/button/ancsd_aabbccddee01/media_volume_up/config")
        #expect(config.payload["unique_id"] == "ancsd_aabbccddee01_media_volume_up" && config.payload["name"] == "Volume up")
        #expect(config.payload["command_topic"] == "ancsd/aabbccddee01/media/command" && config.payload["payload_press"] == "volume-up")
        #expect(config.payload["availability"]?.arrayValue?.count == 2 && config.payload["availability_mode"] == "all")
        #expect(discovery.configTopic(address: media.device, type: "media", entity: buttons[5]) == config.topic)
        let title = discovery.serviceConfig(address: media.device, name: nil, type: "media", entity: sensors[0]).payload
        #expect(title["state_topic"] == "ancsd/aabbccddee01/media" && title["json_attributes_topic"] == "ancsd/aabbccddee01/media")
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
