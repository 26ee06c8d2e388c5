/// Follows one phone's Data Source stream from the Control Point requests that ask for it, to
/// replace the attribute values and keep the rest (command, UID, app identifier's NUL, IDs,
/// lengths). A response that does not match its request (another command or UID, an attribute
/// not asked for, a length past the maximum asked, bytes after its end) is replaced whole from
/// there to the next request. Pure.
struct DataSourceScrubber: Sendable {
    private enum State: Sendable {
        /// Waiting for the response's command byte.
        case command
        case uid(Int)
        case appIdentifier
        case attributeID
        case length(first: UInt8?)
        case value(remaining: Int)
        /// The response is complete: another byte is out of step.
        case done
        /// Out of step: everything is replaced until the next request.
        case lost
    }

    private var state = State.lost
    private var command: UInt8 = 0
    private var uid: [UInt8] = []
    private var uidSeen: [UInt8] = []
    /// The attributes asked for and not answered yet, in order, with their maximum lengths.
    private var pending: [(id: UInt8, maxLength: Int?)] = []

    /// A Control Point request written: the ranges of it to replace (the app identifier of Get
    /// App Attributes); sets what the Data Source's answer must look like.
    mutating func request(_ bytes: [UInt8]) -> [Range<Int>] {
        state = .lost
        pending = []
        uidSeen = []
        guard let first = bytes.first else { return [] }
        switch first {
        case 0x00:  // Get Notification Attributes: UID, {ID [max length]}
            guard bytes.count >= 5 else { return [] }
            var index = 5
            var asked: [(UInt8, Int?)] = []
            while index < bytes.count {
                let id = bytes[index]
                if (1...3).contains(id) {
                    guard index + 3 <= bytes.count else { return [] }
                    asked.append((id, Int(bytes[index + 1]) | Int(bytes[index + 2]) << 8))
                    index += 3
                } else {
                    asked.append((id, nil))
                    index += 1
                }
            }
            (command, uid, pending) = (0, Array(bytes[1..<5]), asked)
            state = .command
            return []
        case 0x01:  // Get App Attributes: app identifier, NUL, {ID}
            guard let nul = bytes.dropFirst().firstIndex(of: 0) else { return bytes.count > 1 ? [1..<bytes.count] : [] }
            (command, uid, pending) = (1, [], bytes[(nul + 1)...].map { ($0, nil) })
            state = .command
            return nul > 1 ? [1..<nul] : []
        default:
            return []
        }
    }

    /// A Data Source notification: the ranges to replace, and how many values they hold.
    mutating func notification(_ bytes: [UInt8]) -> (ranges: [Range<Int>], values: Int) {
        var ranges: [Range<Int>] = []
        var values = 0
        var start: Int? = nil  // the start of the range being replaced
        func close(_ index: Int) {
            if let open = start, open < index { ranges.append(open..<index) }
            start = nil
        }
        for (index, byte) in bytes.enumerated() {
            var matches = true
            switch state {
            case .command:
                matches = byte == command
                if matches {
                    state = command == 0 ? .uid(0) : .appIdentifier
                    if command == 1 { values += 1 }
                }
            case .uid(let count):
                uidSeen.append(byte)
                if count + 1 < 4 { state = .uid(count + 1) } else {
                    matches = uidSeen == uid
                    state = next()
                }
            case .appIdentifier:
                if byte == 0 { close(index); state = next() } else if start == nil { start = index }
            case .attributeID:
                // iOS may leave out an attribute it was asked for: the later ones keep their order.
                if let position = pending.firstIndex(where: { $0.id == byte }) {
                    pending.removeFirst(position)
                    state = .length(first: nil)
                } else {
                    matches = false
                }
            case .length(nil):
                state = .length(first: byte)
            case .length(let first?):
                let length = Int(first) | Int(byte) << 8
                let limit = pending.first?.maxLength.map { $0 + 3 } ?? Int(UInt16.max)  // an appended "…" is 3 bytes
                if !pending.isEmpty { pending.removeFirst() }
                if length > limit { matches = false } else if length == 0 { state = next() } else {
                    state = .value(remaining: length)
                    values += 1
                }
            case .value(let remaining):
                if start == nil { start = index }
                if remaining == 1 { close(index + 1); state = next() } else { state = .value(remaining: remaining - 1) }
            case .done:
                matches = false
            case .lost:
                break
            }
            if !matches {
                state = .lost
                close(index)
                start = index
                values += 1
            } else if case .lost = state, start == nil {
                start = index
                values += 1
            }
        }
        close(bytes.count)
        return (ranges, values)
    }

    /// The state after a tuple (or the header) ends: the next attribute, or the end.
    private func next() -> State {
        pending.isEmpty ? .done : .attributeID
    }
}
