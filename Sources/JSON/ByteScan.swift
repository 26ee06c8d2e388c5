/// Word-at-a-time tests over eight bytes (SWAR), for the writer's and the parser's scans.
enum ByteScan {
    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highs: UInt64 = 0x8080_8080_8080_8080

    /// Whether any byte of `word` is zero.
    @inline(__always)
    static func hasZero(_ word: UInt64) -> Bool { (word &- ones) & ~word & highs != 0 }

    /// Whether any byte of `word` equals `byte`.
    @inline(__always)
    static func has(_ word: UInt64, _ byte: UInt8) -> Bool { hasZero(word ^ (ones &* UInt64(byte))) }

    /// Whether any byte of `word` is below 0x20 (a control character).
    @inline(__always)
    static func hasControl(_ word: UInt64) -> Bool { (word &- ones &* 0x20) & ~word & highs != 0 }

    /// Whether any byte of `word` is 0x7F or above.
    @inline(__always)
    static func hasDELOrHigh(_ word: UInt64) -> Bool {
        (word | ((word & 0x7F7F_7F7F_7F7F_7F7F) &+ ones)) & highs != 0
    }

    /// Whether any byte of `word` needs more than a copy in a JSON string: a control character,
    /// DEL or a non-ASCII byte, `"` or `\`. (The four tests in one, with one branch.)
    @inline(__always)
    static func needsCare(_ word: UInt64) -> Bool {
        let quote = word ^ (ones &* UInt64(UInt8(ascii: "\"")))
        let backslash = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
        let zeroBytes = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)
        let control = (word &- ones &* 0x20) & ~word
        let delOrHigh = word | ((word & 0x7F7F_7F7F_7F7F_7F7F) &+ ones)
        return (zeroBytes | control | delOrHigh) & highs != 0
    }

    /// Whether any byte of `word` has its high bit set (is not ASCII).
    @inline(__always)
    static func hasHigh(_ word: UInt64) -> Bool { word & highs != 0 }

    /// Eight bytes at `pointer`, in memory order, in a word.
    @inline(__always)
    static func load(_ pointer: UnsafePointer<UInt8>) -> UInt64 {
        UInt64(littleEndian: UnsafeRawPointer(pointer).loadUnaligned(as: UInt64.self))
    }
}
