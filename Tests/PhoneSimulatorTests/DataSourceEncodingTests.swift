import ANCS
import Testing

/// The phone side of the Data Source: what the encoder builds must decode with the
/// consumer's own `DataSourceReassembler`, at every MTU.
@Suite("Data Source encoding")
struct DataSourceEncodingTests {
    static let values: [NotificationAttributeID: [UInt8]] = [
        .appIdentifier: Array("com.apple.MobileSMS".utf8),
        .title: Array("Ada Lovelace".utf8),
        .subtitle: [],
        .message: Array("Shall we meet at the „Analytical Engine“ café? ☕️ β-test at 10".utf8),
        .messageSize: Array("66".utf8),
        .date: Array("20261130T101500".utf8),
        .positiveActionLabel: Array("Reply".utf8),
        .negativeActionLabel: Array("Clear".utf8),
    ]

    static let allAttributes: [NotificationAttributeRequest] = [
        NotificationAttributeRequest(.appIdentifier),
        NotificationAttributeRequest(.title, maxLength: 64),
        NotificationAttributeRequest(.subtitle, maxLength: 64),
        NotificationAttributeRequest(.message, maxLength: 512),
        NotificationAttributeRequest(.messageSize),
        NotificationAttributeRequest(.date),
        NotificationAttributeRequest(.positiveActionLabel),
        NotificationAttributeRequest(.negativeActionLabel),
    ]

    /// Feeds fragments to a reassembler expecting `request`; returns the response.
    static func reassemble(_ request: ControlPointRequest, _ fragments: [[UInt8]]) throws -> DataSourceResponse? {
        var reassembler = DataSourceReassembler()
        try reassembler.expect(request)
        var result: DataSourceResponse?
        for (index, fragment) in fragments.enumerated() {
            let output = reassembler.feed(fragment)
            #expect(output.error == nil, "fragment \(index): \(String(describing: output.error))")
            if let response = output.response {
                #expect(index == fragments.count - 1, "the response completed before its last fragment")
                result = response
            }
        }
        return result
    }

    @Test("notification attributes round-trip at MTU 23, 185 and 247", arguments: [23, 185, 247])
    func roundTrip(mtu: Int) throws {
        let request = ControlPointRequest.getNotificationAttributes(uid: 0x0403_0201, attributes: Self.allAttributes)
        let bytes = try #require(DataSourceEncoder.response(to: request, notificationAttributes: Self.values))
        #expect(Array(bytes.prefix(5)) == [0x00, 0x01, 0x02, 0x03, 0x04])
        let fragments = DataSourceEncoder.fragments(of: bytes, mtu: mtu)
        #expect(fragments.allSatisfy { $0.count <= mtu - 3 && !$0.isEmpty })
        #expect(fragments.flatMap { $0 } == bytes)
        let response = try #require(try Self.reassemble(request, fragments))
        #expect(response.isComplete)
        #expect(response.subject == .notification(uid: 0x0403_0201))
        #expect(response.attributes.map(\.rawID) == Self.allAttributes.map(\.id.rawValue), "tuples in request order")
        for attribute in Self.allAttributes {
            #expect(response.value(of: attribute.id) == Self.values[attribute.id])
        }
    }

    @Test("tuples follow the request's order, not the ID order")
    func requestOrder() throws {
        let requested = [
            NotificationAttributeRequest(.date), NotificationAttributeRequest(.message, maxLength: 100),
            NotificationAttributeRequest(.appIdentifier),
        ]
        let request = ControlPointRequest.getNotificationAttributes(uid: 7, attributes: requested)
        let bytes = try #require(DataSourceEncoder.response(to: request, notificationAttributes: Self.values))
        let response = try #require(try Self.reassemble(request, [bytes]))
        #expect(response.attributes.map(\.rawID) == [5, 3, 0])
    }

    @Test("missing attributes come with length 0")
    func missingAttribute() throws {
        let request = ControlPointRequest.getNotificationAttributes(
            uid: 9, attributes: [NotificationAttributeRequest(.title, maxLength: 20), NotificationAttributeRequest(.positiveActionLabel)])
        let bytes = DataSourceEncoder.notificationResponse(uid: 9, requested: [
            NotificationAttributeRequest(.title, maxLength: 20), NotificationAttributeRequest(.positiveActionLabel),
        ], values: [.title: Array("Hi".utf8)])
        #expect(bytes == [0x00, 9, 0, 0, 0, 1, 2, 0, 0x48, 0x69, 6, 0, 0])
        let response = try #require(try Self.reassemble(request, [bytes]))
        #expect(response.value(of: .positiveActionLabel) == [])
    }

    @Test("Title, Subtitle and Message are cut on a character boundary with …")
    func truncation() throws {
        // "Grüße" = 47 72 c3bc c39f 65: a budget of 5 bytes (8 minus the ellipsis) must not split "ß".
        let text = Array("Grüße aus Köln".utf8)
        let cut = DataSourceEncoder.truncated(text, maxLength: 8)
        #expect(cut.count <= 8)
        #expect(String(validating: cut, as: UTF8.self) == "Grü…")
        #expect(String(validating: DataSourceEncoder.truncated(text, maxLength: 9), as: UTF8.self) == "Grüß…")
        #expect(DataSourceEncoder.truncated(text, maxLength: 100) == text, "short values are untouched")
        #expect(DataSourceEncoder.truncated(text, maxLength: text.count) == text, "a value of exactly max length is untouched")
        #expect(DataSourceEncoder.truncated(text, maxLength: 2) == [0x47, 0x72], "no room for the ellipsis")
        #expect(DataSourceEncoder.truncated(text, maxLength: 5, ellipsis: false) == Array("Grü".utf8))
        // An emoji of 4 bytes is never split.
        let emoji = Array("ab😀cdef".utf8)
        #expect(String(validating: DataSourceEncoder.truncated(emoji, maxLength: 7), as: UTF8.self) == "ab…")
        #expect(String(validating: DataSourceEncoder.truncated(emoji, maxLength: 9), as: UTF8.self) == "ab😀…")

        let request = ControlPointRequest.getNotificationAttributes(
            uid: 1, attributes: [NotificationAttributeRequest(.message, maxLength: 20), NotificationAttributeRequest(.messageSize)])
        let bytes = try #require(DataSourceEncoder.response(to: request, notificationAttributes: Self.values))
        let response = try #require(try Self.reassemble(request, DataSourceEncoder.fragments(of: bytes, mtu: 23)))
        let message = try #require(response.value(of: .message))
        #expect(message.count <= 20)
        #expect(Array(message.suffix(3)) == DataSourceEncoder.ellipsis)
        #expect(String(validating: message, as: UTF8.self) != nil)
        #expect(response.value(of: .messageSize) == Array("66".utf8), "MessageSize keeps the full size")
    }

    @Test("an omitted tuple leaves the response incomplete, as iOS sometimes does")
    func omittedTuple() throws {
        let request = ControlPointRequest.getNotificationAttributes(uid: 0x75, attributes: Self.allAttributes)
        let bytes = try #require(DataSourceEncoder.response(
            to: request, notificationAttributes: Self.values,
            options: DataSourceEncodingOptions(omittedAttributes: [.positiveActionLabel])))
        var reassembler = DataSourceReassembler()
        try reassembler.expect(request)
        for fragment in DataSourceEncoder.fragments(of: bytes, mtu: 23) {
            let output = reassembler.feed(fragment)
            #expect(output.response == nil && output.error == nil)
        }
        let finished = reassembler.finishEarly()
        let partial = try #require(finished)
        #expect(partial.missingAttributeIDs == [NotificationAttributeID.positiveActionLabel.rawValue])
        #expect(partial.value(of: .negativeActionLabel) == Array("Clear".utf8))
    }

    @Test("app attributes round-trip")
    func appAttributes() throws {
        let request = ControlPointRequest.getAppAttributes(appIdentifier: "com.apple.MobileSMS", attributes: [.displayName])
        let bytes = try #require(DataSourceEncoder.response(to: request, appAttributes: [.displayName: Array("Messages".utf8)]))
        #expect(bytes.first == 0x01)
        let response = try #require(try Self.reassemble(request, DataSourceEncoder.fragments(of: bytes, mtu: 23)))
        #expect(response.subject == .app(identifier: "com.apple.MobileSMS"))
        #expect(response.value(of: .displayName) == Array("Messages".utf8))
    }

    @Test("PerformNotificationAction has no Data Source response")
    func action() {
        #expect(DataSourceEncoder.response(to: .performNotificationAction(uid: 1, action: .positive)) == nil)
    }

    @Test("fragments: sizes, empty input, MTU below the minimum")
    func fragments() {
        let bytes = (0..<100).map { UInt8($0) }
        #expect(DataSourceEncoder.fragments(of: bytes, mtu: 23).map(\.count) == [20, 20, 20, 20, 20])
        #expect(DataSourceEncoder.fragments(of: bytes, mtu: 50).map(\.count) == [47, 47, 6])
        #expect(DataSourceEncoder.fragments(of: bytes, mtu: 247).map(\.count) == [100])
        #expect(DataSourceEncoder.fragments(of: [], mtu: 23).isEmpty)
        #expect(DataSourceEncoder.fragments(of: bytes, mtu: 5).map(\.count) == [20, 20, 20, 20, 20])
    }
}
