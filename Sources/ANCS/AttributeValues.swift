/// A text attribute decoded leniently as UTF-8.
///
/// Invalid sequences become U+FFFD and `wasRepaired` says so; the raw bytes stay available.
public struct AttributeText: Hashable, Sendable, CustomStringConvertible {
    /// The bytes exactly as the phone sent them.
    public let raw: [UInt8]
    /// The decoded text.
    public let string: String
    /// True if the bytes were not valid UTF-8 and had to be repaired.
    public let wasRepaired: Bool

    public init(_ raw: [UInt8]) {
        self.raw = raw
        // Decoding repairs what is ill-formed, so it is enough to know whether anything was: a
        // scan that skips ASCII eight bytes at a time (`String(validating:)` walks the bytes
        // generically, which costs more than the decoding).
        string = String(decoding: raw, as: UTF8.self)
        wasRepaired = !raw.withUnsafeBufferPointer(isWellFormedUTF8)
    }

    public var description: String { string }
}

/// The Date attribute, `yyyyMMdd'T'HHmmss` in the phone's local time (no time zone).
public struct ANCSDate: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int
    public var hour: Int
    public var minute: Int
    public var second: Int

    public init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
    }

    /// Parses the 15-character ANCS form, checking every field's range; nil if it is not one.
    public init?(parsing text: some Collection<UInt8>) {
        guard let date = Array(text).withUnsafeBufferPointer({ ANCSDate(parsing: $0) }) else { return nil }
        self = date
    }

    /// Parses the ANCS form from a buffer, as `init?(parsing:)` does, without copying it.
    public init?(parsing chars: UnsafeBufferPointer<UInt8>) {
        guard chars.count == 15, chars[8] == UInt8(ascii: "T") else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for char in chars[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(char) else { return nil }
                value = value * 10 + Int(char - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(4..<6), let day = number(6..<8),
              let hour = number(9..<11), let minute = number(11..<13), let second = number(13..<15),
              (1...12).contains(month), (1...ANCSDate.days(inMonth: month, year: year)).contains(day),
              hour < 24, minute < 60, second <= 60  // 60: a leap second
        else { return nil }
        self.init(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
    }

    /// ISO 8601 without a zone, e.g. `2015-06-15T16:18:37`.
    public var iso8601: String { withISO8601 { String(decoding: $0, as: UTF8.self) } }

    /// Hands the UTF-8 bytes of `iso8601` to `body` without making a `String`. A date whose
    /// fields fit their widths (every date parsed from the ANCS form) is written with a few
    /// byte stores on the stack.
    @inlinable
    public func withISO8601<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        guard (0...9999).contains(year), (0...99).contains(month), (0...99).contains(day),
              (0...99).contains(hour), (0...99).contains(minute), (0...99).contains(second)
        else {
            var text = paddedISO8601
            return try text.withUTF8(body)
        }
        var storage: (UInt64, UInt64, UInt64) = (0, 0, 0)  // "yyyy-MM-ddTHH:mm:ss": 19 bytes
        return try withUnsafeMutableBytes(of: &storage) { raw in
            let text = raw.bindMemory(to: UInt8.self)
            func put(_ value: Int, at index: Int) {  // two digits
                text[index] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value / 10)
                text[index + 1] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value % 10)
            }
            put(year / 100, at: 0)
            put(year % 100, at: 2)
            text[4] = UInt8(ascii: "-")
            put(month, at: 5)
            text[7] = UInt8(ascii: "-")
            put(day, at: 8)
            text[10] = UInt8(ascii: "T")
            put(hour, at: 11)
            text[13] = UInt8(ascii: ":")
            put(minute, at: 14)
            text[16] = UInt8(ascii: ":")
            put(second, at: 17)
            return try body(UnsafeBufferPointer(rebasing: text[0..<19]))
        }
    }

    /// `iso8601` for any field values: each zero-padded to its width, wider ones as they are.
    @usableFromInline
    var paddedISO8601: String {
        func pad(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2))"
    }

    public var description: String { iso8601 }

    public static func < (a: ANCSDate, b: ANCSDate) -> Bool {
        (a.year, a.month, a.day, a.hour, a.minute, a.second) < (b.year, b.month, b.day, b.hour, b.minute, b.second)
    }

    static func days(inMonth month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}

/// The Date attribute as it came: a date, empty (incoming calls send none), or malformed.
public enum DateAttribute: Hashable, Sendable {
    case valid(ANCSDate)
    case empty
    /// Not in the ANCS form; the text is kept as sent (repaired if not UTF-8).
    case malformed(String)

    public init(_ raw: [UInt8]) {
        self = raw.withUnsafeBufferPointer { DateAttribute($0) }
    }

    /// `init(_:)` for bytes in a buffer.
    public init(_ raw: UnsafeBufferPointer<UInt8>) {
        if raw.isEmpty {
            self = .empty
        } else if let date = ANCSDate(parsing: raw) {
            self = .valid(date)
        } else {
            self = .malformed(String(decoding: raw, as: UTF8.self))  // as `AttributeText` repairs it
        }
    }

    /// The date, if the value was a valid one.
    public var date: ANCSDate? {
        if case .valid(let date) = self { return date }
        return nil
    }
}

/// The MessageSize attribute: the full message size as a decimal string; nil if it is not one.
public func parseMessageSize(_ raw: [UInt8]) -> Int? {
    raw.withUnsafeBufferPointer { parseMessageSize($0) }
}

/// `parseMessageSize(_:)` for bytes in a buffer.
public func parseMessageSize(_ raw: UnsafeBufferPointer<UInt8>) -> Int? {
    guard !raw.isEmpty, raw.count <= 9 else { return nil }
    var value = 0
    for char in raw {
        guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(char) else { return nil }
        value = value * 10 + Int(char - UInt8(ascii: "0"))
    }
    return value
}

/// True if the phone cut the message short: MessageSize exceeds what was delivered.
///
/// The unit of MessageSize is not specified (an NSString length counts UTF-16 code units; some
/// phones and peers count UTF-8 bytes), and iOS may append "…" (U+2026) to a cut value. So the
/// delivered message, without that "…", is measured both ways and the larger count is used: a
/// message that arrived whole is never called truncated, whichever unit the phone used.
public func isMessageTruncated(message: String, messageSize: Int) -> Bool {
    var delivered = Substring(message)
    if delivered.hasSuffix("\u{2026}") { delivered = delivered.dropLast() }
    return messageSize > max(delivered.utf16.count, delivered.utf8.count)
}

/// `isMessageTruncated(message:messageSize:)` for the message's raw bytes (repaired as
/// `AttributeText` repairs them), counting UTF-16 units and UTF-8 bytes straight from the bytes.
/// A message ending in "…" right after a non-ASCII character goes through the `String` form,
/// where grapheme rules decide whether that "…" stands alone.
public func isMessageTruncated(messageBytes raw: [UInt8], messageSize: Int) -> Bool {
    raw.withUnsafeBufferPointer { isMessageTruncated(messageBytes: $0, messageSize: messageSize) }
}

/// `isMessageTruncated(messageBytes:messageSize:)` for bytes in a buffer.
public func isMessageTruncated(messageBytes raw: UnsafeBufferPointer<UInt8>, messageSize: Int) -> Bool {
    var utf8 = 0
    var utf16 = 0
    var previousWasASCII = true  // the scalar before the one just counted
    var lastWasASCII = true
    var index = 0
    while index < raw.count {
        if let base = raw.baseAddress, index + 8 <= raw.count, areASCII(base + index) {
            // Eight ASCII characters: each counts one byte and one unit, and the last two of them
            // are ASCII.
            utf8 += 8
            utf16 += 8
            index += 8
            (previousWasASCII, lastWasASCII) = (true, true)
            continue
        }
        previousWasASCII = lastWasASCII
        let lead = raw[index]
        if lead < 0x80 {
            utf8 += 1
            utf16 += 1
            index += 1
            lastWasASCII = true
            continue
        }
        lastWasASCII = false
        let length = wellFormedLength(raw, at: index)
        if length > 0 {
            utf8 += length
            utf16 += length == 4 ? 2 : 1
            index += length
        } else {  // one U+FFFD for the maximal ill-formed subpart, as String(decoding:) does
            utf8 += 3
            utf16 += 1
            index += maximalSubpartLength(raw, at: index)
        }
    }
    let endsWithEllipsis = raw.count >= 3 && raw[raw.count - 3] == 0xE2 && raw[raw.count - 2] == 0x80 && raw[raw.count - 1] == 0xA6
    if endsWithEllipsis {
        guard raw.count == 3 || previousWasASCII else {
            return isMessageTruncated(message: String(decoding: raw, as: UTF8.self), messageSize: messageSize)
        }
        utf8 -= 3
        utf16 -= 1
    }
    return messageSize > max(utf16, utf8)
}

/// True when the eight bytes at `bytes` are all ASCII (one test for the eight).
@inline(__always)
private func areASCII(_ bytes: UnsafePointer<UInt8>) -> Bool {
    UnsafeRawPointer(bytes).loadUnaligned(as: UInt64.self) & 0x8080_8080_8080_8080 == 0
}

/// True if `bytes` are well-formed UTF-8 (Unicode Table 3-7).
func isWellFormedUTF8(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    guard let base = bytes.baseAddress else { return true }
    var index = 0
    while index < bytes.count {
        while index + 8 <= bytes.count, areASCII(base + index) { index += 8 }
        guard index < bytes.count else { break }
        if bytes[index] < 0x80 {
            index += 1
            continue
        }
        let length = wellFormedLength(bytes, at: index)
        guard length > 0 else { return false }
        index += length
    }
    return true
}

/// The length of the well-formed UTF-8 sequence that starts with the non-ASCII byte at `index`,
/// or 0 (Unicode Table 3-7).
private func wellFormedLength(_ bytes: UnsafeBufferPointer<UInt8>, at index: Int) -> Int {
    let (second, length) = secondByteRange(bytes[index])
    guard length > 1, index + length <= bytes.count, second.contains(bytes[index + 1]) else { return 0 }
    for offset in 2..<length where !(0x80...0xBF).contains(bytes[index + offset]) { return 0 }
    return length
}

/// How many bytes of the ill-formed sequence at `index` one U+FFFD replaces: the longest prefix
/// of a well-formed sequence there, at least one byte.
private func maximalSubpartLength(_ bytes: UnsafeBufferPointer<UInt8>, at index: Int) -> Int {
    let (second, length) = secondByteRange(bytes[index])
    guard length > 1, index + 1 < bytes.count, second.contains(bytes[index + 1]) else { return 1 }
    var consumed = 2
    while consumed < length, index + consumed < bytes.count, (0x80...0xBF).contains(bytes[index + consumed]) { consumed += 1 }
    return consumed
}

/// For a lead byte: the range its second byte must be in, and the sequence's length (1 for a
/// byte that cannot start a sequence).
private func secondByteRange(_ lead: UInt8) -> (ClosedRange<UInt8>, Int) {
    switch lead {
    case 0xC2...0xDF: (0x80...0xBF, 2)
    case 0xE0: (0xA0...0xBF, 3)
    case 0xE1...0xEC, 0xEE...0xEF: (0x80...0xBF, 3)
    case 0xED: (0x80...0x9F, 3)
    case 0xF0: (0x90...0xBF, 4)
    case 0xF1...0xF3: (0x80...0xBF, 4)
    case 0xF4: (0x80...0x8F, 4)
    default: (0x80...0x80, 1)
    }
}
