import ANCS
import JSON

/// A scenario's step lines: `do`, `after`, `device`, and each step's own keys (docs/simulator.md).
extension ObjectReader {
    mutating func step(settings: ScenarioSettings) throws(ScenarioError) -> ScenarioStep {
        guard let kind = try string("do") else { throw fail("a step needs \"do\"") }
        var step = ScenarioStep(line: line, action: .end)
        step.after = try number("after") ?? 0
        if let d = value("device") { step.device = try deviceIndex(d, among: settings.devices) }
        step.action = try action(kind, settings: settings)
        return step
    }

    /// The device a step's `"device"` names, by index or by address.
    func deviceIndex(_ d: JSONValue, among devices: [DeviceSettings]) throws(ScenarioError) -> Int {
        if let i = d.intValue {
            guard i >= 0, i < devices.count else { throw fail("there is no device \(i)") }
            return i
        }
        if let s = d.stringValue {
            let wanted = s.uppercasedASCII
            guard let i = devices.firstIndex(where: { $0.address == wanted }) else {
                throw fail("no device has the address \(s)")
            }
            return i
        }
        throw fail("\"device\" must be an address or an index")
    }

    /// What a step of kind `kind` (its `"do"`) does, read from its keys.
    mutating func action(_ kind: String, settings: ScenarioSettings) throws(ScenarioError) -> ScenarioAction {
        switch kind {
        case "add": return .add(try notificationSpec())
        case "modify":
            let uid = try uid()
            return .modify(uid: uid, NotificationChange(category: try category(), flags: try flags(), attributes: try attributes()))
        case "remove": return .remove(uid: try uid())
        case "burst": return try burst()
        case "disconnect": return .disconnect
        case "connect": return try connect()
        case "restart_bluez": return .restartBlueZ(downtime: try number("downtime", max: 600) ?? 1)
        case "cp_error":
            guard let code = try integer("code", min: 1, max: 255) else { throw fail("\"code\" (the ATT error) is required") }
            return .cpError(code: UInt8(code), count: try integer("count", min: 1, max: 1_000_000) ?? 1)
        case "deny_sharing": return .denySharing
        case "allow_sharing": return .allowSharing
        case "silent_drop": return .silentDrop
        case "silent_drop_all": return .silentDropAll
        case "sharing_off": return .sharingOff
        case "sharing_on": return .sharingOn
        case "slow": return .slow(delay: try number("delay", max: 600) ?? 0.5)
        case "garbage":
            guard let seconds = try number("seconds", max: 86_400) else { throw fail("\"seconds\" is required") }
            return .garbage(seconds: seconds, rate: try integer("rate", min: 1, max: 10_000) ?? 1000, seed: UInt64(truncatingIfNeeded: line))
        case "omit": return try omit()
        case "mid_response_disconnect": return .midResponseDisconnect
        case "cp_timeout": return .cpTimeout(count: try integer("count", min: 1, max: 1_000_000) ?? 1)
        case "disconnect_on_write": return .disconnectOnWrite
        case "heal": return .heal
        case "stale_sockets": return .staleSockets
        case "refuse_subscribe": return .refuseSubscribe(count: try integer("count", min: 1, max: 1_000_000) ?? 1)
        case "wait_subscribed": return .waitSubscribed(timeout: try number("timeout", max: 86_400) ?? 30)
        case "appear": return .appear
        case "pair":
            let passkey = try integer("passkey", min: 0, max: 999_999) ?? 123_456
            return .pair(
                passkey: UInt32(passkey), expect: try choice("expect", of: PairingOutcome.self), timeout: try number("timeout", max: 86_400) ?? 10)
        case "wait_state": return .waitState(try stateExpectation(), timeout: try number("timeout", max: 86_400) ?? 30)
        case "release_advertisement": return .releaseAdvertisements
        case "rogue": return .rogue(error: try string("error"))
        case "stranger_connect": return .strangerConnect(timeout: try number("timeout", max: 86_400) ?? 10)
        case "stranger_pair":
            let passkey = try integer("passkey", min: 0, max: 999_999) ?? 123_456
            return .strangerPair(
                passkey: UInt32(passkey), expect: try choice("expect", of: StrangerOutcome.self), timeout: try number("timeout", max: 86_400) ?? 5)
        case "sleep":
            guard let seconds = try number("seconds") else { throw fail("\"seconds\" is required") }
            return .sleep(seconds: seconds)
        case "end": return .end
        case "media_track", "media_play", "media_pause", "media_volume", "media_commands", "media_service":
            return .media(try mediaStep(kind, settings: settings))
        default:
            throw fail("unknown step \"\(kind)\"")
        }
    }

    /// An `add` step's notification; without a `date` it gets one.
    mutating func notificationSpec() throws(ScenarioError) -> NotificationSpec {
        var spec = NotificationSpec(uid: try uid())
        spec.category = try category() ?? .other
        spec.flags = try flags() ?? []
        spec.attributes = try attributes()
        if spec.attributes[.date] == nil { spec.attributes[.date] = "20261130T101500" }
        return spec
    }

    /// A `burst` step: `count` notifications from `start_uid` on, at `rate` a second (0: at once).
    mutating func burst() throws(ScenarioError) -> ScenarioAction {
        guard let count = try integer("count", min: 1, max: 1_000_000) else { throw fail("\"count\" is required") }
        let start = try integer("start_uid", min: 0, max: Int(UInt32.max)) ?? 1000
        guard start + count - 1 <= Int(UInt32.max) else { throw fail("the burst's UIDs do not fit 32 bits") }
        return .burst(
            count: count, startUID: UInt32(start), rate: try number("rate", max: 1_000_000) ?? 0,
            category: try category() ?? .social, app: try string("app") ?? "com.apple.MobileSMS")
    }

    /// A `connect` step, and what it expects: the phone connected, or kept away.
    mutating func connect() throws(ScenarioError) -> ScenarioAction {
        var away = false
        if let e = try string("expect") {
            guard e == "connected" || e == "away" else { throw fail("\"expect\" must be \"connected\" or \"away\"") }
            away = e == "away"
        }
        return .connect(timeout: try number("timeout", max: 86_400) ?? 10, expectAway: away)
    }

    /// An `omit` step: the attribute the phone leaves out of its answers from now on (without one:
    /// none again).
    mutating func omit() throws(ScenarioError) -> ScenarioAction {
        guard let name = try string("attribute") else { return .omit(nil) }
        guard let id = NotificationAttributeID.allDefined.first(where: { $0.name == name }) else {
            throw fail("unknown attribute \"\(name)\"; use one of " + NotificationAttributeID.allDefined.compactMap(\.name).joined(separator: ", "))
        }
        return .omit(id)
    }

    /// A `wait_state` step's expectation (its `timeout` aside).
    mutating func stateExpectation() throws(ScenarioError) -> StateExpectation {
        var e = StateExpectation()
        e.pairable = try bool("pairable")
        e.discoverable = try bool("discoverable")
        e.pairableTimeout = try integer("pairable_timeout", min: 0, max: Int(UInt32.max)).map(UInt32.init)
        e.discoverableTimeout = try integer("discoverable_timeout", min: 0, max: Int(UInt32.max)).map(UInt32.init)
        e.agents = try integer("agents", min: 0, max: 1000)
        e.defaultAgent = try bool("default_agent")
        e.advertisements = try integer("advertisements", min: 0, max: 1000)
        e.discoverableAdvertisements = try integer("discoverable_advertisements", min: 0, max: 1000)
        e.paired = try bool("paired")
        e.trusted = try bool("trusted")
        e.connected = try bool("connected")
        e.bonded = try bool("bonded")
        if let a = try string("address") { e.address = try address(a, key: "address") }
        e.applications = try integer("applications", min: 0, max: 1000)
        e.inputReports = try integer("input_reports", min: 0, max: Int(Int32.max))
        e.keyboard = try bool("keyboard")
        e.accessoryFlagged = try bool("accessory_flagged")
        e.reportSubscribed = try bool("report_subscribed")
        if let state = try string("media_state") {
            guard state == "playing" || state == "paused" else { throw fail("\"media_state\" must be \"playing\" or \"paused\"") }
            e.mediaState = state
        }
        e.mediaCommandsReceived = try integer("media_commands_received", min: 0, max: Int(Int32.max))
        e.securityRequests = try integer("security_requests", min: 0, max: Int(Int32.max))
        return e
    }

    mutating func category() throws(ScenarioError) -> CategoryID? {
        guard let v = value("category") else { return nil }
        if let i = v.intValue {
            guard (0...255).contains(i) else { throw fail("\"category\" must be 0…255") }
            return CategoryID(rawValue: UInt8(i))
        }
        guard let name = v.stringValue else { throw fail("\"category\" must be a name or a number") }
        for raw in UInt8(0)...11 where CategoryID(rawValue: raw).name == name { return CategoryID(rawValue: raw) }
        throw fail("unknown category \"\(name)\"")
    }

    mutating func flags() throws(ScenarioError) -> EventFlags? {
        guard let v = value("flags") else { return nil }
        guard let list = v.arrayValue else { throw fail("\"flags\" must be an array of flag names") }
        var flags: EventFlags = []
        for item in list {
            guard let name = item.stringValue, let flag = EventFlags.named.first(where: { $0.name == name })?.flag else {
                throw fail("unknown flag \(item); use " + EventFlags.named.map(\.name).joined(separator: ", "))
            }
            flags.insert(flag)
        }
        return flags
    }

    static let attributeKeys: [(String, NotificationAttributeID)] = [
        ("app", .appIdentifier), ("title", .title), ("subtitle", .subtitle), ("message", .message),
        ("date", .date), ("positive_action", .positiveActionLabel), ("negative_action", .negativeActionLabel),
    ]

    mutating func attributes() throws(ScenarioError) -> [NotificationAttributeID: String] {
        var out: [NotificationAttributeID: String] = [:]
        for (key, id) in Self.attributeKeys {
            if let s = try string(key) { out[id] = s }
        }
        return out
    }
}
