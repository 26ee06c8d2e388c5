import Btsnoop
import Foundation
import JSON
import Testing
import TestSupport

private let ns: UInt16 = 0x0010, cp: UInt16 = 0x0013, ds: UInt16 = 0x0016
private let request: [UInt8] = [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, 0x40, 0x00]
private let title = Array("Tea at five? The kettle is already on".utf8)
private let response: [UInt8] = [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, UInt8(title.count), 0x00] + title
private let added: [UInt8] = [0x00, 0x00, 0x04, 0x01, 0x07, 0x00, 0x00, 0x00]

/// Two phones on two controllers, both on connection handle 0x0040, interleaved.
private func twoPhones(_ datalink: BtsnoopDatalink = .monitor, discovery: Bool = true, findInformation: Bool = false) -> SnoopBuilder {
    var b = SnoopBuilder(datalink)
    let controllers: [UInt16] = datalink == .monitor ? [0, 1] : [0]
    for c in controllers { b.newIndex(controller: c) }
    for c in controllers {
        if discovery { b.connect(controller: c, handle: 0x40, peer: [UInt8(c + 1), 0xEE, 0xDD, 0xCC, 0xBB, 0xAA]) }
        if discovery { b.discovery(controller: c, handle: 0x40, ns: ns, cp: cp, ds: ds, useFindInformation: findInformation) }
    }
    for c in controllers { b.notify(controller: c, handle: 0x40, attribute: ns, added) }
    for c in controllers { b.write(controller: c, handle: 0x40, attribute: cp, request) }
    for c in controllers { b.writeResponse(controller: c, handle: 0x40) }
    for c in controllers { b.notify(controller: c, handle: 0x40, attribute: ds, Array(response.prefix(20))) }
    for c in controllers { b.notify(controller: c, handle: 0x40, attribute: ds, Array(response.dropFirst(20))) }
    if discovery { for c in controllers { b.disconnect(controller: c, handle: 0x40) } }
    return b
}

/// One phone whose ATT traffic, after discovery on channel 0x0004, goes over two EATT
/// channels that the phone opened (0x17/0x18; the host receives on 0x0040 and 0x0041, the phone
/// on 0x0060 and 0x0061): an NS value in a Multiple Handle Value Notification, a write answered,
/// the Data Source response in several K-frames, then a write refused with ATT 0xA2.
private func eattPhone() -> SnoopBuilder {
    var b = SnoopBuilder(.monitor)
    b.connect(handle: 0x40)
    b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
    b.signal(code: 0x17, identifier: 7, le(0x0027) + le(247) + le(64) + le(5) + le(0x60) + le(0x61), handle: 0x40, from: .phone)
    b.signal(code: 0x18, identifier: 7, le(517) + le(64) + le(5) + le(0) + le(0x40) + le(0x41), handle: 0x40, from: .host)
    b.sdu([0x23] + le(ns) + le(8) + added, cid: 0x40, handle: 0x40, from: .phone)
    b.sdu([0x12] + le(cp) + request, cid: 0x61, handle: 0x40, from: .host)
    b.sdu([0x13], cid: 0x41, handle: 0x40, from: .phone)
    b.sdu([0x1B] + le(ds) + response, cid: 0x40, mps: 20, handle: 0x40, from: .phone)
    b.sdu([0x12] + le(cp) + [0x02, 0x07, 0x00, 0x00, 0x00, 0x01], cid: 0x60, handle: 0x40, from: .host)
    b.sdu([0x01, 0x12] + le(cp) + [0xA2], cid: 0x40, handle: 0x40, from: .phone)
    return b
}

private func file(_ bytes: [UInt8]) throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("ancsd-test-\(UUID().uuidString).btsnoop")
    try Data(bytes).write(to: url)
    return url
}

private func objects(_ result: AncsdProcess.Result) throws -> [JSONValue] { try result.lines.map { try JSONValue(parsing: $0) } }

@Suite struct BtsnoopDecodeTests {
    @Test func decodesEachConnectionOnItsOwn() throws {
        let url = try file(twoPhones().bytes)
        defer { try? FileManager.default.removeItem(at: url) }
        let result = try AncsdProcess.run(["decode", url.path])
        #expect(result.status == 0, "\(result.stderr)")
        let out = try objects(result)
        for conn in ["hci0/0x0040", "hci1/0x0040"] {
            let mine = out.filter { $0["conn"]?.stringValue == conn }
            #expect(mine.map { $0["char"]?.stringValue ?? $0["event"]?.stringValue ?? "?" } == ["connected", "ns", "cp", "ds", "disconnected"])
            let answer = try #require(mine.first { $0["char"] == "ds" })
            #expect(answer["complete"] == true && answer["uid"] == 7)
            #expect(answer["attributes"]?.arrayValue?.first?["value"]?.stringValue == String(decoding: title, as: UTF8.self))
            #expect(mine.first?.objectValue?.keys.first == "conn", "conn comes first")
        }
    }

    @Test func toCaptureMakesAFixtureThatDecodesTheSame() throws {
        let url = try file(twoPhones().bytes)
        defer { try? FileManager.default.removeItem(at: url) }
        let capture = try AncsdProcess.run(["decode", "--to-capture", url.path])
        #expect(capture.status == 0, "\(capture.stderr)")
        let lines = try objects(capture)
        let header = try #require(lines.first)
        #expect(header["format"] == "ancs-capture/1" && header["source"] == "btsnoop" && header["datalink"] == "monitor")
        #expect(header["start"]?.stringValue?.hasSuffix("Z") == true)
        #expect(lines[1] == ["t": 0.002, "conn": "hci0/0x0040", "event": "connected", "peer": "AA:BB:CC:DD:EE:01"])
        let cpRecord = try #require(lines.first { $0["char"] == "cp" })
        #expect(cpRecord["hex"] == "0007000000014000" && cpRecord["conn"] == "hci0/0x0040")
        let fixture = try temporaryFile(capture.stdout)
        defer { try? FileManager.default.removeItem(at: fixture) }
        let fromFixture = try AncsdProcess.run(["decode", fixture.path])
        let fromSnoop = try AncsdProcess.run(["decode", url.path])
        #expect(fromFixture.status == 0 && fromFixture.stdout == fromSnoop.stdout)
    }

    @Test func handlesForACaptureWithoutDiscovery() throws {
        let url = try file(twoPhones(.h4, discovery: false).bytes)
        defer { try? FileManager.default.removeItem(at: url) }
        let without = try AncsdProcess.run(["decode", url.path])
        #expect(without.status == 0 && without.stdout.isEmpty)
        let with = try AncsdProcess.run(["decode", "--handles", "ns=0x0010,cp=0x0013,ds=0x0016", url.path])
        #expect(with.status == 0)
        #expect(try objects(with).map { $0["char"]?.stringValue ?? "" } == ["ns", "cp", "ds"])
        let capture = try AncsdProcess.run(["decode", "--to-capture", "--handles=ns=16,cp=19,ds=22", url.path])
        #expect(capture.lines.first?.contains(#""handles":"ns=0x0010,cp=0x0013,ds=0x0016""#) == true)
        let bad = try AncsdProcess.run(["decode", "--handles", "ns=banana", url.path])
        #expect(bad.status == 2 && bad.stderr.contains("--handles needs"))
        let notSnoop = try temporaryFile("{\"char\":\"ns\",\"hex\":\"0000000100000000\"}\n")
        defer { try? FileManager.default.removeItem(at: notSnoop) }
        let misuse = try AncsdProcess.run(["decode", "--to-capture", notSnoop.path])
        #expect(misuse.status == 2 && misuse.stderr.contains("--to-capture applies only to btsnoop files"))
    }

    @Test func eattTrafficDecodesAndBecomesACapture() throws {
        var b = eattPhone()
        b.disconnect(handle: 0x40)
        let url = try file(b.bytes)
        defer { try? FileManager.default.removeItem(at: url) }
        let result = try AncsdProcess.run(["decode", url.path])
        #expect(result.status == 0 && result.stderr.isEmpty, "\(result.stderr)")
        let out = try objects(result)
        #expect(out.map { $0["char"]?.stringValue ?? $0["event"]?.stringValue ?? "?" } == ["connected", "ns", "cp", "ds", "cp", "disconnected"])
        #expect(out[3]["complete"] == true && out[3]["attributes"]?.arrayValue?.first?["value"]?.stringValue == String(decoding: title, as: UTF8.self))
        #expect(out[4]["command"] == "perform_notification_action" && out[4]["att_error"] == 162)

        let capture = try AncsdProcess.run(["decode", "--to-capture", url.path])
        #expect(capture.status == 0, "\(capture.stderr)")
        let lines = try objects(capture)
        #expect(lines.compactMap { $0["char"]?.stringValue } == ["ns", "cp", "ds", "cp"])
        #expect(lines.last { $0["char"] == "cp" }?["att_error"] == 162)
        let fixture = try temporaryFile(capture.stdout)
        defer { try? FileManager.default.removeItem(at: fixture) }
        #expect(try AncsdProcess.run(["decode", fixture.path]).stdout == result.stdout)
    }

    /// A broken K-frame is a warning naming its record; the rest of the file is decoded, and
    /// the exit status says something was wrong.
    @Test func eattWarningsDoNotStopTheDecodeOrTheCapture() throws {
        var b = eattPhone()
        let broken = b.recordCount + 1
        b.l2cap(le(600) + [0x1B], cid: 0x40, handle: 0x40, from: .phone)
        b.signal(code: 0x18, identifier: 8, [0x00], handle: 0x40, from: .host)
        b.sdu([0x1B] + le(ns) + added, cid: 0x41, handle: 0x40, from: .phone)
        let url = try file(b.bytes)
        defer { try? FileManager.default.removeItem(at: url) }
        for arguments in [["decode", url.path], ["decode", "--to-capture", url.path]] {
            let result = try AncsdProcess.run(arguments)
            #expect(result.status == 1)
            let warnings = result.stderr.split(separator: "\n")
            #expect(warnings.count == 2, "\(result.stderr)")
            #expect(warnings.first == "ancsd: \(url.path): warning: record \(broken): hci0/0x0040: EATT channel 0x0040 (received): SDU dropped: its length 600 exceeds the channel's MTU 517")
            #expect(warnings.last?.hasPrefix("ancsd: \(url.path): warning: record \(broken + 1): hci0/0x0040: L2CAP signaling: corrupt: a Credit Based Connection Response (0x18)") == true)
            #expect(try objects(result).filter { $0["char"] == "ns" }.count == 2, "the NS value after the warnings is there")
        }
    }

    /// Apple Media Service beside ANCS: found by discovery (or --handles), each value one
    /// object with "service":"ams", a summary and the describer's fields; ANCS's objects are as
    /// without it; a malformed value is an error object and exit status 1; --to-capture leaves
    /// AMS out.
    @Test func appleMediaServiceTraffic() throws {
        let rc: UInt16 = 0x0020, eu: UInt16 = 0x0023, ea: UInt16 = 0x0026
        /// The phone's file, and the record of the malformed value if there is one.
        func phone(discovery: Bool, malformed: Bool = false) -> (SnoopBuilder, Int) {
            var b = SnoopBuilder(.monitor)
            b.connect(handle: 0x40)
            b.exchangeMTU(handle: 0x40, client: 517, server: 23)
            if discovery {
                b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
                b.amsDiscovery(handle: 0x40, rc: rc, eu: eu, ea: ea)
            }
            b.write(handle: 0x40, attribute: eu, [0x02, 0x00, 0x02])  // track: artist, title
            b.writeResponse(handle: 0x40)
            b.notify(handle: 0x40, attribute: rc, [0, 1, 3])
            b.notify(handle: 0x40, attribute: ns, added)
            b.notify(handle: 0x40, attribute: eu, [0x02, 0x02, 0x01] + Array("Under Pressure (Rem".utf8))
            b.write(handle: 0x40, attribute: ea, [0x02, 0x02])
            b.writeResponse(handle: 0x40)
            b.readLong(handle: 0x40, attribute: ea, Array("Under Pressure (Remastered 2011), with David Bowie".utf8), mtu: 23)
            b.write(handle: 0x40, attribute: cp, request)
            b.writeResponse(handle: 0x40)
            b.notify(handle: 0x40, attribute: ds, response)
            b.write(handle: 0x40, attribute: rc, [0x01])
            b.writeResponse(handle: 0x40)
            let record = b.recordCount + 1
            if malformed { b.notify(handle: 0x40, attribute: eu, [0x02]) }
            b.disconnect(handle: 0x40)
            return (b, record)
        }
        let url = try file(phone(discovery: true).0.bytes)
        let bare = try file(phone(discovery: false).0.bytes)
        defer { for u in [url, bare] { try? FileManager.default.removeItem(at: u) } }
        let result = try AncsdProcess.run(["decode", url.path])
        #expect(result.status == 0 && result.stderr.isEmpty, "\(result.stderr)")
        let out = try objects(result)
        #expect(out.map { $0["service"] == "ams" ? "ams \($0["char"]?.stringValue ?? "?") \($0["direction"]?.stringValue ?? "?")"
                          : $0["char"]?.stringValue ?? $0["event"]?.stringValue ?? "?" } == [
            "connected", "ams eu write", "ams rc notification", "ns", "ams eu notification", "ams ea write", "ams ea read", "cp", "ds",
            "ams rc write", "disconnected",
        ])
        #expect(out[1]["summary"] == "Entity Update: register for the track's artist, title" && out[1]["conn"] == "hci0/0x0040")
        #expect(out[2]["commands"] == "play,pause,next" && out[2]["count"] == 3)
        #expect(out[4]["summary"] == #"Entity Update track.title = "Under Pressure (Rem" (truncated)"#)
        #expect(out[6]["value"] == "Under Pressure (Remastered 2011), with David Bowie" && out[6]["attribute"] == nil)
        #expect(out[9]["summary"] == "Remote Command: send pause" && out[9]["command_id"] == 1)
        #expect(out[8]["complete"] == true && out[8]["uid"] == 7)

        // Without discovery: nothing until the handles are given, then the same.
        let none = try AncsdProcess.run(["decode", bare.path])
        #expect(none.status == 0 && none.lines.count == 2, "connected and disconnected only")
        let given = try AncsdProcess.run(["decode", "--handles", "ns=0x10,cp=0x13,ds=0x16,rc=0x20,eu=0x23,ea=0x26", bare.path])
        #expect(given.status == 0 && given.stdout == result.stdout)
        let amsOnly = try AncsdProcess.run(["decode", "--handles", "rc=32,eu=35,ea=38", bare.path])
        #expect(try objects(amsOnly).filter { $0["service"] == "ams" }.count == 6)

        // The ancs-capture/1 form holds ANCS only, and decodes to ANCS's objects.
        let capture = try AncsdProcess.run(["decode", "--to-capture", url.path])
        #expect(capture.status == 0 && !capture.stdout.contains("ams"))
        let fixture = try temporaryFile(capture.stdout)
        defer { try? FileManager.default.removeItem(at: fixture) }
        let fromFixture = try AncsdProcess.run(["decode", fixture.path])
        #expect(fromFixture.lines == result.lines.filter { !$0.contains(#""service":"ams""#) })
        let refused = try AncsdProcess.run(["decode", "--to-capture", "--handles", "rc=0x20", bare.path])
        #expect(refused.status == 2 && refused.stderr.contains("rc, eu and ea do not apply to --to-capture"))

        // A malformed value: an error object naming its record, and exit status 1.
        let (broken, record) = phone(discovery: true, malformed: true)
        let brokenURL = try file(broken.bytes)
        defer { try? FileManager.default.removeItem(at: brokenURL) }
        let malformed = try AncsdProcess.run(["decode", brokenURL.path])
        #expect(malformed.status == 1)
        let error = try #require(try objects(malformed).dropLast().last)
        #expect(error["error"] == "too_short" && error["record"]?.intValue == record && error["service"] == "ams")
    }

    @Test func readsStandardInput() throws {
        let result = try AncsdProcess.run(["decode", "-"], stdin: Data(twoPhones().bytes))
        #expect(result.status == 0 && result.lines.count == 10)
    }

    @Test func truncatedAndCorruptFilesNameTheRecord() throws {
        let b = twoPhones()
        let url = try file(Array(b.bytes.dropLast(5)))
        defer { try? FileManager.default.removeItem(at: url) }
        let result = try AncsdProcess.run(["decode", url.path])
        #expect(result.status == 2)
        #expect(result.stderr.contains("record \(b.recordCount): truncated"), "\(result.stderr)")
        #expect(result.lines.count == 9, "what came before stays printed:\n\(result.stdout)")

        var corrupt = twoPhones()
        let goodRecords = corrupt.recordCount
        corrupt.record(flags: 1 << 16 | 5, data: [0x40, 0x20, 0x09])
        let corruptURL = try file(corrupt.bytes)
        defer { try? FileManager.default.removeItem(at: corruptURL) }
        let broken = try AncsdProcess.run(["decode", corruptURL.path])
        #expect(broken.status == 2 && broken.stderr.contains("record \(goodRecords + 1): corrupt"), "\(broken.stderr)")
        #expect(broken.lines.count == 10)
        let capture = try AncsdProcess.run(["decode", "--to-capture", corruptURL.path])
        #expect(capture.status == 2 && capture.lines.count == 13, "header and the 12 records")

        var header = BtsnoopWriter.fileHeader(.h4)
        header[14] = 0x03
        header[15] = 0xE9
        let unknown = try AncsdProcess.run(["decode"], stdin: Data(header))
        #expect(unknown.status == 2 && unknown.stderr.contains("standard input: file header: unsupported datalink type 1001"))
    }

    /// Wireshark's btsnoop writer (editcap, Debian wireshark-common) rewrites the H4 file the
    /// test built through pcap; the result decodes the same.
    @Test  // editcap comes with wireshark-common, which make test installs
    func aFileWrittenByEditcap() throws {
        let url = try file(twoPhones(.h4).bytes)
        let pcap = url.deletingPathExtension().appendingPathExtension("pcap")
        let rewritten = url.deletingPathExtension().appendingPathExtension("editcap.btsnoop")
        defer { for u in [url, pcap, rewritten] { try? FileManager.default.removeItem(at: u) } }
        for arguments in [["-F", "pcap", url.path, pcap.path], ["-F", "btsnoop", pcap.path, rewritten.path]] {
            let process = try Process.run(URL(fileURLWithPath: "/usr/bin/editcap"), arguments: arguments)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
        }
        let original = try AncsdProcess.run(["decode", url.path])
        let decoded = try AncsdProcess.run(["decode", rewritten.path])
        #expect(decoded.status == 0, "\(decoded.stderr)")
        #expect(decoded.lines.count == 5 && decoded.stdout == original.stdout)
    }

    /// BlueZ's own reader (btmon -r, Debian bluez) reads the files the test built the way ancsd
    /// does: ACL TX/RX opcodes and controller indexes in the monitor record flags, directions in
    /// the H4 flags. (Discovery by Find Information: btmon 5.66 crashes reading a Read By Type
    /// Request from a file.)
    @Test(arguments: [BtsnoopDatalink.monitor, .h4])  // btmon comes with bluez, which make test installs
    func btmonReadsTheFiles(datalink: BtsnoopDatalink) throws {
        let bytes = twoPhones(datalink, findInformation: true).bytes
        let url = try file(bytes)
        defer { try? FileManager.default.removeItem(at: url) }
        let (status, text) = try runTool("/usr/bin/btmon", ["-r", url.path, "--no-pager"])
        #expect(status == 0, "\(text)")
        #expect(text.contains("ATT: Handle Value Notification (0x1b)"))
        #expect(text.contains("ATT: Write Request (0x12)") && text.contains("ATT: Write Response (0x13)"))
        #expect(text.contains("ACL Data TX: Handle 64") && text.contains("ACL Data RX: Handle 64"))
        #expect(text.contains("ATT: Find Information Response (0x05)"))
        if datalink == .monitor {
            #expect(text.contains("[hci1]"), "the controller index is in the flags")
            #expect(text.contains("Peer address: AA:BB:CC:DD:EE:02"))
        }
        let decoded = try AncsdProcess.run(["decode", url.path])
        #expect(decoded.status == 0 && decoded.lines.count == (datalink == .monitor ? 10 : 5))
    }
}
