import ANCS
import ANCSCapture
import Btsnoop
import Foundation
import JSON
import Testing
import TestSupport

/// True if `needle` occurs in `haystack`.
func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, needle.count <= haystack.count else { return false }
    for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
        if Array(haystack[start..<start + needle.count]) == needle { return true }
    }
    return false
}

/// What the extractor read of a file, as comparable facts: for each record, its connection,
/// kind, characteristic, length and ATT error.
func shape(_ records: [ExtractedRecord]) -> [String] {
    records.map { extracted in
        switch extracted.content {
        case .capture(.value(_, let characteristic, let bytes, let error)):
            return "\(extracted.recordNumber) \(extracted.connection) \(characteristic) \(bytes.count) \(error.map(String.init) ?? "-")"
        case .capture(let other): return "\(extracted.recordNumber) \(extracted.connection) \(other)"
        case .ams(let ams): return "\(extracted.recordNumber) \(extracted.connection) ams \(ams.characteristic) \(ams.bytes.count)"
        }
    }
}

@Suite("BtsnoopScrubber")
struct ScrubberTests {
    static let secretTitle = Array("Meet me at Brasserie Lumière".utf8)
    static let secretApp = Array("Signal Private Messenger".utf8)
    static let secretBundle = Array("org.whispersystems.signal".utf8)
    static let phoneName = Array("Alice’s iPhone".utf8)
    static let hostName = Array("alice-thinkpad".utf8)
    static let ltk: [UInt8] = Array(0xA0...0xAF)
    static let irk: [UInt8] = Array(0xB0...0xBF)
    static let csrk: [UInt8] = Array(0xC0...0xCF)
    static let track = Array("Bohemian Rhapsody (Remastered)".utf8)

    /// A capture with everything personal a real one may hold, planted.
    static func plantedCapture(_ datalink: BtsnoopDatalink, aclPayloadLimit: Int = 27) -> SnoopBuilder {
        var b = SnoopBuilder(datalink)
        b.aclPayloadLimit = aclPayloadLimit
        b.newIndex(controller: 0)
        // The host's name and advertising, a phone's advertising and scan response.
        func command(_ opcode: UInt16, _ parameters: [UInt8]) {
            let packet = le(opcode) + [UInt8(parameters.count)] + parameters
            switch datalink {
            case .h4: b.record(flags: 0x02, data: [0x01] + packet)
            case .monitor: b.record(flags: 2, data: packet)
            }
        }
        command(0x0C13, hostName + [UInt8](repeating: 0, count: 248 - hostName.count))
        let ad: [UInt8] = [0x02, 0x01, 0x06, UInt8(hostName.count + 1), 0x09] + hostName
        command(0x2008, [UInt8(ad.count)] + ad + [UInt8](repeating: 0, count: 31 - ad.count))
        let phoneAD: [UInt8] = [0x02, 0x01, 0x1A, UInt8(phoneName.count + 1), 0x08] + phoneName
        b.event(code: 0x3E, parameters: [0x02, 0x01, 0x04, 0x01, 1, 2, 3, 4, 5, 6, UInt8(phoneAD.count)] + phoneAD + [0xC0])
        b.event(code: 0x07, parameters: [0x00, 1, 2, 3, 4, 5, 6] + phoneName + [UInt8](repeating: 0, count: 248 - phoneName.count))
        b.event(code: 0x0E, parameters: [0x01, 0x14, 0x0C, 0x00] + hostName + [UInt8](repeating: 0, count: 248 - hostName.count))
        b.connect(handle: 0x40)
        // Pairing: SMP key distribution, then encryption with the LTK.
        b.l2cap([0x01, 0x04, 0x00, 0x0D, 0x10, 0x07, 0x07], cid: 0x0006, handle: 0x40, from: .host)
        b.l2cap([0x06] + ltk, cid: 0x0006, handle: 0x40, from: .phone)
        b.l2cap([0x07, 0x34, 0x12] + Array(1...8), cid: 0x0006, handle: 0x40, from: .phone)
        b.l2cap([0x08] + irk, cid: 0x0006, handle: 0x40, from: .phone)
        b.l2cap([0x0A] + csrk, cid: 0x0006, handle: 0x40, from: .phone)
        command(0x201A, le(0x40) + ltk)
        command(0x2019, le(0x40) + Array(1...8) + [0x34, 0x12] + ltk)
        b.event(code: 0x18, parameters: [1, 2, 3, 4, 5, 6] + irk + [0x04])
        // GATT: the phone's Device Name read by UUID and by handle, ANCS and AMS discovered.
        b.att([0x08, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x2A], handle: 0x40, from: .host)
        b.att([0x09, UInt8(phoneName.count + 2), 0x03, 0x00] + phoneName, handle: 0x40, from: .phone)
        b.att([0x08, 0x01, 0x00, 0x05, 0x00, 0x03, 0x28], handle: 0x40, from: .host)
        b.att([0x09, 0x07, 0x02, 0x00, 0x02, 0x03, 0x00, 0x00, 0x2A], handle: 0x40, from: .phone)
        b.read(handle: 0x40, attribute: 0x0003)
        b.readResponse(handle: 0x40, phoneName)
        b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        b.amsDiscovery(handle: 0x40, rc: 0x0030, eu: 0x0033, ea: 0x0036)
        // A notification: NS, the request, the response over three notifications (the title cut).
        b.notify(handle: 0x40, attribute: ns, added)
        b.write(handle: 0x40, attribute: cp, [0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x01, 0x40, 0x00, 0x03, 0x00, 0x01])
        b.writeResponse(handle: 0x40)
        // In parts: swiftlang 6.0's type checker gives up on the one expression of literals and +.
        let bundleAttribute: [UInt8] = le(UInt16(secretBundle.count)) + secretBundle
        let titleAttribute: [UInt8] = [0x01] + le(UInt16(secretTitle.count)) + secretTitle
        let answer: [UInt8] = [0x00, 0x07, 0x00, 0x00, 0x00, 0x00] + bundleAttribute + titleAttribute
            + [0x03, 0x05, 0x00] + Array("hello".utf8)
        b.notify(handle: 0x40, attribute: ds, Array(answer[0..<40]))
        b.notify(handle: 0x40, attribute: ds, Array(answer[40..<50]))
        b.notify(handle: 0x40, attribute: ds, Array(answer[50...]))
        // The app's name.
        b.write(handle: 0x40, attribute: cp, [0x01] + secretBundle + [0x00, 0x00])
        b.writeResponse(handle: 0x40)
        b.notify(handle: 0x40, attribute: ds, [0x01] + secretBundle + [0x00, 0x00] + le(UInt16(secretApp.count)) + secretApp)
        // AMS: the track's title notified, then read whole from Entity Attribute.
        b.write(handle: 0x40, attribute: 0x0033, [0x02, 0x00, 0x01, 0x02])
        b.writeResponse(handle: 0x40)
        b.notify(handle: 0x40, attribute: 0x0033, [0x02, 0x02, 0x01] + track.prefix(12))
        b.write(handle: 0x40, attribute: 0x0036, [0x02, 0x02])
        b.writeResponse(handle: 0x40)
        b.read(handle: 0x40, attribute: 0x0036)
        b.readResponse(handle: 0x40, track)
        b.disconnect(handle: 0x40)
        return b
    }

    static let secrets: [(String, [UInt8])] = [
        ("title", secretTitle), ("app name", secretApp), ("bundle", secretBundle), ("phone name", phoneName),
        ("host name", hostName), ("LTK", ltk), ("IRK", irk), ("CSRK", csrk), ("track", track), ("track prefix", Array(track.prefix(12))),
    ]

    @Test("nothing planted survives, and the exchange reads the same", arguments: [BtsnoopDatalink.monitor, .h4])
    func planted(datalink: BtsnoopDatalink) throws {
        var builder = Self.plantedCapture(datalink, aclPayloadLimit: 251)
        let original = builder.bytes
        for (what, secret) in Self.secrets {
            let planted = contains(original, Array(secret.prefix(4)))  // the Data Source cuts the title
            #expect(planted, "the test did not plant the \(what)")
        }
        let (scrubbed, counts) = try BtsnoopScrubber.scrub(file: original)
        #expect(scrubbed.count == original.count)
        for (what, secret) in Self.secrets {
            let survived = contains(scrubbed, secret)
            #expect(!survived, "the \(what) survived")
        }
        // Fragmented at 27 bytes, as a controller with the LE default does, nothing survives either.
        builder = Self.plantedCapture(datalink)
        let fragmented = try BtsnoopScrubber.scrub(file: builder.bytes).file
        for (what, secret) in Self.secrets {
            for start in stride(from: 0, to: secret.count - 4, by: 1) {
                let survived = contains(fragmented, Array(secret[start..<start + 4]))
                #expect(!survived, "4 bytes of the \(what) survived in a fragmented capture")
            }
        }
        #expect(counts.keys >= 7)
        #expect(counts.deviceNames >= 6)
        #expect(counts.ancsValues >= 4)
        #expect(counts.amsValues == 2)

        let before = extract(original)
        let after = extract(scrubbed)
        #expect(before.error == nil && after.error == nil)
        #expect(shape(before.records) == shape(after.records))
        #expect(before.records.count >= 9)
        // The Notification Source and the Get Notification Attributes request are kept as they were.
        let values = { (records: [ExtractedRecord], char: CaptureCharacteristic) in
            records.compactMap { record -> [UInt8]? in
                if case .capture(.value(_, char, let bytes, _)) = record.content { return bytes }
                return nil
            }
        }
        #expect(values(before.records, .ns) == values(after.records, .ns))
        #expect(values(before.records, .cp).first == values(after.records, .cp).first)
        // The Data Source response still reassembles: the same attributes and lengths, values all x.
        let fragments = values(after.records, .ds)
        var reassembler = DataSourceReassembler()
        try reassembler.expect(try ControlPointRequest(decoding: values(after.records, .cp)[0]))
        var response: DataSourceResponse?
        for fragment in fragments.prefix(3) { response = reassembler.feed(fragment[...]).response ?? response }
        let attributes = try #require(response).attributes
        #expect(attributes.map(\.rawID) == [0, 1, 3])
        #expect(attributes.map(\.value.count) == [Self.secretBundle.count, Self.secretTitle.count, 5])
        #expect(attributes.allSatisfy { $0.value.allSatisfy { $0 == BtsnoopScrubber.placeholder } })
    }

    @Test("an ATT PDU cut across ACL fragments is scrubbed in every fragment")
    func fragments() throws {
        for limit in [5, 8, 27] {
            var b = SnoopBuilder(.monitor)
            b.aclPayloadLimit = limit
            b.connect(handle: 0x41)
            b.discovery(handle: 0x41, ns: ns, cp: cp, ds: ds)
            b.write(handle: 0x41, attribute: cp, [0x00, 0x09, 0x00, 0x00, 0x00, 0x01, 0xFF, 0x00])
            b.notify(handle: 0x41, attribute: ds, [0x00, 0x09, 0x00, 0x00, 0x00, 0x01] + le(UInt16(Self.secretTitle.count)) + Self.secretTitle)
            let (scrubbed, counts) = try BtsnoopScrubber.scrub(file: b.bytes)
            // No run of 3 bytes of the title survives in any fragment.
            for start in 0..<(Self.secretTitle.count - 3) {
                let survived = contains(scrubbed, Array(Self.secretTitle[start..<start + 3]))
                #expect(!survived, "limit \(limit)")
            }
            #expect(counts.ancsValues == 1)
            #expect(shape(extract(b.bytes).records) == shape(extract(scrubbed).records))
        }
    }

    @Test("without discovery every value is replaced, and --handles keeps the structure")
    func withoutDiscovery() throws {
        var b = SnoopBuilder(.monitor)
        b.connect(handle: 0x40)
        b.notify(handle: 0x40, attribute: ns, added)
        b.write(handle: 0x40, attribute: cp, request)
        b.writeResponse(handle: 0x40)
        b.notify(handle: 0x40, attribute: ds, response)
        let blind = try BtsnoopScrubber.scrub(file: b.bytes)
        #expect(!contains(blind.file, title))
        #expect(!contains(blind.file, added))
        let told = try BtsnoopScrubber.scrub(file: b.bytes, defaultHandles: ANCSHandles(notificationSource: ns, controlPoint: cp, dataSource: ds))
        #expect(!contains(told.file, Array(title.prefix(4))))
        #expect(contains(told.file, added))
        #expect(contains(told.file, request))
    }

    @Test("a response that does not match its request is replaced from there on")
    func outOfStep() throws {
        var b = SnoopBuilder(.monitor)
        b.connect(handle: 0x40)
        b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        b.write(handle: 0x40, attribute: cp, request)  // asks for the title of UID 7
        // UID 8 answers, then a title longer than the maximum asked for, then stray bytes.
        b.notify(handle: 0x40, attribute: ds, [0x00, 0x08, 0x00, 0x00, 0x00, 0x01, 0x03, 0x00] + Array("abc".utf8))
        b.notify(handle: 0x40, attribute: ds, Array("stray secret".utf8))
        let (scrubbed, _) = try BtsnoopScrubber.scrub(file: b.bytes)
        #expect(!contains(scrubbed, Array("abc".utf8)))
        #expect(!contains(scrubbed, Array("secret".utf8)))
    }

    @Test("monitor records: audio, management, vendor data and log text replaced; index records kept")
    func monitorRecords() throws {
        var b = SnoopBuilder(.monitor)
        b.newIndex(controller: 0)
        let voice = Array("voice samples".utf8)
        b.record(flags: 7, data: [0x01, 0x00, UInt8(voice.count)] + voice)
        b.record(flags: 0xFFFF_0000 | 13, data: [0x06, 0x0B] + Array("bluetoothd".utf8) + [0] + Array("Device Alice’s iPhone found".utf8) + [0])
        b.record(flags: 17, data: [1, 0, 0, 0, 0x0A, 0x00] + [0x00, 0x00] + Self.ltk)  // MGMT New Long Term Key
        b.record(flags: 11, data: Array("vendor secret".utf8))
        let (scrubbed, counts) = try BtsnoopScrubber.scrub(file: b.bytes)
        #expect(!contains(scrubbed, voice))
        #expect(!contains(scrubbed, Array("Alice".utf8)))
        #expect(!contains(scrubbed, Self.ltk))
        #expect(!contains(scrubbed, Array("secret".utf8)))
        #expect(contains(scrubbed, Array("bluetoothd".utf8)))
        #expect(contains(scrubbed, Array("hci0".utf8)))
        #expect(counts.logMessages == 1)
        #expect(counts.payloads == 3)
    }

    /// The real Data Source captures (Tests/ANCSCaptureTests/Fixtures/captures, whose README
    /// keeps their provenance), put in a btsnoop file as a phone would send them.
    static let fixtures: [URL] = {
        let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("ANCSCaptureTests/Fixtures/captures")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { $0.hasPrefix("real-ds-") && $0.hasSuffix(".jsonl") }.sorted().map { directory.appendingPathComponent($0) }
    }()

    @Test("real captures: no attribute value survives, the exchange reads the same")
    func realCaptures() throws {
        #expect(Self.fixtures.count >= 15)
        for url in Self.fixtures {
            let name = url.deletingPathExtension().lastPathComponent
            var parser = CaptureParser()
            let records = try String(contentsOf: url, encoding: .utf8).split(separator: "\n").compactMap { try parser.parse(line: String($0)) }
            var b = SnoopBuilder(.monitor)
            b.connect(handle: 0x40)
            b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
            for case .value(_, let characteristic, let bytes, let error) in records {
                switch characteristic {
                case .ns: b.notify(handle: 0x40, attribute: ns, bytes)
                case .ds: b.notify(handle: 0x40, attribute: ds, bytes)
                case .cp:
                    b.write(handle: 0x40, attribute: cp, bytes)
                    if let error { b.errorResponse(handle: 0x40, attribute: cp, code: error) } else { b.writeResponse(handle: 0x40) }
                }
            }
            let (scrubbed, counts) = try BtsnoopScrubber.scrub(file: b.bytes)
            let expected = try JSONValue(parsing: Array(try Data(contentsOf: url.deletingLastPathComponent()
                .appendingPathComponent("cases/\(name).json"))))
            var needles = 0
            for response in expected["expected"]?["responses"]?.arrayValue ?? [] {
                for attribute in response["attributes"]?.arrayValue ?? [] {
                    guard let hex = attribute["value_hex"]?.stringValue, case .success(let value) = decodeHex(hex), value.count >= 4 else { continue }
                    needles += 1
                    let survived = contains(scrubbed, value)
                    #expect(!survived, "\(name): attribute \(attribute["id"]?.intValue ?? -1) survived")
                }
            }
            #expect(needles > 0 || name.contains("empty"), "\(name): nothing to look for")
            #expect(counts.ancsValues > 0 || name.hasSuffix("empty-title"), "\(name): nothing replaced")
            #expect(shape(extract(b.bytes).records) == shape(extract(scrubbed).records), "\(name)")
        }
    }
}
