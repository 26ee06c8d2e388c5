import JSON
import Testing

@Suite struct JSONParsingTests {
    @Test func parsesEveryKindOfValue() throws {
        let value = try JSONValue(parsing: #" {"a": [1, -2, 3.5, 1e3, -0.25E-2], "b": {"c": null, "d": true, "e": false}, "s": "x"} "#)
        #expect(value["a"] == [1, -2, 3.5, 1000.0, -0.0025])
        #expect(value["b"]?["c"] == .null)
        #expect(value["b"]?["d"]?.boolValue == true)
        #expect(value["s"]?.stringValue == "x")
        #expect(value.objectValue?.keys == ["a", "b", "s"])
    }

    @Test func numbers() throws {
        #expect(try JSONValue(parsing: "0") == .int(0))
        #expect(try JSONValue(parsing: "-0") == .int(0))
        #expect(try JSONValue(parsing: "9223372036854775807") == .int(Int.max))
        #expect(try JSONValue(parsing: "9223372036854775808") == .double(9223372036854775808.0))
        #expect(try JSONValue(parsing: "0.03").doubleValue == 0.03)
        #expect(try JSONValue(parsing: "2.0").intValue == 2)
        #expect(try JSONValue(parsing: "2.5").intValue == nil)
    }

    @Test func stringEscapes() throws {
        #expect(try JSONValue(parsing: #""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{08}\u{0C}\n\r\t"))
        #expect(try JSONValue(parsing: #""\u00e9\u2026\ud83d\udc4d""#) == .string("é…👍"))
        #expect(try JSONValue(parsing: "\"β „“ 👍\"") == .string("β „“ 👍"))
    }

    /// Invalid texts and the reason each is refused for. A property rather than a closure
    /// inside `@Test(arguments:)`, which crashes Swift 6.0's compiler.
    static let invalidTexts: [(text: String, reason: String)] = [
        ("", "unexpected end of text"), ("{", "expected a member name"), ("[1,]", "unexpected character"),
        ("[1 2]", "expected ',' or ']'"), (#"{"a" 1}"#, "expected ':'"), (#"{"a":1,}"#, "expected a member name"),
        ("01", "unexpected text after"), ("1.", "digits must follow '.'"), ("1e", "digits must follow the exponent"),
        ("-", "invalid number"), ("tru", "invalid literal"), ("nul", "invalid literal"), (#""abc"#, "unterminated string"),
        ("\"a\nb\"", "control character"), (#""\x""#, "invalid escape"), (#""\u12""#, "truncated"),
        (#""\u12zz""#, "invalid hex digit"), (#""\ud800""#, "unpaired surrogate"), (#""\udc00""#, "unpaired surrogate"),
        (#""\ud800\u0041""#, "unpaired surrogate"), ("1e999", "number out of range"), ("[1] x", "unexpected text after"),
    ]

    @Test(arguments: invalidTexts)
    func refusesInvalidText(text: String, reason: String) {
        do {
            _ = try JSONValue(parsing: text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.reason.contains(reason), "\(text): \(error)")
        }
    }

    @Test func reportsTheOffset() {
        #expect(throws: JSONParseError(reason: "unexpected character '}'", offset: 6)) { try JSONValue(parsing: #"{"a": }"#) }
        #expect(JSONParseError(reason: "x", offset: 0).description == "x at byte 1")
    }

    @Test func refusesInvalidUTF8() {
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: [0x22, 0xC3, 0x28, 0x22]) }
    }

    @Test func limitsNesting() throws {
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: deep) }
        let fine = String(repeating: "[", count: JSONValue.maxDepth) + String(repeating: "]", count: JSONValue.maxDepth)
        #expect(try JSONValue(parsing: fine).arrayValue != nil)
    }
}

@Suite struct JSONWritingTests {
    @Test func compactOutputInOrder() {
        let value: JSONValue = ["b": 1, "a": [true, nil, "x"], "c": 2.5, "d": ["e": -3]]
        #expect(value.serialized == #"{"b":1,"a":[true,null,"x"],"c":2.5,"d":{"e":-3}}"#)
    }

    @Test func escapesWhatMustBeEscaped() {
        let value = JSONValue.string("q\"b\\n\n\r\t\u{0}\u{1F}\u{7F}\u{2028}\u{2029}é…👍")
        #expect(value.serialized == #""q\"b\\n\n\r\t\u0000\u001f\u007f\u2028\u2029é…👍""#)
    }

    /// C1 controls (U+0080–U+009F) are valid JSON raw, but a terminal showing the text acts on
    /// them (CSI U+009B, OSC U+009D…): escaped, like ESC; U+00A0 on is text.
    @Test func escapesC1Controls() throws {
        let value = JSONValue.string("a\u{80}b\u{85}\u{9B}31m\u{9D}0;x\u{9C}\u{9F}\u{A0}é")
        #expect(value.serialized == #""a\u0080b\u0085\u009b31m\u009d0;x\u009c\u009f"# + "\u{A0}é\"")
        var writer = JSONWriter()
        writer.writeString(utf8: [0x41, 0xC2, 0x9B, 0x42, 0xC2, 0x80])  // given as bytes
        #expect(String(decoding: writer.bytes, as: UTF8.self) == #""A\u009bB\u0080""#)
        #expect(try JSONValue(parsing: value.serialized) == value, "read back the same")
    }

    @Test func doubles() {
        #expect(JSONValue.double(0.03).serialized == "0.03")
        #expect(JSONValue.double(2).serialized == "2.0")
        #expect(JSONValue.double(.infinity).serialized == "null")
        #expect(JSONValue.double(.nan).serialized == "null")
    }

    @Test func roundTrips() throws {
        let values: [JSONValue] = [
            ["s": "line\nbreak \u{1} \u{2028} „“ 👍", "n": [0, -1, .int(Int.max), .int(Int.min)], "d": 1.5e-7, "o": [:], "a": []],
            .string(""), .null, [[[["deep"]]]],
        ]
        for value in values {
            #expect(try JSONValue(parsing: value.serialized) == value)
        }
    }

    @Test func optionalsBecomeNull() {
        #expect(JSONValue(nil as String?) == .null)
        #expect(JSONValue(3 as Int?) == .int(3))
        #expect(JSONValue(true as Bool?) == .bool(true))
    }

    @Test func objectEditing() {
        var object: JSONObject = ["a": 1, "b": 2]
        object["a"] = 3
        object["c"] = 4
        object["b"] = nil
        #expect(object.keys == ["a", "c"])
        #expect(JSONValue.object(object).serialized == #"{"a":3,"c":4}"#)
    }
}
