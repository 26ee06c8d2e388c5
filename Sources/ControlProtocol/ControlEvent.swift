public import JSON

/// One event a `subscribe`d client receives, as `ancsd run --format json` prints it
/// (docs/output.md): `{"v": 1, "type": …, "device": …, …}`.
public enum ControlEvent: Sendable, Equatable {
    /// A notification arrived, changed or went away on the phone.
    case added(ControlNotification)
    case modified(ControlNotification)
    case removed(ControlNotification)
    /// The phone's session began; `name` is its Bluetooth name.
    case connected(device: String, name: String?)
    /// The phone's session ended; `reason` says why ("ancsd stopped" when the daemon stops).
    case disconnected(device: String, reason: String?)
    /// The phone stopped sharing its notifications (`allowed` false) or shares them again.
    case sharing(device: String, allowed: Bool)
    /// What the phone's player says changed (Apple Media Service).
    case media(ControlMedia)

    /// The version of the event format (`"v"`) this module reads and writes.
    public static let version = 1

    /// The phone the event is about.
    public var device: String {
        switch self {
        case .added(let n), .modified(let n), .removed(let n): n.device
        case .connected(let device, _), .disconnected(let device, _), .sharing(let device, _): device
        case .media(let media): media.device
        }
    }

    /// The `type` member.
    public var type: String {
        switch self {
        case .added: "added"
        case .modified: "modified"
        case .removed: "removed"
        case .connected: "connected"
        case .disconnected: "disconnected"
        case .sharing: "sharing"
        case .media: "media"
        }
    }

    /// The event's object, members in the order `ancsd run --format json` writes them.
    public var json: JSONObject {
        var object: JSONObject = ["v": .int(Self.version), "type": .string(type)]
        switch self {
        case .added(let n), .modified(let n), .removed(let n):
            n.appendMembers(to: &object)
        case .connected(let device, let name):
            object.append("device", .string(device))
            object.append("name", JSONValue(name))
        case .disconnected(let device, let reason):
            object.append("device", .string(device))
            object.append("reason", JSONValue(reason))
        case .sharing(let device, let allowed):
            object.append("device", .string(device))
            object.append("state", allowed ? "on" : "off")
        case .media(let media):
            object.append("device", .string(media.device))
            media.appendFields(to: &object)
        }
        return object
    }

    /// Reads an event; members it does not know are ignored, an unknown `type` or another
    /// version `v` is an error.
    public init(decoding object: JSONObject) throws(ControlDecodingError) {
        let fields = ControlFields(object, "an event")
        let version = try fields.int("v")
        guard version == Self.version else {
            throw ControlDecodingError("an event of format version \(version); this client reads version \(Self.version)")
        }
        let type = try fields.string("type")
        let place = "a \(type) event"
        let event = ControlFields(object, place)
        switch type {
        case "added": self = .added(try ControlNotification(event))
        case "modified": self = .modified(try ControlNotification(event))
        case "removed": self = .removed(try ControlNotification(event))
        case "connected": self = .connected(device: try event.string("device"), name: try event.optionalString("name"))
        case "disconnected": self = .disconnected(device: try event.string("device"), reason: try event.optionalString("reason"))
        case "sharing":
            let state = try event.string("state")
            guard state == "on" || state == "off" else { throw ControlDecodingError("\"state\" of \(place) is \"\(state)\", not on or off") }
            self = .sharing(device: try event.string("device"), allowed: state == "on")
        case "media":
            self = .media(try ControlMedia(event))
        default:
            throw ControlDecodingError("an event of an unknown type \"\(type)\"")
        }
    }
}
