import AMS
import GattSession
import Testing

@Suite struct FormatTests {
    @Test func decodesATrackTitle() throws {
        let bytes = [UInt8]([0x02, 0x02, 0x00], "Bohemian Rhapsody")
        let update = try EntityUpdate(decoding: bytes)
        #expect(update.attribute == .title)
        #expect(update.attribute.entity == .track)
        #expect(update.attribute.description == "track.title")
        #expect(update.flags == [])
        #expect(!update.isTruncated)
        #expect(update.text.string == "Bohemian Rhapsody")
        #expect(update.encoded == bytes)
    }

    @Test func decodesPlaybackInfo() throws {
        let update = try EntityUpdate(decoding: [UInt8]([0x00, 0x01, 0x00], "1,1.0,30.5"))
        #expect(update.attribute == .playbackInfo)
        let info = PlaybackInfo(parsing: update.text.string)
        #expect(info == PlaybackInfo(state: .playing, rate: 1.0, elapsed: 30.5))
        #expect(info.text == "1,1.0,30.5")
    }

    @Test func decodesATruncatedValue() throws {
        let update = try EntityUpdate(decoding: [UInt8]([0x02, 0x01, 0x01], "A Night at the Op"))
        #expect(update.attribute == .album)
        #expect(update.isTruncated)
        #expect(update.flags.description == "[truncated]")
        let reserved = try EntityUpdate(decoding: [0x02, 0x01, 0xF1])
        #expect(reserved.isTruncated && reserved.flags.reservedBits == 0xF0 && reserved.value.isEmpty)
    }

    @Test func decodesSupportedCommands() {
        #expect(decodeSupportedCommands([0x00, 0x01, 0x02, 0x03, 0x04]) == [.play, .pause, .togglePlayPause, .nextTrack, .previousTrack])
        #expect(decodeSupportedCommands([]) == [])
        #expect(decodeSupportedCommands([0x03, 0x03, 0x00, 0x03]) == [.nextTrack, .play])
        let unknown = decodeSupportedCommands([0x20, 0xFF])
        #expect(unknown.map(\.rawValue) == [0x20, 0xFF] && unknown.allSatisfy { !$0.isKnown })
        #expect(unknown[0].description == "unknown(0x20)")
    }

    @Test(arguments: [0, 1, 2])
    func refusesAShortEntityUpdate(length: Int) {
        #expect(throws: AMSFormatError.tooShort(length: length, needed: 3)) {
            try EntityUpdate(decoding: [UInt8](repeating: 2, count: length))
        }
    }

    @Test func anEmptyValueIsAValue() throws {
        let update = try EntityUpdate(decoding: [0x00, 0x00, 0x00])
        #expect(update.attribute == .playerName && update.value.isEmpty && update.text.string.isEmpty)
    }

    @Test func keepsUnknownEntitiesAndAttributes() throws {
        let update = try EntityUpdate(decoding: [0x05, 0x09, 0x00, 0x41])
        #expect(!update.attribute.isKnown && !update.attribute.entity.isKnown)
        #expect(update.attribute.description == "unknown(0x05).unknown(0x09)")
        let attribute = try EntityUpdate(decoding: [0x01, 0x04, 0x00]).attribute
        #expect(!attribute.isKnown && attribute.description == "queue.unknown(0x04)")
        #expect(EntityID(rawValue: 7).definedAttributes.isEmpty)
    }

    @Test func repairsInvalidUTF8() {
        let text = AMSText([0x41, 0xFF, 0x42, 0xE2, 0x80])
        #expect(text.wasRepaired)
        #expect(text.string == "A\u{FFFD}B\u{FFFD}")
        let valid = AMSText(Array("Motörhead – Ace of Spades".utf8))
        #expect(!valid.wasRepaired && valid.string == "Motörhead – Ace of Spades")
    }

    @Test func readsPlaybackInfoTolerantly() {
        #expect(PlaybackInfo(parsing: "") == PlaybackInfo(state: nil, rate: nil, elapsed: nil))
        #expect(PlaybackInfo(parsing: "0,0.0,12.345") == PlaybackInfo(state: .paused, rate: 0, elapsed: 12.345))
        #expect(PlaybackInfo(parsing: "1,,") == PlaybackInfo(state: .playing, rate: nil, elapsed: nil))
        #expect(PlaybackInfo(parsing: "x,1.0,abc") == PlaybackInfo(state: nil, rate: 1, elapsed: nil))
        #expect(PlaybackInfo(parsing: "2,-2.0,10") == PlaybackInfo(state: .rewinding, rate: -2, elapsed: 10))
        #expect(PlaybackInfo(parsing: "3,2.0,1,extra,parts") == PlaybackInfo(state: .fastForwarding, rate: 2, elapsed: 1))
        #expect(PlaybackInfo(parsing: "9,nan,inf").state == PlaybackState(rawValue: 9))
        #expect(PlaybackInfo(parsing: "9,nan,inf").rate == nil && PlaybackInfo(parsing: "9,nan,inf").elapsed == nil)
        #expect(PlaybackInfo(parsing: "1,1.0,-5").elapsed == 0)
        #expect(PlaybackState(rawValue: 9).description == "unknown(9)")
    }

    @Test func readsNumbersTolerantly() {
        for bad in ["", " ", "nan", "NaN", "inf", "-inf", "infinity", "1e999", "0x10", "1,5", "abc", ".", "-", "e", "1.2.3", "١٢"] {
            #expect(parseAMSDecimal(bad) == nil, "\(bad)")
        }
        #expect(parseAMSDecimal(" 0.5 ") == 0.5)
        #expect(parseAMSDecimal("-0") == 0 && parseAMSDecimal("-0")?.sign == .plus)
        #expect(parseAMSDecimal("1e2") == 100)
        #expect(parseVolume("0.75") == 0.75 && parseVolume("1.5") == 1 && parseVolume("-1") == 0 && parseVolume("loud") == nil)
        #expect(parseTrackDuration("354.5") == 354.5 && parseTrackDuration("-3") == nil && parseTrackDuration("") == nil)
        #expect(parseAMSInteger("12") == 12 && parseAMSInteger(" 3 ") == 3)
        for bad in ["", "-", "1.0", "99999999999999999999999", "0x1", "٣"] { #expect(parseAMSInteger(bad) == nil, "\(bad)") }
        #expect(ShuffleMode(rawValue: 2) == .all && ShuffleMode(rawValue: 2).description == "all" && RepeatMode(rawValue: 1).name == "one")
        #expect(RepeatMode(rawValue: 5).name == nil)
    }

    @Test func commandsHaveCommandLineNames() {
        let names = RemoteCommand.allDefined.map { $0.name ?? "" }
        #expect(names == [
            "play", "pause", "toggle", "next", "previous", "volume-up", "volume-down", "repeat", "shuffle",
            "skip-forward", "skip-backward", "like", "dislike", "bookmark",
        ])
        for command in RemoteCommand.allDefined { #expect(RemoteCommand(name: command.name ?? "") == command) }
        #expect(RemoteCommand(name: "Volume-Up") == .volumeUp)
        #expect(RemoteCommand(name: "stop") == nil && RemoteCommand(name: "") == nil)
        #expect(RemoteCommand.bookmarkTrack.rawValue == 13 && RemoteCommand(rawValue: 14).name == nil)
    }

    @Test func encodesTheWrites() throws {
        #expect(EntityRegistration.standard.map(\.encoded) == [[0, 0, 1, 2], [1, 0, 1, 2, 3], [2, 0, 1, 2, 3]])
        #expect(try EntityRegistration(decoding: [2, 0, 2]) == EntityRegistration(entity: .track, attributes: [0, 2]))
        #expect(throws: AMSFormatError.tooShort(length: 1, needed: 2)) { try EntityRegistration(decoding: [2]) }
        #expect(EntityAttributeRequest(.title).encoded == [2, 2])
        #expect(try EntityAttributeRequest(decoding: [0, 1]).attribute == .playbackInfo)
        #expect(throws: AMSFormatError.tooLong(length: 3, allowed: 2)) { try EntityAttributeRequest(decoding: [0, 1, 2]) }
        #expect(throws: AMSFormatError.tooShort(length: 1, needed: 2)) { try EntityAttributeRequest(decoding: [0]) }
        #expect(RemoteCommand.nextTrack.encoded == [3])
        #expect(try RemoteCommand(decoding: [9]) == .skipForward)
        #expect(throws: AMSFormatError.tooShort(length: 0, needed: 1)) { try RemoteCommand(decoding: []) }
        #expect(throws: AMSFormatError.tooLong(length: 2, allowed: 1)) { try RemoteCommand(decoding: [1, 2]) }
    }

    @Test func namesTheUUIDsAndErrors() {
        #expect(AMSUUID.service.rawValue == "89d3502b-0f36-433a-8ef4-c502ad55f8dc")
        #expect(AMSUUID.remoteCommand.rawValue == "9b3c81d8-57b1-4a8a-b8df-0e56f7ca51c2")
        #expect(AMSUUID.entityUpdate.rawValue == "2f7cabce-808d-411f-9a0c-bb92ba96c102")
        #expect(AMSUUID.entityAttribute.rawValue == "c6b2f38c-23ab-46d8-a6ab-a3a870bbd5d7")
        #expect(AMSErrorCode(rawValue: 0xA0) == .invalidState && AMSErrorCode.invalidCommand.rawValue == 0xA1)
        #expect(AMSErrorCode.absentAttribute.description == "absent_attribute")
        #expect(AMSErrorCode(rawValue: 0x0E).description == "att_error(0x0e)")
        #expect(EntityAttribute.allDefined.count == 11 && EntityAttribute.allDefined.allSatisfy(\.isKnown))
        #expect(EntityAttribute.allDefined.filter(\.isPrivate) == [.artist, .album, .title])
    }
}
