public import JSON

/// The three ANCS characteristics a capture records.
public enum CaptureCharacteristic: String, Hashable, Sendable {
    /// Notification Source: a value the phone sent.
    case ns
    /// Control Point: a value the consumer wrote.
    case cp
    /// Data Source: a value the phone sent.
    case ds
}

/// A connection event in a capture.
public enum CaptureEvent: String, Hashable, Sendable {
    case connected
    case disconnected
}

/// One line of an `ancs-capture/1` file.
public enum CaptureRecord: Hashable, Sendable {
    /// The optional first line: `{"format": "ancs-capture/1", …metadata}`.
    case header(JSONObject)
    /// A GATT value, with the ATT error the phone answered a Control Point write with, if any.
    case value(time: Double?, characteristic: CaptureCharacteristic, bytes: [UInt8], attError: UInt8?)
    /// A connection event; a disconnect ends any response in progress.
    case event(time: Double?, CaptureEvent)
}

/// One line of a capture with its JSON object and the connection it belongs to.
public struct CaptureEntry: Hashable, Sendable {
    public var record: CaptureRecord
    /// The line's JSON object, members in file order.
    public var object: JSONObject
    /// The `conn` member: which connection of a multi-connection capture (nil: the only one).
    public var connection: String?
}

/// Why a capture file cannot be read, naming the line (1-based).
public struct CaptureFormatError: Error, Hashable, Sendable, CustomStringConvertible {
    public var line: Int
    public var reason: String

    public init(line: Int, reason: String) {
        self.line = line
        self.reason = reason
    }

    public var description: String { "line \(line): \(reason)" }
}

/// Parses `ancs-capture/1` lines one at a time, so a reader can act on each as it comes.
public struct CaptureParser: Sendable {
    /// The format name a header must carry.
    public static let formatName = "ancs-capture/1"

    private var lineNumber = 0
    private var sawRecord = false

    public init() {}

    /// Parses the next line of the file. Blank lines give nil. Throws on anything malformed.
    public mutating func parse(line text: String) throws(CaptureFormatError) -> CaptureRecord? {
        try parse(line: Array(text.utf8))
    }

    /// Parses the next line of the file, as UTF-8 bytes without the newline.
    public mutating func parse(line text: [UInt8]) throws(CaptureFormatError) -> CaptureRecord? {
        try parseEntry(line: text)?.record
    }

    /// Parses the next line of the file and keeps its JSON object, for the members a reader
    /// may use beyond the record (`conn`, `reason`, `t_answer`, …). Blank lines give nil.
    public mutating func parseEntry(line text: [UInt8]) throws(CaptureFormatError) -> CaptureEntry? {
        lineNumber += 1
        let line = lineNumber
        guard let (record, object) = try parseRecord(line: text) else { return nil }
        var connection: String? = nil
        if case .header = record {} else if let conn = object["conn"] {
            guard let name = conn.stringValue else { throw CaptureFormatError(line: line, reason: "\"conn\" must be a string") }
            connection = name
        }
        return CaptureEntry(record: record, object: object, connection: connection)
    }

    /// Counts a line read by the plain path of `parseRecord(line:)`, as `parseEntry` would.
    mutating func noteFastRecord() {
        lineNumber += 1
        sawRecord = true
    }

    private mutating func parseRecord(line text: [UInt8]) throws(CaptureFormatError) -> (CaptureRecord, JSONObject)? {
        let line = lineNumber
        func fail(_ reason: String) -> CaptureFormatError { CaptureFormatError(line: line, reason: reason) }

        if text.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { return nil }
        let json: JSONValue
        do { json = try JSONValue(parsing: text) } catch { throw fail("not valid JSON: \(error)") }
        guard let object = json.objectValue else { throw fail("expected a JSON object, found \(json.typeName)") }

        if let format = object["format"] {
            guard !sawRecord else { throw fail("a header must be the first line") }
            guard format.stringValue == Self.formatName else {
                throw fail("unsupported format \(format.serialized), expected \"\(Self.formatName)\"")
            }
            sawRecord = true
            return (.header(object), object)
        }
        sawRecord = true

        var time: Double? = nil
        if let t = object["t"] {
            guard let seconds = t.doubleValue, seconds >= 0 else { throw fail("\"t\" must be a number of seconds ≥ 0") }
            time = seconds
        }
        if let event = object["event"] {
            guard let name = event.stringValue, let parsed = CaptureEvent(rawValue: name) else {
                throw fail("unknown event \(event.serialized), expected \"connected\" or \"disconnected\"")
            }
            return (.event(time: time, parsed), object)
        }
        guard let charValue = object["char"] else { throw fail("a record needs \"char\" (or \"event\")") }
        guard let name = charValue.stringValue, let characteristic = CaptureCharacteristic(rawValue: name) else {
            throw fail("unknown char \(charValue.serialized), expected \"ns\", \"cp\" or \"ds\"")
        }
        guard let hex = object["hex"]?.stringValue else { throw fail("a \(name) record needs \"hex\" as a string") }
        let bytes: [UInt8]
        switch decodeHex(hex) {
        case .success(let decoded): bytes = decoded
        case .failure(let error): throw fail("bad hex: \(error.reason)")
        }
        var attError: UInt8? = nil
        if let value = object["att_error"] {
            guard characteristic == .cp else { throw fail("\"att_error\" belongs only on a cp record") }
            guard let code = value.intValue, let byte = UInt8(exactly: code) else {
                throw fail("\"att_error\" must be an integer from 0 to 255")
            }
            attError = byte
        }
        return (.value(time: time, characteristic: characteristic, bytes: bytes, attError: attError), object)
    }
}

/// Why a hex string is not one.
public struct HexError: Error, Hashable, Sendable {
    public var reason: String
}

/// Decodes a string of hex digit pairs (either case, no separators).
public func decodeHex(_ text: String) -> Result<[UInt8], HexError> {
    var text = text
    return text.withUTF8 { decodeHex(utf8: $0) }
}

/// Decodes hex digit pairs (either case, no separators) given as UTF-8 bytes.
public func decodeHex(utf8 chars: UnsafeBufferPointer<UInt8>) -> Result<[UInt8], HexError> {
    guard chars.count % 2 == 0 else { return .failure(HexError(reason: "odd number of hex digits (\(chars.count))")) }
    var failedAt = -1
    let bytes = [UInt8](unsafeUninitializedCapacity: chars.count / 2) { out, initialized in
        failedAt = decodeHexDigits(chars, into: out)
        initialized = failedAt < 0 ? chars.count / 2 : 0
    }
    if failedAt >= 0 { return .failure(HexError(reason: "not a hex digit at position \(failedAt + 1)")) }
    return .success(bytes)
}

/// Decodes hex digit pairs as `decodeHex(utf8:)` does, appending the bytes to `bytes`; false
/// (and `bytes` as it was) if they are not hex digit pairs.
func decodeHex(utf8 chars: UnsafeBufferPointer<UInt8>, appendingTo bytes: inout [UInt8]) -> Bool {
    guard chars.count % 2 == 0 else { return false }
    // Decoded on the stack (for a value of usual size), then copied on: no zero-filling.
    return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: chars.count / 2) { decoded in
        guard decodeHexDigits(chars, into: decoded) < 0 else { return false }
        bytes.append(contentsOf: decoded)
        return true
    }
}

/// Decodes an even number of hex digits into `out` (room for half as many bytes); the index of
/// the first character that is not a hex digit, or -1 when all are.
private func decodeHexDigits(_ chars: UnsafeBufferPointer<UInt8>, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
    var index = 0
    if let start = chars.baseAddress, let target = out.baseAddress {
        // Eight digits (four bytes) at a time while they are all valid.
        while index + 8 <= chars.count, let four = hexWord(UnsafeRawPointer(start + index).loadUnaligned(as: UInt64.self)) {
            UnsafeMutableRawPointer(target + index >> 1).storeBytes(of: four, as: UInt32.self)
            index += 8
        }
    }
    while index < chars.count {
        let high = hexValue(chars[index]), low = hexValue(chars[index + 1])
        guard high | low < 0x10 else { return high >= 0x10 ? index : index + 1 }
        out[index >> 1] = high << 4 | low
        index += 2
    }
    return -1
}

/// Eight ASCII hex digits (in memory order, little-endian word) as the four bytes they spell, in
/// memory order; nil if any is not a hex digit.
@inline(__always)
private func hexWord(_ raw: UInt64) -> UInt32? {
    let word = UInt64(littleEndian: raw)
    let highs: UInt64 = 0x8080_8080_8080_8080
    guard word & highs == 0 else { return nil }
    func at(_ value: UInt64) -> UInt64 { 0x0101_0101_0101_0101 &* value }
    // Per byte: the high bit says "at least" (bytes are below 0x80, so no carries between bytes).
    let lower = word | at(0x20)  // letters to lower case; digits keep bit 5
    let digit = (word &+ at(0x80 - 0x30)) & ~(word &+ at(0x80 - 0x3A))
    let letter = (lower &+ at(0x80 - 0x61)) & ~(lower &+ at(0x80 - 0x67))
    guard (digit | letter) & highs == highs else { return nil }
    // Each digit's value: its low nibble, plus 9 for a letter (bit 6 set).
    let values = (word & at(0x0F)) &+ ((word >> 6) & at(0x01)) &* 9
    // Pairs into bytes: in each 16-bit lane, first digit << 4 | second digit.
    var pairs = ((values << 4) | (values >> 8)) & 0x00FF_00FF_00FF_00FF
    pairs = (pairs | (pairs >> 8)) & 0x0000_FFFF_0000_FFFF
    pairs = (pairs | (pairs >> 16)) & 0x0000_0000_FFFF_FFFF
    return UInt32(littleEndian: UInt32(truncatingIfNeeded: pairs))
}

/// A hex digit's value, or 0xFF.
@inline(__always)
private func hexValue(_ char: UInt8) -> UInt8 {
    let digit = char &- UInt8(ascii: "0")
    if digit < 10 { return digit }
    let letter = (char | 0x20) &- UInt8(ascii: "a")  // either case
    return letter < 6 ? letter + 10 : 0xFF
}

/// Encodes bytes as lowercase hex.
public func encodeHex(_ bytes: some Sequence<UInt8>) -> String {
    var writer = [UInt8]()
    writer.reserveCapacity(bytes.underestimatedCount * 2)
    for byte in bytes {
        writer.append(hexDigitsASCII[Int(byte >> 4)])
        writer.append(hexDigitsASCII[Int(byte & 0x0F)])
    }
    return String(decoding: writer, as: UTF8.self)
}

private let hexDigitsASCII: [UInt8] = Array("0123456789abcdef".utf8)

private func nibble(_ char: UInt8) -> UInt8? {
    switch char {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): char - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): char - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): char - UInt8(ascii: "A") + 10
    default: nil
    }
}
