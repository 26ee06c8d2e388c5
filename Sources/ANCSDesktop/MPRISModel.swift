public import ANCSControl
public import DBus

/// One phone's player as MPRIS (the Media Player Remote Interfacing Specification 2.2) shows
/// it: the properties of `org.mpris.MediaPlayer2` and `org.mpris.MediaPlayer2.Player`, made
/// from the daemon's `media` state (docs/desktop.md, "Music"). A value: no bus, no clock of its
/// own (`now` comes from the caller's loop), so each mapping is tested alone.
public struct MPRISModel: Sendable, Equatable {
    public static let path: ObjectPath = "/org/mpris/MediaPlayer2"
    public static let rootInterface: InterfaceName = "org.mpris.MediaPlayer2"
    public static let playerInterface: InterfaceName = "org.mpris.MediaPlayer2.Player"
    /// The track ID MPRIS reserves for "no track".
    public static let noTrack: ObjectPath = "/org/mpris/MediaPlayer2/TrackList/NoTrack"
    /// How far the phone's position may stray from where it was expected before it counts as
    /// a jump (`Seeked`): the daemon's own tolerance is 0.5 s.
    static let seekTolerance = 1.0

    /// What the phone's player says, as the daemon last sent it.
    public private(set) var media: ControlMedia
    /// When `media` arrived: `Position` moves on from its `position` since then.
    public private(set) var receivedAt: ContinuousClock.Instant
    /// The phone's Bluetooth name, once known.
    public var phoneName: String?
    /// Numbers the tracks for `mpris:trackid`: one more at each change of track.
    public private(set) var trackNumber = 1

    public init(media: ControlMedia, phoneName: String? = nil, at now: ContinuousClock.Instant) {
        self.media = media
        self.phoneName = phoneName
        receivedAt = now
    }

    /// `org.mpris.MediaPlayer2.ancsd_aabbccddeeff` for AA:BB:CC:DD:EE:FF; nil for a device that
    /// is no Bluetooth address.
    public static func busName(device: String) -> BusName? {
        guard let address = BluetoothAddressText(device) else { return nil }
        let digits = address.description.lowercased().filter { $0 != ":" }
        return BusName(validating: "org.mpris.MediaPlayer2.ancsd_" + digits)
    }

    /// The result of a new state from the phone.
    public struct Change: Sendable, Equatable {
        /// Another track than before (title, artist, album, duration or place in the queue).
        public var newTrack: Bool
        /// The position jumped (µs): the phone's user moved it. Nil when it went on as expected
        /// (or the track changed, which says as much).
        public var seeked: Int64?

        public init(newTrack: Bool, seeked: Int64?) {
            self.newTrack = newTrack
            self.seeked = seeked
        }
    }

    /// Takes the phone's new state, received at `now`.
    @discardableResult
    public mutating func update(_ new: ControlMedia, at now: ContinuousClock.Instant) -> Change {
        let expected = position(at: now)
        let newTrack = Track(new) != Track(media)
        media = new
        receivedAt = now
        if newTrack { trackNumber += 1 }
        var seeked: Int64?
        if !newTrack, let position = new.position, let expected, abs(position - expected) > Self.seekTolerance {
            seeked = Self.microseconds(position)
        }
        return Change(newTrack: newTrack, seeked: seeked)
    }

    /// What tells one track from another.
    private struct Track: Equatable {
        var title, artist, album: String?
        var duration: Double?
        var queueIndex: Int?
        init(_ media: ControlMedia) {
            (title, artist, album, duration, queueIndex) = (media.title, media.artist, media.album, media.duration, media.queueIndex)
        }
        var isEmpty: Bool { title == nil && artist == nil && album == nil && duration == nil }
    }

    // MARK: org.mpris.MediaPlayer2

    /// `iPhone (Alice's iPhone)`, or the address while the name is unknown.
    public var identity: String {
        let name = phoneName.map(Self.dbusText).flatMap { $0.isEmpty ? nil : $0 } ?? Self.dbusText(media.device)
        return "iPhone (\(name))"
    }

    // MARK: Text from the phone

    /// `text` as a D-Bus string can carry it: without NUL, which D-Bus refuses in a string (and
    /// with it the whole message: one NUL in a title kept every property of that update off
    /// the bus). A NUL between words separates values (ID3v2.4 separates an artist's or a
    /// title's several values with one), so a run of them becomes " / "; at either end it is
    /// dropped. Invalid UTF-8 needs nothing here: a Swift `String` is always valid UTF-8, and
    /// bytes that were not were repaired (U+FFFD) where they entered, in the daemon's AMS
    /// session or in the companion's JSON reader.
    public static func dbusText(_ text: String) -> String {
        dbusValues(text).joined(separator: " / ")
    }

    /// The values that NULs separate in `text` (empty ones dropped); `[text]` when it has none.
    public static func dbusValues(_ text: String) -> [String] {
        guard text.utf8.contains(0) else { return [text] }
        return text.split(separator: "\0").map(String.init)
    }

    /// The root interface's properties. `DesktopEntry` names the desktop entry ancsd installs
    /// (`ancsd.desktop`), whose name and icon the desktops' media controls show.
    public var rootProperties: [(name: String, value: DBusValue)] {
        [
            ("CanQuit", .bool(false)), ("CanRaise", .bool(false)), ("HasTrackList", .bool(false)),
            ("DesktopEntry", .string(DesktopNotification.desktopEntry)),
            ("Identity", .string(identity)), ("SupportedUriSchemes", .stringArray([])), ("SupportedMimeTypes", .stringArray([])),
        ]
    }

    // MARK: org.mpris.MediaPlayer2.Player

    /// `Playing` (also while rewinding or fast-forwarding), `Paused`, or `Stopped` when the phone
    /// has not said (no player).
    public var playbackStatus: String {
        switch media.state {
        case "playing", "rewinding", "fast_forwarding": "Playing"
        case "paused": "Paused"
        case nil: "Stopped"
        default: "Paused"  // a state of a later iOS: not playing, as far as anyone can tell
        }
    }

    /// Where the track is at `now` in seconds: the event's `position`, moved on at `rate` since
    /// it came while playing, never below 0 nor past the duration. Nil when the phone has not said.
    public func position(at now: ContinuousClock.Instant) -> Double? {
        guard let start = media.position, start.isFinite else { return nil }
        var position = start
        if let rate = media.rate, rate.isFinite, rate != 0, media.state != "paused", media.state != nil, now > receivedAt {
            let elapsed = now - receivedAt
            position += rate * (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }
        position = max(0, position)
        if let duration = media.duration, duration.isFinite, duration >= 0 { position = min(position, duration) }
        return position
    }

    /// `Position` in microseconds (0 when unknown).
    public func positionMicroseconds(at now: ContinuousClock.Instant) -> Int64 {
        position(at: now).map(Self.microseconds) ?? 0
    }

    /// The current track's ID: `/org/ancsd/track/<n>`, a new one at each change of track.
    public var trackID: ObjectPath {
        Track(media).isEmpty ? Self.noTrack : ObjectPath(validating: "/org/ancsd/track/\(trackNumber)") ?? Self.noTrack
    }

    /// `Metadata`: the track ID, and the title, artist (each value NULs separate: the
    /// artists), album and length the phone gave, as D-Bus strings (`dbusText`).
    public var metadata: DBusValue {
        var entries: [String: DBusValue] = ["mpris:trackid": .objectPath(trackID)]
        if let title = media.title { entries["xesam:title"] = .string(Self.dbusText(title)) }
        if let artist = media.artist { entries["xesam:artist"] = .stringArray(Self.dbusValues(artist)) }
        if let album = media.album { entries["xesam:album"] = .string(Self.dbusText(album)) }
        if let duration = media.duration, duration.isFinite, duration > 0 { entries["mpris:length"] = .int64(Self.microseconds(duration)) }
        return .variantDictionary(entries)
    }

    /// The playback rate: the phone's while it is positive, else 1 (MPRIS has no rate 0 nor
    /// backwards; paused says the rest).
    public var rate: Double {
        guard let rate = media.rate, rate.isFinite, rate > 0 else { return 1 }
        return rate
    }

    /// `LoopStatus`: `None`, `Track` or `Playlist` from the phone's repeat mode (`None` when unknown).
    public var loopStatus: String {
        switch media.repeat {
        case "one": "Track"
        case "all": "Playlist"
        default: "None"
        }
    }

    /// The commands the phone's player takes now.
    public func accepts(_ command: ControlMediaCommand) -> Bool { media.commands.contains(command.rawValue) }

    public var canPlay: Bool { accepts(.play) || accepts(.toggle) }
    public var canPause: Bool { accepts(.pause) || accepts(.toggle) }
    /// Whether setting `Volume` can do anything: steps up or down.
    public var canStepVolume: Bool { accepts(.volumeUp) || accepts(.volumeDown) }

    /// The player interface's properties but `Position`, which is read when asked for.
    /// `Volume` is the phone's (1 while it has not said). `CanSeek` is false: AMS moves only
    /// by skips of its own length, so `Seek` and `SetPosition` do nothing, as MPRIS asks.
    /// `Rate`, `Shuffle` and `LoopStatus` are read only.
    public var playerProperties: [(name: String, value: DBusValue)] {
        [
            ("PlaybackStatus", .string(playbackStatus)), ("LoopStatus", .string(loopStatus)), ("Rate", .double(rate)),
            ("Shuffle", .bool(media.shuffle == "one" || media.shuffle == "all")), ("Metadata", metadata),
            ("Volume", .double(min(1, max(0, media.volume ?? 1)))),
            ("MinimumRate", .double(min(1, rate))), ("MaximumRate", .double(max(1, rate))),
            ("CanGoNext", .bool(accepts(.next))), ("CanGoPrevious", .bool(accepts(.previous))),
            ("CanPlay", .bool(canPlay)), ("CanPause", .bool(canPause)), ("CanSeek", .bool(false)), ("CanControl", .bool(true)),
        ]
    }

    /// What a property is set to when its own value is refused by the bus (which `dbusText`
    /// should make impossible): `Metadata` with the track ID only, an empty string; nil for
    /// numbers and flags, which cannot be refused.
    public func fallback(for property: String, of value: DBusValue) -> DBusValue? {
        if property == "Metadata" { return .variantDictionary(["mpris:trackid": .objectPath(trackID)]) }
        if case .string = value { return .string("") }
        return nil
    }

    // MARK: Methods

    /// The methods of `org.mpris.MediaPlayer2.Player` that reach the phone.
    public enum Method: String, Sendable, CaseIterable {
        case play = "Play", pause = "Pause", playPause = "PlayPause", stop = "Stop", next = "Next", previous = "Previous"
    }

    /// The remote command a method sends: `toggle` for PlayPause when the player takes it, else
    /// `pause` or `play` by the state; Play and Pause fall back on `toggle` when the player only
    /// takes that and it would do what was asked; Stop pauses (AMS has no stop). Nil: nothing to
    /// do (Play while playing with only `toggle`, …).
    public func command(for method: Method) -> ControlMediaCommand? {
        let playing = playbackStatus == "Playing"
        switch method {
        case .playPause:
            if accepts(.toggle) { return .toggle }
            return playing ? .pause : .play
        case .play:
            if accepts(.play) || !accepts(.toggle) { return .play }
            return playing ? nil : .toggle
        case .pause, .stop:
            if accepts(.pause) || !accepts(.toggle) { return .pause }
            return playing ? .toggle : nil
        case .next:
            return .next
        case .previous:
            return .previous
        }
    }

    /// The steps of `volume-up` (positive) or `volume-down` (negative) that bring the phone's
    /// volume to `target`: iOS has 16 steps, so one per 1/16, at least one when the target
    /// differs at all; 0 when it does not or the phone has not said its volume.
    public func volumeSteps(to target: Double) -> Int {
        guard let volume = media.volume, volume.isFinite, target.isFinite else { return 0 }
        let difference = min(1, max(0, target)) - volume
        guard abs(difference) > 0.001 else { return 0 }
        let steps = max(1, Int((abs(difference) * Double(Self.volumeStepsPerRange)).rounded()))
        return difference > 0 ? steps : -steps
    }

    /// How many volume steps iOS has from silent to full.
    public static let volumeStepsPerRange = 16

    static func microseconds(_ seconds: Double) -> Int64 {
        guard seconds.isFinite else { return 0 }
        return Int64((max(0, min(seconds, 1e9)) * 1_000_000).rounded())
    }
}
