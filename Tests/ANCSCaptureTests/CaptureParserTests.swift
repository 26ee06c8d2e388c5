import ANCSCapture
import JSON
import Testing

@Suite struct CaptureParserTests {
    private func parseAll(_ lines: [String]) throws(CaptureFormatError) -> [CaptureRecord] {
        var parser = CaptureParser()
        var records: [CaptureRecord] = []
        for line in lines {
            if let record = try parser.parse(line: line) { records.append(record) }
        }
        return records
    }

    private func failure(_ lines: [String]) -> CaptureFormatError? {
        do {
            _ = try parseAll(lines)
            return nil
        } catch {
            return error
        }
    }

    @Test func parsesEveryKindOfRecord() throws {
        let records = try parseAll([
            #"{"format": "ancs-capture/1", "id": "x"}"#,
            #"{"t": 0.5, "char": "ns", "hex": "0018060201020304"}"#,
            "",
            #"{"t": 1, "char": "cp", "hex": "02010000000A", "att_error": 162}"#,
            #"{"char": "ds", "hex": ""}"#,
            #"{"t": 2.25, "event": "disconnected"}"#,
        ])
        #expect(records == [
            .header(["format": "ancs-capture/1", "id": "x"]),
            .value(time: 0.5, characteristic: .ns, bytes: [0, 0x18, 6, 2, 1, 2, 3, 4], attError: nil),
            .value(time: 1, characteristic: .cp, bytes: [2, 1, 0, 0, 0, 0x0A], attError: 0xA2),
            .value(time: nil, characteristic: .ds, bytes: [], attError: nil),
            .event(time: 2.25, .disconnected),
        ])
    }

    @Test func headerIsOptional() throws {
        #expect(try parseAll([#"{"event": "connected"}"#]) == [.event(time: nil, .connected)])
    }

    @Test func errorsNameTheLine() {
        let header = #"{"format": "ancs-capture/1"}"#
        let cases: [([String], Int, String)] = [
            ([header, "{not json"], 2, "not valid JSON"),
            ([header, "[1, 2]"], 2, "expected a JSON object, found array"),
            ([#"{"format": "ancs-capture/2"}"#], 1, "unsupported format \"ancs-capture/2\""),
            ([#"{"event": "connected"}"#, header], 2, "a header must be the first line"),
            ([header, "", #"{"char": "xx", "hex": ""}"#], 3, "unknown char \"xx\""),
            ([header, #"{"char": "ds"}"#], 2, "needs \"hex\""),
            ([header, #"{"char": "ds", "hex": "abc"}"#], 2, "odd number of hex digits (3)"),
            ([header, #"{"char": "ds", "hex": "zz"}"#], 2, "not a hex digit at position 1"),
            ([header, #"{"char": "ds", "hex": 12}"#], 2, "needs \"hex\" as a string"),
            ([header, #"{"char": "ds", "hex": "00", "att_error": 3}"#], 2, "only on a cp record"),
            ([header, #"{"char": "cp", "hex": "00", "att_error": 256}"#], 2, "from 0 to 255"),
            ([header, #"{"char": "cp", "hex": "00", "t": -1}"#], 2, "\"t\" must be a number"),
            ([header, #"{"event": "exploded"}"#], 2, "unknown event \"exploded\""),
            ([header, #"{"hex": "00"}"#], 2, "needs \"char\""),
        ]
        for (lines, line, reason) in cases {
            let error = failure(lines)
            #expect(error?.line == line, "\(lines)")
            #expect(error?.reason.contains(reason) == true, "\(String(describing: error)) should say \(reason)")
        }
    }

    @Test func invalidUTF8LineIsAFormatError() {
        var parser = CaptureParser()
        #expect(throws: CaptureFormatError.self) { try parser.parse(line: [0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D]) }
    }

    @Test func hexHelpers() throws {
        #expect(try decodeHex("00aAfF").get() == [0, 0xAA, 0xFF])
        #expect(encodeHex([0, 0xAA, 0xFF]) == "00aaff")
    }

    private enum Either: Equatable {
        case bytes([UInt8])
        case refused(String)
    }

    /// decodeHex (eight digits at a time where it can) against a digit-by-digit reference, on
    /// random strings of hex digits with, now and then, one character that is not one.
    @Test func hexAgainstAReference() {
        /// The bytes, or the reason for refusing them.
        func reference(_ text: [UInt8]) -> Either {
            guard text.count % 2 == 0 else { return .refused("odd number of hex digits (\(text.count))") }
            var out: [UInt8] = []
            for index in stride(from: 0, to: text.count, by: 2) {
                guard let high = Int(String(UnicodeScalar(text[index])), radix: 16), text[index] != UInt8(ascii: "+"), text[index] != UInt8(ascii: "-") else {
                    return .refused("not a hex digit at position \(index + 1)")
                }
                guard let low = Int(String(UnicodeScalar(text[index + 1])), radix: 16), text[index + 1] != UInt8(ascii: "+"), text[index + 1] != UInt8(ascii: "-") else {
                    return .refused("not a hex digit at position \(index + 2)")
                }
                out.append(UInt8(high << 4 | low))
            }
            return .bytes(out)
        }
        var state: UInt64 = 16
        func next() -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(truncatingIfNeeded: state >> 33)
        }
        let digits = Array("0123456789abcdefABCDEF".utf8)
        let others = Array("gG/:@`xX \u{7F}".utf8) + [0x00, 0x80, 0xC3, 0xFF, 0x2F, 0x3A, 0x40, 0x47, 0x60, 0x67]
        for _ in 0..<20_000 {
            var text = (0..<(next() % 40)).map { _ in digits[next() % digits.count] }
            if next() % 3 == 0, !text.isEmpty { text[next() % text.count] = others[next() % others.count] }
            let result: Either = switch text.withUnsafeBufferPointer({ decodeHex(utf8: $0) }) {
            case .success(let bytes): .bytes(bytes)
            case .failure(let error): .refused(error.reason)
            }
            #expect(result == reference(text), "\(text)")
        }
    }
}

@Suite struct CaptureDecoderTests {
    private func decode(_ lines: [String]) throws -> (output: [String], errors: Int) {
        var parser = CaptureParser()
        var decoder = CaptureDecoder()
        var output: [String] = []
        for (index, line) in lines.enumerated() {
            if let record = try parser.parse(line: line) {
                output += decoder.decode(record, line: index + 1).map(\.serialized)
            }
        }
        output += decoder.finish().map(\.serialized)
        return (output, decoder.protocolErrorCount)
    }

    @Test func notificationSource() throws {
        let result = try decode([#"{"char":"ns","hex":"0018060201020304"}"#, #"{"char":"ns","hex":"07e4c8ff05000000"}"#])
        #expect(result.output == [
            #"{"char":"ns","event":"added","event_id":0,"uid":67305985,"flags":["positive_action","negative_action"],"flags_raw":24,"category":"email","category_id":6,"category_count":2}"#,
            #"{"char":"ns","event":"reserved","event_id":7,"uid":5,"flags":["pre_existing"],"flags_raw":228,"category":"reserved","category_id":200,"category_count":255}"#,
        ])
        #expect(result.errors == 0)
    }

    @Test func notificationSourceOfTheWrongLength() throws {
        let result = try decode([#"{"char":"ns","hex":"00180602010203"}"#])
        #expect(result.output == [#"{"char":"ns","error":"wrong_length","detail":"a Notification Source value is 8 bytes, this one has 7","line":1}"#])
        #expect(result.errors == 1)
    }

    @Test func controlPointAndResponse() throws {
        let result = try decode([
            #"{"char":"cp","hex":"00010000000128000504"}"#,
            #"{"char":"ds","hex":"000100000001020048"}"#,
            #"{"char":"ds","hex":"69050000040300313133"}"#,
        ])
        #expect(result.output == [
            #"{"char":"cp","command":"get_notification_attributes","uid":1,"attributes":[{"id":1,"name":"title","max_length":40},{"id":5,"name":"date"},{"id":4,"name":"message_size"}]}"#,
            #"{"char":"ds","response":"notification_attributes","uid":1,"complete":true,"missing":[],"attributes":[{"id":1,"name":"title","length":2,"value":"Hi","utf8_valid":true},{"id":5,"name":"date","length":0,"value":"","utf8_valid":true,"date":null},{"id":4,"name":"message_size","length":3,"value":"113","utf8_valid":true,"message_size":113}]}"#,
        ])
    }

    @Test func actionWithAnATTError() throws {
        let result = try decode([#"{"char":"cp","hex":"020500000001","att_error":162}"#])
        #expect(result.output == [#"{"char":"cp","command":"perform_notification_action","uid":5,"action":"negative","att_error":162,"att_error_name":"invalid_parameter"}"#])
        #expect(result.errors == 0)
    }

    @Test func aRefusedRequestExpectsNoData() throws {
        let result = try decode([#"{"char":"cp","hex":"00010000000500","att_error":162}"#, #"{"char":"ds","hex":"00"}"#])
        #expect(result.output.last == #"{"char":"ds","error":"no_pending_request","detail":"Data Source bytes arrived while no request was pending (at byte 0)","line":2,"offset":0}"#)
        #expect(result.errors == 1)
    }

    @Test func aDisconnectClosesTheOpenResponse() throws {
        let result = try decode([
            #"{"char":"cp","hex":"000100000001280005"}"#,
            #"{"char":"ds","hex":"00010000000102004869"}"#,
            #"{"event":"disconnected"}"#,
        ])
        #expect(result.output.dropFirst() == [
            #"{"char":"ds","response":"notification_attributes","uid":1,"complete":false,"missing":[5],"attributes":[{"id":1,"name":"title","length":2,"value":"Hi","utf8_valid":true}]}"#,
            #"{"event":"disconnected"}"#,
        ])
    }

    @Test func theNextRequestClosesTheOpenResponse() throws {
        let result = try decode([
            #"{"char":"cp","hex":"000100000001280005"}"#,
            #"{"char":"ds","hex":"00010000000102004869"}"#,
            #"{"char":"cp","hex":"0161620000"}"#,
        ])
        #expect(result.output.count == 4)
        #expect(result.output[1].contains(#""complete":false,"missing":[5]"#))
        #expect(result.output[2].hasPrefix(#"{"char":"cp","command":"get_app_attributes","app_id":"ab""#))
        #expect(result.output[3] == #"{"char":"ds","response":"app_attributes","app_id":"ab","complete":false,"missing":[0],"attributes":[]}"#, "still open at the end")
    }

    @Test func protocolErrorsCarryTheLineAndOffset() throws {
        let result = try decode([#"{"char":"cp","hex":"000100000005"}"#, #"{"char":"ds","hex":"0002000000"}"#, #"{"char":"cp","hex":"09"}"#])
        #expect(result.output[1] == #"{"char":"ds","error":"uid_mismatch","detail":"the response is for notification 2, the request was for 1 (at byte 1)","line":2,"offset":1}"#)
        #expect(result.output[2] == #"{"char":"cp","error":"unknown_command","detail":"unknown command ID 0x09","line":3}"#)
        #expect(result.errors == 2)
    }

    @Test func invalidUTF8IsRepairedAndItsBytesShown() throws {
        let result = try decode([#"{"char":"cp","hex":"0001000000012800"}"#, #"{"char":"ds","hex":"000100000001030048ff69"}"#])
        #expect(result.output[1].contains(#""value":"H\#u{FFFD}i","utf8_valid":false,"value_hex":"48ff69""#))
    }

    @Test func truncationVerdict() throws {
        let result = try decode([
            #"{"char":"cp","hex":"0001000000030a0004"}"#,
            #"{"char":"ds","hex":"00010000000303006162630402003130"}"#,
        ])
        #expect(result.output[1].hasSuffix(#""truncated":true}"#))
    }
}
