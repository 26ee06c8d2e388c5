import AMS
import GattSession
import Testing
import TestSupport

@Suite struct RecordDescriptionTests {
    func describe(_ characteristic: CharacteristicUUID, _ direction: AMSDirection, _ value: [UInt8]) -> AMSRecordDescription? {
        AMSRecordDescription(characteristic: characteristic, direction: direction, value: value)
    }

    @Test func anEntityUpdateNotification() throws {
        let record = try #require(describe(AMSUUID.entityUpdate, .notification, [UInt8]([0x02, 0x02, 0x00], "Bohemian Rhapsody")))
        #expect(record.summary == "Entity Update track.title = \"Bohemian Rhapsody\"")
        #expect(record.fields["entity"] == .string("track") && record.fields["attribute"] == .string("title"))
        #expect(record.fields["value"] == .string("Bohemian Rhapsody") && record.fields["flags"] == .int(0))
        #expect(record.fields["characteristic"] == .string("Entity Update") && record.fields["direction"] == .string("notification"))
    }

    @Test func playbackInfoWithItsNumbers() throws {
        let record = try #require(describe(AMSUUID.entityUpdate, .notification, [UInt8]([0x00, 0x01, 0x00], "1,1.0,30.5")))
        #expect(record.fields["playback_state"] == .string("playing"))
        #expect(record.fields["playback_rate"] == .double(1) && record.fields["elapsed_time"] == .double(30.5))
        let queue = try #require(describe(AMSUUID.entityUpdate, .notification, [UInt8]([0x01, 0x02, 0x01], "2")))
        #expect(queue.fields["shuffle_mode"] == .string("all") && queue.fields["truncated"] == .int(1))
        #expect(queue.summary.hasSuffix("(truncated)"))
    }

    @Test func theWrites() throws {
        let registration = try #require(describe(AMSUUID.entityUpdate, .write, [2, 0, 1, 2, 3, 9]))
        #expect(registration.summary == "Entity Update: register for the track's artist, album, title, duration, unknown(0x09)")
        let select = try #require(describe(AMSUUID.entityAttribute, .write, [2, 2]))
        #expect(select.summary == "Entity Attribute: ask for the whole track.title")
        let command = try #require(describe(AMSUUID.remoteCommand, .write, [3]))
        #expect(command.summary == "Remote Command: send next" && command.fields["command_id"] == .int(3))
    }

    @Test func theReadAndTheCommandList() throws {
        let read = try #require(describe(AMSUUID.entityAttribute, .read, [0x41, 0xFF]))
        #expect(read.summary == "Entity Attribute: \"A\u{FFFD}\"" && read.fields["repaired"] == .int(1))
        let list = try #require(describe(AMSUUID.remoteCommand, .notification, [0, 1, 2, 3, 4]))
        #expect(list.summary == "Remote Command: the player takes play, pause, toggle, next, previous")
        #expect(list.fields["commands"] == .string("play,pause,toggle,next,previous") && list.fields["count"] == .int(5))
        #expect(describe(AMSUUID.remoteCommand, .notification, [])?.summary == "Remote Command: the player takes nothing")
    }

    @Test func malformedValues() throws {
        let short = try #require(describe(AMSUUID.entityUpdate, .notification, [0x02]))
        #expect(short.summary == "Entity Update notification: malformed (1 bytes, at least 3 expected)")
        #expect(short.fields["error"] == .string("too_short") && short.fields["bytes"] == .string("02"))
        #expect(describe(AMSUUID.remoteCommand, .write, [])?.fields["error"] == .string("too_short"))
        #expect(describe(AMSUUID.entityAttribute, .write, [1, 2, 3])?.fields["error"] == .string("too_long"))
        #expect(describe(AMSUUID.entityUpdate, .write, [])?.fields["error"] == .string("too_short"))
        #expect(describe(CharacteristicUUID("00002a00-0000-1000-8000-00805f9b34fb"), .read, [1]) == nil)
    }

    @Test func anyBytesDescribe() {
        var random = SplitMix64(seed: 7)
        for _ in 0..<2000 {
            let bytes = (0..<Int(random.next() % 10)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            for characteristic in [AMSUUID.remoteCommand, AMSUUID.entityUpdate, AMSUUID.entityAttribute] {
                for direction in [AMSDirection.notification, .write, .read] {
                    let record = describe(characteristic, direction, bytes)
                    #expect(record?.summary.isEmpty == false)
                }
            }
        }
    }
}
