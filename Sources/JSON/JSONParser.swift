/// Why a text is not valid JSON, and where.
public struct JSONParseError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is wrong, in a few words.
    public var reason: String
    /// The byte offset in the text where the problem was found.
    public var offset: Int

    public init(reason: String, offset: Int) {
        self.reason = reason
        self.offset = offset
    }

    public var description: String { "\(reason) at byte \(offset + 1)" }
}

extension JSONValue {
    /// The deepest nesting the parser accepts, so hostile input cannot exhaust the stack.
    public static let maxDepth = 64

    /// Parses one JSON value that must fill the whole text (surrounding whitespace allowed).
    public init(parsing text: String) throws(JSONParseError) {
        try self.init(parsing: Array(text.utf8))
    }

    /// Parses one JSON value from UTF-8 bytes that it must fill.
    public init(parsing bytes: [UInt8]) throws(JSONParseError) {
        let result = bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(JSONParseError) -> JSONValue in try JSONValue(parsing: buffer) }
        }
        self = try result.get()
    }

    /// Parses one JSON value from UTF-8 bytes that it must fill.
    public init(parsing bytes: UnsafeBufferPointer<UInt8>) throws(JSONParseError) {
        var parser = JSONParser(bytes: bytes)
        self = try parser.parseDocument()
    }
}

/// A recursive-descent parser over UTF-8 bytes (RFC 8259), strict about syntax.
struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0
    /// Reused for strings with escapes.
    var scratch: [UInt8] = []

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw error("unexpected text after the value") }
        return value
    }

    private func error(_ reason: String) -> JSONParseError { JSONParseError(reason: reason, offset: index) }

    var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    mutating func skipWhitespace() {
        while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
    }

    mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard let byte = current else { throw error("unexpected end of text") }
        switch byte {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("unexpected character '\(printable(byte))'")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count,
              (0..<count).allSatisfy({ bytes[index + $0] == literal.utf8Start[$0] })
        else { throw error("invalid literal") }
        index += count
    }

    private mutating func enter() throws(JSONParseError) {
        depth += 1
        guard depth <= JSONValue.maxDepth else { throw error("nesting deeper than \(JSONValue.maxDepth)") }
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enter()
        index += 1
        var object = JSONObject()
        skipWhitespace()
        if current == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw error("expected a member name in quotes") }
            let key = try parseString()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw error("expected ':' after a member name") }
            index += 1
            skipWhitespace()
            object.append(key, try parseValue())
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                depth -= 1
                return .object(object)
            default: throw error("expected ',' or '}' in an object")
            }
        }
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enter()
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue())
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                depth -= 1
                return .array(elements)
            default: throw error("expected ',' or ']' in an array")
            }
        }
    }

    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var integral = true
        if current == UInt8(ascii: "-") { index += 1 }
        guard let first = current, isDigit(first) else { throw error("invalid number") }
        index += 1
        if first != UInt8(ascii: "0") { while let byte = current, isDigit(byte) { index += 1 } }
        if current == UInt8(ascii: ".") {
            integral = false
            index += 1
            guard let byte = current, isDigit(byte) else { throw error("invalid number: digits must follow '.'") }
            while let byte = current, isDigit(byte) { index += 1 }
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            integral = false
            index += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
            guard let byte = current, isDigit(byte) else { throw error("invalid number: digits must follow the exponent") }
            while let byte = current, isDigit(byte) { index += 1 }
        }
        if integral, index - start <= 18 {  // fits an Int without overflow: no text needed
            var value = 0
            var position = start
            let negative = bytes[position] == UInt8(ascii: "-")
            if negative { position += 1 }
            while position < index {
                value = value &* 10 &+ Int(bytes[position] &- UInt8(ascii: "0"))
                position += 1
            }
            return .int(negative ? -value : value)
        }
        if let value = exactDecimal(from: start) { return .double(value) }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if integral, let value = Int(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else {
            index = start
            throw error("number out of range")
        }
        return .double(value)
    }

    /// Parses a string value, making one `String`: a string without escapes is validated and
    /// copied straight from the input; one with escapes is built in `scratch` first.
    /// A number without exponent of at most 15 digits (such as 12.345), read exactly: both the
    /// digits and the power of ten are exact Doubles, so one division rounds correctly, as the
    /// full conversion would. Nil for anything else.
    private func exactDecimal(from start: Int) -> Double? {
        var position = start
        let negative = bytes[position] == UInt8(ascii: "-")
        if negative { position += 1 }
        var mantissa: UInt64 = 0
        var digits = 0
        var fraction = -1
        while position < index {
            let byte = bytes[position]
            if byte == UInt8(ascii: ".") {
                fraction = 0
            } else if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                mantissa = mantissa &* 10 &+ UInt64(byte - UInt8(ascii: "0"))
                digits += 1
                if fraction >= 0 { fraction += 1 }
            } else {
                return nil  // an exponent
            }
            position += 1
        }
        guard digits <= 15, fraction >= 0 else { return nil }
        let powers: (Double, Double, Double, Double, Double, Double, Double, Double, Double, Double, Double, Double, Double, Double, Double, Double) =
            (1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15)
        let scale = withUnsafeBytes(of: powers) { $0.load(fromByteOffset: fraction * 8, as: Double.self) }
        let value = Double(mantissa) / scale
        return negative ? -value : value
    }

    private mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // the opening quote
        var runStart = index
        var usesScratch = false
        while true {
            let (stop, asciiOnly) = scanRun(from: index)
            index = stop
            guard stop < bytes.count else { throw error("unterminated string") }
            let byte = bytes[stop]
            if byte < 0x20 { throw error("control character in a string (must be escaped)") }
            let run = UnsafeBufferPointer(rebasing: bytes[runStart..<stop])
            if !asciiOnly, !isValidUTF8(run) {
                throw JSONParseError(reason: "invalid UTF-8 in a string", offset: runStart)
            }
            if byte == UInt8(ascii: "\"") {
                index += 1
                guard usesScratch else { return String(decoding: run, as: UTF8.self) }
                scratch.append(contentsOf: run)
                return String(decoding: scratch, as: UTF8.self)
            }
            // A backslash.
            if !usesScratch {
                usesScratch = true
                scratch.removeAll(keepingCapacity: true)
            }
            scratch.append(contentsOf: run)
            index += 1
            let scalar = try parseEscape()
            appendUTF8(scalar, to: &scratch)
            runStart = index
        }
    }

    /// Scans from `start` to the next quote, backslash or control character (or the end);
    /// also tells whether every byte scanned was ASCII.
    @inline(__always)
    func scanRun(from start: Int) -> (stop: Int, asciiOnly: Bool) {
        var position = start
        var high: UInt8 = 0
        let count = bytes.count
        if let base = bytes.baseAddress {
            var highWords = false
            while position + 8 <= count {
                let word = ByteScan.load(base + position)
                if ByteScan.hasControl(word) || ByteScan.has(word, UInt8(ascii: "\"")) || ByteScan.has(word, UInt8(ascii: "\\")) {
                    break
                }
                highWords = highWords || ByteScan.hasHigh(word)
                position += 8
            }
            if highWords { high = 0x80 }
        }
        while position < count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            high |= byte
            position += 1
        }
        return (position, high < 0x80)
    }

    private mutating func parseEscape() throws(JSONParseError) -> Unicode.Scalar {
        guard let byte = current else { throw error("unterminated escape") }
        index += 1
        switch byte {
        case UInt8(ascii: "\""): return "\""
        case UInt8(ascii: "\\"): return "\\"
        case UInt8(ascii: "/"): return "/"
        case UInt8(ascii: "b"): return "\u{08}"
        case UInt8(ascii: "f"): return "\u{0C}"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "u"):
            let high = try parseHex4()
            if (0xD800..<0xDC00).contains(high) {
                guard current == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else {
                    throw error("unpaired surrogate in \\u escape")
                }
                index += 2
                let low = try parseHex4()
                guard (0xDC00..<0xE000).contains(low) else { throw error("unpaired surrogate in \\u escape") }
                let value = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                guard let scalar = Unicode.Scalar(value) else { throw error("invalid \\u escape") }
                return scalar
            }
            guard let scalar = Unicode.Scalar(high) else { throw error("unpaired surrogate in \\u escape") }
            return scalar
        default:
            index -= 1
            throw error("invalid escape '\\\(printable(byte))'")
        }
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard bytes.count - index >= 4 else { throw error("truncated \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let nibble = hexValue(bytes[index]) else { throw error("invalid hex digit in \\u escape") }
            value = value << 4 | UInt32(nibble)
            index += 1
        }
        return value
    }
}

func isValidUTF8(_ run: UnsafeBufferPointer<UInt8>) -> Bool {
    var iterator = run.makeIterator()
    var parser = Unicode.UTF8.ForwardParser()
    while true {
        switch parser.parseScalar(from: &iterator) {
        case .valid: continue
        case .emptyInput: return true
        case .error: return false
        }
    }
}

private func appendUTF8(_ scalar: Unicode.Scalar, to out: inout [UInt8]) {
    let value = scalar.value
    switch value {
    case 0..<0x80:
        out.append(UInt8(value))
    case 0x80..<0x800:
        out.append(0xC0 | UInt8(value >> 6))
        out.append(0x80 | UInt8(value & 0x3F))
    case 0x800..<0x10000:
        out.append(0xE0 | UInt8(value >> 12))
        out.append(0x80 | UInt8((value >> 6) & 0x3F))
        out.append(0x80 | UInt8(value & 0x3F))
    default:
        out.append(0xF0 | UInt8(value >> 18))
        out.append(0x80 | UInt8((value >> 12) & 0x3F))
        out.append(0x80 | UInt8((value >> 6) & 0x3F))
        out.append(0x80 | UInt8(value & 0x3F))
    }
}

private func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}

private func printable(_ byte: UInt8) -> String {
    (0x21..<0x7F).contains(byte) ? String(UnicodeScalar(byte)) : "\\x" + String(byte, radix: 16)
}
