import AMS
import GattSession
import Testing
import TestSupport

@Suite struct MediaSessionTests {
    @Test func describesTheService() {
        let service = MediaSession.service
        #expect(service.name == "AMS" && service.uuid == AMSUUID.service)
        #expect(service.characteristics.map(\.uuid) == [AMSUUID.remoteCommand, AMSUUID.entityUpdate, AMSUUID.entityAttribute])
        #expect(service.characteristics.map(\.notifies) == [true, true, false])
        #expect(service.characteristics.allSatisfy { !$0.required })
    }

    @Test func registersOneEntityAtATime() {
        var h = Harness()
        h.subscribe()
        #expect(h.requests == [.write(AMSUUID.entityUpdate, [0, 0, 1, 2])])
        h.result(.written)
        #expect(h.requests.last == .write(AMSUUID.entityUpdate, [1, 0, 1, 2, 3]))
        h.result(.written)
        #expect(h.requests.last == .write(AMSUUID.entityUpdate, [2, 0, 1, 2, 3]))
        h.result(.written)
        #expect(h.requests.count == 3 && !h.outstanding)
        #expect(h.session.nextDeadline == nil)
        #expect(h.events.isEmpty)
    }

    @Test func registersAgainWhenSubscribedAgain() {
        var h = Harness()
        h.start()
        h.subscribe()
        #expect(h.requests.suffix(1) == [.write(AMSUUID.entityUpdate, [0, 0, 1, 2])])
        h.result(.written)
        h.result(.written)
        let registrations = EntityRegistration.standard.map { GattRequest.write(AMSUUID.entityUpdate, $0.encoded) }
        #expect(Array(h.requests.suffix(3)) == registrations)
    }

    @Test func aResubscriptionWithARequestInFlightWaitsForItsResult() {
        var h = Harness()
        h.subscribe()  // Player's registration in flight
        h.subscribe()
        #expect(h.requests.count == 1)
        h.result(.written)  // the first one's result; the registrations start over
        #expect(h.requests.last == .write(AMSUUID.entityUpdate, [0, 0, 1, 2]))
    }

    @Test func coalescesOneChange() {
        var h = Harness()
        h.start()
        h.update(.title, "Bohemian Rhapsody")
        h.advance(.milliseconds(50))
        h.update(.artist, "Queen")
        h.update(.album, "A Night at the Opera")
        h.update(.duration, "354.0")
        #expect(h.events.isEmpty)
        #expect(h.session.nextDeadline == .milliseconds(150))
        h.advance(.milliseconds(99))
        #expect(h.events.isEmpty)
        h.advance(.milliseconds(1))
        #expect(h.states.count == 1)
        let state = h.states[0]
        #expect(state.title == "Bohemian Rhapsody" && state.artist == "Queen" && state.album == "A Night at the Opera")
        #expect(state.duration == 354)
        #expect(h.session.nextDeadline == nil)
        #expect(h.session.lastEmitted == state)
    }

    @Test func nothingChangedIsNoEvent() {
        var h = Harness()
        h.start()
        h.update(.title, "Bohemian Rhapsody")
        h.advance(.seconds(1))
        #expect(h.states.count == 1)
        h.update(.title, "Bohemian Rhapsody")
        #expect(h.session.nextDeadline == nil)
        h.update(.title, "Other")
        h.update(.title, "Bohemian Rhapsody")  // and back, within the window
        h.advance(.seconds(1))
        #expect(h.states.count == 1)
    }

    @Test func coalescesSupportedCommands() {
        var h = Harness()
        h.start()
        h.commands([.play, .pause])
        h.advance(.milliseconds(100))
        h.commands([.play, .pause, .togglePlayPause, .play])
        h.advance(.milliseconds(100))
        #expect(h.states.map(\.supportedCommands) == [[.play, .pause, .togglePlayPause]])
        h.commands([.play, .pause, .togglePlayPause])
        h.advance(.seconds(1))
        #expect(h.states.count == 1)
    }

    @Test func playbackInfoThatFollowsIsNoChange() {
        var h = Harness()
        h.start()
        h.now = .seconds(10)
        h.update(.playbackInfo, "1,1.0,30.5")
        h.advance(.seconds(1))
        #expect(h.states.count == 1)
        #expect(h.states[0].position(at: .seconds(20)) == 40.5)
        #expect(h.states[0].elapsedAt == .seconds(10))
        h.update(.playbackInfo, "1,1.0,31.5")  // one second later: where it was anyway
        h.advance(.seconds(1))
        #expect(h.states.count == 1)
        h.update(.playbackInfo, "0,0.0,32.5")  // paused
        h.advance(.seconds(1))
        #expect(h.states.count == 2 && h.states[1].playbackState == .paused)
        h.update(.playbackInfo, "0,0.0,32.5")  // again, later: paused, nothing moved
        h.advance(.seconds(1))
        h.update(.playbackInfo, "0,0.0,100")  // a seek
        h.advance(.seconds(1))
        #expect(h.states.count == 3 && h.states[2].elapsedTime == 100)
    }

    @Test func readsATruncatedValueWhole() {
        var h = Harness()
        h.start()
        h.update(.title, "A very long ti", truncated: true)
        h.update(.artist, "Someone")
        #expect(h.requests.last == .write(AMSUUID.entityAttribute, [2, 2]))
        h.result(.written)
        #expect(h.requests.last == .read(AMSUUID.entityAttribute))
        h.advance(.milliseconds(500))
        #expect(h.events.isEmpty, "the event waits for the read")
        #expect(h.session.state.truncated == [.title])
        h.result(.read(Array("A very long title indeed".utf8)))
        #expect(h.states.count == 1)
        #expect(h.states[0].title == "A very long title indeed" && h.states[0].truncated.isEmpty && h.states[0].artist == "Someone")
        #expect(h.session.nextDeadline == nil)
    }

    @Test func aReadThatComesBeforeTheWindowEndsWaitsForIt() {
        var h = Harness()
        h.start()
        h.update(.title, "A very long ti", truncated: true)
        h.result(.written)
        h.result(.read(Array("A very long title".utf8)))
        #expect(h.events.isEmpty)
        h.advance(.milliseconds(150))
        #expect(h.states.map(\.title) == ["A very long title"])
    }

    @Test func aStaleReadDoesNotOverwriteANewerValue() {
        var h = Harness()
        h.start()
        h.update(.title, "Old long ti", truncated: true)
        h.result(.written)  // the read is in flight
        h.update(.title, "New")
        h.result(.read(Array("Old long title".utf8)))
        #expect(h.session.state.title == "New" && h.session.state.truncated.isEmpty)
        #expect(h.logged(.debug, containing: "newer update"))
        h.advance(.milliseconds(150))
        #expect(h.states.map(\.title) == ["New"])
    }

    @Test func aNewerTruncatedUpdateReadsAgain() {
        var h = Harness()
        h.start()
        h.update(.title, "First long ti", truncated: true)
        h.result(.written)
        h.update(.title, "Second long ti", truncated: true)
        h.result(.read(Array("First long title".utf8)))  // stale
        #expect(h.requests.last == .write(AMSUUID.entityAttribute, [2, 2]))
        h.result(.written)
        h.result(.read(Array("Second long title".utf8)))
        h.advance(.milliseconds(150))
        #expect(h.states.map(\.title) == ["Second long title"])
        #expect(h.states[0].truncated.isEmpty)
    }

    @Test func theEventWaitsForAReadTwoSecondsAtMost() {
        var h = Harness()
        h.start()
        h.update(.title, "A very long ti", truncated: true)
        h.result(.written)  // the read never ends
        #expect(h.session.nextDeadline == .seconds(2))
        h.advance(.milliseconds(1999))
        #expect(h.events.isEmpty)
        h.advance(.milliseconds(1))
        #expect(h.states.count == 1 && h.states[0].title == "A very long ti" && h.states[0].truncated == [.title])
        h.result(.read(Array("A very long title".utf8)))
        h.advance(.milliseconds(150))
        #expect(h.states.count == 2 && h.states[1].title == "A very long title" && h.states[1].truncated.isEmpty)
    }

    @Test func withoutEntityAttributeATruncatedValueStaysTruncated() {
        var h = Harness()
        h.start([AMSUUID.remoteCommand, AMSUUID.entityUpdate])
        let before = h.requests.count
        h.update(.title, "A very long ti", truncated: true)
        #expect(h.requests.count == before)
        h.advance(.milliseconds(150))
        #expect(h.states.count == 1 && h.states[0].truncated == [.title] && h.states[0].title == "A very long ti")
    }

    @Test func withoutEntityUpdateCommandsStillWork() throws {
        var h = Harness()
        h.subscribe([AMSUUID.remoteCommand])
        #expect(h.requests.isEmpty)
        h.commands([.play, .pause])
        try h.send(.pause)
        #expect(h.requests == [.write(AMSUUID.remoteCommand, [1])])
        h.result(.written)
        h.advance(.seconds(1))
        #expect(h.states.count == 1 && h.states[0].supportedCommands == [.play, .pause] && h.states[0].hasNoEntities)
    }

    @Test func withoutRemoteCommandNoCommands() {
        var h = Harness()
        h.start([AMSUUID.entityUpdate, AMSUUID.entityAttribute])
        #expect(h.requests.count == 3)
        #expect(throws: MediaCommandError.noRemoteCommand) { try h.send(.play) }
        var fresh = Harness()
        #expect(throws: MediaCommandError.noRemoteCommand) { try fresh.send(.play) }
    }

    @Test func losingACharacteristicForgetsWhatItTold() throws {
        var h = Harness()
        h.start()
        h.commands([.play, .nextTrack])
        h.update(.title, "Song")
        h.advance(.seconds(1))
        h.update(.artist, "Band", truncated: true)  // its select is in flight
        try h.send(.nextTrack)  // waits behind it
        h.subscribe([AMSUUID.remoteCommand])  // the phone now offers Remote Command only
        #expect(h.session.state.title == nil && h.session.state.artist == nil && h.session.state.truncated.isEmpty)
        h.result(.written)  // the select's result: no read follows
        #expect(h.requests.last == .write(AMSUUID.remoteCommand, [3]))
        h.result(.written)
        h.advance(.seconds(1))
        #expect(h.states.last?.hasNoEntities == true && h.states.last?.supportedCommands == [.play, .nextTrack])
        try h.send(.play)  // in flight
        try h.send(.nextTrack)  // waits
        h.subscribe([AMSUUID.entityUpdate])  // and now Entity Update only
        #expect(h.failures.map(\.0) == [.nextTrack])
        #expect(h.session.state.supportedCommands.isEmpty)
        h.result(.written)  // the play command's result
        #expect(h.requests.last == .write(AMSUUID.entityUpdate, [0, 0, 1, 2]))
        #expect(h.failures.count == 1)
    }

    @Test func sendsACommand() throws {
        var h = Harness()
        h.start()
        h.commands([.play, .pause, .togglePlayPause])
        try h.send(.togglePlayPause)
        #expect(h.requests.last == .write(AMSUUID.remoteCommand, [2]))
        h.result(.written)
        #expect(h.failures.isEmpty)
    }

    @Test func refusesAnUnsupportedCommandWithTheList() {
        var h = Harness()
        h.start()
        h.commands([.play, .pause])
        #expect(throws: MediaCommandError.unsupported(.nextTrack, supported: [.play, .pause])) { try h.send(.nextTrack) }
        let error = MediaCommandError.unsupported(.nextTrack, supported: [.play, .pause])
        #expect(error.description == "the player does not take next now; it takes: play, pause")
        #expect(error.code == "unsupported_command")
        #expect(h.requests.count == 3)
    }

    @Test func boundsTheCommandsThatWait() throws {
        var h = Harness { $0.maxPendingCommands = 2 }
        h.subscribe()  // a registration in flight
        h.commands([.volumeUp])
        try h.send(.volumeUp)
        try h.send(.volumeUp)
        #expect(throws: MediaCommandError.tooManyPending(2)) { try h.send(.volumeUp) }
    }

    /// A flood (a script, a broker) meets the rate limit; a person never does: a burst of 10,
    /// then one every 100 ms. Refused commands take nothing from the bucket.
    @Test func commandsFasterThanTheRateAreRefused() throws {
        var h = Harness()
        h.start()
        h.commands([.togglePlayPause])
        for _ in 0..<10 {
            try h.send(.togglePlayPause)
            h.result(.written)
        }
        #expect(throws: MediaCommandError.tooFast(perSecond: 10)) { try h.send(.togglePlayPause) }
        #expect(MediaCommandError.tooFast(perSecond: 10).code == "too_fast")
        h.advance(.milliseconds(99))
        #expect(throws: MediaCommandError.tooFast(perSecond: 10)) { try h.send(.togglePlayPause) }
        h.advance(.milliseconds(1))
        try h.send(.togglePlayPause)
        h.result(.written)
        #expect(throws: MediaCommandError.tooFast(perSecond: 10)) { try h.send(.togglePlayPause) }
        // A person's pace, 7 a second, for 10 seconds: never refused.
        h.advance(.seconds(1))
        for _ in 0..<70 {
            h.advance(.milliseconds(143))
            try h.send(.togglePlayPause)
            h.result(.written)
        }
        #expect(h.requests.filter { $0 == .write(AMSUUID.remoteCommand, [RemoteCommand.togglePlayPause.rawValue]) }.count == 81)
    }

    @Test func aFailedCommandIsReported() throws {
        var h = Harness()
        h.start()
        h.commands([.nextTrack, .likeTrack])
        try h.send(.nextTrack)
        h.result(.attError(0x0E))
        try h.send(.likeTrack)
        h.result(.failed("le-connection-abort-by-local"))
        #expect(h.failures.count == 2)
        #expect(h.failures[0].0 == .nextTrack && h.failures[0].1 == .attError(AMSErrorCode(rawValue: 0x0E)))
        #expect(h.failures[1].0 == .likeTrack && h.failures[1].1 == .failed("le-connection-abort-by-local"))
    }

    @Test func aCommandGoesAheadOfPendingReads() throws {
        var h = Harness()
        h.start([AMSUUID.remoteCommand, AMSUUID.entityUpdate, AMSUUID.entityAttribute])
        h.commands([.play])
        h.update(.title, "Long ti", truncated: true)  // its select is in flight
        h.update(.artist, "Long ar", truncated: true)  // queued
        h.update(.album, "Long al", truncated: true)  // queued
        try h.send(.play)
        h.result(.written)  // the title's select: its read follows at once
        #expect(h.requests.last == .read(AMSUUID.entityAttribute))
        h.result(.read(Array("Long title".utf8)))
        #expect(h.requests.last == .write(AMSUUID.remoteCommand, [0]), "the command before the other reads")
        h.result(.written)
        #expect(h.requests.last == .write(AMSUUID.entityAttribute, [2, 0]))
    }

    @Test func invalidStateAsksToSubscribeAgainAtMostOncePerInterval() {
        var h = Harness()
        h.subscribe()
        h.result(.attError(0xA0))
        #expect(h.resubscribes.count == 1)
        #expect(h.session.resubscriptions == 1)
        #expect(!h.outstanding, "the other registrations are dropped: they would be refused too")
        h.subscribe()
        h.now = .seconds(10)
        h.result(.attError(0xA0))
        #expect(h.resubscribes.count == 1)
        #expect(h.logged(.warning, containing: "0xa0"))
        h.now = .seconds(31)
        h.subscribe()
        h.result(.attError(0xA0))
        #expect(h.resubscribes.count == 2)
    }

    @Test func invalidCommandDropsTheRequest() {
        var h = Harness()
        h.subscribe()
        h.result(.attError(0xA1))
        #expect(h.logged(.warning, containing: "malformed"))
        #expect(h.requests.last == .write(AMSUUID.entityUpdate, [1, 0, 1, 2, 3]))
        #expect(h.resubscribes.isEmpty)
    }

    @Test func absentAttributeIsEmpty() {
        var h = Harness()
        h.start()
        h.update(.album, "Some long alb", truncated: true)
        h.result(.written)
        h.result(.attError(0xA2))
        h.advance(.milliseconds(150))
        #expect(h.session.state.album == nil && h.session.state.truncated.isEmpty)
        // On the select too.
        h.update(.artist, "Some long art", truncated: true)
        h.result(.attError(0xA2))
        h.advance(.seconds(1))
        #expect(h.session.state.artist == nil && h.session.state.truncated.isEmpty)
    }

    @Test func otherFailuresGoOnWithTheNextRequest() {
        var h = Harness()
        h.subscribe()
        h.result(.failed("Operation failed with ATT error: 0x0e"))
        #expect(h.requests.last == .write(AMSUUID.entityUpdate, [1, 0, 1, 2, 3]))
        h.result(.attError(0x0E))
        #expect(h.requests.last == .write(AMSUUID.entityUpdate, [2, 0, 1, 2, 3]))
        h.result(.written)
        h.update(.title, "Long ti", truncated: true)
        h.update(.artist, "Long ar", truncated: true)
        h.result(.failed("timeout"))  // the title's select
        #expect(h.requests.last == .write(AMSUUID.entityAttribute, [2, 0]))
        h.result(.written)
        h.result(.attError(0x0E))  // the artist's read
        h.advance(.seconds(1))
        #expect(h.states.count == 1 && h.states[0].truncated == [.title, .artist])
        #expect(h.logs.filter { $0.0 == .warning }.count == 4)
    }

    @Test func aResultWithNothingInFlightIsIgnored() {
        var h = Harness()
        h.start()
        let actions = h.session.handleResult(.written, now: h.now)
        #expect(actions.count == 1)
        if case .log(let level, _)? = actions.first { #expect(level == .debug) } else { Issue.record("not a log: \(actions)") }
        #expect(!h.session.isRequestInFlight)
    }

    @Test func contentIsLoggedOnlyAtDebug() {
        var h = Harness()
        h.start()
        h.update(.title, "Bohemian Rhapsody", truncated: true)
        h.update(.artist, "Queen")
        h.notify([0x02, 0x01])
        h.result(.attError(0xA1))
        h.advance(.seconds(3))
        #expect(h.logged(.debug, containing: "Bohemian"))
        for (level, message) in h.logs where level > .debug {
            #expect(!message.contains("Bohemian") && !message.contains("Queen"), "\(level): \(message)")
        }
    }

    @Test func malformedValuesNeverTrap() {
        var h = Harness()
        h.start()
        h.notify([])
        h.notify([0x02])
        h.notify([0x02, 0x02])
        #expect(h.logs.filter { $0.0 == .warning }.count == 3)
        h.notify([0x07, 0x00, 0x00, 0x41])  // unknown entity
        h.notify([0x02, 0x09, 0x00, 0x41])  // unknown attribute
        h.notify([0x02, 0x02, 0x00, 0x41, 0xFF, 0x42])  // bad UTF-8
        h.notify([0x00, 0x01, 0x00] + Array("x,nan,1e999".utf8))
        h.notify([0x00, 0x02, 0x00] + Array("loud".utf8))
        h.notify([0x01, 0x00, 0x00] + Array("-".utf8))
        h.notify([0x01, 0x02, 0x00] + Array("7".utf8))
        h.notify([0x02, 0x03, 0x00] + Array("-12".utf8))
        h.notify([0xFF, 0xEE], on: AMSUUID.entityAttribute)
        h.notify([0xFF, 0xEE], on: CharacteristicUUID("00002a00-0000-1000-8000-00805f9b34fb"))
        h.notify([0x20, 0x00, 0x20], on: AMSUUID.remoteCommand)
        h.advance(.seconds(1))
        let state = h.session.state
        #expect(state.title == "A\u{FFFD}B")
        #expect(state.playbackState == nil && state.playbackRate == nil && state.elapsedTime == nil)
        #expect(state.volume == nil && state.queueIndex == nil && state.duration == nil)
        #expect(state.shuffleMode == ShuffleMode(rawValue: 7))
        #expect(state.supportedCommands == [RemoteCommand(rawValue: 0x20), .play])
        #expect(h.states.count == 1)
    }

    /// ATT caps an attribute value at 512 bytes, and so does BlueZ; a peer that sends more (a
    /// notification or a long read of 1 MB) gets its value cut there, on a character boundary,
    /// and marked truncated: no output carries more.
    @Test func aValueLongerThanAnyAttributeIsCut() {
        var h = Harness()
        h.start()
        // 511 ASCII bytes, then "é" (2 bytes) across the limit, then more.
        let long = String(repeating: "a", count: 511) + "é" + String(repeating: "b", count: 1_000_000)
        h.update(.title, long)
        #expect(h.requests.last != .write(AMSUUID.entityAttribute, [2, 2]), "no read of a value longer still")
        h.advance(.milliseconds(150))
        #expect(h.states.count == 1)
        #expect(h.states.first?.title == String(repeating: "a", count: 511), "cut before the character that does not fit")
        #expect(h.states.first?.truncated == [.title])
        // A long read of a truncated value: the same cut.
        h.update(.artist, "Some", truncated: true)
        h.result(.written)
        h.result(.read(Array(String(repeating: "€", count: 1000).utf8)))  // 3 bytes each
        h.advance(.milliseconds(150))
        #expect(h.states.last?.artist == String(repeating: "€", count: 170), "510 bytes: the 171st € would pass 512")
        #expect(h.states.last?.truncated == [.artist, .title])
        // A value of the limit exactly is whole.
        h.update(.title, String(repeating: "c", count: MediaSession.maximumValueLength))
        h.advance(.milliseconds(150))
        #expect(h.states.last?.title?.utf8.count == 512 && h.states.last?.truncated == [.artist])
    }

    /// Rates, elapsed times and durations past 1e9 (or not finite) are unknown: no output
    /// clamps one while another overflows.
    @Test func aNumberPastTheLimitIsUnknown() {
        var h = Harness()
        h.start()
        h.update(.playbackInfo, "1,1e308,1e308")
        h.update(.duration, "1e308")
        h.update(.title, "Long")
        h.advance(.milliseconds(150))
        let state = h.session.state
        #expect(state.playbackState == .playing && state.playbackRate == nil && state.elapsedTime == nil && state.duration == nil)
        #expect(state.position(at: h.now) == nil)
        h.update(.playbackInfo, "1,1.0,1000000000")
        h.update(.duration, "1000000001")
        h.advance(.milliseconds(150))
        #expect(h.session.state.elapsedTime == 1e9 && h.session.state.duration == nil, "the limit is a number, past it none")
        // At rate 1e9 from 1e9 s, the position passes the limit a second later: unknown then.
        h.update(.playbackInfo, "1,1000000000,0")
        h.advance(.milliseconds(150))
        #expect(h.session.state.position(at: h.now + .seconds(2)) == nil)
    }

    /// A phone that sends garbage at its link's full rate: every value any length and any
    /// bytes. The session never traps, never holds a value past the cap or a number past the
    /// limit, keeps one request in flight, and the next clean value is reported as usual.
    @Test func aFloodOfGarbageValuesBreaksNothing() {
        var random = SplitMix64(seed: 36)
        var h = Harness()
        h.start()
        for round in 0..<20_000 {
            let length = round % 1000 == 0 ? 4096 : Int(random.next() % 40)
            var bytes = [UInt8(random.next() % 3), UInt8(random.next() % 5), UInt8(random.next() % 2)]
            bytes += (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            if random.next() % 4 == 0 { bytes += Array("1,1e300,\(random.next())e\(random.next() % 400)".utf8) }
            h.notify(bytes)
            if h.outstanding, random.next() % 3 == 0 { h.result(.read((0..<Int(random.next() % 700)).map { _ in UInt8(truncatingIfNeeded: random.next()) })) }
            if round % 50 == 0 { h.advance(.milliseconds(100)) }
        }
        h.advance(.seconds(3))
        for state in h.states + [h.session.state] {
            for text in [state.playerName, state.artist, state.album, state.title].compactMap({ $0 }) {
                #expect(text.utf8.count <= MediaSession.maximumValueLength)
            }
            for number in [state.playbackRate, state.elapsedTime, state.duration].compactMap({ $0 }) {
                #expect(number.isFinite && abs(number) <= largestMediaNumber)
            }
        }
        while h.outstanding { h.result(.written) }
        h.update(.title, "Clean")
        h.advance(.milliseconds(150))
        #expect(h.states.last?.title == "Clean")
    }

    @Test func randomBytesNeverTrapAndKeepOneRequestInFlight() {
        var random = SplitMix64(seed: 29)
        for _ in 0..<300 {
            var h = Harness()
            for _ in 0..<60 {
                switch random.next() % 8 {
                case 0: h.subscribe(Set([AMSUUID.remoteCommand, AMSUUID.entityUpdate, AMSUUID.entityAttribute].filter { _ in random.next() % 4 != 0 }))
                case 1, 2:
                    let length = Int(random.next() % 12)
                    var bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next() % 5) }
                    if length > 3, random.next() % 2 == 0 { bytes += Array("1,1.0,3".utf8) }
                    h.notify(bytes, on: random.next() % 4 == 0 ? AMSUUID.remoteCommand : AMSUUID.entityUpdate)
                case 3:
                    if h.outstanding {
                        let results: [GattResult] = [.written, .read([0x41, 0xC3]), .attError(0xA0), .attError(0xA1), .attError(0xA2), .failed("x")]
                        h.result(results[Int(random.next() % UInt64(results.count))])
                    }
                case 4: _ = try? h.send(RemoteCommand(rawValue: UInt8(random.next() % 16)))
                default: h.advance(.milliseconds(Int64(random.next() % 400)))
                }
                let state = h.session.state
                #expect(Set(state.supportedCommands).count == state.supportedCommands.count)
                #expect(state.truncated.allSatisfy { $0.isKnown })
                #expect(h.session.pendingRequestCount <= 3 + 11 + 16)
            }
        }
    }
}
