import ANCS
import ANCSCapture
import Btsnoop
import JSON
import Testing
import TestSupport

// The host asks for three EATT channels with a Credit Based Connection Request (0x17): it
// receives on 0x0040, 0x0041, 0x0042. The phone accepts two (it receives on 0x0050, 0x0051)
// and refuses the third. Bearer A: host → phone on 0x0050, phone → host on 0x0040; bearer B:
// 0x0051 / 0x0041.
let hostA: UInt16 = 0x50, phoneA: UInt16 = 0x40, hostB: UInt16 = 0x51, phoneB: UInt16 = 0x41

/// A connection with ANCS discovered on channel 0x0004 and the two EATT bearers open.
/// `hostMTU` is what the host may receive per SDU.
func eattConnection(_ datalink: BtsnoopDatalink = .monitor, hostMTU: UInt16 = 517) -> SnoopBuilder {
    var b = SnoopBuilder(datalink)
    b.connect(handle: 0x40)
    b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
    b.signal(code: 0x17, identifier: 1, le(0x0027) + le(hostMTU) + le(64) + le(10) + le(0x40) + le(0x41) + le(0x42), handle: 0x40, from: .host)
    b.signal(code: 0x18, identifier: 1, le(247) + le(64) + le(10) + le(0x0004) + le(0x50) + le(0x51) + le(0x0000), handle: 0x40, from: .phone)
    return b
}

/// Every record of a file, the warnings, and the error that stopped it.
func extractWithWarnings(_ b: SnoopBuilder) -> (records: [String], warnings: [BtsnoopError], error: BtsnoopError?) {
    var extractor = BtsnoopExtractor(datalink: b.datalink)
    var out: [ExtractedRecord] = []
    var warnings: [BtsnoopError] = []
    do {
        for record in try records(of: b.bytes) {
            out += try extractor.process(record)
            warnings += extractor.takeWarnings()
        }
    } catch {
        return ((out + extractor.finish()).map(summary), warnings, error as? BtsnoopError)
    }
    return ((out + extractor.finish()).map(summary), warnings, nil)
}

let conn = "hci0/0x0040"

@Suite struct EATTTests {
    /// A Data Source notification whose SDU spans several K-frames (and each K-frame several
    /// ACL packets), interleaved with a whole SDU on the other bearer.
    @Test(arguments: [BtsnoopDatalink.monitor, .h4])
    func aDataSourceSDUOverSeveralKFrames(datalink: BtsnoopDatalink) throws {
        var b = eattConnection(datalink)
        b.aclPayloadLimit = 10
        b.sdu([0x12] + le(cp) + request, cid: hostB, handle: 0x40, from: .host)
        b.sdu([0x13], cid: phoneB, handle: 0x40, from: .phone)
        let pdu = [0x1B] + le(ds) + response
        let kFrames = (le(UInt16(pdu.count)) + pdu).chunked(into: 23)
        #expect(kFrames.count == 3)
        b.l2cap(kFrames[0], cid: phoneA, handle: 0x40, from: .phone)
        b.sdu([0x1B] + le(ns) + added, cid: phoneB, handle: 0x40, from: .phone)
        for frame in kFrames.dropFirst() { b.l2cap(frame, cid: phoneA, handle: 0x40, from: .phone) }
        let result = extractWithWarnings(b)
        #expect(result.error == nil && result.warnings.isEmpty)
        #expect(result.records == ["\(conn) connected", "\(conn) cp \(encodeHex(request))", "\(conn) ns \(encodeHex(added))",
                                   "\(conn) ds \(encodeHex(response))"])
    }

    /// A Multiple Handle Value Notification SDU carrying a Notification Source and a Data
    /// Source value; the decoder sees a complete response.
    @Test func multipleHandleValueNotificationSDU() throws {
        var b = eattConnection()
        b.sdu([0x12] + le(cp) + request, cid: hostA, handle: 0x40, from: .host)
        b.sdu([0x13], cid: phoneA, handle: 0x40, from: .phone)
        // In parts: Swift 6.0 cannot type-check the whole sum in reasonable time.
        let nsPart: [UInt8] = le(ns) + le(8) + added
        let dsPart: [UInt8] = le(ds) + le(UInt16(response.count)) + response
        b.sdu([0x23] + nsPart + dsPart, cid: phoneA, mps: 40, handle: 0x40, from: .phone)
        var extractor = BtsnoopExtractor(datalink: .monitor)
        var extracted: [ExtractedRecord] = []
        for record in try records(of: b.bytes) { extracted += try extractor.process(record) }
        #expect(extracted.map(summary) == ["\(conn) connected", "\(conn) cp \(encodeHex(request))", "\(conn) ns \(encodeHex(added))",
                                           "\(conn) ds \(encodeHex(response))"])
        var decoder = CaptureDecoder()
        let decoded = extracted.flatMap { extracted in extracted.record.map { decoder.decode($0, line: extracted.recordNumber) } ?? [] } + decoder.finish()
        let answer = try #require(decoded.first { $0["char"] == "ds" })
        #expect(answer["complete"] == true)
        #expect(answer["attributes"]?.arrayValue?.first?["value"]?.stringValue == String(decoding: title, as: UTF8.self))
    }

    /// A Control Point write on bearer A is answered only by the Error Response on bearer A: the
    /// Write Response to another write on bearer B does not count, and what bearer B carries
    /// meanwhile follows the write.
    @Test func answersPairWithTheirRequestsBearer() {
        var b = eattConnection()
        b.sdu([0x12] + le(cp) + request, cid: hostA, handle: 0x40, from: .host)
        b.sdu([0x12, 0x30, 0x00, 0x01, 0x00], cid: hostB, handle: 0x40, from: .host)  // a CCC, not ANCS
        b.sdu([0x13], cid: phoneB, handle: 0x40, from: .phone)
        b.sdu([0x1B] + le(ns) + added, cid: phoneB, handle: 0x40, from: .phone)
        b.att([0x13], handle: 0x40, from: .phone)  // nor does one on channel 0x0004
        b.sdu([0x01, 0x12] + le(cp) + [0xA2], cid: phoneA, handle: 0x40, from: .phone)
        let result = extractWithWarnings(b)
        #expect(result.records == ["\(conn) connected", "\(conn) cp \(encodeHex(request)) !162", "\(conn) ns \(encodeHex(added))"])
        #expect(result.warnings.isEmpty)
    }

    /// Disconnecting a channel ends the write waiting on it; its CIDs are forgotten, and a
    /// legacy LE Credit Based Connection (0x14/0x15) from the phone reuses the host's CID.
    @Test func disconnectionThenReuseByALegacyChannel() {
        var b = eattConnection()
        b.sdu([0x12] + le(cp) + request, cid: hostA, handle: 0x40, from: .host)
        b.sdu([0x1B] + le(ns) + added, cid: phoneB, handle: 0x40, from: .phone)  // held behind the write
        b.signal(code: 0x06, identifier: 2, le(hostA) + le(phoneA), handle: 0x40, from: .host)
        b.signal(code: 0x07, identifier: 2, le(hostA) + le(phoneA), handle: 0x40, from: .phone)
        b.sdu([0x01, 0x12] + le(cp) + [0xA2], cid: phoneA, handle: 0x40, from: .phone)  // closed: ignored
        // Other SPSMs and refused requests open nothing.
        b.signal(code: 0x14, identifier: 3, le(0x0080) + le(0x62) + le(100) + le(100) + le(5), handle: 0x40, from: .phone)
        b.signal(code: 0x15, identifier: 3, le(0x45) + le(517) + le(100) + le(5) + le(0), handle: 0x40, from: .host)
        b.signal(code: 0x14, identifier: 4, le(0x0027) + le(0x61) + le(100) + le(100) + le(5), handle: 0x40, from: .phone)
        b.signal(code: 0x15, identifier: 4, le(0x46) + le(517) + le(100) + le(5) + le(0x0002), handle: 0x40, from: .host)
        b.sdu([0x1B] + le(ns) + added, cid: 0x45, handle: 0x40, from: .phone)
        b.sdu([0x1B] + le(ns) + added, cid: 0x46, handle: 0x40, from: .phone)
        // The phone opens a legacy channel: it receives on 0x0060, the host on 0x0040 again.
        b.signal(code: 0x14, identifier: 5, le(0x0027) + le(0x60) + le(100) + le(100) + le(5), handle: 0x40, from: .phone)
        b.signal(code: 0x15, identifier: 5, le(phoneA) + le(517) + le(100) + le(5) + le(0), handle: 0x40, from: .host)
        b.sdu([0x12] + le(cp) + request, cid: 0x60, handle: 0x40, from: .host)
        b.sdu([0x01, 0x12] + le(cp) + [0xA1], cid: phoneA, handle: 0x40, from: .phone)
        b.sdu([0x1B] + le(ds) + response, cid: phoneA, handle: 0x40, from: .phone)
        // A channel of another SPSM takes bearer B's CID (its disconnection was not seen).
        b.signal(code: 0x14, identifier: 6, le(0x0080) + le(0x62) + le(100) + le(100) + le(5), handle: 0x40, from: .phone)
        b.signal(code: 0x15, identifier: 6, le(phoneB) + le(517) + le(100) + le(5) + le(0), handle: 0x40, from: .host)
        b.sdu([0x1B] + le(ns) + added, cid: phoneB, handle: 0x40, from: .phone)
        b.disconnect(handle: 0x40)
        let result = extractWithWarnings(b)
        #expect(result.error == nil && result.warnings.isEmpty)
        #expect(result.records == [
            "\(conn) connected", "\(conn) cp \(encodeHex(request))", "\(conn) ns \(encodeHex(added))",
            "\(conn) cp \(encodeHex(request)) !161", "\(conn) ds \(encodeHex(response))", "\(conn) disconnected",
        ])
    }

    /// The link's end forgets its channels: a new connection with the same handle has none.
    @Test func theLinksEndForgetsItsChannels() {
        var b = eattConnection()
        b.disconnect(handle: 0x40)
        b.connect(handle: 0x40)
        b.sdu([0x1B] + le(ns) + added, cid: phoneA, handle: 0x40, from: .phone)
        b.att([0x1B] + le(ns) + added, handle: 0x40, from: .phone)
        #expect(extractWithWarnings(b).records.suffix(2) == ["\(conn) connected", "\(conn) ns \(encodeHex(added))"])
    }

    /// Broken K-frames and signaling are warnings naming their record; they drop what they
    /// break, and the rest of the file is read.
    @Test func malformedKFramesAndSignaling() {
        var b = eattConnection(hostMTU: 64)
        var expectedWarnings: [(Int, String)] = []
        b.l2cap([0x05, 0x00, 0x1B, 0x10, 0x00, 0x00, 0x00], cid: 0x70, handle: 0x40, from: .phone)  // unknown CID: ignored
        // An SDU longer than the host's MTU of 64: dropped, its continuation K-frames too.
        let long = b.recordCount + 1
        b.sdu([0x1B] + le(ds) + Array(repeating: 0x41, count: 97), cid: phoneA, handle: 0x40, from: .phone)
        expectedWarnings.append((long, "EATT channel 0x0040 (received): SDU dropped: its length 100 exceeds the channel's MTU 64"))
        b.sdu([0x1B] + le(ns) + added, cid: phoneA, handle: 0x40, from: .phone)
        // A first K-frame with more than its SDU, and one too short for the SDU length.
        b.l2cap(le(3) + [0x1B, 0x10, 0x00, 0x00], cid: phoneB, handle: 0x40, from: .phone)
        expectedWarnings.append((b.recordCount, "EATT channel 0x0041 (received): SDU dropped: its first K-frame carries 4 bytes, more than its length 3"))
        b.l2cap([0x01], cid: phoneB, handle: 0x40, from: .phone)
        expectedWarnings.append((b.recordCount, "EATT channel 0x0041 (received): SDU dropped: a K-frame of 1 byte cannot start an SDU (2-byte SDU length)"))
        // K-frames that run past their SDU's length.
        b.l2cap(le(12) + [0x1B] + le(ns) + [0, 0], cid: phoneB, handle: 0x40, from: .phone)
        b.l2cap([0, 4, 1, 7, 0, 0, 0, 0, 0], cid: phoneB, handle: 0x40, from: .phone)
        expectedWarnings.append((b.recordCount, "EATT channel 0x0041 (received): SDU dropped: its K-frames carry 14 bytes, more than its length 12"))
        // Signaling: truncated, a length that disagrees, a request cut short, a response with
        // fewer CIDs than its request.
        b.l2cap([0x17, 0x09, 0x00], cid: 0x0005, handle: 0x40, from: .host)
        expectedWarnings.append((b.recordCount, "L2CAP signaling: corrupt: a signaling frame of 3 bytes, shorter than the 4-byte command header; ignored"))
        b.l2cap([0x06, 0x09, 0x08, 0x00, 0x50, 0x00, 0x40, 0x00], cid: 0x0005, handle: 0x40, from: .host)
        expectedWarnings.append((b.recordCount, "L2CAP signaling: corrupt: signaling command 0x06 says 8 bytes of data, 4 follow; ignored"))
        b.signal(code: 0x17, identifier: 9, le(0x0027) + le(100) + le(64) + le(1) + [0x43], handle: 0x40, from: .host)
        expectedWarnings.append((b.recordCount, "L2CAP signaling: corrupt: a Credit Based Connection Request (0x17) with 9 bytes of data, not 8 and 2 for each of 1 to 5 channels; ignored"))
        b.signal(code: 0x17, identifier: 10, le(0x0027) + le(100) + le(64) + le(1) + le(0x43) + le(0x44), handle: 0x40, from: .host)
        b.signal(code: 0x18, identifier: 10, le(100) + le(64) + le(1) + le(0) + le(0x53), handle: 0x40, from: .phone)
        expectedWarnings.append((b.recordCount, "L2CAP signaling: corrupt: EATT connection response 0x18: 1 destination CIDs answer 2 source CIDs"))
        b.sdu([0x1B] + le(ds) + response, cid: 0x43, handle: 0x40, from: .phone)  // the pair it names is open
        b.disconnect(handle: 0x40)

        let result = extractWithWarnings(b)
        #expect(result.error == nil)
        #expect(result.records == ["\(conn) connected", "\(conn) ns \(encodeHex(added))", "\(conn) ds \(encodeHex(response))", "\(conn) disconnected"])
        #expect(result.warnings.map(\.description) == expectedWarnings.map { "record \($0.0): \(conn): \($0.1)" })
    }

    /// The capture format carries what came over EATT, refused write and all.
    @Test func theCaptureFormatCarriesEATTTraffic() throws {
        var b = eattConnection()
        b.sdu([0x23] + le(ns) + le(8) + added, cid: phoneB, handle: 0x40, from: .phone)
        b.sdu([0x12] + le(cp) + request, cid: hostB, handle: 0x40, from: .host)
        b.sdu([0x01, 0x12] + le(cp) + [0x80], cid: phoneB, handle: 0x40, from: .phone)
        var converter = BtsnoopCaptureConverter(datalink: .monitor)
        var lines: [String] = []
        for record in try records(of: b.bytes) { lines += try converter.lines(for: record) }
        lines += converter.finish()
        #expect(converter.takeWarnings().isEmpty && converter.warningCount == 0)
        let objects = try lines.map { try JSONValue(parsing: $0) }
        #expect(objects.compactMap { $0["char"]?.stringValue } == ["ns", "cp"])
        #expect(objects.last?["hex"] == .string(encodeHex(request)) && objects.last?["att_error"] == 128)
    }

    /// `ancsd capture --format capture` hears of the warnings and goes on.
    @Test func theRecorderPassesWarningsOn() throws {
        var b = eattConnection()
        b.signal(code: 0x14, identifier: 2, [0x27, 0x00], handle: 0x40, from: .phone)
        b.sdu([0x1B] + le(ns) + added, cid: phoneA, handle: 0x40, from: .phone)
        var recorder = MonitorRecorder(format: .capture(handles: ANCSHandles(), metadata: [:]))
        var text = String(decoding: recorder.start(), as: UTF8.self)
        var warnings: [BtsnoopError] = []
        for (bytes, time) in try datagrams(of: b) {
            text += String(decoding: try recorder.record(MonitorFrame(datagram: bytes), unixMicroseconds: time), as: UTF8.self)
            warnings += recorder.takeWarnings()
        }
        #expect(warnings.map(\.description) == [
            "record \(b.recordCount - 1): \(conn): L2CAP signaling: corrupt: an LE Credit Based Connection Request (0x14) with 2 bytes of data, not 10; ignored",
        ])
        #expect(text.contains(#""char":"ns""#))
    }
}

extension Array {
    /// The array cut into pieces of at most `size` elements.
    func chunked(into size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min(count, $0 + size)]) }
    }
}
