/// A set of bytes without heap storage.
struct ByteSet: Sendable {
    private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    init() {}

    init(where predicate: (UInt8) -> Bool) {
        for byte in UInt8.min...UInt8.max where predicate(byte) { _ = insert(byte) }
    }

    func contains(_ byte: UInt8) -> Bool {
        let bit: UInt64 = 1 << UInt64(byte & 63)
        switch byte >> 6 {
        case 0: return words.0 & bit != 0
        case 1: return words.1 & bit != 0
        case 2: return words.2 & bit != 0
        default: return words.3 & bit != 0
        }
    }

    /// Adds `byte`; false if it was already there.
    mutating func insert(_ byte: UInt8) -> Bool {
        let bit: UInt64 = 1 << UInt64(byte & 63)
        let old: UInt64
        switch byte >> 6 {
        case 0: old = words.0; words.0 |= bit
        case 1: old = words.1; words.1 |= bit
        case 2: old = words.2; words.2 |= bit
        default: old = words.3; words.3 |= bit
        }
        return old & bit == 0
    }
}
