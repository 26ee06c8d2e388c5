/// Reassembles the SDUs of one direction of an LE credit-based channel from its K-frames: the
/// first K-frame of an SDU starts with the SDU's 2-byte little-endian length, the following
/// ones continue it until that length is reached. Holds at most `mtu` bytes.
struct SDUReassembler: Sendable {
    /// What a K-frame did.
    enum Outcome: Hashable, Sendable {
        /// It completed this SDU.
        case sdu([UInt8])
        /// It started or continued an SDU that is not complete yet (or belongs to a dropped one).
        case incomplete
        /// It broke the SDU, which is dropped: why.
        case dropped(String)
    }

    /// The most bytes an SDU may have: the MTU announced by the side that receives it.
    var mtu: Int
    private var buffer: [UInt8] = []
    /// The length of the SDU in progress, if one is.
    private var expected: Int?
    /// Bytes still to come of an SDU dropped for its length: skipped, not kept.
    private var skipping = 0

    init(mtu: Int) { self.mtu = mtu }

    mutating func feed(_ payload: [UInt8]) -> Outcome {
        if skipping > 0 {
            skipping = max(0, skipping - payload.count)
            return .incomplete
        }
        if let expected {
            guard buffer.count + payload.count <= expected else {
                let carried = buffer.count + payload.count
                reset()
                return .dropped("its K-frames carry \(carried) bytes, more than its length \(expected)")
            }
            buffer += payload
            guard buffer.count == expected else { return .incomplete }
            defer { reset() }
            return .sdu(buffer)
        }
        guard payload.count >= 2 else {
            return .dropped("a K-frame of \(payload.count) byte\(payload.count == 1 ? "" : "s") cannot start an SDU (2-byte SDU length)")
        }
        let length = Int(payload[0]) | Int(payload[1]) << 8
        let first = payload.count - 2
        guard length <= mtu else {
            skipping = max(0, length - first)
            return .dropped("its length \(length) exceeds the channel's MTU \(mtu)")
        }
        guard first <= length else { return .dropped("its first K-frame carries \(first) bytes, more than its length \(length)") }
        guard first < length else { return .sdu(Array(payload[2...])) }
        buffer = Array(payload[2...])
        expected = length
        return .incomplete
    }

    private mutating func reset() {
        buffer = []
        expected = nil
    }
}
