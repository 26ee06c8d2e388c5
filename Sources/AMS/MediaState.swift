/// What a phone's media player is doing, as AMS told it: the player, its queue, the track, and
/// the commands it takes. A field is nil when the phone has not told it, sent it empty, or sent
/// something unreadable.
public struct MediaState: Hashable, Sendable {
    // Player
    /// The app that plays (its localized name).
    public var playerName: String?
    public var playbackState: PlaybackState?
    /// 1.0 at normal speed; 0 when paused.
    public var playbackRate: Double?
    /// Seconds into the track at `elapsedAt`.
    public var elapsedTime: Double?
    /// The session time (the link's clock) at which `elapsedTime` arrived.
    public var elapsedAt: Duration?
    /// 0 to 1.
    public var volume: Double?

    // Queue
    public var queueIndex: Int?
    public var queueCount: Int?
    public var shuffleMode: ShuffleMode?
    public var repeatMode: RepeatMode?

    // Track: artist, album and title are the user's content (never logged above `.debug`).
    public var artist: String?
    public var album: String?
    public var title: String?
    /// Seconds.
    public var duration: Double?

    /// The attributes whose value is cut short (the phone truncated it to fit the MTU and the
    /// whole value could not be read, or is still being read).
    public var truncated: Set<EntityAttribute> = []

    /// The commands the player takes now, in the phone's order, without repeats (unknown ids
    /// kept); empty when the phone offers no Remote Command.
    public var supportedCommands: [RemoteCommand] = []

    public init() {}

    /// Where playback is at the session time `now`, in seconds: `elapsedTime` moved on by
    /// `playbackRate` × the time since it arrived (not when paused or at rate 0, nor backwards
    /// in time), never below 0 and, when the duration is known, never past it. Nil when the
    /// elapsed time is unknown (or the result is no number: `mediaNumber`).
    public func position(at now: Duration) -> Double? {
        guard let elapsed = elapsedTime, elapsed.isFinite else { return nil }
        var position = elapsed
        if let at = elapsedAt, let rate = playbackRate, rate != 0, playbackState != .paused, now > at {
            position += rate * seconds(now - at)
        }
        guard let moved = mediaNumber(position) else { return nil }
        position = max(0, moved)
        if let duration, duration.isFinite, duration >= 0 { position = min(position, duration) }
        return position
    }

    /// True if both say the same to someone looking at them at `now`: every field equal, except
    /// that the elapsed time may differ when both give the same position (within `tolerance`
    /// seconds): a phone that sends a position that follows from the last one changes nothing.
    public func isEquivalent(to other: MediaState, at now: Duration, tolerance: Double = 0.5) -> Bool {
        var mine = self, theirs = other
        (mine.elapsedTime, mine.elapsedAt, theirs.elapsedTime, theirs.elapsedAt) = (nil, nil, nil, nil)
        guard mine == theirs else { return false }
        switch (position(at: now), other.position(at: now)) {
        case (nil, nil): return true
        case (let a?, let b?): return abs(a - b) <= tolerance
        default: return false
        }
    }

    /// True if no field of Player, Queue or Track is known.
    public var hasNoEntities: Bool {
        var entities = self
        entities.supportedCommands = []
        return entities == MediaState()
    }

    /// The value of a text attribute (player name, artist, album, title) or nil.
    func text(of attribute: EntityAttribute) -> String? {
        switch attribute {
        case .playerName: playerName
        case .artist: artist
        case .album: album
        case .title: title
        default: nil
        }
    }

    /// Takes a value of `attribute` that arrived at `now` (empty text: unknown). An unknown
    /// attribute changes nothing.
    mutating func apply(_ text: String, to attribute: EntityAttribute, now: Duration) {
        let value: String? = text.isEmpty ? nil : text
        switch attribute {
        case .playerName: playerName = value
        case .playbackInfo:
            let info = PlaybackInfo(parsing: text)
            playbackState = info.state
            playbackRate = info.rate
            elapsedTime = info.elapsed
            elapsedAt = info.elapsed == nil ? nil : now
        case .volume: volume = parseVolume(text)
        case .queueIndex: queueIndex = parseAMSInteger(text)
        case .queueCount: queueCount = parseAMSInteger(text)
        case .shuffleMode: shuffleMode = parseAMSInteger(text).map(ShuffleMode.init(rawValue:))
        case .repeatMode: repeatMode = parseAMSInteger(text).map(RepeatMode.init(rawValue:))
        case .artist: artist = value
        case .album: album = value
        case .title: title = value
        case .duration: duration = parseTrackDuration(text)
        default: break
        }
    }

    /// Forgets everything Entity Update told (the commands stay).
    mutating func clearEntities() {
        let commands = supportedCommands
        self = MediaState()
        supportedCommands = commands
    }
}

/// A `Duration` in seconds.
func seconds(_ duration: Duration) -> Double {
    let (whole, atto) = duration.components
    return Double(whole) + Double(atto) / 1e18
}
