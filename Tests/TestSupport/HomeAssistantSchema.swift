public import JSON

/// Home Assistant's MQTT discovery schema for the entity types ancsd announces, as documented
/// (https://www.home-assistant.io/integrations/mqtt/, binary_sensor.mqtt, sensor.mqtt,
/// event.mqtt, button.mqtt): the keys each type accepts, the required ones and their types.
/// Home Assistant rejects a config with an unknown key or a missing required one ("Invalid config").
public enum HomeAssistantSchema {
    /// Keys every MQTT entity accepts.
    static let common: Set<String> = [
        "availability", "availability_mode", "availability_template", "availability_topic", "device", "origin",
        "enabled_by_default", "encoding", "entity_category", "entity_picture", "icon", "json_attributes_template",
        "json_attributes_topic", "name", "object_id", "default_entity_id", "payload_available", "payload_not_available",
        "platform", "qos", "unique_id",
    ]
    static let byComponent: [String: (allowed: Set<String>, required: [String])] = [
        "binary_sensor": (["device_class", "expire_after", "force_update", "off_delay", "payload_off", "payload_on",
                           "state_topic", "value_template"], ["state_topic"]),
        "sensor": (["device_class", "expire_after", "force_update", "last_reset_value_template", "options",
                    "suggested_display_precision", "state_class", "state_topic", "unit_of_measurement", "value_template"],
                   ["state_topic"]),
        "event": (["device_class", "event_types", "state_topic", "value_template"], ["state_topic", "event_types"]),
        "button": (["command_template", "command_topic", "device_class", "payload_press", "retain"], ["command_topic"]),
    ]
    static let deviceKeys: Set<String> = [
        "configuration_url", "connections", "hw_version", "identifiers", "manufacturer", "model", "model_id", "name",
        "serial_number", "suggested_area", "sw_version", "via_device",
    ]
    static let binarySensorClasses: Set<String> = [
        "battery", "battery_charging", "carbon_monoxide", "cold", "connectivity", "door", "garage_door", "gas", "heat",
        "light", "lock", "moisture", "motion", "moving", "occupancy", "opening", "plug", "power", "presence", "problem",
        "running", "safety", "smoke", "sound", "tamper", "update", "vibration", "window",
    ]

    /// The problems with a set of discovery messages (topic → payload); empty when Home
    /// Assistant would accept every one. `published`: topics that carry messages; every state,
    /// attributes and availability topic a config names must be one of them. `subscribed`: the
    /// filters the publisher subscribes to; every command topic must match one of them.
    public static func problems(
        _ configs: [(topic: String, payload: JSONValue)], published: Set<String>? = nil, subscribed: [String]? = nil
    ) -> [String] {
        var problems: [String] = []
        var uniqueIDs: Set<String> = []
        for (topic, payload) in configs {
            func problem(_ text: String) { problems.append("\(topic): \(text)") }
            let levels = topic.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            guard levels.count >= 4, levels.last == "config" else {
                problem("not <prefix>/<component>/[<node_id>/]<object_id>/config")
                continue
            }
            let component = levels.count == 4 ? levels[1] : levels[levels.count - 4]
            let ids = levels.count == 4 ? [levels[2]] : [levels[levels.count - 3], levels[levels.count - 2]]
            for id in ids where id.isEmpty || !id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }) {
                problem("node or object id '\(id)' has characters other than [a-zA-Z0-9_-]")
            }
            guard let schema = byComponent[component] else {
                problem("component '\(component)' is not one this check knows")
                continue
            }
            guard let object = payload.objectValue else {
                problem("the payload is not a JSON object")
                continue
            }
            for key in object.keys where !common.contains(key) && !schema.allowed.contains(key) {
                problem("unknown key '\(key)' for \(component)")
            }
            for key in schema.required where object[key] == nil { problem("missing required '\(key)'") }
            var topics: [String] = []
            for key in ["state_topic", "json_attributes_topic", "availability_topic"] {
                guard let value = object[key] else { continue }
                guard let text = value.stringValue, !text.isEmpty else {
                    problem("'\(key)' must be a non-empty string")
                    continue
                }
                topics.append(text)
            }
            if let value = object["command_topic"] {
                if let text = value.stringValue, !text.isEmpty {
                    if text.contains("+") || text.contains("#") { problem("command topic '\(text)' has a wildcard") }
                    if let subscribed, !subscribed.contains(where: { matches(filter: $0, topic: text) }) {
                        problem("command topic '\(text)' reaches no subscriber")
                    }
                } else {
                    problem("'command_topic' must be a non-empty string")
                }
            }
            for key in ["value_template", "json_attributes_template", "command_template", "payload_press", "icon"] {
                if let value = object[key], value.stringValue?.isEmpty != false { problem("'\(key)' must be a non-empty string") }
            }
            if let unique = object["unique_id"] {
                if let text = unique.stringValue, !text.isEmpty {
                    if !uniqueIDs.insert(text).inserted { problem("unique_id '\(text)' is used twice") }
                } else {
                    problem("'unique_id' must be a non-empty string")
                }
            } else {
                problem("no unique_id: the entity could not be renamed or put in a device")
            }
            if let availability = object["availability"] {
                if object["availability_topic"] != nil { problem("both 'availability' and 'availability_topic'") }
                guard let list = availability.arrayValue, !list.isEmpty else {
                    problem("'availability' must be a non-empty list")
                    continue
                }
                for item in list {
                    guard let entry = item.objectValue, let text = entry["topic"]?.stringValue, !text.isEmpty else {
                        problem("an 'availability' entry needs 'topic'")
                        continue
                    }
                    for key in entry.keys where !["topic", "payload_available", "payload_not_available", "value_template"].contains(key) {
                        problem("unknown availability key '\(key)'")
                    }
                    topics.append(text)
                }
            }
            if let mode = object["availability_mode"], !["all", "any", "latest"].contains(mode.stringValue ?? "") {
                problem("availability_mode must be all, any or latest")
            }
            for text in topics where text.contains("+") || text.contains("#") {
                problem("topic '\(text)' has a wildcard")
            }
            if let published {
                for text in topics where !published.contains(text) { problem("topic '\(text)' carries no message") }
            }
            if let device = object["device"] {
                guard let block = device.objectValue else {
                    problem("'device' must be an object")
                    continue
                }
                for key in block.keys where !deviceKeys.contains(key) { problem("unknown device key '\(key)'") }
                let identifiers = block["identifiers"]?.arrayValue ?? block["identifiers"].flatMap { $0.stringValue.map { [.string($0)] } } ?? []
                let connections = block["connections"]?.arrayValue ?? []
                if identifiers.isEmpty && connections.isEmpty { problem("the device needs identifiers or connections") }
                if !identifiers.allSatisfy({ $0.stringValue?.isEmpty == false }) { problem("device identifiers must be strings") }
                if !connections.allSatisfy({ $0.arrayValue?.count == 2 && $0.arrayValue?.allSatisfy { $0.stringValue != nil } == true }) {
                    problem("device connections must be [type, id] pairs")
                }
            }
            if let origin = object["origin"], origin["name"]?.stringValue == nil { problem("'origin' needs 'name'") }
            switch component {
            case "binary_sensor":
                if let deviceClass = object["device_class"], !binarySensorClasses.contains(deviceClass.stringValue ?? "") {
                    problem("binary_sensor device_class '\(deviceClass.stringValue ?? "?")' is not one Home Assistant knows")
                }
            case "sensor":
                if let stateClass = object["state_class"],
                   !["measurement", "measurement_angle", "total", "total_increasing"].contains(stateClass.stringValue ?? "") {
                    problem("sensor state_class '\(stateClass.stringValue ?? "?")' is not one Home Assistant knows")
                }
            case "event":
                let types = object["event_types"]?.arrayValue ?? []
                if types.isEmpty || !types.allSatisfy({ $0.stringValue?.isEmpty == false }) {
                    problem("event_types must be a non-empty list of strings")
                }
                if let deviceClass = object["device_class"], !["button", "doorbell", "motion"].contains(deviceClass.stringValue ?? "") {
                    problem("event device_class '\(deviceClass.stringValue ?? "?")' is not one Home Assistant knows")
                }
            case "button":
                if let deviceClass = object["device_class"], !["identify", "restart", "update"].contains(deviceClass.stringValue ?? "") {
                    problem("button device_class '\(deviceClass.stringValue ?? "?")' is not one Home Assistant knows")
                }
                if let retain = object["retain"], retain.boolValue == nil { problem("'retain' must be true or false") }
            default:
                break
            }
        }
        return problems
    }

    /// Whether an MQTT subscription `filter` (with `+` and `#`) takes messages on `topic`.
    public static func matches(filter: String, topic: String) -> Bool {
        let filterLevels = filter.split(separator: "/", omittingEmptySubsequences: false)
        let topicLevels = topic.split(separator: "/", omittingEmptySubsequences: false)
        for (index, level) in filterLevels.enumerated() {
            if level == "#" { return true }
            guard index < topicLevels.count, level == "+" || level == topicLevels[index] else { return false }
        }
        return filterLevels.count == topicLevels.count
    }
}
