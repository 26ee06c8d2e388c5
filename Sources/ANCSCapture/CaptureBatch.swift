#if canImport(Glibc)
import Glibc
#endif
import JSON

/// Records of an `ancs-capture/1` file parsed in a run, their values' bytes kept end to end in
/// one buffer: a record costs no allocation of its own. `ancsd decode` parses a batch on one
/// thread and decodes it (`CaptureDecoder.decode(_:line:tag:into:)` with a `CaptureRecordView`)
/// on another; `removeAll()` keeps the storage for the next batch.
///
/// `append(line:number:parser:)` gives the same records and errors as
/// `CaptureParser.parseEntry(line:)` (the `capture` fuzz target compares them).
public struct CaptureRecordBatch: Sendable {
    /// What a record is, without its bytes.
    public enum Kind: Hashable, Sendable {
        case header
        case value(CaptureCharacteristic, attError: UInt8?)
        case event(CaptureEvent)
    }

    private struct Entry: Sendable {
        var kind: Kind
        var time: Double?
        var start: Int
        var count: Int
        var connection: String?
        var line: Int
    }

    private var bytes: [UInt8] = []
    private var entries: [Entry] = []

    public init() {}

    /// An empty batch with room for `records` records and `bytes` bytes of values.
    public init(reservingRecords records: Int, bytes: Int) {
        entries.reserveCapacity(records)
        self.bytes.reserveCapacity(bytes)
    }

    /// How many bytes of values the batch holds.
    public var byteCount: Int { bytes.count }

    /// How many records the batch holds.
    public var count: Int { entries.count }
    public var isEmpty: Bool { entries.isEmpty }

    /// Empties the batch, keeping its storage.
    public mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        entries.removeAll(keepingCapacity: true)
    }

    /// Parses line `number` of the file (UTF-8, without its newline) with `parser` and adds its
    /// record, if it has one (a blank line has none). Throws what `parser.parseEntry(line:)`
    /// throws.
    public mutating func append(line text: UnsafeBufferPointer<UInt8>, number: Int, parser: inout CaptureParser) throws(CaptureFormatError) {
        if appendCommonShape(text, number: number) {
            parser.noteFastRecord()
            return
        }
        if let members = CaptureParser.plainMembers(text) {
            let start = bytes.count
            if case .event = members.kind {} else if !decodeHex(utf8: members.hex, appendingTo: &bytes) {
                return try appendGeneral(text, number: number, parser: &parser)
            }
            parser.noteFastRecord()
            let connection = members.connection.map { String(decoding: $0, as: UTF8.self) }
            entries.append(Entry(kind: members.kind, time: members.time, start: start, count: bytes.count - start,
                                 connection: connection, line: number))
            return
        }
        try appendGeneral(text, number: number, parser: &parser)
    }

    /// Adds the record of a line of the shape capture writers give a value,
    /// `{"t":T,"char":"C","hex":"H"}` or `{"t":T,"conn":"N","char":"C","hex":"H"}` (no spaces;
    /// T digits with an optional fraction; N printable ASCII without a quote or backslash), read
    /// by matching that text, the hex digits decoded in the same pass that checks them. False,
    /// and nothing added, for any other line, which then takes the general way: a line of this
    /// shape holds exactly those members, so both read the same record.
    mutating func appendCommonShape(_ text: UnsafeBufferPointer<UInt8>, number: Int) -> Bool {
        let count = text.count
        @inline(__always) func matches(_ at: Int, _ literal: StaticString) -> Bool {
            let length = literal.utf8CodeUnitCount
            guard at + length <= count, let base = text.baseAddress else { return false }
            return memcmp(base + at, literal.utf8Start, length) == 0
        }
        func isDigit(_ at: Int) -> Bool { at < count && text[at] &- UInt8(ascii: "0") < 10 }
        guard matches(0, "{\"t\":") else { return false }
        var index = 5
        let numberStart = index
        var mantissa: UInt64 = 0
        while isDigit(index) {
            mantissa = mantissa &* 10 &+ UInt64(text[index] &- UInt8(ascii: "0"))
            index += 1
        }
        let integerDigits = index - numberStart
        guard integerDigits > 0, text[numberStart] != UInt8(ascii: "0") || integerDigits == 1 else { return false }  // JSON: no leading zero
        var fractionDigits = -1
        if index < count, text[index] == UInt8(ascii: ".") {
            index += 1
            let fraction = index
            while isDigit(index) {
                mantissa = mantissa &* 10 &+ UInt64(text[index] &- UInt8(ascii: "0"))
                index += 1
            }
            fractionDigits = index - fraction
            guard fractionDigits > 0 else { return false }
        }
        let time: Double
        if integerDigits + max(fractionDigits, 0) <= 15 {
            // What the JSON parser reads: an integer exactly, a short decimal as its digits over a
            // power of ten (both exact Doubles, so the one division rounds correctly).
            time = fractionDigits < 0 ? Double(mantissa) : Double(mantissa) / Self.powersOfTen[fractionDigits]
        } else {
            guard let value = (try? JSONValue(parsing: UnsafeBufferPointer(rebasing: text[numberStart..<index])))?.doubleValue else {
                return false
            }
            time = value
        }
        var connection: String? = nil
        if matches(index, ",\"conn\":\"") {
            index += 9
            let nameStart = index
            while index < count, text[index] != UInt8(ascii: "\"") {
                guard text[index] >= 0x20, text[index] < 0x7F, text[index] != UInt8(ascii: "\\") else { return false }
                index += 1
            }
            guard index < count else { return false }
            connection = String(decoding: UnsafeBufferPointer(rebasing: text[nameStart..<index]), as: UTF8.self)
            index += 1
            guard matches(index, ",\"char\":\"") else { return false }
        } else {
            guard matches(index, ",\"char\":\"") else { return false }
        }
        index += 9
        guard index + 2 <= count, let characteristic = CaptureParser.characteristic(UnsafeBufferPointer(rebasing: text[index..<index + 2])) else {
            return false
        }
        index += 2
        guard matches(index, "\",\"hex\":\""), count >= index + 11,
              text[count - 2] == UInt8(ascii: "\""), text[count - 1] == UInt8(ascii: "}")
        else { return false }
        index += 9
        // Every byte up to the closing quote must be a hex digit: none can be a quote or an escape.
        let start = bytes.count
        guard decodeHex(utf8: UnsafeBufferPointer(rebasing: text[index..<count - 2]), appendingTo: &bytes) else { return false }
        entries.append(Entry(kind: .value(characteristic, attError: nil), time: time, start: start, count: bytes.count - start,
                             connection: connection, line: number))
        return true
    }

    private static let powersOfTen: [Double] = [1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15]

    private mutating func appendGeneral(_ text: UnsafeBufferPointer<UInt8>, number: Int, parser: inout CaptureParser) throws(CaptureFormatError) {
        guard let entry = try parser.parseEntry(line: Array(text)) else { return }
        append(entry.record, connection: entry.connection, line: number)
    }

    /// Adds a record as it is.
    public mutating func append(_ record: CaptureRecord, connection: String?, line: Int) {
        let start = bytes.count
        switch record {
        case .header:
            entries.append(Entry(kind: .header, time: nil, start: start, count: 0, connection: connection, line: line))
        case .event(let time, let event):
            entries.append(Entry(kind: .event(event), time: time, start: start, count: 0, connection: connection, line: line))
        case .value(let time, let characteristic, let value, let attError):
            bytes += value
            entries.append(Entry(kind: .value(characteristic, attError: attError), time: time, start: start, count: value.count,
                                 connection: connection, line: line))
        }
    }

    /// Hands each record to `body`, in order; its bytes are valid only during the call.
    public func forEach(_ body: (CaptureRecordView) throws -> Void) rethrows {
        try bytes.withUnsafeBufferPointer { all in
            for entry in entries {
                let value = UnsafeBufferPointer(rebasing: all[entry.start..<entry.start + entry.count])
                try body(CaptureRecordView(kind: entry.kind, time: entry.time, bytes: value, connection: entry.connection, line: entry.line))
            }
        }
    }
}

/// One record of a `CaptureRecordBatch`, its bytes pointing into the batch.
public struct CaptureRecordView {
    public var kind: CaptureRecordBatch.Kind
    public var time: Double?
    /// A value's bytes (empty for a header or an event).
    public var bytes: UnsafeBufferPointer<UInt8>
    /// The `conn` member.
    public var connection: String?
    /// The line it came from (1-based).
    public var line: Int

    /// The record, with its bytes copied (a header's object is not kept: it is empty).
    public var record: CaptureRecord {
        switch kind {
        case .header: .header([:])
        case .value(let characteristic, let attError): .value(time: time, characteristic: characteristic, bytes: Array(bytes), attError: attError)
        case .event(let event): .event(time: time, event)
        }
    }
}
