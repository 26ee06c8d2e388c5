import PhoneSimulator
import Testing

/// The media player and the AMS bytes without a bus, and the scenario's media settings and steps.
@Suite("AMS media player and scenario")
struct MediaPlayerTests {
    static let start = ContinuousClock.now

    static func player(_ configure: (inout MediaSettings) -> Void = { _ in }) -> MediaPlayer {
        var m = MediaSettings()
        m.tracks = [MediaTrack(title: "A", artist: "X", album: "Y", duration: 100), MediaTrack(title: "B", duration: 50)]
        m.commands = MediaCommand.allCases
        configure(&m)
        return MediaPlayer(m, now: start)
    }

    @Test("values as the AMS formats them")
    func values() {
        var p = Self.player { $0.elapsed = 12.3456 }
        #expect(p.value(of: .playbackInfo, at: Self.start + .seconds(5)) == "0,0.0,12.346", "paused: the elapsed time stands")
        #expect(p.value(of: .volume, at: Self.start) == "0.5")
        #expect(p.value(of: .duration, at: Self.start) == "100.0")
        #expect(p.value(of: .queueCount, at: Self.start) == "2")
        #expect(p.value(of: .playerName, at: Self.start) == "Music")
        _ = p.setPlaying(true, at: Self.start + .seconds(1))
        #expect(p.value(of: .playbackInfo, at: Self.start + .milliseconds(3500)) == "1,1.0,14.846")
        // No further than the track's end.
        #expect(p.elapsed(at: Self.start + .seconds(1000)) == 100)
        let changed = p.perform(.volumeDown, at: Self.start)
        #expect(changed == [.volume])
        #expect(p.value(of: .volume, at: Self.start) == "0.4375")
    }

    @Test("commands change the player, each reporting what changed; unsupported ones do nothing")
    func commands() {
        var p = Self.player()
        let t = Self.start
        var changed = p.perform(.pause, at: t)
        #expect(changed == [], "already paused")
        changed = p.perform(.togglePlayPause, at: t)
        #expect(changed == [.playbackInfo])
        changed = p.perform(.nextTrack, at: t + .seconds(10))
        #expect(changed == [.artist, .album, .title, .duration, .queueIndex, .playbackInfo])
        #expect(p.track.title == "B" && p.index == 1 && p.elapsed(at: t + .seconds(10)) == 0)
        _ = p.perform(.nextTrack, at: t)
        #expect(p.index == 0, "round the queue")
        _ = p.perform(.previousTrack, at: t)
        #expect(p.index == 1)
        for _ in 0..<20 { _ = p.perform(.volumeUp, at: t) }
        changed = p.perform(.volumeUp, at: t)
        #expect(p.volume == 1 && changed == [], "clamped")
        changed = p.perform(.advanceShuffleMode, at: t)
        #expect(changed == [.shuffleMode] && p.shuffleMode == 1)
        _ = p.perform(.advanceShuffleMode, at: t)
        _ = p.perform(.advanceShuffleMode, at: t)
        #expect(p.shuffleMode == 0, "Off, One, All, Off")
        changed = p.perform(.advanceRepeatMode, at: t)
        #expect(changed == [.repeatMode] && p.repeatMode == 1)
        _ = p.setPlaying(false, at: t)
        changed = p.perform(.skipForward, at: t)
        #expect(changed == [.playbackInfo] && p.elapsed(at: t) == 15)
        changed = p.perform(.skipBackward, at: t)
        #expect(changed == [.playbackInfo] && p.elapsed(at: t) == 0)
        changed = p.perform(.skipBackward, at: t)
        #expect(changed == [], "not before the start")
        changed = p.perform(.likeTrack, at: t)
        #expect(changed == [])

        var limited = Self.player { $0.commands = [.play] }
        changed = limited.perform(.nextTrack, at: t)
        #expect(changed == nil && limited.index == 0)
        var listChanged = limited.setCommands([.pause, .play, .play])
        #expect(listChanged && limited.commandList == [0, 1])
        listChanged = limited.setCommands([.play, .pause])
        #expect(listChanged == false)
    }

    @Test("Entity Update bytes: cut to MTU - 6 bytes on a character boundary, with the Truncated flag")
    func entityUpdateBytes() {
        #expect(MediaPlayer.entityUpdate(.title, value: "Hi", mtu: 23) == [2, 2, 0, 0x48, 0x69])
        let long = String(repeating: "é", count: 20)  // 40 bytes
        let bytes = MediaPlayer.entityUpdate(.artist, value: long, mtu: 23)
        #expect(bytes.count == 3 + 16, "17 bytes would split an é: 16")
        #expect(bytes[2] == 1)
        #expect(String(decoding: bytes[3...], as: UTF8.self) == String(repeating: "é", count: 8))
        let exact = String(repeating: "a", count: 179)  // 185 - 6
        #expect(MediaPlayer.entityUpdate(.album, value: exact, mtu: 185)[2] == 0)
        #expect(MediaPlayer.entityUpdate(.album, value: exact + "b", mtu: 185).count == 185 - 3)
    }

    @Test("registrations and selections: what is well-formed")
    func writes() {
        #expect(MediaPlayer.registration([2, 0, 1, 2, 3])?.1 == [0, 1, 2, 3])
        #expect(MediaPlayer.registration([0, 2, 2, 1])?.1 == [2, 1], "a repeated attribute counts once")
        for bad: [UInt8] in [[], [0], [3, 0], [0, 3], [1, 4], [2, 0, 9]] { #expect(MediaPlayer.registration(bad) == nil) }
        #expect(MediaPlayer.selection([1, 3]) == .repeatMode)
        for bad: [UInt8] in [[], [1], [1, 3, 0], [0, 3], [5, 0]] { #expect(MediaPlayer.selection(bad) == nil) }
    }

    @Test("the settings: ams off by default, media, ams_characteristics, and their errors")
    func settings() throws {
        #expect(try ScenarioSettings(parsingLine: #"{"scenario":"x"}"#).ams == false)
        let s = try ScenarioSettings(parsingLine: """
            {"scenario":"x","ams":true,"media":{"player":"Podcasts","title":"Ep. 1","artist":"Host","album":"Show","duration":1800.5,\
            "state":"playing","elapsed":60,"volume":0.25,"commands":["toggle","skip_forward","skip_backward"],\
            "queue":[{"title":"Ep. 2","duration":1700}]},"ams_characteristics":["remote_command","entity_update"]}
            """)
        #expect(s.ams)
        #expect(s.media.player == "Podcasts" && s.media.playing && s.media.elapsed == 60 && s.media.volume == 0.25)
        #expect(s.media.tracks == [
            MediaTrack(title: "Ep. 1", artist: "Host", album: "Show", duration: 1800.5), MediaTrack(title: "Ep. 2", duration: 1700),
        ])
        #expect(s.media.commands == [.togglePlayPause, .skipForward, .skipBackward])
        #expect(s.amsCharacteristics.map(\.rawValue) == ["char001a", "char001d"])
        #expect(try ScenarioSettings(parsingLine: #"{"scenario":"x","ams":true}"#).media.tracks[0].title == "Clair de lune")

        let errors: [(String, String)] = [
            (#"{"scenario":"x","media":{}}"#, "\"media\" needs \"ams\": true"),
            (#"{"scenario":"x","ams_characteristics":["remote_command"]}"#, "\"ams_characteristics\" needs \"ams\": true"),
            (#"{"scenario":"x","ams":true,"ams_characteristics":[]}"#, "\"ams_characteristics\" must be a non-empty array of remote_command, entity_update, entity_attribute"),
            (#"{"scenario":"x","ams":true,"ams_characteristics":["rc"]}"#, "unknown AMS characteristic \"rc\"; use remote_command, entity_update, entity_attribute"),
            (#"{"scenario":"x","ams":true,"media":{"state":"stopped"}}"#, "\"state\" must be \"playing\" or \"paused\""),
            (#"{"scenario":"x","ams":true,"media":{"volume":2}}"#, "\"volume\" must be between 0.0 and 1.0, not 2.0"),
            (#"{"scenario":"x","ams":true,"media":{"commands":["stop"]}}"#, "unknown command \"stop\"; use play, pause, toggle, next, previous, volume_up, volume_down, repeat, shuffle, skip_forward, skip_backward, like, dislike, bookmark"),
            (#"{"scenario":"x","ams":true,"media":{"titel":"A"}}"#, "media: unknown key \"titel\""),
        ]
        for (line, message) in errors {
            #expect(throws: ScenarioError(line: 1, message)) { try ScenarioSettings(parsingLine: line) }
        }
    }

    @Test("the media steps and their errors")
    func steps() throws {
        let on = try ScenarioSettings(parsingLine: #"{"scenario":"x","ams":true}"#)
        func step(_ text: String, _ settings: ScenarioSettings = on) throws -> ScenarioAction {
            try ScenarioStep(parsingLine: text, number: 2, settings: settings).action
        }
        #expect(try step(#"{"do":"media_track","title":"T","artist":"A","duration":61}"#) == .media(.track(MediaTrack(title: "T", artist: "A", duration: 61))))
        #expect(try step(#"{"do":"media_play"}"#) == .media(.play))
        #expect(try step(#"{"do":"media_pause"}"#) == .media(.pause))
        #expect(try step(#"{"do":"media_volume","value":0.3}"#) == .media(.volume(0.3)))
        #expect(try step(#"{"do":"media_commands","commands":[]}"#) == .media(.commands([])))
        #expect(try step(#"{"do":"media_commands","commands":["next","play"]}"#) == .media(.commands([.nextTrack, .play])))
        #expect(try step(#"{"do":"media_service","present":false}"#) == .media(.service(present: false)))
        let wait = try step(#"{"do":"wait_state","media_state":"paused","media_commands_received":2}"#)
        var expected = StateExpectation()
        expected.mediaState = "paused"
        expected.mediaCommandsReceived = 2
        #expect(wait == .waitState(expected, timeout: 30))

        let off = try ScenarioSettings(parsingLine: #"{"scenario":"x"}"#)
        let errors: [(String, ScenarioSettings, String)] = [
            (#"{"do":"media_play"}"#, off, "\"media_play\" needs \"ams\": true in the settings"),
            (#"{"do":"media_volume"}"#, on, "\"value\" (0…1) is required"),
            (#"{"do":"media_commands"}"#, on, "\"commands\" is required (an empty list: none)"),
            (#"{"do":"media_service"}"#, on, "\"present\" (true or false) is required"),
            (#"{"do":"media_track","name":"T"}"#, on, "unknown key \"name\""),
            (#"{"do":"wait_state","media_state":"stopped"}"#, on, "\"media_state\" must be \"playing\" or \"paused\""),
        ]
        for (line, settings, message) in errors {
            #expect(throws: ScenarioError(line: 2, message)) { try step(line, settings) }
        }
    }
}
