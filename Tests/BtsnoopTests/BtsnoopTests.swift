import ANCS
import ANCSCapture
import Btsnoop
import JSON
import Testing
import TestSupport

let ns: UInt16 = 0x0010, cp: UInt16 = 0x0013, ds: UInt16 = 0x0016
let request: [UInt8] = [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, 0x40, 0x00]  // title of UID 7, max 64
let title = Array("A title long enough to need several ACL fragments".utf8)
let response: [UInt8] = [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, UInt8(title.count), 0x00] + title
let added: [UInt8] = [0x00, 0x00, 0x04, 0x01, 0x07, 0x00, 0x00, 0x00]

/// One ANCS exchange on a connection: NS added, CP write, accepted, DS in two notifications.
func exchange(_ b: inout SnoopBuilder, controller: UInt16 = 0, handle: UInt16) {
    b.notify(controller: controller, handle: handle, attribute: ns, added)
    b.write(controller: controller, handle: handle, attribute: cp, request)
    b.writeResponse(controller: controller, handle: handle)
    b.notify(controller: controller, handle: handle, attribute: ds, Array(response.prefix(20)))
    b.notify(controller: controller, handle: handle, attribute: ds, Array(response.dropFirst(20)))
}

/// Every record of a file, or the error that stopped it and what came before. The file is read
/// both ways, record by record (`next`, `process(_:)`) and in place (`withNext`,
/// `process(_:into:)`), which must give the same.
func extract(_ bytes: [UInt8], handles: ANCSHandles = ANCSHandles(), chunk: Int = 7) -> (records: [ExtractedRecord], error: BtsnoopError?) {
    let copied = extractByRecord(bytes, handles: handles, chunk: chunk)
    let inPlace = extractInPlace(bytes, handles: handles, chunk: chunk)
    #expect(copied.records == inPlace.records, "reading records in place gives other records")
    #expect(copied.error == inPlace.error, "reading records in place gives another error")
    return copied
}

/// `extract` with each record read in place.
func extractInPlace(_ bytes: [UInt8], handles: ANCSHandles, chunk: Int) -> (records: [ExtractedRecord], error: BtsnoopError?) {
    var reader = BtsnoopReader()
    var extractor: BtsnoopExtractor?
    var out: [ExtractedRecord] = []
    do {
        var offset = 0
        while true {
            let atEnd = offset >= bytes.count
            reader.append(Array(bytes[min(offset, bytes.count)..<min(bytes.count, offset + chunk)]))
            offset += chunk
            while try reader.withNext(atEnd: atEnd, { record throws(BtsnoopError) in
                if extractor == nil { extractor = BtsnoopExtractor(datalink: record.datalink, defaultHandles: handles) }
                try extractor?.process(record, into: &out)
            }) {}
            if atEnd { break }
        }
    } catch {
        out += extractor?.finish() ?? []
        return (out, error)
    }
    out += extractor?.finish() ?? []
    return (out, nil)
}

/// `extract` with each record copied out of the file.
func extractByRecord(_ bytes: [UInt8], handles: ANCSHandles, chunk: Int) -> (records: [ExtractedRecord], error: BtsnoopError?) {
    var reader = BtsnoopReader()
    var extractor: BtsnoopExtractor?
    var out: [ExtractedRecord] = []
    do {
        var offset = 0
        while true {
            let atEnd = offset >= bytes.count
            reader.append(bytes[min(offset, bytes.count)..<min(bytes.count, offset + chunk)])
            offset += chunk
            while let record = try reader.next(atEnd: atEnd) {
                if extractor == nil, let link = reader.datalink { extractor = BtsnoopExtractor(datalink: link, defaultHandles: handles) }
                out += try extractor?.process(record) ?? []
            }
            if atEnd { break }
        }
    } catch {
        out += extractor?.finish() ?? []
        return (out, error)
    }
    out += extractor?.finish() ?? []
    return (out, nil)
}

/// A record as a short string: "hci0/0x0040 cp 00070000000140 00 !a2", "hci0/0x0040 ams eu
/// notification 020200…".
func summary(_ r: ExtractedRecord) -> String {
    switch r.content {
    case .capture(.value(_, let char, let bytes, let error)):
        return "\(r.connection) \(char.rawValue) \(encodeHex(bytes))" + (error.map { " !\($0)" } ?? "")
    case .capture(.event(_, let event)): return "\(r.connection) \(event.rawValue)"
    case .capture(.header): return "header"
    case .ams(let value):
        return "\(r.connection) ams \(value.characteristic.rawValue) \(value.direction.rawValue) \(encodeHex(value.bytes))"
            + (value.attError.map { " !\($0)" } ?? "") + (value.complete ? "" : " incomplete")
    }
}

func expected(_ conn: String, connect: Bool = true, disconnect: Bool = true) -> [String] {
    (connect ? ["\(conn) connected"] : []) + [
        "\(conn) ns \(encodeHex(added))", "\(conn) cp \(encodeHex(request))",
        "\(conn) ds \(encodeHex(response.prefix(20)))", "\(conn) ds \(encodeHex(response.dropFirst(20)))",
    ] + (disconnect ? ["\(conn) disconnected"] : [])
}

@Suite struct BtsnoopTests {
    @Test(arguments: [BtsnoopDatalink.monitor, .h4])
    func discoveryThenAnExchangeWithFragmentedACL(datalink: BtsnoopDatalink) throws {
        var b = SnoopBuilder(datalink)
        b.newIndex(controller: 0)
        b.connect(handle: 0x40)
        b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        exchange(&b, handle: 0x40)
        b.disconnect(handle: 0x40)
        let (records, error) = extract(b.bytes)
        #expect(error == nil)
        #expect(records.map(summary) == expected("hci0/0x0040"))
        #expect(records.first?.peer == "AA:BB:CC:DD:EE:01")
        // Times count from the first record, in seconds.
        if case .value(let t, _, _, _)? = records[1].record { #expect(t == Double(records[1].recordNumber - 1) / 1000) }

        var decoder = CaptureDecoder()
        let decoded = records.flatMap { extracted in extracted.record.map { decoder.decode($0, line: extracted.recordNumber) } ?? [] } + decoder.finish()
        let ds = try #require(decoded.first { $0["char"] == "ds" })
        #expect(ds["complete"] == true)
        #expect(ds["attributes"]?.arrayValue?.first?["value"]?.stringValue == String(decoding: title, as: UTF8.self))
    }

    @Test func findInformationDiscovery() {
        var b = SnoopBuilder(.monitor)
        b.connect(handle: 0x41)
        b.discovery(handle: 0x41, ns: 0x30, cp: 0x33, ds: 0x36, useFindInformation: true)
        b.notify(handle: 0x41, attribute: 0x30, added)
        b.notify(handle: 0x41, attribute: 0x10, added)  // not ANCS here
        #expect(extract(b.bytes).records.map(summary) == ["hci0/0x0041 connected", "hci0/0x0041 ns \(encodeHex(added))"])
    }

    @Test func twoConnectionsOnTwoControllersWithTheSameHandle() {
        var b = SnoopBuilder(.monitor)
        b.newIndex(controller: 0)
        b.newIndex(controller: 1)
        b.connect(controller: 0, handle: 0x40)
        b.connect(controller: 1, handle: 0x40, peer: [0x02, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA])
        b.discovery(controller: 0, handle: 0x40, ns: ns, cp: cp, ds: ds)
        b.discovery(controller: 1, handle: 0x40, ns: 0x20, cp: 0x23, ds: 0x26)
        // Interleaved: the write on hci1 is answered while hci0 is mid-response.
        b.notify(controller: 0, handle: 0x40, attribute: ns, added)
        b.write(controller: 0, handle: 0x40, attribute: cp, request)
        b.notify(controller: 1, handle: 0x40, attribute: 0x20, added)
        b.writeResponse(controller: 0, handle: 0x40)
        b.write(controller: 1, handle: 0x40, attribute: 0x23, request)
        b.notify(controller: 0, handle: 0x40, attribute: ds, Array(response.prefix(20)))
        b.errorResponse(controller: 1, handle: 0x40, attribute: 0x23, code: 0xA2)
        b.notify(controller: 0, handle: 0x40, attribute: ds, Array(response.dropFirst(20)))
        b.disconnect(controller: 1, handle: 0x40)
        b.disconnect(controller: 0, handle: 0x40)
        let records = extract(b.bytes).records
        let hci0 = records.filter { $0.connection == ConnectionKey(controller: 0, handle: 0x40) }.map(summary)
        let hci1 = records.filter { $0.connection == ConnectionKey(controller: 1, handle: 0x40) }.map(summary)
        #expect(hci0 == expected("hci0/0x0040"))
        #expect(hci1 == ["hci1/0x0040 connected", "hci1/0x0040 ns \(encodeHex(added))", "hci1/0x0040 cp \(encodeHex(request)) !162", "hci1/0x0040 disconnected"])
        #expect(records.first { $0.connection.controller == 1 }?.peer == "AA:BB:CC:DD:EE:02")
    }

    @Test func withoutDiscoveryTheHandlesAreGiven() {
        var b = SnoopBuilder(.monitor)
        exchange(&b, handle: 0x40)
        #expect(extract(b.bytes).records.isEmpty, "no discovery, no handles: nothing is ANCS")
        let handles = ANCSHandles(parsing: "ns=0x0010,cp=0x0013,ds=22")
        #expect(handles == ANCSHandles(notificationSource: 0x10, controlPoint: 0x13, dataSource: 0x16))
        #expect(extract(b.bytes, handles: handles ?? ANCSHandles()).records.map(summary) == expected("hci0/0x0040", connect: false, disconnect: false))
        #expect(ANCSHandles(parsing: "ns=0x10,xx=1") == nil && ANCSHandles(parsing: "ns=zz") == nil && ANCSHandles(parsing: "") == nil)
    }

    @Test func handlesCarryOverToTheNextConnectionOfTheSamePeer() {
        var b = SnoopBuilder(.monitor)
        b.connect(handle: 0x40)
        b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        b.disconnect(handle: 0x40)
        b.connect(handle: 0x41)  // BlueZ does not discover a bonded phone again
        exchange(&b, handle: 0x41)
        let records = extract(b.bytes).records.map(summary)
        #expect(Array(records.suffix(5)) == expected("hci0/0x0041", disconnect: false))
    }

    @Test func multipleHandleValueNotifications() {
        var b = SnoopBuilder(.monitor)
        b.aclPayloadLimit = 40
        b.connect(handle: 0x40)
        b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        b.write(handle: 0x40, attribute: cp, request)
        b.writeResponse(handle: 0x40)
        let first = Array(response.prefix(20)), rest = Array(response.dropFirst(20))
        // In parts: Swift 6.0 cannot type-check the whole sum in reasonable time.
        let nsPart: [UInt8] = le(ns) + le(8) + added
        let firstPart: [UInt8] = le(ds) + le(UInt16(first.count)) + first
        let otherPart: [UInt8] = le(0x50) + le(1) + [9]
        let restPart: [UInt8] = le(ds) + le(UInt16(rest.count)) + rest
        b.att([0x23] + nsPart + firstPart + otherPart + restPart, handle: 0x40, from: .phone)
        let records = extract(b.bytes).records.map(summary)
        #expect(records == ["hci0/0x0040 connected", "hci0/0x0040 cp \(encodeHex(request))", "hci0/0x0040 ns \(encodeHex(added))",
                            "hci0/0x0040 ds \(encodeHex(first))", "hci0/0x0040 ds \(encodeHex(rest))"])
    }

    @Test func dataBeforeTheWriteResponseFollowsTheWrite() {
        var b = SnoopBuilder(.h4)
        b.connect(handle: 0x40)
        b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        b.write(handle: 0x40, attribute: cp, request)
        b.notify(handle: 0x40, attribute: ds, response)
        b.notify(handle: 0x40, attribute: ns, added)
        b.writeResponse(handle: 0x40)
        #expect(extract(b.bytes).records.map(summary).dropFirst() == [
            "hci0/0x0040 cp \(encodeHex(request))", "hci0/0x0040 ds \(encodeHex(response))", "hci0/0x0040 ns \(encodeHex(added))",
        ])
    }

    @Test func preparedWritesToTheControlPoint() {
        var b = SnoopBuilder(.monitor)
        b.connect(handle: 0x40)
        b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        let app: [UInt8] = [0x01] + Array("com.apple.MobileSMS".utf8) + [0x00, 0x00]
        b.att([0x16] + le(cp) + le(0) + Array(app.prefix(18)), handle: 0x40, from: .host)
        b.att([0x17] + le(cp) + le(0) + Array(app.prefix(18)), handle: 0x40, from: .phone)
        b.att([0x16] + le(cp) + le(18) + Array(app.dropFirst(18)), handle: 0x40, from: .host)
        b.att([0x18, 0x01], handle: 0x40, from: .host)
        b.att([0x01, 0x18, 0x00, 0x00, 0xA1], handle: 0x40, from: .phone)
        #expect(extract(b.bytes).records.map(summary).last == "hci0/0x0040 cp \(encodeHex(app)) !161")
    }

    @Test func truncatedFilesNameTheRecordAndKeepWhatCameBefore() {
        var b = SnoopBuilder(.monitor)
        b.connect(handle: 0x40)
        b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        b.notify(handle: 0x40, attribute: ns, added)
        let whole = b.recordCount
        b.notify(handle: 0x40, attribute: ns, added)
        for cut in [3, 20] {
            let (records, error) = extract(Array(b.bytes.dropLast(cut)))
            #expect(error?.record == whole + 1)
            #expect(error?.description.contains("truncated") == true, "\(String(describing: error))")
            #expect(records.map(summary) == ["hci0/0x0040 connected", "hci0/0x0040 ns \(encodeHex(added))"])
        }
        #expect(extract(Array(b.bytes.prefix(10))).error == BtsnoopError(record: nil, reason: "truncated: the file header needs 16 bytes, the file has 10"))
    }

    @Test func corruptFilesAndUnknownDatalinks() {
        var pcap = BtsnoopWriter.fileHeader(.monitor)
        pcap[14] = 0x03
        pcap[15] = 0xE9  // 1001: HCI unencapsulated
        #expect(extract(pcap).error?.description.contains("unsupported datalink type 1001") == true)
        #expect(extract(Array("not a btsnoop file at all".utf8)).error?.description.contains("not a btsnoop file") == true)
        var version = BtsnoopWriter.fileHeader(.h4)
        version[11] = 2
        #expect(extract(version).error?.description == "file header: unsupported btsnoop version 2, expected 1")

        var b = SnoopBuilder(.monitor)
        b.connect(handle: 0x40)
        b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        b.notify(handle: 0x40, attribute: ns, added)
        let good = b.recordCount
        var bad = b
        bad.record(flags: 5, data: [0x40, 0x20, 0x09, 0x00, 0x01])  // ACL says 9 bytes, 1 follows
        var result = extract(bad.bytes)
        #expect(result.error?.record == good + 1 && result.error?.description.contains("corrupt") == true)
        #expect(result.records.count == 2)
        // The included length is larger than the original length.
        var lengths = b
        lengths.record(flags: 5, data: [0x40, 0x20, 0x00, 0x00])
        let header = lengths.bytes.count - 4 - 24
        lengths.bytes[header + 3] = 1
        result = extract(lengths.bytes)
        #expect(result.error?.record == good + 1 && result.error?.description.contains("exceeds the original length") == true)
        // A Multiple Handle Value Notification whose length runs past the PDU.
        var multiple = b
        multiple.att([0x23] + le(ns) + le(30) + added, handle: 0x40, from: .phone)
        #expect(extract(multiple.bytes).error?.record == good + 1)
    }

    @Test func iso8601() {
        #expect(iso8601UTC(unixMicroseconds: 0) == "1970-01-01T00:00:00.000000Z")
        #expect(iso8601UTC(unixMicroseconds: 1_780_000_000_123_456) == "2026-05-28T20:26:40.123456Z")
        #expect(iso8601UTC(unixMicroseconds: 951_782_400_000_000) == "2000-02-29T00:00:00.000000Z")
    }
}

