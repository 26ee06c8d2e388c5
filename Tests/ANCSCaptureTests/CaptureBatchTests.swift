import ANCS
@testable import ANCSCapture
import JSON
import Testing

@Suite struct CaptureBatchTests {
    /// Lines for the plain path and for the general one (header, escapes, nesting, spaces,
    /// repeated members, wrong types, bad values), each of which the batch must read as
    /// `parseEntry(line:)` does.
    static let lines = [
        #"{"format":"ancs-capture/1","source":"test"}"#,
        #"{"t":0.001,"char":"ns","hex":"00180401e8030000"}"#,
        #"{"t":1,"char":"cp","hex":"00e80300000001400002200003000104050607","att_error":162}"#,
        #"{"char":"ds","hex":""}"#,
        #"{"char":"ds","hex":"ABCDEF0123456789abcdef"}"#,
        #"{"t":2.25,"event":"disconnected","conn":"hci0/0x0040"}"#,
        #"{"event":"connected","char":"ds","hex":"zz"}"#,
        #"{"char":"ns","hex":"0018","conn":"hci1/0x0041","extra":[1,2]}"#,
        #"{"char":"ns","hex":"0018","conn":"hci\u00301"}"#,
        #" { "char" : "cp" , "hex" : "00" } "#,
        "",
        "   ",
        #"{"char":"ds","hex":"00","hex":"01"}"#,
        #"{"char":"ds","hex":"abc"}"#,
        #"{"char":"ds","hex":"0g"}"#,
        #"{"char":"ds","hex":"0011223344556677zz"}"#,
        #"{"char":"ds","hex":12}"#,
        #"{"char":"xx","hex":"00"}"#,
        #"{"char":"ds","hex":"00","att_error":3}"#,
        #"{"char":"cp","hex":"00","att_error":256}"#,
        #"{"char":"cp","hex":"00","att_error":1.5}"#,
        #"{"char":"cp","hex":"00","t":-1}"#,
        #"{"event":"exploded"}"#,
        #"{"hex":"00"}"#,
        "[1,2]",
        "{not json",
        #"{"format":"ancs-capture/1"}"#,
        // The shape capture writers give, read by matching its text, and lines just off it.
        #"{"t":0.001,"char":"ds","hex":"00e80300000015006e65742e"}"#,
        #"{"t":12,"conn":"hci0/0x0040","char":"cp","hex":"00e8030000000140"}"#,
        #"{"t":0,"char":"ns","hex":""}"#,
        #"{"t":01,"char":"ns","hex":"00"}"#,
        #"{"t":1.,"char":"ns","hex":"00"}"#,
        #"{"t":1.5e3,"char":"ns","hex":"00"}"#,
        #"{"t":-1,"char":"ns","hex":"00"}"#,
        #"{"t":1,"char":"ns","hex":"0"}"}"#,
        #"{"t":1,"char":"ns","hex":"0\"}"#,
        #"{"t":1,"char":"ns","hex":"00"} "#,
        #"{"t":1,"char":"ns","hex":"00","att_error":1}"#,
        #"{"t":1,"char":"cp","hex":"00"}x"#,
        #"{"t":1,"char":"np","hex":"00"}"#,
        #"{"t":1,"conn":"a\"b","char":"ns","hex":"00"}"#,
        #"{"t":1,"conn":"é","char":"ns","hex":"00"}"#,
        #"{"t":1,"conn":"x","hex":"00"}"#,
        #"{"t":1,"char":"ds","hex":"0011223344556677zz"}"#,
        #"{"t":1,"char":"ds","hex":"00112233445566778"}"#,
    ]

    /// Each line read alone (a fresh parser after an error, as a reader stops there), both ways.
    @Test func batchReadsEveryLineAsTheGeneralParser() throws {
        var general = CaptureParser()
        var parser = CaptureParser()
        var batch = CaptureRecordBatch()
        var expected: [(CaptureRecord, String?, Int)] = []
        for (index, line) in Self.lines.enumerated() {
            let number = index + 1
            let slow = Result { () throws(CaptureFormatError) in try general.parseEntry(line: Array(line.utf8)) }
            let bytes = Array(line.utf8)
            let fast = bytes.withUnsafeBufferPointer { text in
                Result { () throws(CaptureFormatError) in try batch.append(line: text, number: number, parser: &parser) }
            }
            switch (slow, fast) {
            case (.success(let entry), .success):
                if let entry { expected.append((entry.record, entry.connection, number)) }
            case (.failure(let a), .failure(let b)):
                #expect(a == b, "line \(number): \(line)")
                general = CaptureParser()
                parser = CaptureParser()
            default:
                Issue.record("line \(number) read differently: \(slow) / \(fast)")
            }
        }
        var got: [(CaptureRecord, String?, Int)] = []
        batch.forEach { view in
            // A header's object is not kept by the batch.
            if case .header = view.kind { got.append((.header([:]), view.connection, view.line)) } else {
                got.append((view.record, view.connection, view.line))
            }
        }
        #expect(got.count == expected.count)
        for (a, b) in zip(got, expected) {
            if case .header = b.0 { #expect(a.0 == .header([:])) } else { #expect(a.0 == b.0) }
            #expect(a.1 == b.1 && a.2 == b.2)
        }
        #expect(batch.count == expected.count)
        batch.removeAll()
        #expect(batch.isEmpty && batch.byteCount == 0)
    }

    /// A decoder fed a batch writes what it writes fed the records one by one.
    @Test func decodingABatchEqualsDecodingRecords() throws {
        let capture = """
        {"format":"ancs-capture/1"}
        {"t":0.001,"char":"ns","hex":"00180401e8030000"}
        {"t":0.001,"char":"cp","hex":"00e80300000001400002200003000104050607"}
        {"t":0.001,"char":"ds","hex":"00e80300000015006e65742e7768617473617070"}
        {"t":0.001,"char":"ds","hex":"2e57686174734170700113007468652073656520"}
        {"t":0.002,"char":"ns","hex":"ff"}
        {"t":0.003,"event":"disconnected"}
        {"t":0.004,"char":"cp","hex":"01636f6d2e6170706c652e4d6f62696c65534d530000"}
        {"t":0.004,"char":"ds","hex":"01636f6d2e6170706c652e4d6f62696c65534d530000050048656c6c6f"}
        {"t":0.005,"char":"cp","hex":"0207000000ff"}
        """
        var parser = CaptureParser()
        var batch = CaptureRecordBatch(reservingRecords: 4, bytes: 8)
        var records: [(CaptureRecord, Int)] = []
        var general = CaptureParser()
        for (index, line) in capture.split(separator: "\n").enumerated() {
            let bytes = Array(line.utf8)
            // An untyped closure: swiftlang 6.0.3 crashes on a typed-throws one passed to withUnsafeBufferPointer.
            try bytes.withUnsafeBufferPointer { text in try batch.append(line: text, number: index + 1, parser: &parser) }
            if let record = try general.parse(line: bytes) { records.append((record, index + 1)) }
        }
        var viaBatch = CaptureDecoder()
        var viaRecords = CaptureDecoder()
        var a = JSONWriter()
        var b = JSONWriter()
        batch.forEach { viaBatch.decode($0, line: $0.line, into: &a) }
        for (record, line) in records { viaRecords.decode(record, line: line, into: &b) }
        viaBatch.finish(into: &a)
        viaRecords.finish(into: &b)
        #expect(a.bytes == b.bytes)
        #expect(a.bytes.split(separator: 0x0A).count >= 6)
        #expect(viaBatch.protocolErrorCount == viaRecords.protocolErrorCount && viaBatch.protocolErrorCount > 0)
    }

    /// The common shape reads `t` itself: it must give the Double the JSON parser gives, for
    /// integers and decimals of every length (past 15 digits it asks the parser).
    @Test func timesReadAsTheJSONParserReadsThem() throws {
        var state: UInt64 = 14
        func random(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        var texts = ["0", "0.0", "0.001", "1", "9.999", "123456789012345", "1234567890123456", "0.000000000000001",
                     "0.0000000000000001", "99999999999999999999", "4503599627370497.5", "1.7976931348623157"]
        for _ in 0..<2_000 {
            let integer = String((0..<(1 + random(10))).map { index in Character(String(index == 0 ? 1 + random(9) : random(10))) })
            let fraction = String((0..<random(9)).map { _ in Character(String(random(10))) })
            texts.append(random(4) == 0 ? "0." + (fraction.isEmpty ? "5" : fraction) : fraction.isEmpty ? integer : integer + "." + fraction)
        }
        for text in texts {
            let line = Array(#"{"t":\#(text),"char":"ds","hex":"00"}"#.utf8)
            var batch = CaptureRecordBatch()
            var parser = CaptureParser()
            try line.withUnsafeBufferPointer { bytes in try batch.append(line: bytes, number: 1, parser: &parser) }
            let expected = try JSONValue(parsing: Array(text.utf8)).doubleValue
            var time: Double? = nil
            batch.forEach { time = $0.time }
            #expect(time == expected && time != nil, "t \(text)")
        }
    }

    @Test func hexAppendingAgreesWithDecodeHex() {
        let cases = ["", "00", "0a0B", "abc", "0g", "0011223344556677", "0011223344556677zz", "ffFFeeEE99887766554433221100", "  "]
        for text in cases {
            var bytes: [UInt8] = [1, 2, 3]
            let appended = Array(text.utf8).withUnsafeBufferPointer { decodeHex(utf8: $0, appendingTo: &bytes) }
            switch decodeHex(text) {
            case .success(let decoded):
                #expect(appended && bytes == [1, 2, 3] + decoded, "\(text)")
            case .failure:
                #expect(!appended && bytes == [1, 2, 3], "\(text)")
            }
        }
    }

    /// Every name written from `JSONNames` is what the general way writes for that raw value.
    @Test func namesMadeInAdvanceEqualTheGeneralOnes() {
        func text(_ fast: StaticString?) -> String? { fast.map { String(describing: $0) } }
        func quoted(_ name: String?) -> String? { name.map { "\"\($0)\"" } }
        for raw in UInt8.min...UInt8.max {
            #expect(text(JSONNames.event(EventID(rawValue: raw))) == quoted(EventID(rawValue: raw).name))
            #expect(text(JSONNames.category(CategoryID(rawValue: raw))) == quoted(CategoryID(rawValue: raw).name))
            #expect(text(JSONNames.command(CommandID(rawValue: raw))) == quoted(CommandID(rawValue: raw).name))
            #expect(text(JSONNames.action(ActionID(rawValue: raw))) == quoted(ActionID(rawValue: raw).name))
            #expect(text(JSONNames.attError(ATTErrorCode(rawValue: raw))) == quoted(ATTErrorCode(rawValue: raw).name))
            let notification = NotificationAttributeID(rawValue: raw)
            #expect(text(JSONNames.requestedNotificationAttribute(notification))
                == notification.name.map { "{\"id\":\(raw),\"name\":\"\($0)\"" })
            #expect(text(JSONNames.notificationAttribute(notification))
                == notification.name.map { "{\"id\":\(raw),\"name\":\"\($0)\",\"length\":" })
            let app = AppAttributeID(rawValue: raw)
            #expect(text(JSONNames.requestedAppAttribute(app)) == app.name.map { "{\"id\":\(raw),\"name\":\"\($0)\"" })
            #expect(text(JSONNames.appAttribute(app)) == app.name.map { "{\"id\":\(raw),\"name\":\"\($0)\",\"length\":" })
        }
        for bit in 0..<8 {
            let named = bit < EventFlags.named.count ? EventFlags.named[bit] : nil
            #expect(text(JSONNames.flag(bit: bit)) == quoted(named?.name))
            if let named { #expect(named.flag.rawValue == 1 << bit) }
        }
    }
}
