/// Compact JSON text written as UTF-8 bytes into a reusable buffer.
///
/// Strings are escaped by scanning their UTF-8 bytes: runs that need no escape are copied in one
/// go. Non-ASCII text is written as UTF-8; control characters, U+007F, U+2028 and U+2029 are
/// escaped (`\n`, `\t`, … where JSON has a short form, `\u00XX` otherwise). Non-finite numbers,
/// which JSON cannot express, are written as null. Keep one writer, append values or lines,
/// hand `bytes` to one `write(2)`, then `removeAll()` to reuse the storage.
public struct JSONWriter: Sendable {
    /// The text written so far.
    public private(set) var bytes: [UInt8]

    /// An empty writer with room for `capacity` bytes.
    public init(capacity: Int = 0) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// Empties the buffer, keeping its storage.
    public mutating func removeAll() { bytes.removeAll(keepingCapacity: true) }

    /// How many bytes are buffered.
    public var count: Int { bytes.count }

    /// Appends `value` as compact JSON text.
    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: appendASCII("null")
        case .bool(let flag): appendASCII(flag ? "true" : "false")
        case .int(let number): write(number)
        case .double(let number): write(number)
        case .string(let text): write(text)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            var first = true
            for element in elements {
                if !first { bytes.append(UInt8(ascii: ",")) }
                first = false
                write(element)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let object):
            bytes.append(UInt8(ascii: "{"))
            var first = true
            for member in object.members {
                if !first { bytes.append(UInt8(ascii: ",")) }
                first = false
                write(member.key)
                bytes.append(UInt8(ascii: ":"))
                write(member.value)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    /// Appends `value` followed by a newline: one JSON Lines record.
    public mutating func writeLine(_ value: JSONValue) {
        write(value)
        bytes.append(0x0A)
    }

    /// Appends a newline.
    public mutating func newline() { bytes.append(0x0A) }

    /// Appends an integer.
    public mutating func write(_ number: Int) {
        if number >= 0 && number < 10 {
            bytes.append(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: number))
            return
        }
        // At most 20 characters: a sign and 19 digits.
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { raw in
            var magnitude = number.magnitude
            var position = raw.count
            repeat {
                position -= 1
                raw[position] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if number < 0 {
                position -= 1
                raw[position] = UInt8(ascii: "-")
            }
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[position...]))
        }
    }

    /// Appends a number; a non-finite one as null.
    public mutating func write(_ number: Double) {
        guard number.isFinite else { return appendASCII("null") }
        if number.rounded() == number, abs(number) < 1e15 {
            write(Int(number))
            appendASCII(".0")
            return
        }
        bytes.append(contentsOf: String(number).utf8)  // the shortest text that reads back as the same Double
    }

    /// Appends a string value, quoted and escaped.
    public mutating func write(_ text: String) {
        var text = text
        text.withUTF8 { writeString(utf8: $0) }
    }

    /// Appends a string value given as UTF-8 bytes, quoted and escaped. Invalid UTF-8 is repaired
    /// exactly as `String(decoding:as: UTF8.self)` repairs it (each maximal invalid subsequence
    /// becomes U+FFFD), so the text equals that of the repaired `String`.
    public mutating func writeString(utf8 text: UnsafeBufferPointer<UInt8>) {
        bytes.append(UInt8(ascii: "\""))
        var runStart = 0
        var index = 0
        let count = text.count
        while index < count {
            let byte = text[index]
            if byte >= 0x20 && byte < 0x7F {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                    flush(text, runStart, index)
                    bytes.append(UInt8(ascii: "\\"))
                    bytes.append(byte)
                    index += 1
                    runStart = index
                } else {
                    index += 1
                }
                continue
            }
            if byte < 0x80 {  // a control character or DEL
                flush(text, runStart, index)
                appendEscape(byte)
                index += 1
                runStart = index
                continue
            }
            // Non-ASCII: check one scalar's encoding.
            let length = validSequenceLength(text, at: index)
            if length == 0 {
                flush(text, runStart, index)
                bytes.append(contentsOf: [0xEF, 0xBF, 0xBD] as [UInt8])  // U+FFFD
                index += invalidSequenceLength(text, at: index)
                runStart = index
            } else if length == 3, byte == 0xE2, text[index + 1] == 0x80, text[index + 2] & 0xFE == 0xA8 {
                flush(text, runStart, index)
                appendASCII(text[index + 2] == 0xA8 ? "\\u2028" : "\\u2029")
                index += 3
                runStart = index
            } else {
                index += length
            }
        }
        flush(text, runStart, count)
        bytes.append(UInt8(ascii: "\""))
    }

    /// Appends a string value given as UTF-8 bytes (see `writeString(utf8:)` for the repair).
    public mutating func writeString(utf8 text: [UInt8]) {
        text.withUnsafeBufferPointer { writeString(utf8: $0) }
    }

    /// Appends lowercase hex digits of `data` as a JSON string.
    public mutating func writeHexString(_ data: UnsafeBufferPointer<UInt8>) {
        bytes.append(UInt8(ascii: "\""))
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: data.count * 2))
        bytes.withUnsafeMutableBufferPointer { out in
            var position = start
            for byte in data {
                out[position] = hexDigits[Int(byte >> 4)]
                out[position + 1] = hexDigits[Int(byte & 0x0F)]
                position += 2
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Appends bytes that are already JSON text (punctuation, a member name written in advance).
    public mutating func appendRaw(_ text: UnsafeRawBufferPointer) { bytes.append(contentsOf: text) }

    /// Appends JSON text given as a static string, such as `,"name":`.
    public mutating func appendASCII(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    private mutating func flush(_ text: UnsafeBufferPointer<UInt8>, _ from: Int, _ to: Int) {
        guard from < to else { return }
        bytes.append(contentsOf: UnsafeBufferPointer(rebasing: text[from..<to]))
    }

    private mutating func appendEscape(_ byte: UInt8) {
        switch byte {
        case 0x0A: appendASCII("\\n")
        case 0x0D: appendASCII("\\r")
        case 0x09: appendASCII("\\t")
        case 0x08: appendASCII("\\b")
        case 0x0C: appendASCII("\\f")
        default:
            appendASCII("\\u00")
            bytes.append(hexDigits[Int(byte >> 4)])
            bytes.append(hexDigits[Int(byte & 0x0F)])
        }
    }
}

private let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

/// The length of the well-formed UTF-8 sequence starting with the non-ASCII byte at `index`, or 0
/// if it is not one (Unicode Table 3-7).
@inline(__always)
private func validSequenceLength(_ text: UnsafeBufferPointer<UInt8>, at index: Int) -> Int {
    let lead = text[index]
    let remaining = text.count - index
    func continuation(_ offset: Int, _ range: ClosedRange<UInt8> = 0x80...0xBF) -> Bool {
        offset < remaining && range.contains(text[index + offset])
    }
    switch lead {
    case 0xC2...0xDF: return continuation(1) ? 2 : 0
    case 0xE0: return continuation(1, 0xA0...0xBF) && continuation(2) ? 3 : 0
    case 0xE1...0xEC, 0xEE...0xEF: return continuation(1) && continuation(2) ? 3 : 0
    case 0xED: return continuation(1, 0x80...0x9F) && continuation(2) ? 3 : 0
    case 0xF0: return continuation(1, 0x90...0xBF) && continuation(2) && continuation(3) ? 4 : 0
    case 0xF1...0xF3: return continuation(1) && continuation(2) && continuation(3) ? 4 : 0
    case 0xF4: return continuation(1, 0x80...0x8F) && continuation(2) && continuation(3) ? 4 : 0
    default: return 0
    }
}

/// How many bytes of an ill-formed sequence at `index` one U+FFFD replaces: the maximal prefix of
/// a well-formed sequence (at least one byte), as the standard library's decoder does.
private func invalidSequenceLength(_ text: UnsafeBufferPointer<UInt8>, at index: Int) -> Int {
    let lead = text[index]
    let remaining = text.count - index
    let second: ClosedRange<UInt8>
    let length: Int
    switch lead {
    case 0xC2...0xDF: second = 0x80...0xBF; length = 2
    case 0xE0: second = 0xA0...0xBF; length = 3
    case 0xE1...0xEC, 0xEE...0xEF: second = 0x80...0xBF; length = 3
    case 0xED: second = 0x80...0x9F; length = 3
    case 0xF0: second = 0x90...0xBF; length = 4
    case 0xF1...0xF3: second = 0x80...0xBF; length = 4
    case 0xF4: second = 0x80...0x8F; length = 4
    default: return 1
    }
    guard remaining > 1, second.contains(text[index + 1]) else { return 1 }
    var consumed = 2
    while consumed < length, consumed < remaining, (0x80...0xBF).contains(text[index + consumed]) { consumed += 1 }
    return consumed
}

extension JSONValue {
    /// The value as compact JSON text on one line (fit for JSON Lines); see `JSONWriter`.
    public var serialized: String {
        var writer = JSONWriter(capacity: 64)
        writer.write(self)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// The value's compact JSON text as UTF-8 bytes, with a newline when `newline` is true.
    public func serializedBytes(newline: Bool = false) -> [UInt8] {
        var writer = JSONWriter(capacity: 64)
        writer.write(self)
        if newline { writer.newline() }
        return writer.bytes
    }

    /// Appends the compact JSON text of this value to `out`.
    public func write(to out: inout String) {
        out += serialized
    }
}
