import JSON
import TestSupport
import Testing

/// The byte writer against an independent reference: the scalar-by-scalar writer the project used
/// before (a `String` grown one Unicode scalar at a time), on random values.
@Suite struct JSONWriterPropertyTests {
    @Test func matchesTheReferenceOnRandomValues() throws {
        var random = SplitMix64(seed: 14)
        for round in 0..<3_000 {
            let value = randomValue(&random, depth: round % 40 == 0 ? 60 : 4)
            let text = value.serialized
            #expect(text == referenceSerialized(value), "round \(round)")
            #expect(try JSONValue(parsing: text) == normalized(value), "round \(round)")
        }
    }

    @Test func repairsInvalidUTF8AsTheStandardLibraryDoes() {
        var random = SplitMix64(seed: 2028)
        for round in 0..<20_000 {
            let bytes = randomBytes(&random)
            var writer = JSONWriter()
            writer.writeString(utf8: bytes)
            let expected = referenceSerialized(.string(String(decoding: bytes, as: UTF8.self)))
            #expect(String(decoding: writer.bytes, as: UTF8.self) == expected, "round \(round): \(bytes)")
        }
    }

    @Test func everyEscape() {
        for scalar in (0..<0xA2).compactMap(Unicode.Scalar.init) + ["\u{2028}", "\u{2029}", "\u{2027}", "\u{202A}"] {
            let value = JSONValue.string("a\(scalar)b")
            #expect(value.serialized == referenceSerialized(value), "U+\(String(scalar.value, radix: 16))")
        }
    }

    @Test func numbersAsTheReferenceWritesThem() {
        for number in [0, 9, 10, -1, -9, -10, 99, 100, 1_234_567, Int.max, Int.min, Int.min + 1] {
            #expect(JSONValue.int(number).serialized == String(number))
        }
        // Every count of digits, odd and even, each digit pair, and the powers of ten around them
        // (the writer takes two digits a step).
        var numbers = Array(-1_000...1_000) + [Int.max - 1, Int.min + 9]
        var power = 1
        for _ in 0..<18 {
            power *= 10
            numbers += [power - 1, power, power + 1, -power, power * 5 + 7]
        }
        for number in numbers {
            #expect(JSONValue.int(number).serialized == String(number))
        }
        for number in [0.0, -0.0, 1.5, 1e15, 1e14, -1e14, 1e300, .leastNonzeroMagnitude, 0.1, 123_456.75, -2.0] {
            #expect(JSONValue.double(number).serialized == referenceSerialized(.double(number)))
        }
    }
}

/// What the parser reads back: doubles that are whole numbers below 1e15 come back as the same
/// Double; everything else as written.
private func normalized(_ value: JSONValue) -> JSONValue {
    switch value {
    case .double(let number) where !number.isFinite: .null
    case .array(let elements): .array(elements.map(normalized))
    case .object(let object):
        .object(object.reduce(into: JSONObject()) { $0.append($1.key, normalized($1.value)) })
    default: value
    }
}

// MARK: - The reference writer (scalar by scalar, into a String)

private func referenceSerialized(_ value: JSONValue) -> String {
    var out = ""
    referenceWrite(value, to: &out)
    return out
}

private func referenceWrite(_ value: JSONValue, to out: inout String) {
    switch value {
    case .null: out += "null"
    case .bool(let flag): out += flag ? "true" : "false"
    case .int(let number): out += String(number)
    case .double(let number):
        if !number.isFinite {
            out += "null"
        } else if number.rounded() == number, abs(number) < 1e15 {
            out += String(Int(number)) + ".0"
        } else {
            out += String(number)
        }
    case .string(let text): referenceString(text, to: &out)
    case .array(let elements):
        out += "["
        for (index, element) in elements.enumerated() {
            if index > 0 { out += "," }
            referenceWrite(element, to: &out)
        }
        out += "]"
    case .object(let object):
        out += "{"
        for (index, member) in object.members.enumerated() {
            if index > 0 { out += "," }
            referenceString(member.key, to: &out)
            out += ":"
            referenceWrite(member.value, to: &out)
        }
        out += "}"
    }
}

private func referenceString(_ text: String, to out: inout String) {
    out += "\""
    let hex = Array("0123456789abcdef")
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case "\u{08}": out += "\\b"
        case "\u{0C}": out += "\\f"
        case "\u{00}"..."\u{1F}", "\u{7F}"..."\u{9F}", "\u{2028}", "\u{2029}":
            let code = Int(scalar.value)
            out += "\\u"
            for shift in [12, 8, 4, 0] { out.append(hex[(code >> shift) & 0xF]) }
        default: out.unicodeScalars.append(scalar)
        }
    }
    out += "\""
}

// MARK: - Random values


/// Scalars that matter to the writer: every control character, the escapes, DEL, the line and
/// paragraph separators and their neighbours, two- and three-byte text, astral characters.
private let interesting: [Unicode.Scalar] = (0..<0x20).compactMap(Unicode.Scalar.init) + [
    "\"", "\\", "/", "\u{7F}", "\u{80}", "\u{85}", "\u{9B}", "\u{9F}", "\u{A0}", "\u{FF}", "é", "β", "…", "„", "“", "\u{2027}", "\u{2028}", "\u{2029}",
    "\u{202A}", "\u{200E}", "\u{FEFF}", "\u{FFFD}", "\u{FFFF}", "👍", "🎉", "\u{10FFFF}", "\u{1F1E9}",
]

private func randomString(_ random: inout SplitMix64) -> String {
    var scalars = String.UnicodeScalarView()
    for _ in 0..<Int.random(in: 0...24, using: &random) {
        switch Int.random(in: 0..<4, using: &random) {
        case 0: scalars.append(interesting.randomElement(using: &random) ?? "a")
        case 1: scalars.append(Unicode.Scalar(UInt8.random(in: 0x20...0x7E, using: &random)))
        default:
            let value = UInt32.random(in: 0...0x10FFFF, using: &random)
            scalars.append(Unicode.Scalar(value) ?? "x")
        }
    }
    return String(scalars)
}

private func randomValue(_ random: inout SplitMix64, depth: Int) -> JSONValue {
    let kind = depth <= 0 ? Int.random(in: 0..<5, using: &random) : Int.random(in: 0..<8, using: &random)
    switch kind {
    case 0: return .null
    case 1: return .bool(Bool.random(using: &random))
    case 2:
        let choices = [0, -1, Int.max, Int.min, Int.random(in: Int.min...Int.max, using: &random),
                       Int.random(in: -1000...1000, using: &random)]
        return .int(choices.randomElement(using: &random) ?? 0)
    case 3:
        let choices = [0.5, -2.0, 1e15, 1e14, .infinity, -.infinity, .nan,
                       Double(bitPattern: random.next()), Double.random(in: -1e6...1e6, using: &random)]
        let number = choices.randomElement(using: &random) ?? 0
        return .double(number.isNaN && Bool.random(using: &random) ? 1.25 : number)
    case 4: return .string(randomString(&random))
    case 5:
        if depth > 8 { return .array([randomValue(&random, depth: depth - 1)]) }
        return .array((0..<Int.random(in: 0...4, using: &random)).map { _ in randomValue(&random, depth: depth - 1) })
    default:
        var object = JSONObject()
        let count = depth > 8 ? 1 : Int.random(in: 0...4, using: &random)
        for _ in 0..<count { object.append(randomString(&random), randomValue(&random, depth: depth - 1)) }
        return .object(object)
    }
}

/// Bytes that are mostly UTF-8 with every kind of damage: stray continuation bytes, truncated
/// sequences, overlong forms, surrogates, values above U+10FFFF, bytes F5–FF.
private func randomBytes(_ random: inout SplitMix64) -> [UInt8] {
    var bytes: [UInt8] = []
    for _ in 0..<Int.random(in: 0...16, using: &random) {
        switch Int.random(in: 0..<6, using: &random) {
        case 0: bytes.append(UInt8.random(in: 0...0xFF, using: &random))
        case 1: bytes += Array(String(interesting.randomElement(using: &random) ?? "a").utf8)
        case 2:  // a valid sequence cut short
            let encoded = Array(String(interesting.randomElement(using: &random) ?? "a").utf8)
            bytes += encoded.prefix(Int.random(in: 0...encoded.count, using: &random))
        case 3:
            let leads: [UInt8] = [0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF]
            bytes.append(leads.randomElement(using: &random) ?? 0xC0)
            for _ in 0..<Int.random(in: 0...3, using: &random) { bytes.append(UInt8.random(in: 0x7F...0xC0, using: &random)) }
        default: bytes.append(UInt8.random(in: 0x20...0x7E, using: &random))
        }
    }
    return bytes
}
