/// Word-at-a-time tests over eight bytes (SWAR), for the writer's and the parser's scans.
enum ByteScan {
    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highs: UInt64 = 0x8080_8080_8080_8080

    // Each mask has the high bit of every byte that matches set (and perhaps of some bytes after
    // a match, which does not change whether any matched); `& highs != 0` asks for any.

    /// The bytes of `word` that are zero.
    @inline(__always)
    private static func zeroMask(_ word: UInt64) -> UInt64 { (word &- ones) & ~word }

    /// The bytes of `word` that equal `byte`.
    @inline(__always)
    private static func equalMask(_ word: UInt64, _ byte: UInt8) -> UInt64 { zeroMask(word ^ (ones &* UInt64(byte))) }

    /// The bytes of `word` below 0x20.
    @inline(__always)
    private static func controlMask(_ word: UInt64) -> UInt64 { (word &- ones &* 0x20) & ~word }

    /// The bytes of `word` at 0x7F or above.
    @inline(__always)
    private static func delOrHighMask(_ word: UInt64) -> UInt64 { word | ((word & 0x7F7F_7F7F_7F7F_7F7F) &+ ones) }

    /// Whether any byte of `word` is zero.
    @inline(__always)
    static func hasZero(_ word: UInt64) -> Bool { zeroMask(word) & highs != 0 }

    /// Whether any byte of `word` equals `byte`.
    @inline(__always)
    static func has(_ word: UInt64, _ byte: UInt8) -> Bool { equalMask(word, byte) & highs != 0 }

    /// Whether any byte of `word` is below 0x20 (a control character).
    @inline(__always)
    static func hasControl(_ word: UInt64) -> Bool { controlMask(word) & highs != 0 }

    /// Whether any byte of `word` is 0x7F or above.
    @inline(__always)
    static func hasDELOrHigh(_ word: UInt64) -> Bool { delOrHighMask(word) & highs != 0 }

    /// Whether any byte of `word` needs more than a copy in a JSON string: a control character,
    /// DEL or a non-ASCII byte, `"` or `\`. (The four tests in one, with one branch.)
    @inline(__always)
    static func needsCare(_ word: UInt64) -> Bool {
        let masks = equalMask(word, UInt8(ascii: "\"")) | equalMask(word, UInt8(ascii: "\\"))
            | controlMask(word) | delOrHighMask(word)
        return masks & highs != 0
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
