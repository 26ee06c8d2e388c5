/// The Apple Media Service (AMS) of a simulated iPhone without any I/O: the media player, its
/// values as the Entity Update and Entity Attribute characteristics carry them, and the Remote
/// Commands that change it. The identifiers and formats are written here from Apple's AMS
/// specification (Appendix A), not taken from ancsd's AMS client, so that the simulator stays an
/// independent oracle for it (docs/field-evidence.md, "The Apple Media Service").

/// A RemoteCommandID.
public enum MediaCommand: UInt8, CaseIterable, Hashable, Sendable {
    case play = 0
    case pause = 1
    case togglePlayPause = 2
    case nextTrack = 3
    case previousTrack = 4
    case volumeUp = 5
    case volumeDown = 6
    case advanceRepeatMode = 7
    case advanceShuffleMode = 8
    case skipForward = 9
    case skipBackward = 10
    case likeTrack = 11
    case dislikeTrack = 12
    case bookmarkTrack = 13

    /// Its name in scenarios, the events log and the simulator's log.
    public var name: String {
        switch self {
        case .play: "play"
        case .pause: "pause"
        case .togglePlayPause: "toggle"
        case .nextTrack: "next"
        case .previousTrack: "previous"
        case .volumeUp: "volume_up"
        case .volumeDown: "volume_down"
        case .advanceRepeatMode: "repeat"
        case .advanceShuffleMode: "shuffle"
        case .skipForward: "skip_forward"
        case .skipBackward: "skip_backward"
        case .likeTrack: "like"
        case .dislikeTrack: "dislike"
        case .bookmarkTrack: "bookmark"
        }
    }

    public init?(name: String) {
        guard let command = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = command
    }
}

/// An EntityID.
public enum MediaEntity: UInt8, CaseIterable, Hashable, Sendable {
    case player = 0
    case queue = 1
    case track = 2

    /// How many attributes the specification defines for the entity (IDs from 0).
    var attributeCount: UInt8 { self == .player ? 3 : 4 }
}

/// One entity/attribute pair.
public struct MediaAttribute: Hashable, Sendable, CustomStringConvertible {
    public let entity: MediaEntity
    public let attribute: UInt8

    /// A pair the specification defines; nil for an unknown entity or attribute.
    public init?(entity: UInt8, attribute: UInt8) {
        guard let e = MediaEntity(rawValue: entity), attribute < e.attributeCount else { return nil }
        self.entity = e
        self.attribute = attribute
    }

    private init(_ entity: MediaEntity, _ attribute: UInt8) {
        self.entity = entity
        self.attribute = attribute
    }

    public static let playerName = MediaAttribute(.player, 0)
    /// "PlaybackState,PlaybackRate,ElapsedTime".
    public static let playbackInfo = MediaAttribute(.player, 1)
    public static let volume = MediaAttribute(.player, 2)
    public static let queueIndex = MediaAttribute(.queue, 0)
    public static let queueCount = MediaAttribute(.queue, 1)
    public static let shuffleMode = MediaAttribute(.queue, 2)
    public static let repeatMode = MediaAttribute(.queue, 3)
    public static let artist = MediaAttribute(.track, 0)
    public static let album = MediaAttribute(.track, 1)
    public static let title = MediaAttribute(.track, 2)
    public static let duration = MediaAttribute(.track, 3)

    static let track: [MediaAttribute] = [.artist, .album, .title, .duration]

    public var description: String { "\(entity.rawValue)/\(attribute)" }
}

/// A track in the player's queue.
public struct MediaTrack: Hashable, Sendable {
    public var title: String
    public var artist: String
    public var album: String
    /// Seconds.
    public var duration: Double

    public init(title: String = "", artist: String = "", album: String = "", duration: Double = 0) {
        self.title = title
        self.artist = artist
        self.album = album
        self.duration = duration
    }
}

/// The player a phone starts with (the scenario's `"media"`).
public struct MediaSettings: Hashable, Sendable {
    /// The Player's Name: the media app.
    public var player = "Music"
    /// The queue, the current track first.
    public var tracks = [MediaTrack(title: "Clair de lune", artist: "Claude Debussy", album: "Suite bergamasque", duration: 300)]
    public var playing = false
    /// Seconds into the current track at the start.
    public var elapsed: Double = 0
    /// 0…1.
    public var volume = 0.5
    /// The Remote Commands the player supports: a music app's.
    public var commands: [MediaCommand] = [
        .play, .pause, .togglePlayPause, .nextTrack, .previousTrack, .volumeUp, .volumeDown,
        .advanceRepeatMode, .advanceShuffleMode,
    ]

    public init() {}
}

/// The media player of a phone: what the AMS reports and what its Remote Commands change.
/// The elapsed time advances with the clock it is given while playing (rate 1.0).
public struct MediaPlayer: Hashable, Sendable {
    public private(set) var name: String
    /// The queue (never empty) and the current track's index in it.
    public private(set) var queue: [MediaTrack]
    public private(set) var index = 0
    public private(set) var playing: Bool
    /// The elapsed time at `anchor`.
    private var elapsedAtAnchor: Double
    private var anchor: ContinuousClock.Instant
    public private(set) var volume: Double
    /// Off 0, One 1, All 2.
    public private(set) var shuffleMode: UInt8 = 0
    public private(set) var repeatMode: UInt8 = 0
    /// The supported Remote Commands, in ID order.
    public private(set) var commands: [MediaCommand]

    /// How far VolumeUp and VolumeDown move the volume (iOS's 16 steps).
    public static let volumeStep = 0.0625
    /// How far SkipForward and SkipBackward move the elapsed time, in seconds.
    public static let skipInterval = 15.0
    /// The longest value the Entity Attribute answers: ATT's longest attribute value.
    public static let maxAttributeLength = 512

    public init(_ settings: MediaSettings, now: ContinuousClock.Instant) {
        name = settings.player
        queue = settings.tracks.isEmpty ? [MediaTrack()] : settings.tracks
        playing = settings.playing
        anchor = now
        volume = min(1, max(0, settings.volume))
        commands = Self.sorted(settings.commands)
        elapsedAtAnchor = 0
        elapsedAtAnchor = clamped(settings.elapsed)
    }

    public var track: MediaTrack { queue[index] }

    /// Seconds into the current track at `now` (no further than its duration, when it has one).
    public func elapsed(at now: ContinuousClock.Instant) -> Double {
        guard playing else { return elapsedAtAnchor }
        let (seconds, attoseconds) = (now - anchor).components
        return clamped(elapsedAtAnchor + Double(seconds) + Double(attoseconds) / 1e18)
    }

    private func clamped(_ elapsed: Double) -> Double {
        let low = max(0, elapsed)
        return track.duration > 0 ? min(low, track.duration) : low
    }

    /// The attribute's value, as the AMS sends it (UTF-8 text).
    public func value(of a: MediaAttribute, at now: ContinuousClock.Instant) -> String {
        switch (a.entity, a.attribute) {
        case (.player, 0): name
        case (.player, 1): "\(playing ? 1 : 0),\(playing ? "1.0" : "0.0"),\(Self.decimal(elapsed(at: now), places: 3, trim: false))"
        case (.player, _): Self.decimal(volume, places: 4, trim: true)
        case (.queue, 0): String(index)
        case (.queue, 1): String(queue.count)
        case (.queue, 2): String(shuffleMode)
        case (.queue, _): String(repeatMode)
        case (.track, 0): track.artist
        case (.track, 1): track.album
        case (.track, 2): track.title
        case (.track, _): Self.decimal(track.duration, places: 3, trim: true)
        }
    }

    // MARK: Changes (each returns the attributes whose values changed, in the order they are notified)

    /// Performs a Remote Command; nil when the player does not support it now (nothing happens).
    public mutating func perform(_ command: MediaCommand, at now: ContinuousClock.Instant) -> [MediaAttribute]? {
        guard commands.contains(command) else { return nil }
        switch command {
        case .play: return setPlaying(true, at: now)
        case .pause: return setPlaying(false, at: now)
        case .togglePlayPause: return setPlaying(!playing, at: now)
        case .nextTrack: return move(by: 1, at: now)
        case .previousTrack: return move(by: -1, at: now)
        case .volumeUp: return setVolume(volume + Self.volumeStep)
        case .volumeDown: return setVolume(volume - Self.volumeStep)
        case .advanceRepeatMode:
            repeatMode = (repeatMode + 1) % 3
            return [.repeatMode]
        case .advanceShuffleMode:
            shuffleMode = (shuffleMode + 1) % 3
            return [.shuffleMode]
        case .skipForward: return seek(by: Self.skipInterval, at: now)
        case .skipBackward: return seek(by: -Self.skipInterval, at: now)
        case .likeTrack, .dislikeTrack, .bookmarkTrack: return []
        }
    }

    /// Playing or paused; the elapsed time stops or starts moving.
    public mutating func setPlaying(_ play: Bool, at now: ContinuousClock.Instant) -> [MediaAttribute] {
        guard play != playing else { return [] }
        elapsedAtAnchor = elapsed(at: now)
        anchor = now
        playing = play
        return [.playbackInfo]
    }

    /// The volume, clamped to 0…1.
    public mutating func setVolume(_ value: Double) -> [MediaAttribute] {
        let new = min(1, max(0, value))
        guard new != volume else { return [] }
        volume = new
        return [.volume]
    }

    /// The current track is replaced by `track`, from its start.
    public mutating func setTrack(_ new: MediaTrack, at now: ContinuousClock.Instant) -> [MediaAttribute] {
        queue[index] = new
        elapsedAtAnchor = 0
        anchor = now
        return MediaAttribute.track + [.playbackInfo]
    }

    /// The supported commands; true when the list changed.
    public mutating func setCommands(_ new: [MediaCommand]) -> Bool {
        let sorted = Self.sorted(new)
        guard sorted != commands else { return false }
        commands = sorted
        return true
    }

    /// Next or previous track, round the queue, from its start.
    private mutating func move(by step: Int, at now: ContinuousClock.Instant) -> [MediaAttribute] {
        let old = index
        index = ((index + step) % queue.count + queue.count) % queue.count
        elapsedAtAnchor = 0
        anchor = now
        return MediaAttribute.track + (index != old ? [.queueIndex] : []) + [.playbackInfo]
    }

    private mutating func seek(by seconds: Double, at now: ContinuousClock.Instant) -> [MediaAttribute] {
        let old = elapsed(at: now)
        elapsedAtAnchor = clamped(old + seconds)
        anchor = now
        return elapsedAtAnchor != old ? [.playbackInfo] : []
    }

    private static func sorted(_ commands: [MediaCommand]) -> [MediaCommand] {
        MediaCommand.allCases.filter(commands.contains)
    }

    /// `value` with `places` decimals ("12.345"); `trim` drops trailing zeros but one ("0.5", "355.0").
    static func decimal(_ value: Double, places: Int, trim: Bool) -> String {
        var scale = 1
        for _ in 0..<places { scale *= 10 }
        let scaled = Int((abs(value) * Double(scale)).rounded())
        var fraction = String(scaled % scale)
        while fraction.utf8.count < places { fraction = "0" + fraction }
        if trim {
            while fraction.utf8.count > 1, fraction.hasSuffix("0") { fraction.removeLast() }
        }
        return (value < 0 && scaled != 0 ? "-" : "") + String(scaled / scale) + (places > 0 ? "." + fraction : "")
    }

    // MARK: Bytes

    /// An Entity Update notification: `[EntityID][AttributeID][EntityUpdateFlags][Value]`, the
    /// value cut on a UTF-8 character boundary so the whole fits `mtu - 3` bytes, with the
    /// Truncated flag (bit 0) then.
    public static func entityUpdate(_ a: MediaAttribute, value: String, mtu: Int) -> [UInt8] {
        let (bytes, truncated) = cut(Array(value.utf8), to: max(mtu, 23) - 6)
        return [a.entity.rawValue, a.attribute, truncated ? 1 : 0] + bytes
    }

    /// The Remote Command notification: the supported RemoteCommandIDs, one byte each.
    public var commandList: [UInt8] { commands.map(\.rawValue) }

    /// The first `limit` bytes at most of UTF-8 `bytes`, never splitting a character; whether it was cut.
    static func cut(_ bytes: [UInt8], to limit: Int) -> ([UInt8], Bool) {
        guard bytes.count > limit else { return (bytes, false) }
        var end = max(0, limit)
        // A continuation byte (10xxxxxx) at the cut belongs to the character before it.
        while end > 0, bytes[end] & 0xC0 == 0x80 { end -= 1 }
        return (Array(bytes[..<end]), true)
    }

    /// An Entity Update registration: `[EntityID][AttributeID…]`, at least one attribute, every
    /// one defined for the entity; nil when malformed. Repeated attributes count once.
    public static func registration(_ value: [UInt8]) -> (MediaEntity, [UInt8])? {
        guard value.count >= 2, let entity = MediaEntity(rawValue: value[0]) else { return nil }
        var attributes: [UInt8] = []
        for a in value.dropFirst() {
            guard a < entity.attributeCount else { return nil }
            if !attributes.contains(a) { attributes.append(a) }
        }
        return (entity, attributes)
    }

    /// An Entity Attribute write: exactly `[EntityID][AttributeID]` of a defined pair; nil otherwise.
    public static func selection(_ value: [UInt8]) -> MediaAttribute? {
        guard value.count == 2 else { return nil }
        return MediaAttribute(entity: value[0], attribute: value[1])
    }
}

/// A Remote Command write the phone received.
public struct ReceivedMediaCommand: Hashable, Sendable {
    /// The RemoteCommandID written.
    public let id: UInt8
    /// False when the player did not support it then (or the ID is reserved): nothing happened.
    public let performed: Bool

    public var command: MediaCommand? { MediaCommand(rawValue: id) }
}

/// A phone's AMS state beside its player: what the Media Remote registered and selected, and
/// whether the phone offers the service now.
struct MediaState: Sendable {
    var player: MediaPlayer
    /// The attributes registered for updates per entity, in the order written (a later
    /// registration of an entity replaces the earlier).
    var registrations: [MediaEntity: [UInt8]] = [:]
    /// The pair the last Entity Attribute write selected.
    var selected: MediaAttribute?
    /// The phone offers AMS (a `media_service` step withdraws and offers it again).
    var offered = true
    /// Every Remote Command write, in order.
    var received: [ReceivedMediaCommand] = []

    /// The Entity Update notifications lost their subscriber: registrations and the selection go.
    mutating func forgetRegistrations() {
        registrations = [:]
        selected = nil
    }
}
