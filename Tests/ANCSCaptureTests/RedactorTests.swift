import ANCS
import ANCSCapture
import Testing

@Suite struct DataSourceRedactorTests {
    @Test func redactsTextValuesAcrossFragmentsAndKeepsTheStructure() throws {
        let request = ControlPointRequest.getNotificationAttributes(uid: 9, attributes: [
            .init(.appIdentifier), .init(.title, maxLength: 64), .init(.message, maxLength: 64), .init(.messageSize), .init(.date),
        ])
        var encoder = [UInt8]()
        func tuple(_ id: UInt8, _ text: String) -> [UInt8] {
            let bytes = Array(text.utf8)
            return [id, UInt8(bytes.count), 0] + bytes
        }
        // Appended one by one: Swift 6.0 cannot type-check the whole sum in reasonable time.
        encoder = [0x00, 9, 0, 0, 0]
        encoder += tuple(0, "com.apple.MobileSMS")
        encoder += tuple(1, "Grace Hopper")
        encoder += tuple(3, "A moth 🦋 in relay 70")
        encoder += tuple(4, "22")
        encoder += tuple(5, "20261130T101200")
        var redactor = DataSourceRedactor()
        redactor.expect(controlPointWrite: try request.encoded())
        var out: [UInt8] = []
        for cut in stride(from: 0, to: encoder.count, by: 7) {  // fragments at arbitrary positions
            out += redactor.redact(Array(encoder[cut..<min(encoder.count, cut + 7)]))
        }
        #expect(out.count == encoder.count)
        var reassembler = DataSourceReassembler()
        try reassembler.expect(request)
        let response = try #require(reassembler.feed(out).response)
        #expect(response.isComplete)
        #expect(response.value(of: .appIdentifier) == Array("com.apple.MobileSMS".utf8))
        #expect(response.value(of: .title) == Array(repeating: UInt8(ascii: "x"), count: 12))
        #expect(response.value(of: .message) == Array(repeating: UInt8(ascii: "x"), count: "A moth 🦋 in relay 70".utf8.count))
        #expect(response.value(of: .messageSize) == Array("22".utf8))
        #expect(response.value(of: .date) == Array("20261130T101200".utf8))
        // Past the response, or with no request known, everything is replaced.
        #expect(redactor.redact(Array("secret".utf8)) == Array("xxxxxx".utf8))
        var fresh = DataSourceRedactor()
        #expect(fresh.redact(Array("Hi".utf8)) == Array("xx".utf8))
    }

    @Test func appAttributesKeepTheDisplayName() throws {
        var redactor = DataSourceRedactor()
        redactor.expect(controlPointWrite: try ControlPointRequest.getAppAttributes(appIdentifier: "a.b", attributes: [.displayName]).encoded())
        let value: [UInt8] = [0x01] + Array("a.b".utf8) + [0, 0, 8, 0] + Array("Messages".utf8)
        #expect(redactor.redact(value) == value)
    }
}
