import ANCSCapture
import Btsnoop
import JSON
import Testing
import TestSupport

/// The records of a btsnoop file.
func records(of bytes: [UInt8]) throws -> [BtsnoopRecord] {
    var reader = BtsnoopReader()
    reader.append(bytes)
    var out: [BtsnoopRecord] = []
    while let record = try reader.next(atEnd: true) { out.append(record) }
    return out
}

/// Each record of a monitor file as the datagram the kernel sent, with its time.
func datagrams(of builder: SnoopBuilder) throws -> [(bytes: [UInt8], unixMicroseconds: Int64)] {
    try records(of: builder.bytes).map { (MonitorFrame(record: $0).datagram, $0.unixMicroseconds) }
}

/// What a recorder writes for these datagrams, from its start to its finish.
func recorded(_ datagrams: [(bytes: [UInt8], unixMicroseconds: Int64)], _ recorder: inout MonitorRecorder) throws -> [UInt8] {
    var out = recorder.start()
    for datagram in datagrams {
        out += try recorder.record(MonitorFrame(datagram: datagram.bytes), unixMicroseconds: datagram.unixMicroseconds)
    }
    return out + recorder.finish()
}

/// A controller's session: NEW_INDEX, LE Connection Complete, discovery, an ANCS exchange (ATT
/// Write Request to the Control Point, Data Source notifications over fragmented ACL), disconnect.
func monitorSession(controllers: [UInt16] = [0]) -> SnoopBuilder {
    var b = SnoopBuilder(.monitor)
    for c in controllers { b.newIndex(controller: c) }
    for c in controllers {
        b.connect(controller: c, handle: 0x40, peer: [UInt8(c + 1), 0xEE, 0xDD, 0xCC, 0xBB, 0xAA])
        b.discovery(controller: c, handle: 0x40, ns: ns, cp: cp, ds: ds)
    }
    for c in controllers { exchange(&b, controller: c, handle: 0x40) }
    for c in controllers { b.disconnect(controller: c, handle: 0x40) }
    return b
}

@Suite struct MonitorFrameTests {
    @Test func aDatagramIsHeaderThenPayload() throws {
        let frame = try MonitorFrame(datagram: [0x05, 0x00, 0x01, 0x00, 0x03, 0x00, 0xAA, 0xBB, 0xCC])
        #expect(frame == MonitorFrame(opcode: .aclReceived, index: 1, payload: [0xAA, 0xBB, 0xCC]))
        #expect(frame.btsnoopFlags == 0x0001_0005)
        #expect(frame.datagram == [0x05, 0x00, 0x01, 0x00, 0x03, 0x00, 0xAA, 0xBB, 0xCC])
        let record = frame.btsnoopRecord(number: 3, timestamp: btsnoopUnixEpoch + 42, drops: 2)
        #expect(record == BtsnoopRecord(number: 3, originalLength: 3, flags: 0x0001_0005, cumulativeDrops: 2,
                                        timestamp: btsnoopUnixEpoch + 42, data: [0xAA, 0xBB, 0xCC]))
        #expect(MonitorFrame(record: record) == frame)
        // An empty payload (DEL_INDEX) is a frame too.
        #expect(try MonitorFrame(datagram: [0x01, 0x00, 0x00, 0x00, 0x00, 0x00]) == MonitorFrame(opcode: .deleteIndex, index: 0, payload: []))
    }

    @Test func everyOpcodePassesThroughUnchanged() throws {
        for (opcode, index) in [(UInt16(13), UInt16(0xFFFF)), (19, 2), (0x00FF, 0), (0xFFFF, 0xFFFE)] {
            let frame = MonitorFrame(opcode: MonitorOpcode(rawValue: opcode), index: index, payload: [1, 2])
            var recorder = MonitorRecorder(format: .btsnoop)
            let bytes = recorder.start() + (try recorder.record(frame, unixMicroseconds: 1)) + recorder.finish()
            let read = try records(of: bytes)
            #expect(read.count == 1 && read[0].flags == UInt32(index) << 16 | UInt32(opcode))
            #expect(MonitorFrame(record: read[0]) == frame)
        }
        #expect(MonitorOpcode.userLogging.description == "USER_LOGGING" && MonitorOpcode(rawValue: 19).description == "opcode 19")
    }

    /// Frames of a whole ANCS session, recorded as btsnoop, give back the very file they came
    /// from, which the extractor reads as it reads btmon's files.
    @Test func framesBecomeTheBtsnoopFileTheyCameFrom() throws {
        let b = monitorSession()
        var recorder = MonitorRecorder(format: .btsnoop)
        let bytes = try recorded(try datagrams(of: b), &recorder)
        #expect(bytes == b.bytes)
        #expect(recorder.recordCount == b.recordCount)
        let read = try records(of: bytes)
        #expect(read.first.map { MonitorFrame(record: $0).opcode } == .newIndex)
        #expect(read.allSatisfy { $0.originalLength == UInt32($0.data.count) && $0.cumulativeDrops == 0 })
        let (extracted, error) = extract(bytes)
        #expect(error == nil)
        #expect(extracted.map(summary) == expected("hci0/0x0040"))
        var decoder = CaptureDecoder()
        let decoded = extracted.flatMap { extracted in extracted.record.map { decoder.decode($0, line: extracted.recordNumber) } ?? [] } + decoder.finish()
        let answer = try #require(decoded.first { $0["char"] == "ds" })
        #expect(answer["complete"] == true)
        #expect(answer["attributes"]?.arrayValue?.first?["value"]?.stringValue == String(decoding: title, as: UTF8.self))
    }

    /// The capture format writes what `ancsd decode --to-capture` makes of the same frames.
    @Test func captureFormatWritesTheANCSRecords() throws {
        let b = monitorSession()
        var recorder = MonitorRecorder(format: .capture(handles: ANCSHandles(), metadata: ["source": "ancsd capture"]))
        #expect(recorder.start().isEmpty, "the header waits for the first frame's time")
        let text = String(decoding: try recorded(try datagrams(of: b), &recorder), as: UTF8.self)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(text.hasSuffix("\n"))
        let header = try JSONValue(parsing: lines[0])
        #expect(header.objectValue?.keys == ["format", "source", "datalink", "start"])
        #expect(header["format"] == "ancs-capture/1" && header["datalink"] == "monitor")
        #expect(header["start"] == .string(iso8601UTC(unixMicroseconds: b.timestamp - b.step * Int64(b.recordCount) - btsnoopUnixEpoch)))

        var converter = BtsnoopCaptureConverter(datalink: .monitor, metadata: ["source": "ancsd capture"])
        var fromFile: [String] = []
        for record in try records(of: b.bytes) { fromFile += try converter.lines(for: record) }
        #expect(lines == fromFile + converter.finish())

        var parser = CaptureParser()
        let entries = try lines.dropFirst().compactMap { try parser.parseEntry(line: Array($0.utf8)) }
        #expect(entries.allSatisfy { $0.connection == "hci0/0x0040" })
        let kinds = entries.map { entry -> String in
            switch entry.record {
            case .value(_, let char, _, _): char.rawValue
            case .event(_, let event): event.rawValue
            case .header: "header"
            }
        }
        #expect(kinds == ["connected", "ns", "cp", "ds", "ds", "disconnected"])
        #expect(lines[1].contains(#""peer":"AA:BB:CC:DD:EE:01""#))
        #expect(lines[3].contains(#""hex":"\#(encodeHex(request))""#))
    }

    @Test func aCaptureWithoutFramesIsJustItsHeader() {
        var recorder = MonitorRecorder(format: .capture(handles: ANCSHandles(notificationSource: 0x10), metadata: ["source": "test"]))
        #expect(String(decoding: recorder.start() + recorder.finish(), as: UTF8.self)
                == #"{"format":"ancs-capture/1","source":"test","datalink":"monitor","handles":"ns=0x0010"}"# + "\n")
        var btsnoop = MonitorRecorder(format: .btsnoop)
        #expect(btsnoop.start() + btsnoop.finish() == BtsnoopWriter.fileHeader(.monitor))
    }

    @Test func indexKeepsOnlyThatController() throws {
        var b = monitorSession(controllers: [0, 1])
        b.record(flags: 0xFFFF_0000 | 12, data: Array("a system note\0".utf8))  // about no controller
        var recorder = MonitorRecorder(format: .btsnoop, index: 1)
        let bytes = try recorded(try datagrams(of: b), &recorder)
        let kept = try records(of: bytes)
        let expectedCount = try records(of: b.bytes).filter { $0.flags >> 16 == 1 }.count
        #expect(kept.count == expectedCount && recorder.recordCount == expectedCount)
        #expect(kept.allSatisfy { $0.flags >> 16 == 1 })
        #expect(kept.map(\.number) == Array(1...expectedCount), "records are numbered in the file written")
        #expect(extract(bytes).records.map(summary) == expected("hci1/0x0040"))

        var capture = MonitorRecorder(format: .capture(handles: ANCSHandles(), metadata: [:]), index: 0)
        let text = String(decoding: try recorded(try datagrams(of: b), &capture), as: UTF8.self)
        #expect(text.contains("hci0/0x0040") && !text.contains("hci1/"))
    }

    @Test func truncatedAndOversizedDatagramsAreRejected() {
        func error(_ bytes: [UInt8], length: Int? = nil) -> MonitorFrameError? {
            do {
                _ = try MonitorFrame(datagram: bytes, length: length)
                return nil
            } catch {
                return error
            }
        }
        #expect(error([0x05, 0x00, 0x00]) == .shorterThanHeader(received: 3))
        #expect(error([0x05, 0x00, 0x00])?.description == "truncated monitor frame: 3 bytes, shorter than the 6-byte header")
        let header: [UInt8] = [0x05, 0x00, 0x00, 0x00, 0x0A, 0x00]  // ACL RX on hci0, 10 bytes of payload
        #expect(error(header + [1, 2, 3, 4]) == .lengthMismatch(header: 10, received: 4))
        #expect(error(header + [1, 2, 3, 4])?.description == "truncated monitor frame: the header says 10 bytes of payload, 4 arrived")
        #expect(error(header + Array(repeating: 0, count: 12))?.description == "oversized monitor frame: the header says 10 bytes of payload, 12 arrived")
        #expect(error(header + Array(repeating: 0, count: 10)) == nil)
        // recv with MSG_TRUNC: the datagram was longer than the bytes kept.
        #expect(error(header + Array(repeating: 0, count: 10), length: 70_000) == .lengthMismatch(header: 10, received: 69_994))
        #expect(error(header + [1, 2], length: 16) == .cut(length: 16, kept: 8))
    }

    @Test func rejectedDatagramsAreCountedAsDrops() throws {
        var recorder = MonitorRecorder(format: .btsnoop)
        var bytes = recorder.start()
        bytes += try recorder.record(MonitorFrame(opcode: .event, index: 0, payload: [0x0E, 0x00]), unixMicroseconds: 1)
        recorder.reject()
        recorder.reject()
        bytes += try recorder.record(MonitorFrame(opcode: .event, index: 0, payload: [0x0F, 0x00]), unixMicroseconds: 2)
        #expect(try records(of: bytes).map(\.cumulativeDrops) == [0, 2])
        #expect(recorder.rejectedCount == 2 && recorder.recordCount == 2)
    }

    /// A corrupt HCI packet does not stop a capture: the extractor's error is thrown for that
    /// frame, and what follows is still recorded.
    @Test func aCorruptPacketIsReportedAndTheCaptureGoesOn() throws {
        var recorder = MonitorRecorder(format: .capture(handles: ANCSHandles(), metadata: [:]))
        _ = recorder.start()
        let bad = MonitorFrame(opcode: .aclReceived, index: 0, payload: [0x40, 0x20, 0x09, 0x00, 0x01])
        #expect(throws: BtsnoopError.self) { try recorder.record(bad, unixMicroseconds: 1) }
        var b = SnoopBuilder(.monitor)
        b.connect(handle: 0x40)
        let connect = try #require(try datagrams(of: b).first)
        let text = String(decoding: try recorder.record(MonitorFrame(datagram: connect.bytes), unixMicroseconds: 2) + recorder.finish(), as: UTF8.self)
        #expect(text.split(separator: "\n").count == 2, "header and the connected event:\n\(text)")
    }
}
