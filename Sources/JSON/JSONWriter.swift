/// Compact JSON text written as UTF-8 bytes into a reusable buffer.
///
/// Strings are escaped by scanning their UTF-8 bytes: runs that need no escape are copied in one
/// go. Non-ASCII text is written as UTF-8; control characters (C0, U+007F and the C1 controls
/// U+0080–U+009F), U+2028 and U+2029 are escaped (`\n`, `\t`, … where JSON has a short form,
/// `\u00XX` otherwise): valid JSON does not need the C1 escapes, but a terminal that shows the
/// text (VTE, xterm) acts on raw C1 controls as on ESC sequences. Non-finite numbers,
/// which JSON cannot express, are written as null. Keep one writer, append values or lines,
/// hand the bytes (`withBytes(_:)`) to one `write(2)`, then `removeAll()` to reuse the storage.
public struct JSONWriter: ~Copyable, @unchecked Sendable {
    // @unchecked: the writer owns its memory alone (it cannot be copied), so sending it sends
    // the only reference. Being noncopyable, a write needs no copy-on-write check.
    @usableFromInline var base: UnsafeMutablePointer<UInt8>
    @usableFromInline var used = 0
    @usableFromInline var capacity: Int

    /// An empty writer with room for `capacity` bytes.
    public init(capacity: Int = 0) {
        self.capacity = max(capacity, 64)
        base = UnsafeMutablePointer<UInt8>.allocate(capacity: self.capacity)
    }

    deinit { base.deallocate() }

    /// The text written so far (a copy; see `withBytes(_:)`).
    public var bytes: [UInt8] { Array(UnsafeBufferPointer(start: base, count: used)) }

    /// Hands the text written so far to `body`, without copying it.
    public func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try body(UnsafeBufferPointer(start: base, count: used))
    }

    /// Empties the buffer, keeping its storage.
    public mutating func removeAll() { used = 0 }

    /// How many bytes are buffered.
    public var count: Int { used }

    /// Appends `value` as compact JSON text.
    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: appendASCII("null")
        case .bool(let flag): appendASCII(flag ? "true" : "false")
        case .int(let number): write(number)
        case .double(let number): write(number)
        case .string(let text): write(text)
        case .array(let elements):
            append(UInt8(ascii: "["))
            // Read in place: iterating would copy (retain and release) every element.
            elements.withUnsafeBufferPointer { elements in
                for index in elements.indices {
                    if index > 0 { append(UInt8(ascii: ",")) }
                    write(elements[index])
                }
            }
            append(UInt8(ascii: "]"))
        case .object(let object):
            append(UInt8(ascii: "{"))
            object.members.withUnsafeBufferPointer { members in
                for index in members.indices {
                    if index > 0 { append(UInt8(ascii: ",")) }
                    write(members[index].key)
                    append(UInt8(ascii: ":"))
                    write(members[index].value)
                }
            }
            append(UInt8(ascii: "}"))
        }
    }

    /// Appends `value` followed by a newline: one JSON Lines record.
    public mutating func writeLine(_ value: JSONValue) {
        write(value)
        append(0x0A)
    }

    /// Appends a newline.
    @inlinable
    public mutating func newline() { append(0x0A) }

    /// Appends an integer.
    public mutating func write(_ number: Int) {
        if number >= 0 && number < 10 {
            append(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: number))
            return
        }
        // Straight into the buffer: the digits counted first, then written from the last, two
        // at a time.
        var magnitude = number.magnitude
        var length = number < 0 ? 2 : 1
        var rest = magnitude
        while rest >= 10 {
            rest /= 10
            length += 1
        }
        reserve(length)
        var position = used + length
        while magnitude >= 10 {
            let pair = Int(truncatingIfNeeded: magnitude % 100) &* 2
            magnitude /= 100
            position -= 2
            base[position] = digitPairText.utf8Start[pair]
            base[position + 1] = digitPairText.utf8Start[pair + 1]
        }
        if position > used + (number < 0 ? 1 : 0) {
            position -= 1
            base[position] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude)
        }
        if number < 0 { base[used] = UInt8(ascii: "-") }
        used += length
    }

    /// Appends a number; a non-finite one as null.
    public mutating func write(_ number: Double) {
        guard number.isFinite else { return appendASCII("null") }
        if number.rounded() == number, abs(number) < 1e15 {
            write(Int(number))
            appendASCII(".0")
            return
        }
        var text = String(number)  // the shortest text that reads back as the same Double
        text.withUTF8 { append($0) }
    }

    /// Appends a string value, quoted and escaped.
    public mutating func write(_ text: String) {
        // In place, without the copy `withUTF8` (a mutating method) needs; only a string
        // without contiguous UTF-8 (bridged) takes the copy.
        if text.utf8.withContiguousStorageIfAvailable({ writeString(utf8: $0) }) == nil {
            var text = text
            _ = text.withUTF8 { writeString(utf8: $0) }
        }
    }

    /// Appends a string value given as UTF-8 bytes, quoted and escaped. Invalid UTF-8 is repaired
    /// exactly as `String(decoding:as: UTF8.self)` repairs it (each maximal invalid subsequence
    /// becomes U+FFFD), so the text equals that of the repaired `String`. Returns false if it had
    /// to repair.
    @discardableResult
    public mutating func writeString(utf8 text: UnsafeBufferPointer<UInt8>) -> Bool {
        let count = text.count
        guard let base = text.baseAddress else {
            appendASCII("\"\"")
            return true
        }
        if count <= 16 {
            // Member names and most short values: their bytes in two words (the rest filled with
            // a plain byte), checked and stored whole.
            var words = (Self.plainWord, Self.plainWord)
            withUnsafeMutableBytes(of: &words) { $0.baseAddress!.copyMemory(from: base, byteCount: count) }
            if !ByteScan.needsCare(words.0) && !ByteScan.needsCare(words.1) {
                reserve(18)  // the quotes, and room for the second word's bytes past the string
                let out = UnsafeMutableRawPointer(self.base + used)
                out.storeBytes(of: UInt8(ascii: "\""), as: UInt8.self)
                out.storeBytes(of: words.0, toByteOffset: 1, as: UInt64.self)
                out.storeBytes(of: words.1, toByteOffset: 9, as: UInt64.self)
                out.storeBytes(of: UInt8(ascii: "\""), toByteOffset: count + 1, as: UInt8.self)
                used += count + 2
                return true
            }
        }
        // Most strings (member names, identifiers, plain text) need no escape: found by one
        // scan, they are copied in one go between their quotes.
        var index = 0
        while index + 8 <= count, !ByteScan.needsCare(ByteScan.load(base + index)) { index += 8 }
        while index < count, Self.isPlain(base[index]) { index += 1 }
        if index == count {
            reserve(count + 2)
            self.base[used] = UInt8(ascii: "\"")
            copy(base, count, to: used + 1)
            self.base[used + count + 1] = UInt8(ascii: "\"")
            used += count + 2
            return true
        }
        return writeEscapedString(text, from: index)
    }

    /// Writes `text` quoted, its bytes before `plainEnd` known to need no escape: escapes what
    /// needs it and repairs invalid UTF-8 (see `writeString(utf8:)`); false if it had to repair.
    /// Always inlined: as a call (out of line, or as the optimizer chose), `writeString`'s
    /// fast paths before it, which most strings take, cost more (callgrind, `make bench`).
    @inline(__always)
    private mutating func writeEscapedString(_ text: UnsafeBufferPointer<UInt8>, from plainEnd: Int) -> Bool {
        guard let source = text.baseAddress else { return true }  // empty: `writeString` wrote it
        let count = text.count
        var index = plainEnd
        var valid = true
        append(UInt8(ascii: "\""))
        var runStart = 0
        while index < count {
            // Eight plain ASCII bytes at a time.
            while index + 8 <= count, !ByteScan.needsCare(ByteScan.load(source + index)) { index += 8 }
            guard index < count else { break }
            let byte = text[index]
            if byte >= 0x20 && byte < 0x7F {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                    flush(text, runStart, index)
                    append(UInt8(ascii: "\\"))
                    append(byte)
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
                valid = false
                flush(text, runStart, index)
                appendASCII("\u{FFFD}")  // U+FFFD, as UTF-8
                index += invalidSequenceLength(text, at: index)
                runStart = index
            } else if length == 2, byte == 0xC2, text[index + 1] < 0xA0 {  // a C1 control, U+0080–U+009F
                flush(text, runStart, index)
                appendEscape(text[index + 1])
                index += 2
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
        append(UInt8(ascii: "\""))
        return valid
    }

    /// Appends a string value given as UTF-8 bytes (see `writeString(utf8:)` for the repair).
    @discardableResult
    public mutating func writeString(utf8 text: [UInt8]) -> Bool {
        text.withUnsafeBufferPointer { writeString(utf8: $0) }
    }

    /// Appends lowercase hex digits of `data` as a JSON string.
    public mutating func writeHexString(_ data: UnsafeBufferPointer<UInt8>) {
        append(UInt8(ascii: "\""))
        reserve(data.count * 2)
        var out = base + used
        for byte in data {
            out[0] = hexDigit(byte >> 4)
            out[1] = hexDigit(byte & 0x0F)
            out += 2
        }
        used += data.count * 2
        append(UInt8(ascii: "\""))
    }

    /// Appends bytes that are already JSON text (punctuation, a member name written in advance).
    public mutating func appendRaw(_ text: UnsafeRawBufferPointer) { append(text.assumingMemoryBound(to: UInt8.self)) }

    /// Appends JSON text given as a static string, such as `,"name":`.
    @inlinable @inline(__always)
    public mutating func appendASCII(_ text: StaticString) {
        append(text.utf8Start, text.utf8CodeUnitCount)
    }

    private mutating func flush(_ text: UnsafeBufferPointer<UInt8>, _ from: Int, _ to: Int) {
        guard from < to, let start = text.baseAddress else { return }
        append(start + from, to - from)
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
            append(hexDigit(byte >> 4))
            append(hexDigit(byte & 0x0F))
        }
    }

    // MARK: - Storage

    /// Room for `extra` more bytes.
    @inlinable @inline(__always)
    mutating func reserve(_ extra: Int) {
        if used + extra > capacity { grow(used + extra) }
    }

    @usableFromInline
    mutating func grow(_ needed: Int) {
        var newCapacity = capacity * 2
        while newCapacity < needed { newCapacity *= 2 }
        let newBase = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
        newBase.update(from: base, count: used)
        base.deallocate()
        base = newBase
        capacity = newCapacity
    }

    @inlinable @inline(__always)
    mutating func append(_ byte: UInt8) {
        reserve(1)
        base[used] = byte
        used += 1
    }

    @inlinable @inline(__always)
    mutating func append(_ source: UnsafePointer<UInt8>, _ length: Int) {
        reserve(length)
        copy(source, length, to: used)
        used += length
    }

    /// Copies `length` bytes to `offset` of the buffer, which has room for them.
    @inlinable @inline(__always)
    mutating func copy(_ source: UnsafePointer<UInt8>, _ length: Int, to offset: Int) {
        if length <= 16 {  // short punctuation and names: a loop beats a call to memmove
            for index in 0..<length { base[offset + index] = source[index] }
        } else {
            (base + offset).update(from: source, count: length)
        }
    }

    /// Eight plain bytes (`a`): what fills a word past the end of a short string.
    private static let plainWord: UInt64 = 0x6161_6161_6161_6161

    /// A byte a JSON string holds as it is: printable ASCII other than `"` and `\`.
    @inline(__always)
    private static func isPlain(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
    }

    private mutating func append(_ source: UnsafeBufferPointer<UInt8>) {
        guard let start = source.baseAddress else { return }
        append(start, source.count)
    }
}

/// "00", "01", … "99": the two digits of each value below 100, for `write(_:)` of an integer (a
/// constant in the binary, so reading it needs no check that it was initialized).
private let digitPairText: StaticString = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"


/// The lowercase hex digit of a value below 16.
@inline(__always)
private func hexDigit(_ value: UInt8) -> UInt8 { value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") - 10 + value }

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
        // Room for an event's line (about 400 bytes) without growing on the way.
        var writer = JSONWriter(capacity: 512)
        writer.write(self)
        return writer.withBytes { String(decoding: $0, as: UTF8.self) }
    }

    /// The value's compact JSON text as UTF-8 bytes, with a newline when `newline` is true.
    public func serializedBytes(newline: Bool = false) -> [UInt8] {
        var writer = JSONWriter(capacity: 512)
        writer.write(self)
        if newline { writer.newline() }
        return writer.bytes
    }
}
