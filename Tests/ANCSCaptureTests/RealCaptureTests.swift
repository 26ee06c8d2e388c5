import ANCS
import ANCSCapture
import Foundation
import JSON
import TestSupport
import Testing

/// Every real capture decodes to exactly the values its case file records, whatever the fragmentation.
@Suite struct RealCaptureTests {
    @Test func allCapturesAreHere() {
        #expect(Fixtures.captureFiles.count == 21)
    }

    @Test(arguments: Fixtures.captureFiles)
    func decodesToTheRecordedValues(capture: URL) throws {
        let records = try Fixtures.records(capture)
        let expected = try #require(try Fixtures.json(Fixtures.caseFile(for: capture))["expected"])
        guard let exchange = try DataSourceExchange(records) else {
            try checkNotificationSource(records, expected)
            return
        }
        let responses = try #require(expected["responses"]?.arrayValue)
        #expect(responses.count == 1)
        let want = try #require(responses.first)
        let outcome = try reassemble(exchange.request, exchange.fragments.map { $0[...] })
        let response: DataSourceResponse
        switch outcome {
        case .response(let r):
            #expect(want["complete"] == true)
            response = r
        case .endedEarly(let r):
            #expect(want["complete"] == false)
            response = r
        case .error(let error):
            Issue.record("unexpected error \(error)")
            return
        }
        try check(response, against: want)
    }

    /// Split into two at every position, and byte by byte: the same outcome each time.
    @Test(arguments: Fixtures.captureFiles)
    func sameOutcomeAtEverySplit(capture: URL) throws {
        guard let exchange = try DataSourceExchange(try Fixtures.records(capture)) else { return }
        let stream = exchange.stream
        let reference = try reassemble(exchange.request, exchange.fragments.map { $0[...] })
        #expect(ReferenceParser.parse(exchange.request, stream) == reference, "the oracle agrees")
        for cut in 0...stream.count {
            #expect(try reassemble(exchange.request, split(stream, at: [cut])) == reference, "split at \(cut)")
        }
        #expect(try reassemble(exchange.request, stream.map { [$0][...] }) == reference, "byte by byte")
    }

    private func check(_ response: DataSourceResponse, against want: JSONValue) throws {
        #expect(Int(response.commandID.rawValue) == want["command_id"]?.intValue)
        switch response.subject {
        case .notification(let uid): #expect(Int(uid) == want["notification_uid"]?.intValue)
        case .app(let identifier): #expect(identifier == want["app_identifier"]?.stringValue)
        }
        let missing = want["missing_requested_attribute_ids"]?.arrayValue?.compactMap(\.intValue) ?? []
        #expect(response.missingAttributeIDs.map(Int.init) == missing)
        let attributes = try #require(want["attributes"]?.arrayValue)
        #expect(response.attributes.count == attributes.count)
        for (got, wanted) in zip(response.attributes, attributes) {
            #expect(Int(got.rawID) == wanted["id"]?.intValue)
            #expect(got.value.count == wanted["length"]?.intValue)
            #expect(encodeHex(got.value) == wanted["value_hex"]?.stringValue)
            let text = AttributeText(got.value)
            #expect(text.string == wanted["value_utf8"]?.stringValue)
            #expect(!text.wasRepaired == wanted["utf8_valid"]?.boolValue)
            if let date = wanted["date"] {
                let parsed = DateAttribute(got.value)
                if date["valid"] == true {
                    let d = try #require(parsed.date)
                    #expect([d.year, d.month, d.day, d.hour, d.minute, d.second]
                        == ["year", "month", "day", "hour", "minute", "second"].map { date[$0]?.intValue ?? -1 })
                } else {
                    #expect(parsed == .empty && date["reason"] == "empty")
                }
            }
            if let size = wanted["message_size"] {
                #expect(parseMessageSize(got.value) == size.intValue)
            }
        }
    }

    private func checkNotificationSource(_ records: [CaptureRecord], _ expected: JSONValue) throws {
        let bytes = try #require(records.compactMap { record -> [UInt8]? in
            if case .value(_, .ns, let bytes, _) = record { return bytes }
            return nil
        }.first)
        let event = try NotificationSourceEvent(decoding: bytes)
        #expect(Int(event.eventID.rawValue) == expected["event_id"]?.intValue)
        #expect(Int(event.flags.rawValue) == expected["event_flags"]?.intValue)
        #expect(Int(event.categoryID.rawValue) == expected["category_id"]?.intValue)
        #expect(Int(event.categoryCount) == expected["category_count"]?.intValue)
        #expect(Int(event.notificationUID) == expected["notification_uid"]?.intValue)
        #expect(event.eventID.isReserved == expected["event_id_reserved"]?.boolValue)
        #expect(event.categoryID.isReserved == expected["category_id_reserved"]?.boolValue)
        #expect(Int(event.flags.reservedBits) == expected["event_flags_reserved_bits"]?.intValue)
    }
}

/// Randomized fragmentation and mutation with a fixed seed: the reassembler never traps, is
/// independent of fragmentation, and agrees with the whole-buffer reference parser.
@Suite struct PropertyTests {
    static let exchanges: [DataSourceExchange] = Fixtures.captureFiles.compactMap {
        try? DataSourceExchange(Fixtures.records($0))
    }

    @Test func randomFragmentationDecodesIdentically() throws {
        var rng = SplitMix64(seed: 0xA0C5_2026)
        #expect(Self.exchanges.count == 20)
        var cases = 0
        for exchange in Self.exchanges {
            let stream = exchange.stream
            let reference = try reassemble(exchange.request, exchange.fragments.map { $0[...] })
            for _ in 0..<250 {
                let cuts = (0..<Int.random(in: 0...12, using: &rng)).map { _ in Int.random(in: 0...stream.count, using: &rng) }
                #expect(try reassemble(exchange.request, split(stream, at: cuts)) == reference, "cuts \(cuts)")
                cases += 1
            }
        }
        #expect(cases == 5_000)
    }

    @Test func randomMutationsNeverTrapAndAgreeWithTheReference() throws {
        var rng = SplitMix64(seed: 0x5EED_0001)
        let tight = DataSourceLimits(maxAttributeLength: 150, maxResponseLength: 400)
        var outcomes: [String: Int] = [:]
        for exchange in Self.exchanges {
            for round in 0..<400 {
                var stream = exchange.stream
                for _ in 0...Int.random(in: 0...2, using: &rng) { mutate(&stream, using: &rng) }
                let cuts = (0..<Int.random(in: 0...8, using: &rng)).map { _ in Int.random(in: 0...stream.count, using: &rng) }
                let limits = round % 4 == 0 ? tight : DataSourceLimits()
                let got = try reassemble(exchange.request, split(stream, at: cuts), limits: limits)
                let want = ReferenceParser.parse(exchange.request, stream, limits: limits)
                #expect(got == want, "stream \(encodeHex(stream)) cuts \(cuts)")
                switch got {
                case .response: outcomes["response", default: 0] += 1
                case .endedEarly: outcomes["endedEarly", default: 0] += 1
                case .error(let error): outcomes[error.code, default: 0] += 1
                }
            }
        }
        // The mutations reach every outcome, not just one.
        for kind in ["response", "endedEarly", "command_mismatch", "uid_mismatch", "unknown_attribute", "attribute_too_long"] {
            #expect(outcomes[kind, default: 0] > 0, "\(kind) never happened: \(outcomes)")
        }
    }

    /// One random change: flip a byte, insert, delete, truncate, or repeat a chunk.
    private func mutate(_ bytes: inout [UInt8], using rng: inout SplitMix64) {
        guard !bytes.isEmpty else {
            bytes.append(UInt8.random(in: 0...255, using: &rng))
            return
        }
        let at = Int.random(in: 0..<bytes.count, using: &rng)
        switch Int.random(in: 0..<6, using: &rng) {
        case 0: bytes[at] = UInt8.random(in: 0...255, using: &rng)
        case 1: bytes[at] ^= 1 << UInt8.random(in: 0..<8, using: &rng)
        case 2: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: at)
        case 3: bytes.remove(at: at)
        case 4: bytes.removeLast(Int.random(in: 0...(bytes.count - at), using: &rng))
        default:
            let end = min(bytes.count, at + Int.random(in: 1...16, using: &rng))
            bytes.insert(contentsOf: bytes[at..<end], at: at)
        }
    }
}
