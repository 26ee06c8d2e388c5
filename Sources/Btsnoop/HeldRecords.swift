/// The records of one connection that wait for writes (to the Control Point, or to an AMS
/// characteristic) to be answered, in order.
///
/// A write's record carries its answer (the ATT error, if any), so it is given only once
/// the answer is seen; records that come after the write wait behind it, and the order stays
/// request-then-response. ATT pairs a request with its response on the bearer it used, so at
/// most one write per bearer waits (0x0004, or an EATT channel).
struct HeldRecords: Sendable {
    /// A write that waits for its answer.
    struct Write: Sendable {
        var bearer: UInt16
        /// The way the write went: its answer comes the other way.
        var direction: HCIDirection
        /// The attribute handle written.
        var handle: UInt16
        var record: ExtractedRecord
    }

    private enum Entry: Sendable {
        case waiting(Write)
        case ready(ExtractedRecord)
    }

    private var entries: [Entry] = []

    /// True when no record is held.
    var isEmpty: Bool { entries.isEmpty }

    /// The write waiting on `bearer`, if one is.
    func waiting(on bearer: UInt16) -> Write? {
        for case .waiting(let write) in entries where write.bearer == bearer { return write }
        return nil
    }

    /// A record: given back at once when nothing waits, else held.
    mutating func add(_ record: ExtractedRecord) -> [ExtractedRecord] {
        guard !entries.isEmpty else { return [record] }
        entries.append(.ready(record))
        return []
    }

    /// A write to hold until its answer; one still waiting on the same bearer gets none.
    mutating func hold(_ write: Write) -> [ExtractedRecord] {
        let earlier = answer(bearer: write.bearer, attError: nil)
        entries.append(.waiting(write))
        return earlier
    }

    /// The answer to the write waiting on `bearer` (nil: accepted, or none came); the records
    /// that no longer wait.
    mutating func answer(bearer: UInt16, attError: UInt8?) -> [ExtractedRecord] {
        for index in entries.indices {
            guard case .waiting(var write) = entries[index], write.bearer == bearer else { continue }
            // A write is held with no error: only a refusal changes its record.
            if let attError {
                switch write.record.content {
                case .capture(.value(let time, let characteristic, let bytes, _)):
                    write.record.content = .capture(.value(time: time, characteristic: characteristic, bytes: bytes, attError: attError))
                case .ams(var value):
                    value.attError = attError
                    write.record.content = .ams(value)
                case .capture:
                    break
                }
            }
            entries[index] = .ready(write.record)
        }
        return release()
    }

    /// Every write given without an answer (the link or the file ended); everything held.
    mutating func answerAll() -> [ExtractedRecord] {
        entries = entries.map { entry in
            guard case .waiting(let write) = entry else { return entry }
            return .ready(write.record)
        }
        return release()
    }

    /// The ready records before the first write still waiting.
    private mutating func release() -> [ExtractedRecord] {
        var out: [ExtractedRecord] = []
        var index = 0
        while index < entries.count, case .ready(let record) = entries[index] {
            out.append(record)
            index += 1
        }
        entries.removeFirst(index)
        return out
    }
}
