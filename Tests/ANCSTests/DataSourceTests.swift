import Testing
import ANCS

/// The request and response of the real SMS capture (uid 0x1a, pebble), used as a known-good stream.
private let smsRequest = ControlPointRequest.getNotificationAttributes(uid: 0x1A, attributes: [
    .init(.positiveActionLabel), .init(.negativeActionLabel), .init(.appIdentifier),
    .init(.title, maxLength: 40), .init(.subtitle, maxLength: 40), .init(.message, maxLength: 200), .init(.date),
])

/// A small response: uid 1, Title "Hi", Date.
private let titleDateRequest = ControlPointRequest.getNotificationAttributes(uid: 1, attributes: [
    .init(.title, maxLength: 40), .init(.date),
])
private let titleDateResponse = hex("00" + "01000000" + "010200" + "4869" + "050f00" + "3230313530363135543136313833370a")
    .dropLast()  // the trailing 0a above only pads the literal
    .map { $0 }

private func reassembler(expecting request: ControlPointRequest, limits: DataSourceLimits = DataSourceLimits()) throws -> DataSourceReassembler {
    var reassembler = DataSourceReassembler(limits: limits)
    try reassembler.expect(request)
    return reassembler
}

@Suite struct DataSourceReassemblyTests {
    @Test func completesInOneFragment() throws {
        var r = try reassembler(expecting: titleDateRequest)
        let output = r.feed(titleDateResponse)
        let response = try #require(output.response)
        #expect(output.error == nil)
        #expect(response.subject == .notification(uid: 1))
        #expect(response.isComplete)
        #expect(response.attributes == [
            DataSourceAttribute(rawID: 1, value: Array("Hi".utf8)),
            DataSourceAttribute(rawID: 5, value: Array("20150615T161837".utf8)),
        ])
        #expect(response.value(of: .title) == Array("Hi".utf8))
        #expect(response.value(of: .message) == nil)
        #expect(r.pendingRequest == nil)
    }

    /// Every split position: inside the command, the UID, the attribute header and the values.
    @Test func completesWhateverTheSplit() throws {
        var once = try reassembler(expecting: titleDateRequest)
        let whole = try #require(once.feedAll([titleDateResponse]).response)
        for split in 0...titleDateResponse.count {
            var r = try reassembler(expecting: titleDateRequest)
            let first = r.feed(titleDateResponse[..<split])
            if split < titleDateResponse.count {
                #expect(first == .needMore, "split at \(split)")
                #expect(r.bytesReceived == split)
                let second = r.feed(titleDateResponse[split...])
                #expect(second.response == whole && second.error == nil, "split at \(split)")
            } else {
                #expect(first.response == whole)
            }
        }
        var r = try reassembler(expecting: titleDateRequest)
        var outputs: [DataSourceOutput] = []
        for byte in titleDateResponse { outputs.append(r.feed([byte])) }
        #expect(outputs.dropLast().allSatisfy { $0 == .needMore })
        #expect(outputs.last?.response == whole)
    }

    @Test func emptyFragmentsChangeNothing() throws {
        var r = try reassembler(expecting: titleDateRequest)
        #expect(r.feed([]) == .needMore)
        #expect(r.feed(titleDateResponse[..<3]) == .needMore)
        #expect(r.feed([]) == .needMore)
        #expect(r.feed(titleDateResponse[3...]).response != nil)
    }

    @Test func acceptsTuplesOutOfRequestOrder() throws {
        var r = try reassembler(expecting: titleDateRequest)
        let reordered = hex("00010000000500000102004869")
        let response = try #require(r.feed(reordered).response)
        #expect(response.attributes.map(\.rawID) == [5, 1])
    }

    @Test func appAttributes() throws {
        var r = try reassembler(expecting: .getAppAttributes(appIdentifier: "com.apple.MobileSMS", attributes: [.displayName]))
        let bytes = hex("01636f6d2e6170706c652e4d6f62696c65534d5300000800") + Array("Messages".utf8)
        for split in 0...bytes.count {
            var copy = r
            let first = copy.feed(bytes[..<split])
            let output = split == bytes.count ? first : copy.feed(bytes[split...])
            let response = try #require(output.response, "split \(split)")
            #expect(response.subject == .app(identifier: "com.apple.MobileSMS"))
            #expect(response.value(of: AppAttributeID.displayName) == Array("Messages".utf8))
        }
        _ = r.finishEarly()
    }

    @Test func finishEarlyReturnsWhatArrived() throws {
        var r = try reassembler(expecting: titleDateRequest)
        #expect(r.feed(titleDateResponse[..<12]) == .needMore)  // Title done, Date header + 2 value bytes
        let finished = r.finishEarly()
        let response = try #require(finished)
        #expect(!response.isComplete)
        #expect(response.attributes == [DataSourceAttribute(rawID: 1, value: Array("Hi".utf8))])
        #expect(response.missingAttributeIDs == [5])
        #expect(r.pendingRequest == nil)
        #expect(r.finishEarly() == nil)
    }

    @Test func finishEarlyBeforeAnyByte() throws {
        var r = try reassembler(expecting: titleDateRequest)
        let finished = r.finishEarly()
        let response = try #require(finished)
        #expect(response.attributes.isEmpty && response.missingAttributeIDs == [1, 5])
    }

    @Test func actionRequestsExpectNoResponse() throws {
        var r = try reassembler(expecting: titleDateRequest)
        try r.expect(.performNotificationAction(uid: 1, action: .positive))
        #expect(r.pendingRequest == nil)
        #expect(r.feed([0]).error == DataSourceError(.noPendingRequest, offset: 0))
    }

    @Test func expectRefusesInvalidRequests() {
        var r = DataSourceReassembler()
        #expect(throws: ControlPointError.reservedAttribute(9)) {
            try r.expect(.getNotificationAttributes(uid: 1, attributes: [.init(NotificationAttributeID(rawValue: 9))]))
        }
        #expect(r.pendingRequest == nil)
    }

    /// `feed(_:completing:)` and `finishEarly(_:)` hand over in place what `feed(_:)` and
    /// `finishEarly()` return, split anywhere, with trailing bytes, and response after response
    /// (the values' storage is reused).
    @Test func inPlaceResponsesSayWhatTheValuesSay() throws {
        let withTrailing = titleDateResponse + [0xAA, 0xBB]
        var byValue = try reassembler(expecting: smsRequest)
        var inPlace = try reassembler(expecting: smsRequest)
        let smsOutput = byValue.feed(RealSMSResponseTests.bytes)
        var smsView: DataSourceResponse? = nil
        let smsError = RealSMSResponseTests.bytes.withUnsafeBufferPointer { inPlace.feed($0, completing: { smsView = $0.response }) }
        #expect(smsError == nil && smsView == smsOutput.response && smsView != nil)
        for split in 0...withTrailing.count {
            try byValue.expect(titleDateRequest)
            try inPlace.expect(titleDateRequest)
            var expected: [DataSourceOutput] = []
            var given: [DataSourceOutput] = []
            for part in [Array(withTrailing[..<split]), Array(withTrailing[split...])] {
                expected.append(byValue.feed(part))
                var response: DataSourceResponse? = nil
                let error = part.withUnsafeBufferPointer { inPlace.feed($0, completing: { response = $0.response }) }
                given.append(DataSourceOutput(response: response, error: error))
            }
            #expect(given == expected, "split \(split)")
        }
        try byValue.expect(titleDateRequest)
        try inPlace.expect(titleDateRequest)
        _ = byValue.feed(titleDateResponse[..<12])
        _ = titleDateResponse[..<12].withUnsafeBufferPointer { inPlace.feed($0, completing: { _ in Issue.record("not complete yet") }) }
        var early: DataSourceResponse? = nil
        #expect(inPlace.finishEarly { early = $0.response })
        #expect(early == byValue.finishEarly() && early?.missingAttributeIDs == [5])
        #expect(!inPlace.finishEarly { _ in Issue.record("nothing is pending") })
    }

    @Test func aResponseSeenInPlaceIsTheSame() throws {
        let response = DataSourceResponse(subject: .app(identifier: "com.example"), attributes: [
            DataSourceAttribute(rawID: 0, value: Array("Example".utf8)), DataSourceAttribute(rawID: 3, value: []),
        ], missingAttributeIDs: [7])
        response.withView { view in
            #expect(view.count == 2 && view.rawID(at: 1) == 3 && view.value(at: 1).isEmpty && !view.isComplete)
            #expect(Array(view.value(at: 0)) == Array("Example".utf8))
            #expect(view.response == response)
        }
    }

    @Test func expectReplacesAResponseInProgress() throws {
        var r = try reassembler(expecting: titleDateRequest)
        _ = r.feed(titleDateResponse[..<8])
        try r.expect(titleDateRequest)
        #expect(r.bytesReceived == 0)
        #expect(r.feed(titleDateResponse).response != nil)
    }
}

@Suite struct DataSourceErrorTests {
    private func firstError(_ request: ControlPointRequest, _ bytes: [UInt8], limits: DataSourceLimits = DataSourceLimits()) throws -> DataSourceError? {
        var r = try reassembler(expecting: request, limits: limits)
        let error = r.feed(bytes).error
        #expect(r.pendingRequest == nil || error == nil, "an error leaves the reassembler idle")
        return error
    }

    @Test func noPendingRequest() {
        var r = DataSourceReassembler()
        #expect(r.feed([0, 1]).error == DataSourceError(.noPendingRequest, offset: 0))
        #expect(r.feed([]) == .needMore)
    }

    @Test func commandMismatch() throws {
        #expect(try firstError(titleDateRequest, [0x01]) == DataSourceError(.commandMismatch(expected: .getNotificationAttributes, received: .getAppAttributes), offset: 0))
    }

    @Test func uidMismatch() throws {
        #expect(try firstError(titleDateRequest, hex("0002000000")) == DataSourceError(.notificationUIDMismatch(expected: 1, received: 2), offset: 1))
    }

    @Test func appIdentifierMismatch() throws {
        let request = ControlPointRequest.getAppAttributes(appIdentifier: "abc", attributes: [.displayName])
        #expect(try firstError(request, hex("01616278")) == DataSourceError(.appIdentifierMismatch(expected: "abc"), offset: 3))
        #expect(try firstError(request, hex("0161626364")) == DataSourceError(.appIdentifierMismatch(expected: "abc"), offset: 4), "longer identifier")
        #expect(try firstError(request, hex("016162000000")) == DataSourceError(.appIdentifierMismatch(expected: "abc"), offset: 3), "shorter identifier")
    }

    @Test func unknownUnrequestedAndDuplicateAttributes() throws {
        #expect(try firstError(titleDateRequest, hex("000100000008")) == DataSourceError(.unknownAttribute(8), offset: 5))
        #expect(try firstError(titleDateRequest, hex("0001000000ff")) == DataSourceError(.unknownAttribute(0xFF), offset: 5))
        #expect(try firstError(titleDateRequest, hex("000100000003")) == DataSourceError(.unrequestedAttribute(3), offset: 5))
        #expect(try firstError(titleDateRequest, hex("00010000000100000100")) == DataSourceError(.duplicateAttribute(1), offset: 8))
        let app = ControlPointRequest.getAppAttributes(appIdentifier: "a", attributes: [.displayName])
        #expect(try firstError(app, hex("01610001")) == DataSourceError(.unknownAttribute(1), offset: 3))
    }

    @Test func attributeOverTheCap() throws {
        let limits = DataSourceLimits(maxAttributeLength: 100, maxResponseLength: 1000)
        #expect(try firstError(titleDateRequest, hex("00010000000165"), limits: limits) == nil)
        #expect(try firstError(titleDateRequest, hex("0001000000016500"), limits: limits)
            == DataSourceError(.attributeTooLong(id: 1, length: 101, limit: 100), offset: 5))
        #expect(try firstError(titleDateRequest, hex("0001000000016400"), limits: limits) == nil)
    }

    @Test func attributeAsLongAsItsRequestedMaximum() throws {
        let limits = DataSourceLimits(maxAttributeLength: 100, maxResponseLength: 1000)
        let request = ControlPointRequest.getNotificationAttributes(uid: 1, attributes: [.init(.title, maxLength: 300), .init(.date)])
        // 300 bytes (0x012C) for a title asked with max 300 pass the 100-byte cap; 301 do not.
        #expect(try firstError(request, hex("0001000000012c01"), limits: limits) == nil)
        #expect(try firstError(request, hex("0001000000012d01"), limits: limits)
            == DataSourceError(.attributeTooLong(id: 1, length: 301, limit: 300), offset: 5))
        // The Date has no requested maximum: the cap applies.
        #expect(try firstError(request, hex("000100000001000005" + "6500"), limits: limits)
            == DataSourceError(.attributeTooLong(id: 5, length: 101, limit: 100), offset: 8))
    }

    /// ANCS lengths are 16-bit: with the default limits, a 65,535-byte Title, Subtitle and Message
    /// requested with max length 65,535 reassemble, cut in 244-byte notifications.
    @Test func fullLengthAttributesWithTheDefaultLimits() throws {
        let full = UInt16.max
        let request = ControlPointRequest.getNotificationAttributes(uid: 7, attributes: [
            .init(.title, maxLength: full), .init(.subtitle, maxLength: full), .init(.message, maxLength: full), .init(.date),
        ])
        let title = [UInt8](repeating: UInt8(ascii: "T"), count: 65_535)
        let subtitle = [UInt8](repeating: UInt8(ascii: "S"), count: 65_535)
        let message = [UInt8](repeating: UInt8(ascii: "M"), count: 65_535)
        var bytes: [UInt8] = [0, 7, 0, 0, 0]
        for (id, value) in [(UInt8(1), title), (2, subtitle), (3, message), (5, Array("20261201T174500".utf8))] {
            bytes += [id, UInt8(value.count & 0xFF), UInt8(value.count >> 8)] + value
        }
        var r = try reassembler(expecting: request)
        var response: DataSourceResponse? = nil
        var index = 0
        while index < bytes.count {
            let output = r.feed(bytes[index..<min(bytes.count, index + 244)])
            #expect(output.error == nil)
            if let done = output.response { response = done }
            index += 244
        }
        #expect(response?.isComplete == true)
        #expect(response?.value(of: .title) == title)
        #expect(response?.value(of: .subtitle) == subtitle)
        #expect(response?.value(of: .message) == message)
        #expect(bytes.count <= DataSourceLimits().maxResponseLength)
    }

    @Test func responseOverTheCap() throws {
        let limits = DataSourceLimits(maxAttributeLength: 100, maxResponseLength: 20)
        // header 5 + tuple header 3 + 13 bytes = 21 > 20
        #expect(try firstError(titleDateRequest, hex("0001000000010d00"), limits: limits)
            == DataSourceError(.responseTooLong(length: 21, limit: 20), offset: 8))
        #expect(try firstError(titleDateRequest, hex("0001000000010c00"), limits: limits) == nil)
    }

    @Test func trailingBytesAfterACompleteResponse() throws {
        var r = try reassembler(expecting: titleDateRequest)
        let output = r.feed(titleDateResponse + [0xAA, 0xBB])
        #expect(output.response?.isComplete == true)
        #expect(output.error == DataSourceError(.trailingBytes(count: 2), offset: titleDateResponse.count))
        #expect(r.feed([0xCC]).error == DataSourceError(.noPendingRequest, offset: 0))
    }

    @Test func readyForTheNextRequestAfterAnError() throws {
        var r = try reassembler(expecting: titleDateRequest)
        #expect(r.feed(hex("0002000000")).error != nil)
        try r.expect(titleDateRequest)
        #expect(r.feed(titleDateResponse).response?.isComplete == true)
    }

    @Test func errorsRenderForHumans() {
        #expect(DataSourceError(.notificationUIDMismatch(expected: 1, received: 2), offset: 1).description
            == "the response is for notification 2, the request was for 1 (at byte 1)")
        #expect(DataSourceError(.trailingBytes(count: 3), offset: 9).code == "trailing_bytes")
    }
}

@Suite struct RealSMSResponseTests {
    /// The real uid 0x1a SMS response (pebble capture), all in one fragment.
    static let bytes = hex(
        "001a000000060000070500436c656172001300636f6d2e6170706c652e4d6f62696c65534d530113004672616e636f697320"
        + "42616c6461737361726902000003"
        + "1b00746869732069732061207465737420"
        + "6e6f74696669636174696f6e050f003230313530363135543136313833370a"
    ).dropLast().map { $0 }

    @Test func decodes() throws {
        var r = try reassembler(expecting: smsRequest)
        let response = try #require(r.feed(Self.bytes).response)
        #expect(response.isComplete)
        #expect(response.attributes.map(\.rawID) == [6, 7, 0, 1, 2, 3, 5])
        #expect(AttributeText(response.value(of: .title) ?? []).string == "Francois Baldassari")
        #expect(DateAttribute(response.value(of: .date) ?? []) == .valid(ANCSDate(year: 2015, month: 6, day: 15, hour: 16, minute: 18, second: 37)))
    }
}

extension DataSourceReassembler {
    /// Feeds fragments until a response or an error comes out.
    mutating func feedAll(_ fragments: [[UInt8]]) -> DataSourceOutput {
        for fragment in fragments {
            let output = feed(fragment)
            if output != .needMore { return output }
        }
        return .needMore
    }
}
