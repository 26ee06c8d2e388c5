import ANCSControl
import ANCSDesktop
import DBus
import Testing

/// How a phone's `media` state becomes MPRIS properties, alone (no bus).
struct MPRISModelTests {
    static let start = ContinuousClock.now

    static func media(
        state: String? = "playing", rate: Double? = 1, position: Double? = 12.5, volume: Double? = 0.5, title: String? = "Bohemian Rhapsody",
        duration: Double? = 355, queueIndex: Int? = 3, shuffle: String? = "off", repeat: String? = "all",
        commands: [String] = ["play", "pause", "toggle", "next", "previous"]
    ) -> ControlMedia {
        ControlMedia(
            device: "AA:BB:CC:DD:EE:FF", player: "Music", state: state, rate: rate, elapsed: position, position: position, volume: volume,
            queueIndex: queueIndex, queueCount: 12, shuffle: shuffle, repeat: `repeat`, artist: "Queen", album: "A Night at the Opera",
            title: title, duration: duration, commands: commands)
    }

    func properties(_ model: MPRISModel) -> [String: DBusValue] {
        Dictionary(uniqueKeysWithValues: model.playerProperties.map { ($0.name, $0.value) })
    }

    @Test func theBusNameIsTheAddressInLowerCaseWithoutColons() {
        #expect(MPRISModel.busName(device: "AA:BB:CC:DD:EE:FF") == "org.mpris.MediaPlayer2.ancsd_aabbccddeeff")
        #expect(MPRISModel.busName(device: "not an address") == nil)
    }

    @Test func thePropertiesOfAPlayingTrack() throws {
        let model = MPRISModel(media: Self.media(), phoneName: "Ada's iPhone", at: Self.start)
        let p = properties(model)
        #expect(p["PlaybackStatus"] == .string("Playing") && p["LoopStatus"] == .string("Playlist") && p["Shuffle"] == .bool(false))
        #expect(p["Rate"] == .double(1) && p["MinimumRate"] == .double(1) && p["MaximumRate"] == .double(1) && p["Volume"] == .double(0.5))
        #expect(p["CanGoNext"] == .bool(true) && p["CanGoPrevious"] == .bool(true) && p["CanPlay"] == .bool(true) && p["CanPause"] == .bool(true))
        #expect(p["CanSeek"] == .bool(false) && p["CanControl"] == .bool(true))
        let metadata = try #require(p["Metadata"]?.stringKeyedDictionary)
        #expect(metadata["mpris:trackid"] == .objectPath("/org/ancsd/track/1"))
        #expect(metadata["xesam:title"] == .string("Bohemian Rhapsody") && metadata["xesam:artist"] == .stringArray(["Queen"]))
        #expect(metadata["xesam:album"] == .string("A Night at the Opera") && metadata["mpris:length"] == .int64(355_000_000))
        #expect(model.identity == "iPhone (Ada's iPhone)")
        let root = Dictionary(uniqueKeysWithValues: model.rootProperties.map { ($0.name, $0.value) })
        #expect(root["CanQuit"] == .bool(false) && root["CanRaise"] == .bool(false) && root["HasTrackList"] == .bool(false))
        #expect(root["SupportedUriSchemes"] == .stringArray([]) && root["DesktopEntry"] == .string("ancsd"))
        #expect(MPRISModel(media: Self.media(), at: Self.start).identity == "iPhone (AA:BB:CC:DD:EE:FF)", "the address until the name is known")
    }

    @Test func playbackStatusOfEachState() {
        let status = { (state: String?) in MPRISModel(media: Self.media(state: state), at: Self.start).playbackStatus }
        #expect(status("playing") == "Playing" && status("rewinding") == "Playing" && status("fast_forwarding") == "Playing")
        #expect(status("paused") == "Paused" && status(nil) == "Stopped")
    }

    @Test func thePositionMovesOnWhilePlayingOnly() {
        let playing = MPRISModel(media: Self.media(rate: 1, position: 12.5), at: Self.start)
        #expect(playing.positionMicroseconds(at: Self.start) == 12_500_000)
        #expect(playing.positionMicroseconds(at: Self.start + .milliseconds(2500)) == 15_000_000)
        #expect(playing.positionMicroseconds(at: Self.start + .seconds(1000)) == 355_000_000, "never past the duration")
        let fast = MPRISModel(media: Self.media(state: "fast_forwarding", rate: 2, position: 10), at: Self.start)
        #expect(fast.positionMicroseconds(at: Self.start + .seconds(3)) == 16_000_000)
        #expect(properties(fast)["Rate"] == .double(2) && properties(fast)["MaximumRate"] == .double(2))
        let paused = MPRISModel(media: Self.media(state: "paused", rate: 1, position: 12.5), at: Self.start)
        #expect(paused.positionMicroseconds(at: Self.start + .seconds(60)) == 12_500_000)
        let unknown = MPRISModel(media: Self.media(position: nil), at: Self.start)
        #expect(unknown.positionMicroseconds(at: Self.start + .seconds(1)) == 0)
    }

    @Test func aNewTrackHasANewTrackIDAndAJumpIsASeek() throws {
        var model = MPRISModel(media: Self.media(), at: Self.start)
        // The same track, where it was expected to be: nothing new.
        var change = model.update(Self.media(position: 17.5), at: Self.start + .seconds(5))
        #expect(change == MPRISModel.Change(newTrack: false, seeked: nil) && model.trackID == "/org/ancsd/track/1")
        // Moved on the phone: a seek.
        change = model.update(Self.media(position: 100), at: Self.start + .seconds(6))
        #expect(change == MPRISModel.Change(newTrack: false, seeked: 100_000_000))
        // Another track.
        change = model.update(Self.media(position: 0, title: "You're My Best Friend", duration: 172, queueIndex: 4), at: Self.start + .seconds(7))
        #expect(change == MPRISModel.Change(newTrack: true, seeked: nil) && model.trackID == "/org/ancsd/track/2")
        // No track at all.
        model.update(ControlMedia(device: "AA:BB:CC:DD:EE:FF"), at: Self.start + .seconds(8))
        #expect(model.trackID == MPRISModel.noTrack && model.playbackStatus == "Stopped")
        #expect(try #require(model.metadata.stringKeyedDictionary) == ["mpris:trackid": .objectPath(MPRISModel.noTrack)])
    }

    @Test func theCommandsOfEachMethod() {
        let all = MPRISModel(media: Self.media(), at: Self.start)
        #expect(all.command(for: .playPause) == .toggle && all.command(for: .play) == .play && all.command(for: .pause) == .pause)
        #expect(all.command(for: .stop) == .pause && all.command(for: .next) == .next && all.command(for: .previous) == .previous)
        // Without toggle: PlayPause by the state.
        let noToggle = MPRISModel(media: Self.media(state: "paused", commands: ["play", "pause"]), at: Self.start)
        #expect(noToggle.command(for: .playPause) == .play)
        #expect(MPRISModel(media: Self.media(commands: ["play", "pause"]), at: Self.start).command(for: .playPause) == .pause)
        // Only toggle: Play toggles a paused player, and does nothing to a playing one.
        let onlyToggle = MPRISModel(media: Self.media(commands: ["toggle"]), at: Self.start)
        #expect(onlyToggle.command(for: .play) == nil && onlyToggle.command(for: .pause) == .toggle)
        #expect(MPRISModel(media: Self.media(state: "paused", commands: ["toggle"]), at: Self.start).command(for: .play) == .toggle)
        // Capabilities follow the commands.
        let few = MPRISModel(media: Self.media(commands: ["play"]), at: Self.start)
        #expect(properties(few)["CanGoNext"] == .bool(false) && properties(few)["CanPause"] == .bool(false) && properties(few)["CanPlay"] == .bool(true))
    }

    @Test func volumeStepsTowardATarget() {
        let model = MPRISModel(media: Self.media(volume: 0.5, commands: ["volume-up", "volume-down"]), at: Self.start)
        #expect(model.volumeSteps(to: 0.75) == 4 && model.volumeSteps(to: 0) == -8 && model.volumeSteps(to: 0.5) == 0)
        #expect(model.volumeSteps(to: 0.51) == 1, "a small change is one step")
        #expect(model.volumeSteps(to: 7) == 8, "past 1 is 1")
        #expect(MPRISModel(media: Self.media(volume: nil), at: Self.start).volumeSteps(to: 1) == 0, "no volume known: no steps")
    }
}
