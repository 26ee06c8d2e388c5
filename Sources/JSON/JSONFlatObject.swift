/// A member value handed out by `JSONValue.scanFlatObject(_:_:)` without building a `JSONValue`.
public enum JSONFlatValue {
    /// A string without escapes: its UTF-8 bytes (validated), pointing into the scanned text.
    case string(UnsafeBufferPointer<UInt8>)
    /// A number, true, false or null.
    case scalar(JSONValue)
}

extension JSONValue {
    /// Reads a JSON object whose members are all strings without escapes, numbers, Booleans or
    /// null, handing each member to `body` as bytes pointing into `text`, without building a
    /// `JSONValue` or a `String`. For readers of one-line records (capture files) that only need
    /// bytes, such as a `hex` member.
    ///
    /// Returns false, having stopped early, when the text is anything else (a nested value, an
    /// escape, invalid JSON, …) or when `body` returns false: the caller then parses the text
    /// with `JSONValue(parsing:)`, which gives the same members or the error. When it returns
    /// true, `JSONValue(parsing:)` would have read the same members from the text.
    public static func scanFlatObject(
        _ text: UnsafeBufferPointer<UInt8>, _ body: (_ key: UnsafeBufferPointer<UInt8>, _ value: JSONFlatValue) -> Bool
    ) -> Bool {
        var parser = JSONParser(bytes: text)
        return parser.scanFlatObject(body)
    }
}

extension JSONParser {
    mutating func scanFlatObject(_ body: (UnsafeBufferPointer<UInt8>, JSONFlatValue) -> Bool) -> Bool {
        skipWhitespace()
        guard current == UInt8(ascii: "{") else { return false }
        index += 1
        skipWhitespace()
        if current == UInt8(ascii: "}") {
            index += 1
            return atEndAfterWhitespace()
        }
        while true {
            skipWhitespace()
            guard current == UInt8(ascii: "\""), let key = plainString() else { return false }
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { return false }
            index += 1
            skipWhitespace()
            guard let byte = current else { return false }
            let value: JSONFlatValue
            switch byte {
            case UInt8(ascii: "\""):
                guard let string = plainString() else { return false }
                value = .string(string)
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                return false
            default:
                guard let scalar = try? parseValue() else { return false }
                value = .scalar(scalar)
            }
            guard body(key, value) else { return false }
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                return atEndAfterWhitespace()
            default: return false
            }
        }
    }

    /// A string at `index` (on its opening quote) without escapes or control characters, as
    /// validated UTF-8 bytes; nil for anything else.
    private mutating func plainString() -> UnsafeBufferPointer<UInt8>? {
        let start = index + 1
        let (stop, asciiOnly) = scanRun(from: start)
        guard stop < bytes.count, bytes[stop] == UInt8(ascii: "\"") else { return nil }
        let run = UnsafeBufferPointer(rebasing: bytes[start..<stop])
        guard asciiOnly || isValidUTF8(run) else { return nil }
        index = stop + 1
        return run
    }

    private mutating func atEndAfterWhitespace() -> Bool {
        skipWhitespace()
        return index == bytes.count
    }
}
