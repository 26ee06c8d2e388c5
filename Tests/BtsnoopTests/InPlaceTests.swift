@testable import Btsnoop
import TestSupport
import Testing

/// The L2CAP reassembler as it was before frames were read in place: every fragment copied, a
/// frame always copied out. The reference the in-place one must agree with.
private struct ReferenceL2CAPReassembler {
    private var buffer: [UInt8] = []
    private var active = false

    mutating func feed(boundary: UInt8, payload: [UInt8]) -> (cid: UInt16, payload: [UInt8])? {
        if boundary == 0x01 {
            guard active else { return nil }
            buffer += payload
        } else {
            buffer = payload
            active = true
        }
        guard buffer.count >= 4 else { return nil }
        let length = Int(buffer[0]) | Int(buffer[1]) << 8
        guard buffer.count >= 4 + length else { return nil }
        let cid = UInt16(buffer[2]) | UInt16(buffer[3]) << 8
        let frame = Array(buffer[4..<4 + length])
        buffer = []
        active = false
        return (cid, frame)
    }
}


/// The in-place reassembler fed `payload`, its frame copied out as the reference gives it.
private func feed(_ reassembler: inout L2CAPReassembler, boundary: UInt8, _ payload: [UInt8]) -> (cid: UInt16, payload: [UInt8])? {
    payload.withUnsafeBufferPointer { bytes in
        switch reassembler.feed(boundary: boundary, payload: bytes) {
        case .none:
            return nil
        case .whole(let cid, let range):
            return (cid, Array(bytes[range]))
        case .buffered(let cid, let length):
            let frame = reassembler.takeFrame()
            defer { reassembler.giveBack(frame) }
            return (cid, Array(frame[4..<4 + length]))
        }
    }
}

@Suite struct InPlaceTests {
    @Test func l2capFramesWholeOrInFragments() {
        var reassembler = L2CAPReassembler()
        // Whole in one fragment, with a byte past its length (dropped).
        var frame = feed(&reassembler, boundary: 0b10, [3, 0, 0x04, 0x00, 0xAA, 0xBB, 0xCC, 0xFF])
        #expect(frame?.cid == 0x0004 && frame?.payload == [0xAA, 0xBB, 0xCC])
        // A frame of no bytes.
        frame = feed(&reassembler, boundary: 0b00, [0, 0, 0x05, 0x00])
        #expect(frame?.cid == 0x0005 && frame?.payload == [])
        // Header cut after two bytes, then the rest in two continuations.
        #expect(feed(&reassembler, boundary: 0b10, [4, 0]) == nil)
        #expect(feed(&reassembler, boundary: 0b01, [0x04, 0x00, 1]) == nil)
        frame = feed(&reassembler, boundary: 0b01, [2, 3, 4])
        #expect(frame?.cid == 0x0004 && frame?.payload == [1, 2, 3, 4])
        // A continuation without a start is dropped; a start drops an incomplete frame.
        #expect(feed(&reassembler, boundary: 0b01, [9, 9, 9, 9, 9]) == nil)
        #expect(feed(&reassembler, boundary: 0b10, [10, 0, 0x04, 0x00, 1]) == nil)
        frame = feed(&reassembler, boundary: 0b10, [1, 0, 0x04, 0x00, 7])
        #expect(frame?.payload == [7])
        #expect(feed(&reassembler, boundary: 0b01, [2, 3]) == nil)  // the dropped frame's rest
    }

    @Test func l2capAgreesWithTheReferenceOnRandomFragments() {
        var random = SplitMix64(seed: 14)
        for _ in 0..<200 {
            var reference = ReferenceL2CAPReassembler()
            var reassembler = L2CAPReassembler()
            for step in 0..<60 {
                let boundary = UInt8(random.below(4))
                var payload = (0..<random.below(12)).map { _ in UInt8(random.below(256)) }
                if payload.count >= 2 && random.below(2) == 0 {  // mostly short lengths, so frames complete
                    payload[0] = UInt8(random.below(16))
                    payload[1] = 0
                }
                let expected = reference.feed(boundary: boundary, payload: payload)
                let got = feed(&reassembler, boundary: boundary, payload)
                #expect(expected?.cid == got?.cid && expected?.payload == got?.payload, "step \(step): \(boundary) \(payload)")
            }
        }
    }

    @Test func connectionTableAgreesWithADictionary() {
        var random = SplitMix64(seed: 7)
        var table = ConnectionTable<[Int]>()
        var reference: [ConnectionKey: [Int]] = [:]
        for step in 0..<3_000 {
            let key = ConnectionKey(controller: UInt16(random.below(2)), handle: UInt16(random.below(6)))
            switch random.below(5) {
            case 0:
                table[key] = [step]
                reference[key] = [step]
            case 1:
                table[key] = nil
                reference[key] = nil
            case 2:
                table[key]?.append(step)
                reference[key]?.append(step)
            case 3:
                #expect(table.contains(key) == (reference[key] != nil))
            default:
                // A copy is a value of its own: changing it leaves the original as it was.
                var copy = table
                copy[key] = [-1]
                copy[ConnectionKey(controller: 9, handle: 9)] = [-2]
                #expect(table[key] == reference[key])
                #expect(table[ConnectionKey(controller: 9, handle: 9)] == nil)
            }
            #expect(table[key] == reference[key], "step \(step)")
            #expect(Set(table.keys) == Set(reference.keys), "step \(step)")
        }
    }

    @Test func readerHandsTheSameRecordsInPlace() throws {
        var bytes = BtsnoopWriter.fileHeader(.h4)
        for index in 0..<50 {
            bytes += BtsnoopWriter.record(flags: UInt32(index % 4), timestamp: Int64(index) * 1_000, data: Array(repeating: UInt8(index), count: index))
        }
        var copied = BtsnoopReader()
        var inPlace = BtsnoopReader()
        copied.append(bytes)
        inPlace.append(bytes)
        var records: [BtsnoopRecord] = []
        while let record = try copied.next(atEnd: true) { records.append(record) }
        var views: [BtsnoopRecord] = []
        while try inPlace.withNext(atEnd: true, { view in
            #expect(view.datalink == .h4)
            views.append(BtsnoopRecord(number: view.number, originalLength: view.header.originalLength, flags: view.flags,
                                       cumulativeDrops: view.header.cumulativeDrops, timestamp: view.timestamp, data: Array(view.data)))
        }) {}
        #expect(records.count == 50)
        #expect(views == records)
    }
}
