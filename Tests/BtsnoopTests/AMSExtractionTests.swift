import AMS
import ANCSCapture
import Btsnoop
import JSON
import Testing
import TestSupport

// Apple Media Service beside ANCS on one phone: its handles from discovery (or --handles), its
// notifications, writes with their answers, and reads joined from their parts.
let rc: UInt16 = 0x0020, eu: UInt16 = 0x0023, ea: UInt16 = 0x0026
let conn0 = "hci0/0x0040"

let commands: [UInt8] = [0, 1, 2, 3, 4]  // play, pause, toggle, next, previous
let registration: [UInt8] = [0x02, 0x00, 0x01, 0x02, 0x03]  // track: artist, album, title, duration
let titleUpdate: [UInt8] = [0x02, 0x02, 0x01] + Array("Bohemian Rhapsody".utf8)  // truncated
let longTitle = Array("Bohemian Rhapsody (Remastered 2011) — Live at Wembley Stadium, July 1986".utf8)

/// A connection with ANCS and AMS discovered, ATT MTU `mtu` (none exchanged when nil).
func amsConnection(_ datalink: BtsnoopDatalink = .monitor, mtu: UInt16? = 23, findInformation: Bool = false) -> SnoopBuilder {
    var b = SnoopBuilder(datalink)
    b.newIndex(controller: 0)
    b.connect(handle: 0x40)
    if let mtu { b.exchangeMTU(handle: 0x40, client: 517, server: mtu) }
    b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds, useFindInformation: findInformation)
    b.amsDiscovery(handle: 0x40, rc: rc, eu: eu, ea: ea, useFindInformation: findInformation)
    return b
}

/// What a client of AMS does and hears, with an ANCS exchange in the middle.
func amsSession(_ b: inout SnoopBuilder) {
    b.write(handle: 0x40, attribute: eu, registration)
    b.writeResponse(handle: 0x40)
    b.notify(handle: 0x40, attribute: rc, commands)
    b.notify(handle: 0x40, attribute: eu, titleUpdate)
    exchange(&b, handle: 0x40)
    b.write(handle: 0x40, attribute: ea, [0x02, 0x02])  // the whole track title, please
    b.writeResponse(handle: 0x40)
    b.readLong(handle: 0x40, attribute: ea, longTitle, mtu: 23)
    b.write(handle: 0x40, attribute: rc, [0x03])  // next
    b.errorResponse(handle: 0x40, attribute: rc, code: 0xA0)  // no player: invalid state
    b.att([0x52] + le(rc) + [0x01], handle: 0x40, from: .host)  // pause, as a Write Command
}

/// The JSON objects `ancsd decode` prints for the AMS records (ANCS's go through `CaptureDecoder`).
func amsObjects(_ records: [ExtractedRecord]) throws -> [JSONValue] {
    var out = JSONWriter()
    for record in records {
        record.ams?.write(connection: record.connection.description, position: record.recordNumber, into: &out)
    }
    return try out.bytes.split(separator: 0x0A).map { try JSONValue(parsing: Array($0)) }
}

@Suite struct AMSExtractionTests {
    @Test(arguments: [BtsnoopDatalink.monitor, .h4])
    func discoveryThenTheServicesTraffic(datalink: BtsnoopDatalink) throws {
        var b = amsConnection(datalink)
        amsSession(&b)
        b.disconnect(handle: 0x40)
        let (records, error) = extract(b.bytes)
        #expect(error == nil)
        #expect(records.map(summary) == ["\(conn0) connected", "\(conn0) ams eu write \(encodeHex(registration))",
                                         "\(conn0) ams rc notification \(encodeHex(commands))",
                                         "\(conn0) ams eu notification \(encodeHex(titleUpdate))"]
            + expected(conn0, connect: false, disconnect: false) + [
                "\(conn0) ams ea write 0202", "\(conn0) ams ea read \(encodeHex(longTitle))", "\(conn0) ams rc write 03 !160",
                "\(conn0) ams rc write 01", "\(conn0) disconnected",
            ])

        let objects = try amsObjects(records)
        #expect(objects.count == 7)
        #expect(objects.allSatisfy { $0.objectValue?.keys.prefix(3) == ["conn", "service", "char"] && $0["service"] == "ams" })
        #expect(objects[0]["summary"] == "Entity Update: register for the track's artist, album, title, duration")
        #expect(objects[0]["direction"] == "write" && objects[0]["char"] == "eu" && objects[0]["entity"] == "track")
        #expect(objects[1]["commands"] == "play,pause,toggle,next,previous" && objects[1]["characteristic"] == "Remote Command")
        #expect(objects[2]["summary"] == "Entity Update track.title = \"Bohemian Rhapsody\" (truncated)")
        #expect(objects[2]["value"] == "Bohemian Rhapsody" && objects[2]["attribute"] == "title" && objects[2]["truncated"] == 1)
        #expect(objects[3]["summary"] == "Entity Attribute: ask for the whole track.title")
        #expect(objects[4]["value"]?.stringValue == String(decoding: longTitle, as: UTF8.self) && objects[4]["direction"] == "read")
        #expect(objects[4]["length"]?.intValue == longTitle.count && objects[4]["complete"] == nil)
        #expect(objects[5]["command"] == "next" && objects[5]["att_error"] == 160 && objects[5]["att_error_name"] == "invalid_state")
        #expect(objects[5]["summary"] == "Remote Command: send next (refused: invalid_state)")
        #expect(objects[6]["command"] == "pause" && objects[6]["att_error"] == nil)
        #expect(objects.allSatisfy { $0["record"] == nil && $0["error"] == nil })

        // The ANCS records decode as they do without AMS beside them.
        var decoder = CaptureDecoder()
        let decoded = records.compactMap(\.record).flatMap { decoder.decode($0, line: 0) } + decoder.finish()
        var plain = SnoopBuilder(datalink)
        plain.newIndex(controller: 0)
        plain.connect(handle: 0x40)
        plain.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        exchange(&plain, handle: 0x40)
        plain.disconnect(handle: 0x40)
        var alone = CaptureDecoder()
        #expect(decoded == extract(plain.bytes).records.compactMap(\.record).flatMap { alone.decode($0, line: 0) } + alone.finish())
    }

    @Test func findInformationDiscoveryAndTheHandlesCarriedToTheNextConnection() {
        var b = amsConnection(findInformation: true)
        b.notify(handle: 0x40, attribute: rc, commands)
        b.disconnect(handle: 0x40)
        b.connect(handle: 0x41)  // the same phone again: BlueZ does not discover it again
        b.notify(handle: 0x41, attribute: eu, titleUpdate)
        b.notify(handle: 0x41, attribute: 0x0030, titleUpdate)  // not AMS
        #expect(extract(b.bytes).records.map(summary) == [
            "\(conn0) connected", "\(conn0) ams rc notification \(encodeHex(commands))", "\(conn0) disconnected",
            "hci0/0x0041 connected", "hci0/0x0041 ams eu notification \(encodeHex(titleUpdate))",
        ])
    }

    @Test func handlesGivenForACaptureWithoutDiscovery() throws {
        let handles = try #require(ANCSHandles(parsing: "ns=0x10,rc=0x20, eu=35,ea=0x0026"))
        #expect(handles == ANCSHandles(notificationSource: 0x10, remoteCommand: 0x20, entityUpdate: 0x23, entityAttribute: 0x26))
        #expect(handles.description == "ns=0x0010,rc=0x0020,eu=0x0023,ea=0x0026" && handles.hasAMS)
        #expect(ANCSHandles(parsing: handles.description) == handles)
        #expect(ANCSHandles(parsing: "rc=0") == nil && ANCSHandles(parsing: "am=0x20") == nil)
        #expect(!ANCSHandles(notificationSource: 0x10, controlPoint: 0x13, dataSource: 0x16).hasAMS)

        var b = SnoopBuilder(.monitor)
        b.connect(handle: 0x40)
        b.notify(handle: 0x40, attribute: rc, commands)
        b.write(handle: 0x40, attribute: eu, [0x00, 0x00, 0x01, 0x02])
        b.writeResponse(handle: 0x40)
        b.notify(handle: 0x40, attribute: eu, [0x00, 0x01, 0x00] + Array("1,1.0,30.5".utf8))
        #expect(extract(b.bytes).records.map(summary) == ["\(conn0) connected"])  // unknown handles: nothing
        let records = extract(b.bytes, handles: handles).records
        #expect(records.map(summary) == [
            "\(conn0) connected", "\(conn0) ams rc notification \(encodeHex(commands))", "\(conn0) ams eu write 00000102",
            "\(conn0) ams eu notification \(encodeHex([0x00, 0x01, 0x00] + Array("1,1.0,30.5".utf8)))",
        ])
        let playback = try #require(try amsObjects(records).last)
        #expect(playback["playback_state"] == "playing" && playback["elapsed_time"] == 30.5 && playback["attribute"] == "playback_info")
    }

    /// A value that fills a response (MTU - 1 bytes) may go on in Read Blob Responses; one
    /// shorter ends it. With the MTU unknown, a part of 22 bytes or more waits for the next
    /// request; a Read Blob refused with Invalid Offset ends a value that filled its last part.
    @Test func readsAndTheirParts() throws {
        // MTU 185 exchanged: 60 bytes is one part.
        var b = amsConnection(mtu: 185)
        b.read(handle: 0x40, attribute: ea)
        b.readResponse(handle: 0x40, Array(longTitle.prefix(60)))
        b.notify(handle: 0x40, attribute: ns, added)
        #expect(extract(b.bytes).records.map(summary).suffix(2) == [
            "\(conn0) ams ea read \(encodeHex(longTitle.prefix(60)))", "\(conn0) ns \(encodeHex(added))",
        ])

        // No MTU exchange seen: a 30-byte part might go on; the next request (a write) ends it.
        var unknown = amsConnection(mtu: nil)
        unknown.read(handle: 0x40, attribute: ea)
        unknown.readResponse(handle: 0x40, Array(longTitle.prefix(30)))
        unknown.notify(handle: 0x40, attribute: ns, added)
        unknown.write(handle: 0x40, attribute: ea, [0x02, 0x00])
        unknown.writeResponse(handle: 0x40)
        unknown.read(handle: 0x40, attribute: ea)
        unknown.readResponse(handle: 0x40, Array("Queen".utf8))
        #expect(extract(unknown.bytes).records.map(summary).suffix(4) == [
            "\(conn0) ns \(encodeHex(added))", "\(conn0) ams ea read \(encodeHex(longTitle.prefix(30)))", "\(conn0) ams ea write 0200",
            "\(conn0) ams ea read \(encodeHex(Array("Queen".utf8)))",
        ])

        // Exactly two full parts: the third Read Blob is refused with Invalid Offset.
        var exact = amsConnection(mtu: 23)
        let value = Array(longTitle.prefix(44))
        exact.read(handle: 0x40, attribute: ea)
        exact.readResponse(handle: 0x40, Array(value.prefix(22)))
        exact.readBlob(handle: 0x40, attribute: ea, offset: 22)
        exact.readBlobResponse(handle: 0x40, Array(value.suffix(22)))
        exact.readBlob(handle: 0x40, attribute: ea, offset: 44)
        exact.errorResponse(handle: 0x40, request: 0x0C, attribute: ea, code: 0x07)
        #expect(extract(exact.bytes).records.map(summary).last == "\(conn0) ams ea read \(encodeHex(value))")

        // Refused at once (no player: Absent Attribute), and cut off by the end of the file.
        var refused = amsConnection(mtu: 23)
        refused.read(handle: 0x40, attribute: ea)
        refused.errorResponse(handle: 0x40, request: 0x0A, attribute: ea, code: 0xA2)
        refused.read(handle: 0x40, attribute: ea)
        refused.readResponse(handle: 0x40, Array(longTitle.prefix(22)))
        refused.readBlob(handle: 0x40, attribute: ea, offset: 22)
        let records = extract(refused.bytes).records
        #expect(records.map(summary).suffix(2) == [
            "\(conn0) ams ea read  !162", "\(conn0) ams ea read \(encodeHex(longTitle.prefix(22))) incomplete",
        ])
        let objects = try amsObjects(records)
        #expect(objects[0]["summary"] == "Entity Attribute read: refused (absent_attribute)" && objects[0]["att_error"] == 162)
        #expect(objects[0]["value"] == nil)
        #expect(objects[1]["complete"] == false && objects[1]["summary"]?.stringValue?.hasSuffix("(incomplete: its last part did not come)") == true)

        // A read of another handle is not AMS's.
        var other = amsConnection(mtu: 23)
        other.read(handle: 0x40, attribute: 0x0003)
        other.readResponse(handle: 0x40, Array("iPhone".utf8))
        #expect(extract(other.bytes).records.map(summary) == ["\(conn0) connected"])
    }

    /// On an EATT bearer, a read's parts are as long as the channel's MTU allows.
    @Test func aReadOnAnEATTBearer() {
        var b = amsConnection(mtu: 23)
        b.signal(code: 0x17, identifier: 1, le(0x0027) + le(64) + le(64) + le(10) + le(0x40), handle: 0x40, from: .host)
        b.signal(code: 0x18, identifier: 1, le(100) + le(64) + le(10) + le(0x0000) + le(0x50), handle: 0x40, from: .phone)
        // ATT MTU 64 on the bearer: a part of 63 bytes goes on, the rest ends it.
        b.sdu([0x0A] + le(ea), cid: 0x50, handle: 0x40, from: .host)
        b.sdu([0x0B] + Array(longTitle.prefix(63)), cid: 0x40, handle: 0x40, from: .phone)
        b.sdu([0x0C] + le(ea) + le(63), cid: 0x50, handle: 0x40, from: .host)
        b.sdu([0x0D] + Array(longTitle.dropFirst(63)), cid: 0x40, handle: 0x40, from: .phone)
        #expect(extract(b.bytes).records.map(summary).last == "\(conn0) ams ea read \(encodeHex(longTitle))")
    }

    /// Malformed values are described as such, never trapped on; `ancsd decode` counts them.
    @Test func malformedValues() throws {
        var b = amsConnection()
        b.notify(handle: 0x40, attribute: eu, [0x02])
        b.write(handle: 0x40, attribute: rc, [])
        b.writeResponse(handle: 0x40)
        b.write(handle: 0x40, attribute: ea, [0x01, 0x02, 0x03])
        b.writeResponse(handle: 0x40)
        b.notify(handle: 0x40, attribute: eu, [0x02, 0x00, 0x00, 0xFF, 0xFE])
        let records = extract(b.bytes).records
        let objects = try amsObjects(records)
        #expect(objects.map { $0["error"]?.stringValue } == ["too_short", "too_short", "too_long", nil])
        #expect(objects[0]["record"]?.intValue == records[1].recordNumber && objects[0]["bytes"] == "02")
        #expect(records.compactMap(\.ams).map(\.isMalformed) == [true, true, true, false])
        #expect(objects[3]["repaired"] == 1 && objects[3]["value"] == "\u{FFFD}\u{FFFD}")

        var random = SplitMix64(seed: 29)
        for _ in 0..<3000 {
            let bytes = (0..<Int(random.next() % 12)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            for characteristic in AMSRecord.Characteristic.allCases {
                for direction in [AMSDirection.notification, .write, .read] {
                    let value = AMSRecord(time: 0, characteristic: characteristic, direction: direction, bytes: bytes,
                                          attError: random.next() % 3 == 0 ? 0xA0 : nil, complete: random.next() % 4 != 0)
                    var out = JSONWriter()
                    value.write(connection: nil, position: 1, into: &out)
                    let object = try JSONValue(parsing: Array(out.bytes.dropLast()))
                    #expect(object["summary"]?.stringValue?.isEmpty == false)
                }
            }
        }
    }

    /// The ancs-capture/1 conversion holds ANCS only: AMS beside it changes nothing.
    @Test func theCaptureConversionLeavesAMSOut() throws {
        var b = amsConnection()
        amsSession(&b)
        b.disconnect(handle: 0x40)
        var plain = SnoopBuilder(.monitor)
        plain.newIndex(controller: 0)
        plain.connect(handle: 0x40)
        plain.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
        exchange(&plain, handle: 0x40)
        plain.disconnect(handle: 0x40)
        func converted(_ bytes: [UInt8]) throws -> [String] {
            var converter = BtsnoopCaptureConverter(datalink: .monitor)
            var lines: [String] = []
            for record in try records(of: bytes) { lines += try converter.lines(for: record) }
            // Without "t" (the files' timing differs) and the header's start.
            return (lines + converter.finish()).dropFirst().map { $0.replacing(/"t":[0-9.e-]+,/, with: "") }
        }
        #expect(try converted(b.bytes) == converted(plain.bytes))
    }

    @Test func theUUIDsAreAMSs() {
        #expect(SnoopBuilder.amsServiceUUID == Array(littleEndian: AMSUUID.service))
        #expect(SnoopBuilder.rcUUID == Array(littleEndian: AMSUUID.remoteCommand))
        #expect(SnoopBuilder.euUUID == Array(littleEndian: AMSUUID.entityUpdate))
        #expect(SnoopBuilder.eaUUID == Array(littleEndian: AMSUUID.entityAttribute))
        #expect(AMSRecord.Characteristic.allCases.map(\.uuid) == [AMSUUID.remoteCommand, AMSUUID.entityUpdate, AMSUUID.entityAttribute])
    }
}

extension Array where Element == UInt8 {
    /// The bytes ATT carries for a UUID's text form.
    init(littleEndian uuid: some CustomStringConvertible) {
        let digits = Array(uuid.description.utf8.filter { $0 != UInt8(ascii: "-") })
        self = stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16) ?? 0 }
            .reversed()
    }
}
