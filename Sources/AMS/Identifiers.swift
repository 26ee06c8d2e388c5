// Every identifier of Apple Media Service (AMS) as a small typed value.
//
// Each type wraps the raw value from the wire, so a value the specification does not define
// (a newer iOS, or a hostile phone) is representable and reported through `isKnown`, never a
// trap. `name` is the stable spelling used in logs, JSON and the command line; nil for unknown
// values.

public import GattSession

/// The UUIDs of AMS's service and characteristics, lower case.
public enum AMSUUID {
    /// The Apple Media Service.
    public static let service = CharacteristicUUID("89D3502B-0F36-433A-8EF4-C502AD55F8DC")
    /// Remote Command (write, notify): the supported commands; a one-byte write sends one.
    public static let remoteCommand = CharacteristicUUID("9B3C81D8-57B1-4A8A-B8DF-0E56F7CA51C2")
    /// Entity Update (write with response, notify): registrations and attribute updates.
    public static let entityUpdate = CharacteristicUUID("2F7CABCE-808D-411F-9A0C-BB92BA96C102")
    /// Entity Attribute (write, read): the whole value of one attribute.
    public static let entityAttribute = CharacteristicUUID("C6B2F38C-23AB-46D8-A6AB-A3A870BBD5D7")
}

/// A one-byte AMS identifier with named constants.
public protocol AMSIdentifier: RawRepresentable, Hashable, Sendable, CustomStringConvertible
where RawValue == UInt8 {
    /// The name of a value the specification defines, or nil.
    var name: String? { get }
}

extension AMSIdentifier {
    /// True if the specification defines this value.
    public var isKnown: Bool { name != nil }

    /// The name, or `unknown(0xNN)`.
    public var description: String { name ?? "unknown(\(hexByte(rawValue)))" }
}

/// A command the phone's media player can be asked to perform (AMS `RemoteCommandID`).
public struct RemoteCommand: AMSIdentifier, Comparable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `RemoteCommandIDPlay` (0).
    public static let play = RemoteCommand(rawValue: 0)
    /// `RemoteCommandIDPause` (1).
    public static let pause = RemoteCommand(rawValue: 1)
    /// `RemoteCommandIDTogglePlayPause` (2).
    public static let togglePlayPause = RemoteCommand(rawValue: 2)
    /// `RemoteCommandIDNextTrack` (3).
    public static let nextTrack = RemoteCommand(rawValue: 3)
    /// `RemoteCommandIDPreviousTrack` (4).
    public static let previousTrack = RemoteCommand(rawValue: 4)
    /// `RemoteCommandIDVolumeUp` (5).
    public static let volumeUp = RemoteCommand(rawValue: 5)
    /// `RemoteCommandIDVolumeDown` (6).
    public static let volumeDown = RemoteCommand(rawValue: 6)
    /// `RemoteCommandIDAdvanceRepeatMode` (7).
    public static let advanceRepeatMode = RemoteCommand(rawValue: 7)
    /// `RemoteCommandIDAdvanceShuffleMode` (8).
    public static let advanceShuffleMode = RemoteCommand(rawValue: 8)
    /// `RemoteCommandIDSkipForward` (9).
    public static let skipForward = RemoteCommand(rawValue: 9)
    /// `RemoteCommandIDSkipBackward` (10).
    public static let skipBackward = RemoteCommand(rawValue: 10)
    /// `RemoteCommandIDLikeTrack` (11).
    public static let likeTrack = RemoteCommand(rawValue: 11)
    /// `RemoteCommandIDDislikeTrack` (12).
    public static let dislikeTrack = RemoteCommand(rawValue: 12)
    /// `RemoteCommandIDBookmarkTrack` (13).
    public static let bookmarkTrack = RemoteCommand(rawValue: 13)

    /// The command-line names, by raw value.
    private static let names = [
        "play", "pause", "toggle", "next", "previous", "volume-up", "volume-down", "repeat", "shuffle",
        "skip-forward", "skip-backward", "like", "dislike", "bookmark",
    ]

    /// Every command the specification defines, by raw value.
    public static let allDefined: [RemoteCommand] = (0..<UInt8(names.count)).map { RemoteCommand(rawValue: $0) }

    /// The command-line name (`play`, `volume-up`, `skip-forward`, …), nil for an unknown id.
    public var name: String? { Int(rawValue) < Self.names.count ? Self.names[Int(rawValue)] : nil }

    /// The command with this command-line name (any case); nil for any other text.
    public init?(name: String) {
        guard let index = Self.names.firstIndex(of: name.lowercased()) else { return nil }
        rawValue = UInt8(index)
    }

    public static func < (a: RemoteCommand, b: RemoteCommand) -> Bool { a.rawValue < b.rawValue }
}

/// One of the three things AMS describes (AMS `EntityID`).
public struct EntityID: AMSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `EntityIDPlayer` (0): the app that plays.
    public static let player = EntityID(rawValue: 0)
    /// `EntityIDQueue` (1): its play queue.
    public static let queue = EntityID(rawValue: 1)
    /// `EntityIDTrack` (2): the track it plays.
    public static let track = EntityID(rawValue: 2)

    public var name: String? {
        switch rawValue {
        case 0: "player"
        case 1: "queue"
        case 2: "track"
        default: nil
        }
    }

    /// The attributes the specification defines for this entity, in id order (empty when unknown).
    public var definedAttributes: [EntityAttribute] {
        EntityAttribute.allDefined.filter { $0.entity == self }
    }
}

/// An attribute of the Player entity (AMS `PlayerAttributeID`).
public struct PlayerAttributeID: AMSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `PlayerAttributeIDName` (0): the app's localized name.
    public static let name = PlayerAttributeID(rawValue: 0)
    /// `PlayerAttributeIDPlaybackInfo` (1): "PlaybackState,PlaybackRate,ElapsedTime".
    public static let playbackInfo = PlayerAttributeID(rawValue: 1)
    /// `PlayerAttributeIDVolume` (2): "0.0" to "1.0".
    public static let volume = PlayerAttributeID(rawValue: 2)

    public var name: String? {
        switch rawValue {
        case 0: "name"
        case 1: "playback_info"
        case 2: "volume"
        default: nil
        }
    }
}

/// An attribute of the Queue entity (AMS `QueueAttributeID`); every value is a decimal integer.
public struct QueueAttributeID: AMSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `QueueAttributeIDIndex` (0): the track's index in the queue.
    public static let index = QueueAttributeID(rawValue: 0)
    /// `QueueAttributeIDCount` (1): how many tracks the queue holds.
    public static let count = QueueAttributeID(rawValue: 1)
    /// `QueueAttributeIDShuffleMode` (2): a `ShuffleMode`.
    public static let shuffleMode = QueueAttributeID(rawValue: 2)
    /// `QueueAttributeIDRepeatMode` (3): a `RepeatMode`.
    public static let repeatMode = QueueAttributeID(rawValue: 3)

    public var name: String? {
        switch rawValue {
        case 0: "index"
        case 1: "count"
        case 2: "shuffle_mode"
        case 3: "repeat_mode"
        default: nil
        }
    }
}

/// An attribute of the Track entity (AMS `TrackAttributeID`).
public struct TrackAttributeID: AMSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `TrackAttributeIDArtist` (0).
    public static let artist = TrackAttributeID(rawValue: 0)
    /// `TrackAttributeIDAlbum` (1).
    public static let album = TrackAttributeID(rawValue: 1)
    /// `TrackAttributeIDTitle` (2).
    public static let title = TrackAttributeID(rawValue: 2)
    /// `TrackAttributeIDDuration` (3): seconds, a decimal number.
    public static let duration = TrackAttributeID(rawValue: 3)

    public var name: String? {
        switch rawValue {
        case 0: "artist"
        case 1: "album"
        case 2: "title"
        case 3: "duration"
        default: nil
        }
    }
}

/// One attribute of one entity: the pair an Entity Update notification or an Entity Attribute
/// request names. Either byte may be unknown.
public struct EntityAttribute: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var entity: EntityID
    /// The attribute's id within its entity.
    public var attribute: UInt8

    public init(entity: EntityID, attribute: UInt8) {
        self.entity = entity
        self.attribute = attribute
    }

    public init(_ attribute: PlayerAttributeID) { self.init(entity: .player, attribute: attribute.rawValue) }
    public init(_ attribute: QueueAttributeID) { self.init(entity: .queue, attribute: attribute.rawValue) }
    public init(_ attribute: TrackAttributeID) { self.init(entity: .track, attribute: attribute.rawValue) }

    public static let playerName = EntityAttribute(PlayerAttributeID.name)
    public static let playbackInfo = EntityAttribute(PlayerAttributeID.playbackInfo)
    public static let volume = EntityAttribute(PlayerAttributeID.volume)
    public static let queueIndex = EntityAttribute(QueueAttributeID.index)
    public static let queueCount = EntityAttribute(QueueAttributeID.count)
    public static let shuffleMode = EntityAttribute(QueueAttributeID.shuffleMode)
    public static let repeatMode = EntityAttribute(QueueAttributeID.repeatMode)
    public static let artist = EntityAttribute(TrackAttributeID.artist)
    public static let album = EntityAttribute(TrackAttributeID.album)
    public static let title = EntityAttribute(TrackAttributeID.title)
    public static let duration = EntityAttribute(TrackAttributeID.duration)

    /// Every attribute the specification defines: Player's, Queue's, then Track's, in id order.
    public static let allDefined: [EntityAttribute] = [
        .playerName, .playbackInfo, .volume, .queueIndex, .queueCount, .shuffleMode, .repeatMode,
        .artist, .album, .title, .duration,
    ]

    /// The attribute's name within its entity (`title`, `playback_info`), nil when the entity or
    /// the attribute is unknown.
    public var attributeName: String? {
        switch entity {
        case .player: PlayerAttributeID(rawValue: attribute).name
        case .queue: QueueAttributeID(rawValue: attribute).name
        case .track: TrackAttributeID(rawValue: attribute).name
        default: nil
        }
    }

    /// True if the specification defines both the entity and the attribute.
    public var isKnown: Bool { attributeName != nil }

    /// True for the attributes whose value is the user's content (artist, album, title): logged
    /// only at `.debug`.
    public var isPrivate: Bool { entity == .track && attribute <= TrackAttributeID.title.rawValue }

    /// `track.title`; `player.unknown(0x07)`, `unknown(0x09).unknown(0x00)` for unknown ids.
    public var description: String {
        "\(entity).\(attributeName ?? "unknown(\(hexByte(attribute)))")"
    }

    public static func < (a: EntityAttribute, b: EntityAttribute) -> Bool {
        (a.entity.rawValue, a.attribute) < (b.entity.rawValue, b.attribute)
    }
}

/// The flags of an Entity Update notification (AMS `EntityUpdateFlags`).
public struct EntityUpdateFlags: OptionSet, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `EntityUpdateFlagTruncated` (bit 0): the value was cut to fit the link's MTU; the Entity
    /// Attribute characteristic gives the whole of it.
    public static let truncated = EntityUpdateFlags(rawValue: 1 << 0)

    /// The bits the specification reserves (1–7) that are set.
    public var reservedBits: UInt8 { rawValue & 0b1111_1110 }

    public var description: String {
        var parts: [String] = []
        if contains(.truncated) { parts.append("truncated") }
        if reservedBits != 0 { parts.append("reserved(\(hexByte(reservedBits)))") }
        return "[" + parts.joined(separator: ", ") + "]"
    }
}

/// The ATT error codes AMS defines, and the generic ones a client meets.
public struct AMSErrorCode: AMSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// ATT 0x03: the phone does not allow the write.
    public static let writeNotPermitted = AMSErrorCode(rawValue: 0x03)
    /// ATT 0x05: the link is not authenticated (not paired).
    public static let insufficientAuthentication = AMSErrorCode(rawValue: 0x05)
    /// ATT 0x0F: the link is not encrypted.
    public static let insufficientEncryption = AMSErrorCode(rawValue: 0x0F)
    /// AMS 0xA0 Invalid State: Entity Update or Entity Attribute was written by a client not
    /// subscribed to Entity Update's notifications.
    public static let invalidState = AMSErrorCode(rawValue: 0xA0)
    /// AMS 0xA1 Invalid Command: the request was malformed.
    public static let invalidCommand = AMSErrorCode(rawValue: 0xA1)
    /// AMS 0xA2 Absent Attribute: the attribute asked for is empty.
    public static let absentAttribute = AMSErrorCode(rawValue: 0xA2)

    public var name: String? {
        switch rawValue {
        case 0x03: "write_not_permitted"
        case 0x05: "insufficient_authentication"
        case 0x0F: "insufficient_encryption"
        case 0xA0: "invalid_state"
        case 0xA1: "invalid_command"
        case 0xA2: "absent_attribute"
        default: nil
        }
    }

    public var description: String { name ?? "att_error(\(hexByte(rawValue)))" }
}

/// What the player is doing (the first part of PlaybackInfo).
public struct PlaybackState: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let paused = PlaybackState(rawValue: 0)
    public static let playing = PlaybackState(rawValue: 1)
    public static let rewinding = PlaybackState(rawValue: 2)
    public static let fastForwarding = PlaybackState(rawValue: 3)

    /// `paused`, `playing`, `rewinding`, `fast_forwarding`; nil for another number.
    public var name: String? {
        switch rawValue {
        case 0: "paused"
        case 1: "playing"
        case 2: "rewinding"
        case 3: "fast_forwarding"
        default: nil
        }
    }

    public var description: String { name ?? "unknown(\(rawValue))" }
}

/// The queue's shuffle mode (Queue's ShuffleMode attribute).
public struct ShuffleMode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let off = ShuffleMode(rawValue: 0)
    public static let one = ShuffleMode(rawValue: 1)
    public static let all = ShuffleMode(rawValue: 2)

    /// `off`, `one`, `all`; nil for another number.
    public var name: String? { modeName(rawValue) }
    public var description: String { name ?? "unknown(\(rawValue))" }
}

/// The queue's repeat mode (Queue's RepeatMode attribute).
public struct RepeatMode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let off = RepeatMode(rawValue: 0)
    public static let one = RepeatMode(rawValue: 1)
    public static let all = RepeatMode(rawValue: 2)

    /// `off`, `one`, `all`; nil for another number.
    public var name: String? { modeName(rawValue) }
    public var description: String { name ?? "unknown(\(rawValue))" }
}

private func modeName(_ value: Int) -> String? {
    switch value {
    case 0: "off"
    case 1: "one"
    case 2: "all"
    default: nil
    }
}

/// Renders a byte as `0xNN`.
func hexByte(_ byte: UInt8) -> String {
    let digits = Array("0123456789abcdef")
    return "0x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0x0F)])
}
