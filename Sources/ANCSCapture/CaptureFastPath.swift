import JSON

extension CaptureParser {
    /// Parses the next line of the file into its record and `conn` member, without keeping the
    /// line's JSON object. The same records and errors as `parseEntry(line:)`; faster, because
    /// an ordinary record (`t`, `char`, `hex`, `att_error`, `conn`, `event` with plain values) is
    /// read straight from the bytes. Anything else goes through `parseEntry(line:)`.
    public mutating func parseRecord(
        line text: UnsafeBufferPointer<UInt8>
    ) throws(CaptureFormatError) -> (record: CaptureRecord, connection: String?)? {
        if let fast = Self.plainRecord(text) {
            noteFastRecord()
            return fast
        }
        guard let entry = try parseEntry(line: Array(text)) else { return nil }
        return (entry.record, entry.connection)
    }

    /// The record of a line holding only plain members with valid values; nil when the line
    /// needs the general parser (a header, a nested or escaped value, a repeated member, an
    /// invalid value, which that parser then reports).
    static func plainRecord(_ text: UnsafeBufferPointer<UInt8>) -> (record: CaptureRecord, connection: String?)? {
        guard let members = plainMembers(text) else { return nil }
        let connection = members.connection.map { String(decoding: $0, as: UTF8.self) }
        switch members.kind {
        case .event(let event):
            return (.event(time: members.time, event), connection)
        case .value(let characteristic, let attError):
            guard case .success(let bytes) = decodeHex(utf8: members.hex) else { return nil }
            return (.value(time: members.time, characteristic: characteristic, bytes: bytes, attError: attError), connection)
        case .header:
            return nil
        }
    }

    /// The members of a plain record line, read in place: everything `plainRecord` checks but
    /// the hex digits, which the caller decodes where it wants them.
    struct PlainMembers {
        var kind: CaptureRecordBatch.Kind
        var time: Double?
        /// The `hex` member's digits (empty for an event).
        var hex: UnsafeBufferPointer<UInt8>
        var connection: UnsafeBufferPointer<UInt8>?
    }

    /// The members of a line `plainRecord` reads (its hex digits not decoded yet); nil when the
    /// line needs the general parser.
    static func plainMembers(_ text: UnsafeBufferPointer<UInt8>) -> PlainMembers? {
        var time: JSONValue?
        var char: UnsafeBufferPointer<UInt8>?
        var hex: UnsafeBufferPointer<UInt8>?
        var attError: JSONValue?
        var conn: UnsafeBufferPointer<UInt8>?
        var event: UnsafeBufferPointer<UInt8>?
        var seen: UInt8 = 0
        let plain = JSONValue.scanFlatObject(text) { key, value in
            let bit: UInt8
            switch (Member(key), value) {
            case (.t, .scalar(let number)): time = number; bit = 1
            case (.char, .string(let bytes)): char = bytes; bit = 2
            case (.hex, .string(let bytes)): hex = bytes; bit = 4
            case (.attError, .scalar(let number)): attError = number; bit = 8
            case (.conn, .string(let bytes)): conn = bytes; bit = 16
            case (.event, .string(let bytes)): event = bytes; bit = 32
            case (.other, _): return true  // a member a reader may use; ignored here as there
            default: return false  // a header, or a value of the wrong type: the general parser reports it
            }
            guard seen & bit == 0 else { return false }
            seen |= bit
            return true
        }
        guard plain else { return nil }

        var seconds: Double? = nil
        if let time {
            guard let value = time.doubleValue, value >= 0 else { return nil }
            seconds = value
        }
        if let event {
            guard let parsed = CaptureEvent(rawValue: String(decoding: event, as: UTF8.self)) else { return nil }
            return PlainMembers(kind: .event(parsed), time: seconds, hex: UnsafeBufferPointer(start: nil, count: 0), connection: conn)
        }
        guard let char, let hex, let characteristic = characteristic(char) else { return nil }
        var code: UInt8? = nil
        if let attError {
            guard characteristic == .cp, let value = attError.intValue, let byte = UInt8(exactly: value) else { return nil }
            code = byte
        }
        return PlainMembers(kind: .value(characteristic, attError: code), time: seconds, hex: hex, connection: conn)
    }

    /// "ns", "cp" or "ds", compared as bytes.
    static func characteristic(_ name: UnsafeBufferPointer<UInt8>) -> CaptureCharacteristic? {
        guard name.count == 2, name[1] == UInt8(ascii: "s") || name[1] == UInt8(ascii: "p") else { return nil }
        switch (name[0], name[1]) {
        case (UInt8(ascii: "n"), UInt8(ascii: "s")): return .ns
        case (UInt8(ascii: "c"), UInt8(ascii: "p")): return .cp
        case (UInt8(ascii: "d"), UInt8(ascii: "s")): return .ds
        default: return nil
        }
    }

    /// The member names the plain path knows.
    private enum Member {
        case t, char, hex, attError, conn, event, format, other

        init(_ key: UnsafeBufferPointer<UInt8>) {
            func matches(_ name: StaticString) -> Bool {
                guard key.count == name.utf8CodeUnitCount else { return false }
                for index in 0..<key.count where key[index] != name.utf8Start[index] { return false }
                return true
            }
            switch key.count {
            case 1 where key[0] == UInt8(ascii: "t"): self = .t
            case 3 where matches("hex"): self = .hex
            case 4 where matches("char"): self = .char
            case 4 where matches("conn"): self = .conn
            case 5 where matches("event"): self = .event
            case 6 where matches("format"): self = .format
            case 9 where matches("att_error"): self = .attError
            default: self = .other
            }
        }
    }
}
