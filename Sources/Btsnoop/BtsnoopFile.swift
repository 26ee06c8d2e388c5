/// Why a btsnoop file cannot be read: the record number (1-based; nil for the file header) and
/// what is wrong.
public struct BtsnoopError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The record (1-based) where the problem is, or nil for the file header.
    public var record: Int?
    public var reason: String

    public init(record: Int?, reason: String) {
        self.record = record
        self.reason = reason
    }

    public var description: String {
        if let record { return "record \(record): \(reason)" }
        return "file header: \(reason)"
    }
}

/// The datalink types of a btsnoop file that carry what ANCS needs.
public enum BtsnoopDatalink: UInt32, Hashable, Sendable {
    /// H4 (UART): each packet starts with its HCI packet type byte; the record flags give the
    /// direction (bit 0: received) and command/event (bit 1). Android's HCI snoop log writes it.
    case h4 = 1002
    /// BlueZ's monitor format, as `btmon -w` writes it: the record flags are
    /// `(controller index << 16) | opcode` (BlueZ src/shared/btsnoop.h).
    case monitor = 2001

    public var name: String {
        switch self {
        case .h4: "h4"
        case .monitor: "monitor"
        }
    }
}

/// One record of a btsnoop file.
public struct BtsnoopRecord: Hashable, Sendable {
    /// 1-based position in the file.
    public var number: Int
    public var originalLength: UInt32
    public var flags: UInt32
    public var cumulativeDrops: UInt32
    /// Microseconds since midnight, January 1st of year 0 (the btsnoop epoch).
    public var timestamp: Int64
    public var data: [UInt8]

    public init(number: Int, originalLength: UInt32, flags: UInt32, cumulativeDrops: UInt32 = 0, timestamp: Int64, data: [UInt8]) {
        self.number = number
        self.originalLength = originalLength
        self.flags = flags
        self.cumulativeDrops = cumulativeDrops
        self.timestamp = timestamp
        self.data = data
    }

    /// Microseconds since the Unix epoch.
    public var unixMicroseconds: Int64 { timestamp &- btsnoopUnixEpoch }
}

/// A record of a btsnoop file with its bytes in place (`BtsnoopReader.withNext(atEnd:_:)`):
/// what `BtsnoopRecord` holds, without a copy of the bytes.
public struct BtsnoopRecordView {
    /// The fields of a record's header, with its position in the file.
    public struct Header: Hashable, Sendable {
        /// 1-based position in the file.
        public var number: Int
        public var originalLength: UInt32
        public var flags: UInt32
        public var cumulativeDrops: UInt32
        /// Microseconds since midnight, January 1st of year 0 (the btsnoop epoch).
        public var timestamp: Int64
        public var includedLength: Int
    }

    public var header: Header
    /// The record's bytes, valid only while the view is handed out.
    public var data: UnsafeBufferPointer<UInt8>
    /// The file's datalink.
    public var datalink: BtsnoopDatalink

    public var number: Int { header.number }
    public var flags: UInt32 { header.flags }
    public var timestamp: Int64 { header.timestamp }
}

/// The btsnoop timestamp of 1970-01-01T00:00:00Z.
public let btsnoopUnixEpoch: Int64 = 0x00DC_DDB3_0F2F_8000

/// Reads a btsnoop file incrementally: append bytes as they are read, take records as they
/// complete. Pure: no I/O.
///
/// The file: a 16-byte header (`btsnoop\0`, version 1, datalink type, all big-endian), then
/// records of a 24-byte header (original length, included length, flags, cumulative drops,
/// 64-bit timestamp) and the included bytes.
public struct BtsnoopReader: Sendable {
    /// The eight bytes every btsnoop file starts with.
    public static let magic: [UInt8] = Array("btsnoop".utf8) + [0]
    /// The biggest packet a record may hold (the monitor's own bound is 1490; leave room).
    public static let maxRecordLength = 65_536 + 8

    private var buffer: [UInt8] = []
    private var position = 0
    public private(set) var datalink: BtsnoopDatalink?
    /// How many records were read so far.
    public private(set) var recordCount = 0

    public init() {}

    /// True if `prefix` starts like a btsnoop file (the eight magic bytes).
    public static func looksLikeBtsnoop(_ prefix: some Collection<UInt8>) -> Bool {
        prefix.count >= magic.count && Array(prefix.prefix(magic.count)) == magic
    }

    /// Adds bytes read from the file.
    public mutating func append(_ bytes: [UInt8]) {
        compact()
        buffer += bytes
    }

    /// Adds bytes read from the file.
    public mutating func append(_ bytes: some Sequence<UInt8>) {
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// Drops the bytes already read once they are the larger part of the buffer.
    private mutating func compact() {
        if position > 65_536 && position * 2 > buffer.count {
            buffer.removeFirst(position)
            position = 0
        }
    }

    private var available: Int { buffer.count - position }

    /// The next complete record, or nil when more bytes are needed (or, with `atEnd`, when the
    /// file ended cleanly). Throws on a bad header, an unsupported datalink, a corrupt record, or
    /// (with `atEnd`) a file that ends inside a record.
    public mutating func next(atEnd: Bool) throws(BtsnoopError) -> BtsnoopRecord? {
        guard let (header, start) = try nextHeader(atEnd: atEnd) else { return nil }
        let data = Array(buffer[start..<start + header.includedLength])
        return BtsnoopRecord(number: header.number, originalLength: header.originalLength, flags: header.flags,
                             cumulativeDrops: header.cumulativeDrops, timestamp: header.timestamp, data: data)
    }

    /// Hands the next complete record to `body` with its bytes in place (valid only during the
    /// call), as `next(atEnd:)` would give it but without copying them; false (and no call)
    /// when `next(atEnd:)` gives nil.
    public mutating func withNext(atEnd: Bool, _ body: (BtsnoopRecordView) throws(BtsnoopError) -> Void) throws(BtsnoopError) -> Bool {
        guard let (header, start) = try nextHeader(atEnd: atEnd), let datalink else { return false }
        try buffer.withBytes { all throws(BtsnoopError) in
            try body(BtsnoopRecordView(header: header, data: UnsafeBufferPointer(rebasing: all[start..<start + header.includedLength]),
                                       datalink: datalink))
        }
        return true
    }

    /// Reads the next record's header and moves past the record; its header and where its bytes start.
    private mutating func nextHeader(atEnd: Bool) throws(BtsnoopError) -> (BtsnoopRecordView.Header, Int)? {
        if datalink == nil {
            guard available >= 16 else {
                if atEnd { throw BtsnoopError(record: nil, reason: "truncated: the file header needs 16 bytes, the file has \(available)") }
                return nil
            }
            guard Array(buffer[position..<position + 8]) == Self.magic else {
                throw BtsnoopError(record: nil, reason: "not a btsnoop file (no \"btsnoop\\0\" magic)")
            }
            let version = readU32(at: position + 8)
            guard version == 1 else { throw BtsnoopError(record: nil, reason: "unsupported btsnoop version \(version), expected 1") }
            let type = readU32(at: position + 12)
            guard let link = BtsnoopDatalink(rawValue: type) else {
                throw BtsnoopError(record: nil, reason: "unsupported datalink type \(type) (supported: 1002 H4, 2001 BlueZ monitor)")
            }
            datalink = link
            position += 16
        }
        let number = recordCount + 1
        guard available >= 24 else {
            if atEnd && available > 0 {
                throw BtsnoopError(record: number, reason: "truncated: the record header needs 24 bytes, the file has \(available) left")
            }
            return nil
        }
        let original = readU32(at: position)
        let included = readU32(at: position + 4)
        let flags = readU32(at: position + 8)
        let drops = readU32(at: position + 12)
        let timestamp = Int64(bitPattern: UInt64(readU32(at: position + 16)) << 32 | UInt64(readU32(at: position + 20)))
        guard included <= original else {
            throw BtsnoopError(record: number, reason: "corrupt: included length \(included) exceeds the original length \(original)")
        }
        guard Int(included) <= Self.maxRecordLength else {
            throw BtsnoopError(record: number, reason: "corrupt: included length \(included) exceeds \(Self.maxRecordLength) bytes")
        }
        guard available >= 24 + Int(included) else {
            if atEnd {
                throw BtsnoopError(record: number, reason: "truncated: the record holds \(included) bytes, the file has \(available - 24) left")
            }
            return nil
        }
        let start = position + 24
        position = start + Int(included)
        recordCount = number
        let header = BtsnoopRecordView.Header(number: number, originalLength: original, flags: flags, cumulativeDrops: drops,
                                              timestamp: timestamp, includedLength: Int(included))
        return (header, start)
    }

    /// The big-endian word at `index` (the caller checked that four bytes are there).
    private func readU32(at index: Int) -> UInt32 {
        buffer.withUnsafeBytes { UInt32(bigEndian: $0.loadUnaligned(fromByteOffset: index, as: UInt32.self)) }
    }
}

/// Writes btsnoop files: the file header and records, big-endian (`ancsd capture`, tests).
public enum BtsnoopWriter {
    public static func fileHeader(_ datalink: BtsnoopDatalink) -> [UInt8] {
        BtsnoopReader.magic + bigEndian(UInt32(1)) + bigEndian(datalink.rawValue)
    }

    public static func record(flags: UInt32, timestamp: Int64, data: [UInt8], drops: UInt32 = 0) -> [UInt8] {
        record(BtsnoopRecord(number: 0, originalLength: UInt32(data.count), flags: flags, cumulativeDrops: drops, timestamp: timestamp, data: data))
    }

    /// A record as it is, with its own original length and cumulative drops.
    public static func record(_ record: BtsnoopRecord) -> [UInt8] {
        bigEndian(record.originalLength) + bigEndian(UInt32(record.data.count)) + bigEndian(record.flags) + bigEndian(record.cumulativeDrops)
            + bigEndian(UInt32(truncatingIfNeeded: UInt64(bitPattern: record.timestamp) >> 32))
            + bigEndian(UInt32(truncatingIfNeeded: UInt64(bitPattern: record.timestamp))) + record.data
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }
}

