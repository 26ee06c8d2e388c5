import Testing
@testable import ANCS

@Suite struct IdentifierTests {
    @Test func eventIDs() {
        #expect(EventID.notificationAdded.rawValue == 0)
        #expect(EventID.notificationModified.rawValue == 1)
        #expect(EventID.notificationRemoved.rawValue == 2)
        #expect([EventID.notificationAdded, .notificationModified, .notificationRemoved].map(\.name) == ["added", "modified", "removed"])
    }

    @Test func categories() {
        let expected = [
            "other", "incoming_call", "missed_call", "voicemail", "social", "schedule", "email", "news",
            "health_and_fitness", "business_and_finance", "location", "entertainment",
        ]
        let constants: [CategoryID] = [
            .other, .incomingCall, .missedCall, .voicemail, .social, .schedule, .email, .news,
            .healthAndFitness, .businessAndFinance, .location, .entertainment,
        ]
        #expect(constants.map(\.rawValue) == Array(0...11))
        #expect(constants.map(\.name) == expected)
    }

    @Test func commandsActionsAndAttributes() {
        #expect([CommandID.getNotificationAttributes, .getAppAttributes, .performNotificationAction].map(\.rawValue) == [0, 1, 2])
        #expect(CommandID.getAppAttributes.name == "get_app_attributes")
        #expect([ActionID.positive, .negative].map(\.rawValue) == [0, 1])
        #expect([ActionID.positive, .negative].map(\.name) == ["positive", "negative"])
        let attributes: [NotificationAttributeID] = [
            .appIdentifier, .title, .subtitle, .message, .messageSize, .date, .positiveActionLabel, .negativeActionLabel,
        ]
        #expect(attributes.map(\.rawValue) == Array(0...7))
        #expect(NotificationAttributeID.allDefined == attributes)
        #expect(attributes.map(\.name) == [
            "app_identifier", "title", "subtitle", "message", "message_size", "date",
            "positive_action_label", "negative_action_label",
        ])
        #expect(attributes.filter(\.takesMaxLength) == [.title, .subtitle, .message])
        #expect(AppAttributeID.displayName.rawValue == 0)
        #expect(AppAttributeID.displayName.name == "display_name")
    }

    @Test func attErrorCodes() {
        let ancs: [ATTErrorCode] = [.unknownCommand, .invalidCommand, .invalidParameter, .actionFailed]
        #expect(ancs.map(\.rawValue) == [0xA0, 0xA1, 0xA2, 0xA3])
        #expect(ancs.allSatisfy { $0.isANCSSpecific })
        #expect(ancs.map(\.name) == ["unknown_command", "invalid_command", "invalid_parameter", "action_failed"])
        #expect(ATTErrorCode.writeNotPermitted.rawValue == 0x03)
        #expect(!ATTErrorCode.writeNotPermitted.isANCSSpecific)
        #expect(ATTErrorCode(rawValue: 0x0E).description == "att_error(0x0e)")
    }

    /// Every byte value of every identifier is representable; reserved ones say so and never trap.
    @Test func everyByteValueIsRepresentable() {
        for raw in UInt8.min...UInt8.max {
            #expect(EventID(rawValue: raw).isReserved == (raw > 2))
            #expect(CategoryID(rawValue: raw).isReserved == (raw > 11))
            #expect(CommandID(rawValue: raw).isReserved == (raw > 2))
            #expect(NotificationAttributeID(rawValue: raw).isReserved == (raw > 7))
            #expect(AppAttributeID(rawValue: raw).isReserved == (raw > 0))
            #expect(ActionID(rawValue: raw).isReserved == (raw > 1))
            if raw > 11 { #expect(CategoryID(rawValue: raw).description == "reserved(\(hexByte(raw)))") }
            let flags = EventFlags(rawValue: raw)
            #expect(flags.reservedBits == raw & 0xE0)
            #expect(flags.names.count == (raw & 0x1F).nonzeroBitCount)
        }
    }

    @Test func eventFlags() {
        let flags = EventFlags(rawValue: 0b0001_1101)
        #expect(flags.contains(.silent) && flags.contains(.preExisting))
        #expect(!flags.contains(.important))
        #expect(flags.names == ["silent", "pre_existing", "positive_action", "negative_action"])
        #expect(EventFlags(rawValue: 0x22).description == "[important, reserved(0x20)]")
        #expect([EventFlags.silent, .important, .preExisting, .positiveAction, .negativeAction].map(\.rawValue) == [1, 2, 4, 8, 16])
    }
}
