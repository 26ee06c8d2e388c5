public import JSON

/// What a phone's player says (Apple Media Service): the `media` event's members and the
/// `media` command's phones (docs/output.md, docs/control.md). Every member is present; null
/// where the phone has not said (or offers no such characteristic).
public struct ControlMedia: Sendable, Equatable {
    public var device: String
    /// The app that plays ("Music", "Podcasts").
    public var player: String?
    /// `playing`, `paused`, `rewinding`, `fast_forwarding`.
    public var state: String?
    public var rate: Double?
    /// Seconds into the track when the phone said so.
    public var elapsed: Double?
    /// Seconds into the track now (when the event or reply was written).
    public var position: Double?
    /// 0 to 1.
    public var volume: Double?
    public var queueIndex: Int?
    public var queueCount: Int?
    /// `off`, `one`, `all`.
    public var shuffle: String?
    /// `off`, `one`, `all`.
    public var `repeat`: String?
    public var artist: String?
    public var album: String?
    public var title: String?
    /// Seconds.
    public var duration: Double?
    /// The values the phone cut short and ancsd could not read whole (`track.title`, …).
    public var truncated: [String]
    /// The commands the phone's player accepts now, by name (`play`, `pause`, `toggle`, …).
    public var commands: [String]

    public init(
        device: String, player: String? = nil, state: String? = nil, rate: Double? = nil, elapsed: Double? = nil,
        position: Double? = nil, volume: Double? = nil, queueIndex: Int? = nil, queueCount: Int? = nil, shuffle: String? = nil,
        repeat: String? = nil, artist: String? = nil, album: String? = nil, title: String? = nil, duration: Double? = nil,
        truncated: [String] = [], commands: [String] = []
    ) {
        self.device = device
        self.player = player
        self.state = state
        self.rate = rate
        self.elapsed = elapsed
        self.position = position
        self.volume = volume
        self.queueIndex = queueIndex
        self.queueCount = queueCount
        self.shuffle = shuffle
        self.repeat = `repeat`
        self.artist = artist
        self.album = album
        self.title = title
        self.duration = duration
        self.truncated = truncated
        self.commands = commands
    }

    /// Reads a player's object (`json`'s members); unknown members are ignored.
    public init(decoding object: JSONObject) throws(ControlDecodingError) {
        try self.init(ControlFields(object, "a media player"))
    }

    /// The members after `v` and `type` of the event (`device` first), in the order ancsd writes them.
    public var json: JSONObject {
        var object: JSONObject = ["device": .string(device)]
        appendFields(to: &object)
        return object
    }

    /// The members after `device`.
    public func appendFields(to object: inout JSONObject) {
        object.append("player", JSONValue(player))
        object.append("state", JSONValue(state))
        object.append("rate", Self.number(rate))
        object.append("elapsed", Self.number(elapsed))
        object.append("position", Self.number(position))
        object.append("volume", Self.number(volume))
        object.append("queue_index", queueIndex.map { .int($0) } ?? .null)
        object.append("queue_count", queueCount.map { .int($0) } ?? .null)
        object.append("shuffle", JSONValue(shuffle))
        object.append("repeat", JSONValue(`repeat`))
        object.append("artist", JSONValue(artist))
        object.append("album", JSONValue(album))
        object.append("title", JSONValue(title))
        object.append("duration", Self.number(duration))
        object.append("truncated", .array(truncated.map { .string($0) }))
        object.append("commands", .array(commands.map { .string($0) }))
    }

    /// Reads the members `json` writes; unknown members are ignored.
    init(_ fields: ControlFields) throws(ControlDecodingError) {
        device = try fields.string("device")
        player = try fields.optionalString("player")
        state = try fields.optionalString("state")
        rate = try fields.optionalNumber("rate")
        elapsed = try fields.optionalNumber("elapsed")
        position = try fields.optionalNumber("position")
        volume = try fields.optionalNumber("volume")
        queueIndex = try fields.optionalInt("queue_index")
        queueCount = try fields.optionalInt("queue_count")
        shuffle = try fields.optionalString("shuffle")
        `repeat` = try fields.optionalString("repeat")
        artist = try fields.optionalString("artist")
        album = try fields.optionalString("album")
        title = try fields.optionalString("title")
        duration = try fields.optionalNumber("duration")
        truncated = try fields.strings("truncated")
        commands = try fields.strings("commands")
    }

    /// The largest number written (in magnitude): AMS's `largestMediaNumber`, past which the
    /// daemon holds a value as unknown. Repeated here, as this module sees no AMS.
    static let largestNumber = 1e9

    /// A finite number up to `largestNumber`, rounded to milliseconds so the text stays short;
    /// null otherwise.
    static func number(_ value: Double?) -> JSONValue {
        guard let value, value.isFinite, abs(value) <= largestNumber else { return .null }
        return .double((value * 1000).rounded() / 1000)
    }
}

/// The commands of `media_command` (docs/control.md): Apple Media Service's remote commands.
public enum ControlMediaCommand: String, Sendable, CaseIterable {
    case play, pause, toggle, next, previous
    case volumeUp = "volume-up", volumeDown = "volume-down"
    case `repeat`, shuffle
    case skipForward = "skip-forward", skipBackward = "skip-backward"
    case like, dislike, bookmark
}

extension ControlFields {
    func optionalNumber(_ key: String) throws(ControlDecodingError) -> Double? {
        let value = try value(key)
        if value == .null { return nil }
        guard let number = value.doubleValue, number.isFinite else {
            throw ControlDecodingError("\"\(key)\" of \(place) is a JSON \(value.typeName), not a number or null")
        }
        return number
    }

    func strings(_ key: String) throws(ControlDecodingError) -> [String] {
        var out: [String] = []
        for element in try array(key) {
            guard let text = element.stringValue else {
                throw ControlDecodingError("\"\(key)\" of \(place) holds a JSON \(element.typeName), not only strings")
            }
            out.append(text)
        }
        return out
    }
}
