/// A 128-bit Bluetooth UUID, parsed from and rendered as the canonical text form.
///
/// BlueZ spells UUIDs in lowercase; comparisons here are by value, so case never matters.
public struct BluetoothUUID: Hashable, Sendable, CustomStringConvertible {
    /// The 16 bytes in the order of the text form (big-endian); ATT carries them reversed.
    public let bytes: [UInt8]

    /// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (any case); nil if it is not one.
    public init?(_ text: String) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        var high: UInt8? = nil
        var position = 0
        for char in text.utf8 {
            defer { position += 1 }
            if [8, 13, 18, 23].contains(position) {
                guard char == UInt8(ascii: "-") else { return nil }
                continue
            }
            guard let nibble = hexNibble(char) else { return nil }
            if let h = high {
                bytes.append(h << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        guard position == 36, bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// A UUID from its 16 bytes in text order; the caller guarantees the count.
    init(bigEndianBytes: [UInt8]) { bytes = bigEndianBytes }

    /// A UUID from 16 bytes in ATT (little-endian) order; nil unless there are exactly 16.
    public init?(littleEndianBytes: some Collection<UInt8>) {
        guard littleEndianBytes.count == 16 else { return nil }
        bytes = littleEndianBytes.reversed()
    }

    /// The 128-bit form of a 16-bit UUID: `0000xxxx-0000-1000-8000-00805f9b34fb`.
    public init(uuid16: UInt16) {
        bytes = [0, 0, UInt8(uuid16 >> 8), UInt8(uuid16 & 0xFF), 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB]
    }

    /// A UUID as ATT carries it: 2 bytes (a 16-bit UUID) or 16, little-endian; nil for any other count.
    public init?(attBytes: some Collection<UInt8>) {
        let value = Array(attBytes)
        switch value.count {
        case 2: self.init(uuid16: UInt16(value[0]) | UInt16(value[1]) << 8)
        case 16: self.init(bigEndianBytes: value.reversed())
        default: return nil
        }
    }

    /// The 16 bytes in ATT (little-endian) order.
    public var littleEndianBytes: [UInt8] { bytes.reversed() }

    /// The canonical lowercase text form, as BlueZ reports it.
    public var description: String {
        var text = ""
        text.reserveCapacity(36)
        let digits = Array("0123456789abcdef")
        for (index, byte) in bytes.enumerated() {
            if [4, 6, 8, 10].contains(index) { text.append("-") }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return text
    }
}

/// The UUIDs of the Apple Notification Center Service and its characteristics.
public enum ANCSUUID {
    /// The ANCS primary service.
    public static let service = known("7905F431-B5CE-4E99-A40F-4B1E122D00D0")
    /// Notification Source: notify, 8-byte event values.
    public static let notificationSource = known("9FBF120D-6301-42D9-8C58-25E699A21DBD")
    /// Control Point: write with response, the consumer's commands.
    public static let controlPoint = known("69D1D8F3-45E1-49A8-9821-9BBDFDAAD9D9")
    /// Data Source: notify, the fragmented responses to Control Point commands.
    public static let dataSource = known("22EAC6E9-24D6-4BB5-BE44-B36ACE7C7BFB")

    private static func known(_ text: String) -> BluetoothUUID {
        // The four literals above are well-formed; the fallback is never taken.
        BluetoothUUID(text) ?? BluetoothUUID(bigEndianBytes: [UInt8](repeating: 0, count: 16))
    }
}

/// The value of one ASCII hex digit, or nil.
func hexNibble(_ char: UInt8) -> UInt8? {
    switch char {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): char - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): char - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): char - UInt8(ascii: "A") + 10
    default: nil
    }
}
