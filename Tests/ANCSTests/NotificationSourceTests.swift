import Testing
import ANCS

@Suite struct NotificationSourceTests {
    @Test func decodesTheSpecificationExample() throws {
        let event = try NotificationSourceEvent(decoding: [0x00, 0x18, 0x06, 0x02, 0x01, 0x02, 0x03, 0x04])
        #expect(event.eventID == .notificationAdded)
        #expect(event.flags == [.positiveAction, .negativeAction])
        #expect(event.categoryID == .email)
        #expect(event.categoryCount == 2)
        #expect(event.notificationUID == 0x0403_0201)
        #expect(event.reservedFields.isEmpty)
        #expect(event.encoded == [0x00, 0x18, 0x06, 0x02, 0x01, 0x02, 0x03, 0x04])
    }

    @Test(arguments: [0, 1, 7, 9, 20, 512])
    func refusesEveryOtherLength(length: Int) {
        #expect(throws: NotificationSourceError.wrongLength(length)) {
            try NotificationSourceEvent(decoding: [UInt8](repeating: 0, count: length))
        }
    }

    @Test func wrongLengthNamesTheLength() {
        #expect(NotificationSourceError.wrongLength(7).description == "a Notification Source value is 8 bytes, this one has 7")
    }

    @Test func keepsAndReportsReservedValues() throws {
        let event = try NotificationSourceEvent(decoding: [0x07, 0xE4, 0xC8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF])
        #expect(event.eventID.rawValue == 7 && event.eventID.isReserved)
        #expect(event.flags.contains(.preExisting))
        #expect(event.flags.reservedBits == 0xE0)
        #expect(event.categoryID.rawValue == 200 && event.categoryID.isReserved)
        #expect(event.notificationUID == UInt32.max)
        #expect(event.reservedFields == ["event_id", "event_flags", "category_id"])
    }

    @Test func decodesFromASlice() throws {
        let bytes: [UInt8] = [0xAA, 0x02, 0x01, 0x01, 0x05, 0x10, 0x00, 0x00, 0x00, 0xBB]
        let event = try NotificationSourceEvent(decoding: bytes[1..<9])
        #expect(event.eventID == .notificationRemoved && event.categoryID == .incomingCall && event.notificationUID == 0x10)
    }
}
