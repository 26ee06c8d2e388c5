import Testing
import ANCS

@Suite struct ControlPointEncodingTests {
    @Test func getNotificationAttributes() throws {
        let request = ControlPointRequest.getNotificationAttributes(uid: 0x75, attributes: [
            .init(.positiveActionLabel), .init(.negativeActionLabel), .init(.appIdentifier),
            .init(.title, maxLength: 40), .init(.subtitle, maxLength: 40), .init(.message, maxLength: 200), .init(.date),
        ])
        #expect(try request.encoded() == hex("007500000006070001280002280003c80005"))
        #expect(request.commandID == .getNotificationAttributes)
        #expect(request.expectsDataSourceResponse)
    }

    @Test func getAppAttributes() throws {
        let request = ControlPointRequest.getAppAttributes(appIdentifier: "com.apple.MobileSMS", attributes: [.displayName])
        #expect(try request.encoded() == hex("01636f6d2e6170706c652e4d6f62696c65534d530000"))
    }

    @Test func performNotificationAction() throws {
        let request = ControlPointRequest.performNotificationAction(uid: 0x0403_0201, action: .negative)
        #expect(try request.encoded() == [0x02, 0x01, 0x02, 0x03, 0x04, 0x01])
        #expect(!request.expectsDataSourceResponse)
    }

    @Test(arguments: [NotificationAttributeID.title, .subtitle, .message])
    func maxLengthIsRequiredForTextAttributes(id: NotificationAttributeID) {
        #expect(throws: ControlPointError.maxLengthRequired(id)) {
            try ControlPointRequest.getNotificationAttributes(uid: 1, attributes: [.init(id)]).encoded()
        }
    }

    @Test(arguments: [NotificationAttributeID.appIdentifier, .messageSize, .date, .positiveActionLabel, .negativeActionLabel])
    func maxLengthIsRefusedForOtherAttributes(id: NotificationAttributeID) {
        #expect(throws: ControlPointError.maxLengthNotAllowed(id)) {
            try ControlPointRequest.getNotificationAttributes(uid: 1, attributes: [.init(id, maxLength: 10)]).encoded()
        }
    }

    @Test func refusesInvalidRequests() {
        let cases: [(ControlPointRequest, ControlPointError)] = [
            (.getNotificationAttributes(uid: 1, attributes: []), .noAttributes),
            (.getNotificationAttributes(uid: 1, attributes: [.init(NotificationAttributeID(rawValue: 8))]), .reservedAttribute(8)),
            (.getNotificationAttributes(uid: 1, attributes: [.init(.date), .init(.date)]), .duplicateAttribute(5)),
            (.getAppAttributes(appIdentifier: "com.example\u{0}evil", attributes: [.displayName]), .appIdentifierContainsNUL),
            (.getAppAttributes(appIdentifier: "", attributes: [.displayName]), .emptyAppIdentifier),
            (.getAppAttributes(appIdentifier: "com.example", attributes: []), .noAttributes),
            (.getAppAttributes(appIdentifier: "com.example", attributes: [AppAttributeID(rawValue: 1)]), .reservedAttribute(1)),
            (.getAppAttributes(appIdentifier: "com.example", attributes: [.displayName, .displayName]), .duplicateAttribute(0)),
            (.getAppAttributes(appIdentifier: String(repeating: "a", count: 510), attributes: [.displayName]), .tooLong(513)),
            (.performNotificationAction(uid: 1, action: ActionID(rawValue: 2)), .reservedAction(2)),
        ]
        for (request, error) in cases {
            #expect(throws: error) { try request.encoded() }
        }
    }

    @Test func largestAppIdentifierThatFits() throws {
        let request = ControlPointRequest.getAppAttributes(appIdentifier: String(repeating: "a", count: 509), attributes: [.displayName])
        #expect(try request.encoded().count == 512)
    }
}

@Suite struct ControlPointDecodingTests {
    @Test func roundTripsEveryCommand() throws {
        let requests: [ControlPointRequest] = [
            .getNotificationAttributes(uid: 0xDEAD_BEEF, attributes: NotificationAttributeID.allDefined.map {
                NotificationAttributeRequest($0, maxLength: $0.takesMaxLength ? 0xFFFF : nil)
            }),
            .getAppAttributes(appIdentifier: "com.getpebble.pebbletime.enterprise", attributes: [.displayName]),
            .performNotificationAction(uid: 7, action: .positive),
        ]
        for request in requests {
            #expect(try ControlPointRequest(decoding: request.encoded()) == request)
        }
    }

    @Test func refusesMalformedValues() {
        let cases: [(String, ControlPointError)] = [
            ("", .empty),
            ("03", .unknownCommand(3)),
            ("000100", .truncated(offset: 3)),
            ("0001000000", .noAttributes),
            ("000100000001", .truncated(offset: 6)),
            ("00010000000128", .truncated(offset: 7)),
            ("00010000000808", .reservedAttribute(8)),
            ("0001000000050500", .duplicateAttribute(5)),
            ("01616263", .unterminatedAppIdentifier),
            ("0100", .emptyAppIdentifier),
            ("0161626300", .noAttributes),
            ("016162630001", .reservedAttribute(1)),
            ("02010000", .truncated(offset: 4)),
            ("0201000000", .truncated(offset: 5)),
            ("020100000000ff", .trailingBytes(offset: 6)),
            ("020100000002", .reservedAction(2)),
        ]
        for (value, error) in cases {
            #expect(throws: error, "\(value)") { try ControlPointRequest(decoding: hex(value)) }
        }
        #expect(throws: ControlPointError.tooLong(513)) { try ControlPointRequest(decoding: [UInt8](repeating: 1, count: 513)) }
    }

    @Test func errorsHaveCodesAndText() {
        #expect(ControlPointError.appIdentifierContainsNUL.code == "app_identifier_contains_nul")
        #expect(ControlPointError.unknownCommand(9).description == "unknown command ID 0x09")
        #expect(ControlPointError.maxLengthRequired(.message).description == "message needs a max length")
    }
}

/// Bytes from a hex string written in a test.
func hex(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var chars = Array(text.utf8)[...]
    while chars.count >= 2 {
        bytes.append(UInt8(String(decoding: chars.prefix(2), as: UTF8.self), radix: 16) ?? 0)
        chars = chars.dropFirst(2)
    }
    return bytes
}
