/// What a frame of the kernel's HCI monitor channel carries (BlueZ's `BTSNOOP_OPCODE_*`, also the
/// low 16 bits of a datalink-2001 btsnoop record's flags). Other values pass through unchanged.
public struct MonitorOpcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16

    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// `BTSNOOP_OPCODE_NEW_INDEX`: a controller appeared (type, bus, address, name).
    public static let newIndex = MonitorOpcode(rawValue: 0)
    /// `BTSNOOP_OPCODE_DEL_INDEX`: a controller went away.
    public static let deleteIndex = MonitorOpcode(rawValue: 1)
    /// `BTSNOOP_OPCODE_COMMAND_PKT`: an HCI command, host to controller.
    public static let command = MonitorOpcode(rawValue: 2)
    /// `BTSNOOP_OPCODE_EVENT_PKT`: an HCI event, controller to host.
    public static let event = MonitorOpcode(rawValue: 3)
    /// `BTSNOOP_OPCODE_ACL_TX_PKT`: ACL data sent.
    public static let aclSent = MonitorOpcode(rawValue: 4)
    /// `BTSNOOP_OPCODE_ACL_RX_PKT`: ACL data received.
    public static let aclReceived = MonitorOpcode(rawValue: 5)
    /// `BTSNOOP_OPCODE_SCO_TX_PKT`.
    public static let scoSent = MonitorOpcode(rawValue: 6)
    /// `BTSNOOP_OPCODE_SCO_RX_PKT`.
    public static let scoReceived = MonitorOpcode(rawValue: 7)
    /// `BTSNOOP_OPCODE_OPEN_INDEX`: a controller was opened (brought up).
    public static let openIndex = MonitorOpcode(rawValue: 8)
    /// `BTSNOOP_OPCODE_CLOSE_INDEX`.
    public static let closeIndex = MonitorOpcode(rawValue: 9)
    /// `BTSNOOP_OPCODE_INDEX_INFO`: a controller's address and manufacturer.
    public static let indexInfo = MonitorOpcode(rawValue: 10)
    /// `BTSNOOP_OPCODE_VENDOR_DIAG`.
    public static let vendorDiagnostic = MonitorOpcode(rawValue: 11)
    /// `BTSNOOP_OPCODE_SYSTEM_NOTE`: a text note from the kernel.
    public static let systemNote = MonitorOpcode(rawValue: 12)
    /// `BTSNOOP_OPCODE_USER_LOGGING`: a log message of a user-space program (bluetoothd).
    public static let userLogging = MonitorOpcode(rawValue: 13)

    private static let names = [
        "NEW_INDEX", "DEL_INDEX", "COMMAND", "EVENT", "ACL_TX", "ACL_RX", "SCO_TX", "SCO_RX",
        "OPEN_INDEX", "CLOSE_INDEX", "INDEX_INFO", "VENDOR_DIAG", "SYSTEM_NOTE", "USER_LOGGING",
    ]

    /// `ACL_RX`, or `opcode 14` for the ones without a name here.
    public var description: String {
        Int(rawValue) < Self.names.count ? Self.names[Int(rawValue)] : "opcode \(rawValue)"
    }
}

/// Why a datagram of the monitor channel is not a frame.
public enum MonitorFrameError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The datagram is shorter than the 6-byte header.
    case shorterThanHeader(received: Int)
    /// The header's payload length disagrees with the payload bytes that arrived: fewer
    /// (truncated) or more (oversized).
    case lengthMismatch(header: Int, received: Int)
    /// The datagram is a whole frame, but only its first `kept` bytes were read.
    case cut(length: Int, kept: Int)

    public var description: String {
        switch self {
        case .shorterThanHeader(let received):
            return "truncated monitor frame: \(received) bytes, shorter than the \(MonitorFrame.headerLength)-byte header"
        case .lengthMismatch(let header, let received):
            return "\(received < header ? "truncated" : "oversized") monitor frame: the header says \(header) bytes of payload, \(received) arrived"
        case .cut(let length, let kept):
            return "monitor frame of \(length) bytes cut to the \(kept) bytes read"
        }
    }
}

/// One frame of the kernel's HCI monitor channel (what btmon reads): a 6-byte header of three
/// little-endian u16 (opcode, controller index, payload length) and the payload. A frame is one
/// record of a datalink-2001 btsnoop file. Pure.
public struct MonitorFrame: Hashable, Sendable {
    /// The size of the header.
    public static let headerLength = 6
    /// The controller index of frames about no controller (`HCI_DEV_NONE`): notes, logging.
    public static let noController: UInt16 = 0xFFFF
    /// The longest datagram that can be a frame (the header's length is 16 bits).
    public static let maxDatagramLength = headerLength + Int(UInt16.max)

    public var opcode: MonitorOpcode
    /// The controller (`hciN`), or `noController`.
    public var index: UInt16
    public var payload: [UInt8]

    public init(opcode: MonitorOpcode, index: UInt16, payload: [UInt8]) {
        self.opcode = opcode
        self.index = index
        self.payload = payload
    }

    /// Parses one datagram. `length` is the datagram's full length when only its first bytes
    /// were kept (recv's `MSG_TRUNC`); by default, the number of bytes given. Throws when the
    /// header's length disagrees with the bytes that arrived.
    public init(datagram: some Collection<UInt8>, length: Int? = nil) throws(MonitorFrameError) {
        let bytes = Array(datagram)
        let received = max(length ?? bytes.count, bytes.count)
        guard bytes.count >= Self.headerLength else { throw .shorterThanHeader(received: received) }
        let declared = Int(bytes[4]) | Int(bytes[5]) << 8
        guard received - Self.headerLength == declared else {
            throw .lengthMismatch(header: declared, received: received - Self.headerLength)
        }
        guard bytes.count == received else { throw .cut(length: received, kept: bytes.count) }
        opcode = MonitorOpcode(rawValue: UInt16(bytes[0]) | UInt16(bytes[1]) << 8)
        index = UInt16(bytes[2]) | UInt16(bytes[3]) << 8
        payload = Array(bytes[Self.headerLength...])
    }

    /// The frame a record of a datalink-2001 btsnoop file holds.
    public init(record: BtsnoopRecord) {
        self.init(opcode: MonitorOpcode(rawValue: UInt16(record.flags & 0xFFFF)), index: UInt16(record.flags >> 16), payload: record.data)
    }

    /// The datagram as the kernel sends it: header, then payload. The payload must fit the
    /// header's 16-bit length.
    public var datagram: [UInt8] {
        let length = UInt16(clamping: payload.count)
        return [UInt8(opcode.rawValue & 0xFF), UInt8(opcode.rawValue >> 8), UInt8(index & 0xFF), UInt8(index >> 8),
                UInt8(length & 0xFF), UInt8(length >> 8)] + payload
    }

    /// The record flags of datalink 2001: `(index << 16) | opcode`.
    public var btsnoopFlags: UInt32 { UInt32(index) << 16 | UInt32(opcode.rawValue) }

    /// The frame as record `number` of a datalink-2001 btsnoop file: original and included
    /// length are the payload's; `timestamp` is in the btsnoop epoch (see `btsnoopUnixEpoch`).
    public func btsnoopRecord(number: Int, timestamp: Int64, drops: UInt32 = 0) -> BtsnoopRecord {
        BtsnoopRecord(number: number, originalLength: UInt32(payload.count), flags: btsnoopFlags, cumulativeDrops: drops,
                      timestamp: timestamp, data: payload)
    }
}
