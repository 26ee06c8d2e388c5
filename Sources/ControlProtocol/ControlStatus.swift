public import JSON

/// The `status` reply (docs/control.md): the daemon, its phones and its outputs.
public struct ControlStatus: Sendable, Equatable {
    /// ancsd's version.
    public var version: String
    public var uptimeSeconds: Int
    /// bluetoothd is on the bus (`"running"`; `"absent"` when not).
    public var bluetoothdRunning: Bool
    /// The adapters' names (`hci0`).
    public var adapters: [String]
    /// The HID accessory shape asked for and where it is registered.
    public var accessory: ControlAccessoryStatus
    public var devices: [ControlPhoneStatus]
    /// Events emitted and phone sessions begun since the daemon started.
    public var events: Int
    public var sessions: Int
    /// One per configured output, in the order events reach them.
    public var outputs: [ControlOutputStatus]

    public init(
        version: String, uptimeSeconds: Int, bluetoothdRunning: Bool, adapters: [String], accessory: ControlAccessoryStatus,
        devices: [ControlPhoneStatus], events: Int, sessions: Int, outputs: [ControlOutputStatus]
    ) {
        self.version = version
        self.uptimeSeconds = uptimeSeconds
        self.bluetoothdRunning = bluetoothdRunning
        self.adapters = adapters
        self.accessory = accessory
        self.devices = devices
        self.events = events
        self.sessions = sessions
        self.outputs = outputs
    }

    /// The reply's members after `"ok": true`.
    func appendMembers(to object: inout JSONObject) {
        object.append("version", .string(version))
        object.append("uptime_s", .int(uptimeSeconds))
        object.append("bluetoothd", bluetoothdRunning ? "running" : "absent")
        object.append("adapters", .array(adapters.map { .string($0) }))
        object.append("accessory", .object(accessory.json))
        object.append("devices", .array(devices.map { .object($0.json) }))
        object.append("counters", ["events": .int(events), "sessions": .int(sessions)])
        object.append("outputs", .array(outputs.map { .object($0.json) }))
    }

    init(_ fields: ControlFields) throws(ControlDecodingError) {
        version = try fields.string("version")
        uptimeSeconds = try fields.int("uptime_s")
        switch try fields.string("bluetoothd") {
        case "running": bluetoothdRunning = true
        case "absent": bluetoothdRunning = false
        case let other: throw ControlDecodingError("\"bluetoothd\" of \(fields.place) is \"\(other)\", not running or absent")
        }
        var adapters: [String] = []
        for adapter in try fields.array("adapters") {
            guard let name = adapter.stringValue else { throw ControlDecodingError("an adapter of \(fields.place) is not a string") }
            adapters.append(name)
        }
        self.adapters = adapters
        accessory = try ControlAccessoryStatus(try fields.fields("accessory", "the accessory of \(fields.place)"))
        devices = try fields.objects("devices", "a phone of \(fields.place)", ControlPhoneStatus.init)
        let counters = try fields.fields("counters", "the counters of \(fields.place)")
        events = try counters.int("events")
        sessions = try counters.int("sessions")
        outputs = try fields.objects("outputs", "an output of \(fields.place)", ControlOutputStatus.init)
    }
}

/// The HID accessory in the `status` reply: the shape `--accessory` asks for (`keyboard`,
/// `remote` or `none`) and the adapter its GATT application is registered on now (`hci0`), nil
/// while it is not (no paired phone yet, `--no-advertise`, `none`, bluetoothd away).
public struct ControlAccessoryStatus: Sendable, Equatable {
    public var shape: String
    public var registeredOn: String?

    public init(shape: String, registeredOn: String?) {
        self.shape = shape
        self.registeredOn = registeredOn
    }

    public var json: JSONObject {
        ["shape": .string(shape), "registered_on": JSONValue(registeredOn)]
    }

    init(_ fields: ControlFields) throws(ControlDecodingError) {
        shape = try fields.string("shape")
        registeredOn = try fields.optionalString("registered_on")
    }
}

/// One phone in the `status` reply. Notification content is never part of it.
public struct ControlPhoneStatus: Sendable, Equatable {
    public var device: String
    public var name: String?
    /// BlueZ says it is connected.
    public var connected: Bool
    /// Its ANCS session runs: the notifications are subscribed to.
    public var subscribed: Bool
    /// How the notifications come: `AcquireNotify` or `StartNotify`; nil before they do.
    public var delivery: String?
    public var sessionAgeSeconds: Int
    /// Notifications the phone holds, and events emitted in this session.
    public var notifications: Int
    public var events: Int
    /// Whether the phone shares its notifications; nil until known.
    public var sharingAllowed: Bool?
    /// How often the subscriptions were renewed in this connection.
    public var resubscriptions: Int
    /// Which characteristic another program held a notify session of at the last renewal.
    public var sharedNotifySession: String?
    /// Notifications the filters dropped in this session, and replays `--replays` held back.
    public var filtered: Int
    public var heldBack: Int
    /// Each filter (`only-app com.apple.*`) and how many notifications of this session it matched.
    public var filterMatches: [ControlFilterMatch]
    public var lastError: String?

    public init(
        device: String, name: String?, connected: Bool, subscribed: Bool, delivery: String?, sessionAgeSeconds: Int,
        notifications: Int, events: Int, sharingAllowed: Bool?, resubscriptions: Int, sharedNotifySession: String?,
        filtered: Int, heldBack: Int, filterMatches: [ControlFilterMatch], lastError: String?
    ) {
        self.device = device
        self.name = name
        self.connected = connected
        self.subscribed = subscribed
        self.delivery = delivery
        self.sessionAgeSeconds = sessionAgeSeconds
        self.notifications = notifications
        self.events = events
        self.sharingAllowed = sharingAllowed
        self.resubscriptions = resubscriptions
        self.sharedNotifySession = sharedNotifySession
        self.filtered = filtered
        self.heldBack = heldBack
        self.filterMatches = filterMatches
        self.lastError = lastError
    }

    public var json: JSONObject {
        var object: JSONObject = ["device": .string(device), "name": JSONValue(name)]
        object.append("connected", .bool(connected))
        object.append("subscribed", .bool(subscribed))
        object.append("delivery", JSONValue(delivery))
        object.append("session_age_s", .int(sessionAgeSeconds))
        object.append("notifications", .int(notifications))
        object.append("events", .int(events))
        object.append("sharing_allowed", JSONValue(sharingAllowed))
        object.append("resubscriptions", .int(resubscriptions))
        object.append("shared_notify_session", JSONValue(sharedNotifySession))
        object.append("filtered", .int(filtered))
        object.append("held_back", .int(heldBack))
        var matches = JSONObject()
        for match in filterMatches { matches.append(match.filter, .int(match.count)) }
        object.append("filter_matches", .object(matches))
        object.append("last_error", JSONValue(lastError))
        return object
    }

    init(_ fields: ControlFields) throws(ControlDecodingError) {
        device = try fields.string("device")
        name = try fields.optionalString("name")
        connected = try fields.bool("connected")
        subscribed = try fields.bool("subscribed")
        delivery = try fields.optionalString("delivery")
        sessionAgeSeconds = try fields.int("session_age_s")
        notifications = try fields.int("notifications")
        events = try fields.int("events")
        sharingAllowed = try fields.optionalBool("sharing_allowed")
        resubscriptions = try fields.int("resubscriptions")
        sharedNotifySession = try fields.optionalString("shared_notify_session")
        filtered = try fields.int("filtered")
        heldBack = try fields.int("held_back")
        let matches = try fields.fields("filter_matches", "the filter matches of \(fields.place)")
        var filterMatches: [ControlFilterMatch] = []
        for member in matches.object.members {
            filterMatches.append(ControlFilterMatch(filter: member.key, count: try matches.int(member.key)))
        }
        self.filterMatches = filterMatches
        lastError = try fields.optionalString("last_error")
    }
}

/// A filter of `ancsd run` (as `--only-app com.apple.*` names it, without the dashes) and how
/// many notifications of the session it matched.
public struct ControlFilterMatch: Sendable, Equatable {
    public var filter: String
    public var count: Int

    public init(filter: String, count: Int) {
        self.filter = filter
        self.count = count
    }
}

/// One output in the `status` reply: its name and counters, in the order the output gives them
/// (docs/control.md lists each kind's: `written`, `dropped`; `started`, …; `connected`, …).
public struct ControlOutputStatus: Sendable, Equatable {
    /// "standard output", a FIFO's path, "exec", "MQTT mqtt://host:1883".
    public var name: String
    public var counters: [Counter]

    /// A count, or a yes/no state such as MQTT's `connected`.
    public struct Counter: Sendable, Equatable {
        public var name: String
        public var value: Value

        public enum Value: Sendable, Equatable {
            case count(Int)
            case state(Bool)
        }

        public init(_ name: String, _ value: Value) {
            self.name = name
            self.value = value
        }
    }

    public init(name: String, counters: [Counter]) {
        self.name = name
        self.counters = counters
    }

    /// The count named `name` (`"dropped"`), if this output has one.
    public func count(_ name: String) -> Int? {
        guard case .count(let value)? = counters.first(where: { $0.name == name })?.value else { return nil }
        return value
    }

    /// The state named `name` (`"connected"`), if this output has one.
    public func state(_ name: String) -> Bool? {
        guard case .state(let value)? = counters.first(where: { $0.name == name })?.value else { return nil }
        return value
    }

    public var json: JSONObject {
        var object: JSONObject = ["name": .string(name)]
        for counter in counters {
            switch counter.value {
            case .count(let value): object.append(counter.name, .int(value))
            case .state(let value): object.append(counter.name, .bool(value))
            }
        }
        return object
    }

    init(_ fields: ControlFields) throws(ControlDecodingError) {
        name = try fields.string("name")
        var counters: [Counter] = []
        for member in fields.object.members where member.key != "name" {
            switch member.value {
            case .int(let value): counters.append(Counter(member.key, .count(value)))
            case .bool(let value): counters.append(Counter(member.key, .state(value)))
            default: throw ControlDecodingError("\"\(member.key)\" of \(fields.place) is a JSON \(member.value.typeName), not a count")
            }
        }
        self.counters = counters
    }
}
