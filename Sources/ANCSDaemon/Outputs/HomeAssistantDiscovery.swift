import ANCS
public import JSON

/// The MQTT topics of ancsd's MQTT output (docs/mqtt.md). DEVICE is the phone's address in
/// lower case without colons.
public struct MQTTTopics: Sendable, Hashable {
    /// `--mqtt-prefix` (default `ancsd`).
    public var prefix: String

    public init(prefix: String) { self.prefix = prefix }

    /// `online`, retained; `offline` as the last will.
    public var status: String { "\(prefix)/status" }
    /// Every event object, as `--format json` prints it; QoS 1, not retained.
    public func event(_ device: String) -> String { "\(prefix)/\(device)/event" }
    /// `connected` / `disconnected`, retained.
    public func state(_ device: String) -> String { "\(prefix)/\(device)/state" }
    /// `on` / `off`, retained: whether the phone shares its notifications (`off` from the second
    /// Control Point write in a row it refused with ATT 0x03; `on` when it accepts one again).
    public func sharing(_ device: String) -> String { "\(prefix)/\(device)/sharing" }
    /// The number of notifications the phone holds, retained.
    public func count(_ device: String) -> String { "\(prefix)/\(device)/count" }
    /// The latest added notification as one line (`App: Title`), retained.
    public func latest(_ device: String) -> String { "\(prefix)/\(device)/latest" }
    /// The latest added notification's event object, retained.
    public func latestAttributes(_ device: String) -> String { "\(prefix)/\(device)/latest/attributes" }
    /// Home Assistant's event entity: `{"event_type": CATEGORY, …the event's fields}` per added notification.
    public func notification(_ device: String) -> String { "\(prefix)/\(device)/notification" }
    /// With `--mqtt-actions`: `{"uid": N, "action": "positive"|"negative"}`.
    public func action(_ device: String) -> String { "\(prefix)/\(device)/action" }
    /// The phone's answer to an action.
    public func actionResult(_ device: String) -> String { "\(prefix)/\(device)/action/result" }
    /// What the action subscription listens to.
    public var actionFilter: String { "\(prefix)/+/action" }
    /// The phone's player: the `media` event's object, retained.
    public func media(_ device: String) -> String { "\(prefix)/\(device)/\(Self.mediaState)" }
    /// With `--mqtt-actions`: a media command's name (`play`) or `{"command": "play"}`.
    public func mediaCommand(_ device: String) -> String { "\(prefix)/\(device)/\(Self.mediaCommand)" }
    /// The phone's answer to a media command.
    public func mediaCommandResult(_ device: String) -> String { "\(prefix)/\(device)/\(Self.mediaCommand)/result" }
    /// What the media command subscription listens to.
    public var mediaCommandFilter: String { "\(prefix)/+/\(Self.mediaCommand)" }
    /// The player's state and command topics below `PREFIX/DEVICE/`.
    public static let mediaState = "media"
    public static let mediaCommand = "media/command"

    /// DEVICE for an address: `AA:BB:CC:DD:EE:FF` → `aabbccddeeff`.
    public static func device(_ address: String) -> String {
        String(address.lowercased().filter { $0 != ":" })
    }

    /// The address for DEVICE: `aabbccddeeff` → `AA:BB:CC:DD:EE:FF`; nil if it is not one.
    public static func address(_ device: String) -> String? {
        guard device.count == 12, device.allSatisfy(\.isHexDigit) else { return nil }
        var parts: [String] = []
        var rest = Substring(device.uppercased())
        while !rest.isEmpty {
            parts.append(String(rest.prefix(2)))
            rest = rest.dropFirst(2)
        }
        return parts.joined(separator: ":")
    }

    /// A topic prefix a user may give: non-empty levels, no wildcards, no leading or trailing `/`.
    public static func isValidPrefix(_ text: String) -> Bool {
        !text.isEmpty && !text.contains("+") && !text.contains("#") && !text.contains("\0")
            && text.split(separator: "/", omittingEmptySubsequences: false).allSatisfy { !$0.isEmpty }
    }
}

/// Home Assistant MQTT discovery (https://www.home-assistant.io/integrations/mqtt/#mqtt-discovery):
/// per phone one device with five entities of its own and those of its other services (the
/// player's), each a retained config message at `DISCOVERY/COMPONENT/ancsd_DEVICE/OBJECT/config`.
public struct HomeAssistantDiscovery: Sendable {
    public var topics: MQTTTopics
    /// The discovery prefix (`homeassistant` by default).
    public var discoveryPrefix: String
    public var version: String

    public init(topics: MQTTTopics, discoveryPrefix: String, version: String) {
        self.topics = topics
        self.discoveryPrefix = discoveryPrefix
        self.version = version
    }

    /// The event types of the event entity: every category name, and `reserved`.
    public static let eventTypes: [String] = (0...11).compactMap { CategoryID(rawValue: UInt8($0)).name } + ["reserved"]

    /// Home Assistant's own status topic: `online` when it (re)starts and wants discovery again.
    public var birthTopic: String { "\(discoveryPrefix)/status" }

    /// The configs for one phone: (topic, payload) pairs, all to be published retained.
    public func configs(address: String, name: String?) -> [(topic: String, payload: JSONValue)] {
        let device = MQTTTopics.device(address)
        let online = onlineAvailability, phoneConnected = phoneAvailability(device)
        let phone = Phone(discovery: self, address: address, name: name)
        return [
            phone.config("binary_sensor", "connected", [
                "name": "Connected", "device_class": "connectivity", "state_topic": .string(topics.state(device)),
                "payload_on": "connected", "payload_off": "disconnected",
            ], availability: [online]),
            phone.config("binary_sensor", "sharing", [
                "name": "Sharing notifications", "icon": "mdi:bell-check", "state_topic": .string(topics.sharing(device)),
                "payload_on": "on", "payload_off": "off",
            ], availability: [online, phoneConnected]),
            phone.config("sensor", "notifications", [
                "name": "Notifications", "icon": "mdi:bell", "state_topic": .string(topics.count(device)),
                "state_class": "measurement", "unit_of_measurement": "notifications",
            ], availability: [online, phoneConnected]),
            phone.config("sensor", "latest", [
                "name": "Latest notification", "icon": "mdi:message-text", "state_topic": .string(topics.latest(device)),
                "json_attributes_topic": .string(topics.latestAttributes(device)),
            ], availability: [online]),
            phone.config("event", "notification", [
                "name": "Notification", "icon": "mdi:cellphone-message", "state_topic": .string(topics.notification(device)),
                "event_types": .array(Self.eventTypes.map { .string($0) }),
            ], availability: [online]),
        ]
    }

    /// The config topic of a service's entity (`media`, `title`):
    /// `DISCOVERY/sensor/ancsd_DEVICE/media_title/config`.
    public func configTopic(address: String, type: String, entity: ServiceOutput.Entity) -> String {
        "\(discoveryPrefix)/\(entity.component)/ancsd_\(MQTTTopics.device(address))/\(type)_\(entity.object)/config"
    }

    /// The config of a service's entity (`ServiceOutput.entities`) at `configTopic`: its members,
    /// with the topics they name below `PREFIX/DEVICE/` written in full, in the phone's device,
    /// available while ancsd is online and the phone connected.
    public func serviceConfig(address: String, name: String?, type: String, entity: ServiceOutput.Entity) -> (topic: String, payload: JSONValue) {
        let device = MQTTTopics.device(address)
        var fields: JSONObject = ["name": .string(entity.name)]
        for (key, value) in entity.config {
            if key.hasSuffix("_topic"), let relative = value.stringValue {
                fields.append(key, .string("\(topics.prefix)/\(device)/\(relative)"))
            } else {
                fields.append(key, value)
            }
        }
        return Phone(discovery: self, address: address, name: name)
            .config(entity.component, "\(type)_\(entity.object)", fields, availability: [onlineAvailability, phoneAvailability(device)])
    }

    /// Available while ancsd is online.
    private var onlineAvailability: JSONValue { ["topic": .string(topics.status)] }

    /// Available while the phone is connected.
    private func phoneAvailability(_ device: String) -> JSONValue {
        ["topic": .string(topics.state(device)), "payload_available": "connected", "payload_not_available": "disconnected"]
    }

    /// What every config of one phone shares: its device block and ancsd's origin.
    private struct Phone {
        let discoveryPrefix: String
        let node: String
        let deviceBlock: JSONValue
        let origin: JSONValue

        init(discovery: HomeAssistantDiscovery, address: String, name: String?) {
            discoveryPrefix = discovery.discoveryPrefix
            node = "ancsd_\(MQTTTopics.device(address))"
            deviceBlock = [
                "identifiers": [.string(node)],
                "connections": [["bluetooth", .string(address.lowercased())]],
                "name": .string(name.map(EventFormatter.sanitize).flatMap { $0.isEmpty ? nil : $0 } ?? "iPhone \(address)"),
                "manufacturer": "Apple",
                "model": "iPhone (ANCS)",
            ]
            origin = ["name": "ancsd", "sw_version": .string(discovery.version)]
        }

        func config(_ component: String, _ object: String, _ fields: JSONObject, availability: [JSONValue]) -> (topic: String, payload: JSONValue) {
            var out: JSONObject = ["unique_id": .string("\(node)_\(object)")]
            for (key, value) in fields { out.append(key, value) }
            out.append("availability", .array(availability))
            if availability.count > 1 { out.append("availability_mode", "all") }
            out.append("device", deviceBlock)
            out.append("origin", origin)
            return ("\(discoveryPrefix)/\(component)/\(node)/\(object)/config", .object(out))
        }
    }

    /// The latest sensor's state: `App: Title` (or the app alone), sanitized, at most 255
    /// characters (Home Assistant's limit for a state).
    public static func latestState(_ event: JSONValue) -> String {
        let app = event["app_name"]?.stringValue ?? event["app_id"]?.stringValue ?? event["category"]?.stringValue ?? "notification"
        var text = EventFormatter.sanitize(app)
        if let title = event["title"]?.stringValue.map(EventFormatter.sanitize), !title.isEmpty { text += ": " + title }
        if text.unicodeScalars.count > 255 {
            text = String(String.UnicodeScalarView(text.unicodeScalars.prefix(254))) + "…"
        }
        return text
    }

    /// The event entity's payload for an added notification: `event_type` (its category),
    /// then the event's fields.
    public static func eventPayload(_ event: JSONValue) -> JSONValue {
        var object: JSONObject = ["event_type": .string(event["category"]?.stringValue ?? "reserved")]
        for (key, value) in event.objectValue ?? [:] { object.append(key, value) }
        return .object(object)
    }
}
