import BluetoothUUIDs
public import ANCSCapture

/// The attribute handles of the ANCS characteristics' values on one phone.
public struct ANCSHandles: Hashable, Sendable, CustomStringConvertible {
    public var notificationSource: UInt16?
    public var controlPoint: UInt16?
    public var dataSource: UInt16?

    public init(notificationSource: UInt16? = nil, controlPoint: UInt16? = nil, dataSource: UInt16? = nil) {
        self.notificationSource = notificationSource
        self.controlPoint = controlPoint
        self.dataSource = dataSource
    }

    /// Parses `ns=0x0010,cp=0x0013,ds=0x0016` (hex with 0x, or decimal; any subset).
    public init?(parsing text: String) {
        for item in text.split(separator: ",") {
            let parts = item.split(separator: "=", maxSplits: 1).map { String($0).lowercased() }
            guard parts.count == 2 else { return nil }
            let number = parts[1].hasPrefix("0x") ? UInt16(parts[1].dropFirst(2), radix: 16) : UInt16(parts[1])
            guard let handle = number, handle != 0 else { return nil }
            switch parts[0].trimmingSpaces {
            case "ns": notificationSource = handle
            case "cp": controlPoint = handle
            case "ds": dataSource = handle
            default: return nil
            }
        }
        guard notificationSource != nil || controlPoint != nil || dataSource != nil else { return nil }
    }

    /// `ns=0x0010,cp=0x0013,ds=0x0016`, the known ones.
    public var description: String {
        [("ns", notificationSource), ("cp", controlPoint), ("ds", dataSource)]
            .compactMap { name, handle in handle.map { "\(name)=\(hex4($0))" } }.joined(separator: ",")
    }

    /// `self` with the handles `other` knows put over it.
    func overlaid(with other: ANCSHandles) -> ANCSHandles {
        ANCSHandles(notificationSource: other.notificationSource ?? notificationSource,
                    controlPoint: other.controlPoint ?? controlPoint, dataSource: other.dataSource ?? dataSource)
    }
}

/// One LE connection in a capture: the controller (adapter index) and the connection handle.
public struct ConnectionKey: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var controller: UInt16
    public var handle: UInt16

    public init(controller: UInt16, handle: UInt16) {
        self.controller = controller
        self.handle = handle
    }

    /// `hci0/0x0040`: the name a record's `conn` member carries.
    public var description: String { "hci\(controller)/\(hex4(handle))" }

    public static func < (a: ConnectionKey, b: ConnectionKey) -> Bool { (a.controller, a.handle) < (b.controller, b.handle) }
}

/// A capture record taken out of a btsnoop file, with where it came from.
public struct ExtractedRecord: Hashable, Sendable {
    /// The btsnoop record (1-based) that carried it; for a Control Point write, the request's.
    public var recordNumber: Int
    public var connection: ConnectionKey
    public var record: CaptureRecord
    /// The peer's address, on a `connected` event.
    public var peer: String?
}

/// Turns the records of a btsnoop file into ANCS capture records, per connection. Pure.
///
/// HCI ACL packets in both directions are reassembled into L2CAP frames (per controller,
/// connection handle and direction); ATT PDUs are read on channel 0x0004 and on Enhanced ATT
/// bearers (LE credit-based channels with SPSM 0x0027, set up by the LE signaling on channel
/// 0x0005, their SDUs reassembled from K-frames; see `EATTChannels`). The ANCS handles come
/// from the capture's own GATT discovery (Read By Group Type responses naming the ANCS service,
/// Read By Type responses with characteristic declarations, Find Information responses), or from
/// `defaultHandles`. Handle Value Notifications (and Indications) and Multiple Handle Value
/// Notifications on the Notification Source and Data Source become `ns`/`ds` records; Write
/// Requests (and prepared writes) to the Control Point become `cp` records once the phone's
/// answer is seen on the same bearer, with the ATT error of an Error Response. Records of that
/// connection seen while a write waits for its answer are held back and follow the `cp` record,
/// so the order stays request-then-response (`HeldRecords`). Malformed L2CAP signaling and
/// K-frames do not stop the file: they are warnings (`takeWarnings()`). LE Connection Complete
/// and Disconnection Complete events give `connected`/`disconnected` records; handles found on
/// a connection are kept for the next connection to the same peer (BlueZ caches the GATT
/// database of bonded devices and does not discover again).
public struct BtsnoopExtractor: Sendable {
    public let datalink: BtsnoopDatalink
    public let defaultHandles: ANCSHandles
    /// The timestamp of the file's first record: `t` is counted from it.
    public private(set) var firstTimestamp: Int64?
    /// Every connection that produced a record, in order of appearance.
    public private(set) var connections: [ConnectionKey] = []

    private struct Connection: Sendable {
        var peer: String?
        var discovered = ANCSHandles()
        /// The side that is the GATT server (the phone), once discovery told.
        var server: HCIDirection?
        var reassemblers = DirectionPair<L2CAPReassembler>(L2CAPReassembler())
        var channels = EATTChannels()
        var held = HeldRecords()
        /// Prepared writes to the Control Point, per ATT bearer.
        var prepared: [UInt16: (direction: HCIDirection, bytes: [UInt8])] = [:]
    }

    private var states = ConnectionTable<Connection>()
    /// Handles and server side learnt per controller and peer address.
    private var known: [String: (handles: ANCSHandles, server: HCIDirection?)] = [:]
    private var pendingWarnings: [BtsnoopError] = []
    /// How many warnings the file gave so far.
    public private(set) var warningCount = 0
    /// The most warnings kept until `takeWarnings()`; more are only counted.
    private static let maxPendingWarnings = 100

    public init(datalink: BtsnoopDatalink, defaultHandles: ANCSHandles = ANCSHandles()) {
        self.datalink = datalink
        self.defaultHandles = defaultHandles
    }

    /// Reads one btsnoop record; returns the capture records it completes.
    public mutating func process(_ record: BtsnoopRecord) throws(BtsnoopError) -> [ExtractedRecord] {
        var out: [ExtractedRecord] = []
        try record.data.withBytes { data throws(BtsnoopError) in
            try process(number: record.number, flags: record.flags, timestamp: record.timestamp, data: data, into: &out)
        }
        return out
    }

    /// Reads one btsnoop record given in place (`BtsnoopReader.withNext(atEnd:_:)`); appends the
    /// capture records it completes to `out`. The same as `process(_:)`, without copying the
    /// record: a record that completes nothing costs no allocation.
    public mutating func process(_ record: BtsnoopRecordView, into out: inout [ExtractedRecord]) throws(BtsnoopError) {
        try process(number: record.number, flags: record.flags, timestamp: record.timestamp, data: record.data, into: &out)
    }

    private mutating func process(
        number: Int, flags: UInt32, timestamp: Int64, data: UnsafeBufferPointer<UInt8>, into out: inout [ExtractedRecord]
    ) throws(BtsnoopError) {
        let first = firstTimestamp ?? timestamp
        firstTimestamp = first
        let time = Double(timestamp &- first) / 1_000_000
        switch try HCIPacketView(number: number, flags: flags, data: data, datalink: datalink) {
        case .acl(let controller, let direction, let handle, let boundary, let payload):
            let key = ConnectionKey(controller: controller, handle: handle)
            // In place: copying the connection out and back would copy its tables for every record.
            if !states.contains(key) { states[key] = Connection() }
            switch states[key]?.reassemblers[direction].feed(boundary: boundary, payload: payload) ?? .none {
            case .none:
                break
            case .whole(let cid, let range):
                try handleL2CAP(cid: cid, payload: UnsafeBufferPointer(rebasing: payload[range]), key: key, direction: direction,
                                time: time, record: number, into: &out)
            case .buffered(let cid, let length):
                let frame = states[key]?.reassemblers[direction].takeFrame() ?? []
                defer { states[key]?.reassemblers[direction].giveBack(frame) }
                try frame.withBytes { bytes throws(BtsnoopError) in
                    try handleL2CAP(cid: cid, payload: UnsafeBufferPointer(rebasing: bytes[4..<4 + length]), key: key,
                                    direction: direction, time: time, record: number, into: &out)
                }
            }
        case .event(let controller, let code, let parameters):
            switch LinkEvent(code: code, parameters: parameters) {
            case .connected(let handle, let peer)?:
                let key = ConnectionKey(controller: controller, handle: handle)
                if states[key] != nil { end(key, time: time, record: number, event: false, into: &out) }
                var state = Connection()
                state.peer = peer
                if let learnt = known["\(controller)/\(peer)"] {
                    state.discovered = learnt.handles
                    state.server = learnt.server
                }
                states[key] = state
                emit(.event(time: time, .connected), key: key, record: number, peer: peer, into: &out)
            case .disconnected(let handle)?:
                end(ConnectionKey(controller: controller, handle: handle), time: time, record: number, event: true, into: &out)
            case nil:
                break
            }
        case .controllerRemoved(let controller):
            for key in states.keys.sorted() where key.controller == controller {
                end(key, time: time, record: number, event: true, into: &out)
            }
        case .other:
            break
        }
    }

    /// The end of the file: Control Point writes still waiting for an answer are given without one.
    public mutating func finish() -> [ExtractedRecord] {
        var out: [ExtractedRecord] = []
        for key in states.keys.sorted() { out += states[key]?.held.answerAll() ?? [] }
        return out
    }

    /// True if warnings wait to be taken (`takeWarnings()`).
    public var hasWarnings: Bool { !pendingWarnings.isEmpty }

    /// The warnings since the last call: malformed L2CAP signaling or K-frames, each naming its
    /// record and connection. Extraction went on past them.
    public mutating func takeWarnings() -> [BtsnoopError] {
        defer { pendingWarnings = [] }
        return pendingWarnings
    }

    /// The handles in use on a connection (discovered over the defaults).
    public func handles(of key: ConnectionKey) -> ANCSHandles {
        defaultHandles.overlaid(with: states[key]?.discovered ?? ANCSHandles())
    }

    // MARK: Connections

    private mutating func end(_ key: ConnectionKey, time: Double, record: Int, event: Bool, into out: inout [ExtractedRecord]) {
        guard let state = states[key] else {
            if event { emit(.event(time: time, .disconnected), key: key, record: record, peer: nil, into: &out) }
            return
        }
        out += states[key]?.held.answerAll() ?? []
        if let peer = state.peer, state.discovered != ANCSHandles() {
            known["\(key.controller)/\(peer)"] = (state.discovered, state.server)
        }
        if event { emit(.event(time: time, .disconnected), key: key, record: record, peer: nil, into: &out) }
        states[key] = nil
    }

    private mutating func emit(_ record: CaptureRecord, key: ConnectionKey, record number: Int, peer: String?, into out: inout [ExtractedRecord]) {
        if !connections.contains(key) { connections.append(key) }
        let extracted = ExtractedRecord(recordNumber: number, connection: key, record: record, peer: peer)
        if states[key]?.held.isEmpty ?? true {
            out.append(extracted)  // nothing waits: no array of its own
        } else {
            out += states[key]?.held.add(extracted) ?? [extracted]
        }
    }

    /// A Control Point write of `bytes` on `bearer`, held until its answer.
    private mutating func holdWrite(
        _ bytes: [UInt8], bearer: UInt16, key: ConnectionKey, direction: HCIDirection, time: Double, record: Int, into out: inout [ExtractedRecord]
    ) {
        if !connections.contains(key) { connections.append(key) }
        let cp = ExtractedRecord(recordNumber: record, connection: key, record: .value(time: time, characteristic: .cp, bytes: bytes, attError: nil), peer: nil)
        out += states[key]?.held.hold(HeldRecords.Write(bearer: bearer, direction: direction, record: cp)) ?? []
    }

    private mutating func warn(_ reason: String, key: ConnectionKey, record: Int) {
        warningCount += 1
        guard pendingWarnings.count < Self.maxPendingWarnings else { return }
        pendingWarnings.append(BtsnoopError(record: record, reason: "\(key): \(reason)"))
    }

    // MARK: L2CAP

    /// An L2CAP frame: ATT on 0x0004, LE signaling on 0x0005, K-frames on EATT channels.
    private mutating func handleL2CAP(
        cid: UInt16, payload: UnsafeBufferPointer<UInt8>, key: ConnectionKey, direction: HCIDirection, time: Double, record: Int,
        into out: inout [ExtractedRecord]
    ) throws(BtsnoopError) {
        switch cid {
        case 0x0004:
            try handleATT(payload, bearer: 0x0004, key: key, direction: direction, time: time, record: record, into: &out)
        case 0x0005:
            guard let outcome = states[key]?.channels.signal(Array(payload), direction: direction) else { return }
            for bearer in outcome.closed {
                out += states[key]?.held.answer(bearer: bearer, attError: nil) ?? []
                states[key]?.prepared[bearer] = nil
            }
            if let warning = outcome.warning { warn("L2CAP signaling: \(warning)", key: key, record: record) }
        default:
            guard states[key]?.channels.isEmpty == false,
                  let (bearer, outcome) = states[key]?.channels.kFrame(Array(payload), cid: cid, direction: direction)
            else { return }
            switch outcome {
            case .sdu(let pdu):
                try pdu.withBytes { bytes throws(BtsnoopError) in
                    try handleATT(bytes, bearer: bearer, key: key, direction: direction, time: time, record: record, into: &out)
                }
            case .incomplete:
                break
            case .dropped(let why):
                warn("EATT channel \(hex4(cid)) (\(direction)): SDU dropped: \(why)", key: key, record: record)
            }
        }
    }

    // MARK: ATT

    /// An ATT PDU on `bearer` (0x0004, or the EATT channel's CID on the host's side).
    private mutating func handleATT(
        _ pdu: UnsafeBufferPointer<UInt8>, bearer: UInt16, key: ConnectionKey, direction: HCIDirection, time: Double, record: Int,
        into out: inout [ExtractedRecord]
    ) throws(BtsnoopError) {
        guard let opcode = pdu.first else { return }
        func fail(_ what: String) -> BtsnoopError {
            BtsnoopError(record: record, reason: "corrupt: \(what) (ATT opcode \(hex2(opcode)), \(pdu.count) bytes)")
        }
        func u16(_ index: Int) -> UInt16 { UInt16(pdu[index]) | UInt16(pdu[index + 1]) << 8 }
        // Read in place (`ConnectionTable` yields the connection; nothing is copied).
        let handles = defaultHandles.overlaid(with: states[key]?.discovered ?? ANCSHandles())
        let server = states[key]?.server
        let fromServer = server.map { $0 == direction } ?? true
        let fromClient = server.map { $0 != direction } ?? true

        switch opcode {
        case 0x11:  // Read By Group Type Response: length, {start, end, UUID}
            guard pdu.count >= 2, pdu[1] >= 6, (pdu.count - 2) % Int(pdu[1]) == 0 else { throw fail("a malformed Read By Group Type Response") }
            let length = Int(pdu[1])
            for entry in stride(from: 2, to: pdu.count, by: length) where length == 20 {
                if BluetoothUUID(littleEndianBytes: pdu[entry + 4..<entry + 20]) == ANCSUUID.service {
                    states[key]?.server = direction
                }
            }
        case 0x09:  // Read By Type Response: length, {handle, value}
            guard pdu.count >= 2, pdu[1] >= 2, (pdu.count - 2) % Int(pdu[1]) == 0 else { throw fail("a malformed Read By Type Response") }
            let length = Int(pdu[1])
            guard length == 21 else { return }  // a characteristic declaration with a 128-bit UUID
            for entry in stride(from: 2, to: pdu.count, by: length) {
                let valueHandle = u16(entry + 3)
                learn(BluetoothUUID(littleEndianBytes: pdu[entry + 5..<entry + 21]), handle: valueHandle, key: key, direction: direction)
            }
        case 0x05:  // Find Information Response: format, {handle, UUID}
            guard pdu.count >= 2, pdu[1] == 1 || pdu[1] == 2 else { throw fail("a malformed Find Information Response") }
            let length = pdu[1] == 1 ? 4 : 18
            guard (pdu.count - 2) % length == 0 else { throw fail("a malformed Find Information Response") }
            guard length == 18 else { return }
            for entry in stride(from: 2, to: pdu.count, by: length) {
                learn(BluetoothUUID(littleEndianBytes: pdu[entry + 2..<entry + 18]), handle: u16(entry), key: key, direction: direction)
            }
        case 0x1B, 0x1D:  // Handle Value Notification / Indication: handle, value
            guard pdu.count >= 3 else { throw fail("a Handle Value Notification without its handle") }
            guard fromServer else { return }
            notified(handle: u16(1), value: Array(pdu[3...]), handles: handles, key: key, time: time, record: record, into: &out)
        case 0x23:  // Multiple Handle Value Notification: {handle, length, value}
            var index = 1
            var values: [(UInt16, [UInt8])] = []
            while index < pdu.count {
                guard index + 4 <= pdu.count else { throw fail("a Multiple Handle Value Notification cut inside a handle-length pair") }
                let handle = u16(index), length = Int(u16(index + 2))
                guard index + 4 + length <= pdu.count else {
                    throw fail("a Multiple Handle Value Notification whose value for handle \(hex4(handle)) claims \(length) bytes")
                }
                values.append((handle, Array(pdu[index + 4..<index + 4 + length])))
                index += 4 + length
            }
            guard fromServer else { return }
            for (handle, value) in values {
                notified(handle: handle, value: value, handles: handles, key: key, time: time, record: record, into: &out)
            }
        case 0x12, 0x52:  // Write Request / Write Command: handle, value
            guard pdu.count >= 3 else { throw fail("a write without its handle") }
            guard fromClient, let cp = handles.controlPoint, u16(1) == cp else { return }
            holdWrite(Array(pdu[3...]), bearer: bearer, key: key, direction: direction, time: time, record: record, into: &out)
            if opcode == 0x52 { out += states[key]?.held.answer(bearer: bearer, attError: nil) ?? [] }  // no answer comes
        case 0x16:  // Prepare Write Request: handle, offset, part
            guard pdu.count >= 5 else { throw fail("a Prepare Write Request without its handle and offset") }
            guard fromClient, let cp = handles.controlPoint, u16(1) == cp else { return }
            var bytes = states[key]?.prepared[bearer]?.bytes ?? []
            if u16(3) == 0 { bytes = [] }
            bytes += pdu[5...]
            states[key]?.prepared[bearer] = (direction, bytes)
        case 0x18:  // Execute Write Request: flags
            guard pdu.count >= 2 else { throw fail("an Execute Write Request without its flags") }
            guard let prepared = states[key]?.prepared[bearer], prepared.direction == direction else { return }
            states[key]?.prepared[bearer] = nil
            guard pdu[1] == 1 else { return }
            holdWrite(prepared.bytes, bearer: bearer, key: key, direction: direction, time: time, record: record, into: &out)
        case 0x13, 0x19:  // Write Response / Execute Write Response
            guard states[key]?.held.waiting(on: bearer)?.direction == direction.opposite else { return }
            out += states[key]?.held.answer(bearer: bearer, attError: nil) ?? []
        case 0x01:  // Error Response: request opcode, handle, error code
            guard pdu.count >= 5 else { throw fail("an Error Response shorter than 5 bytes") }
            let request = pdu[1]
            if request == 0x16 { states[key]?.prepared[bearer] = nil }
            guard [0x12, 0x16, 0x18].contains(request), states[key]?.held.waiting(on: bearer)?.direction == direction.opposite,
                  request != 0x12 || u16(2) == handles.controlPoint
            else { return }
            out += states[key]?.held.answer(bearer: bearer, attError: pdu[4]) ?? []
        default:
            break
        }
    }

    private mutating func learn(_ uuid: BluetoothUUID?, handle: UInt16, key: ConnectionKey, direction: HCIDirection) {
        guard let uuid else { return }
        switch uuid {
        case ANCSUUID.notificationSource: states[key]?.discovered.notificationSource = handle
        case ANCSUUID.controlPoint: states[key]?.discovered.controlPoint = handle
        case ANCSUUID.dataSource: states[key]?.discovered.dataSource = handle
        default: return
        }
        states[key]?.server = direction
    }

    private mutating func notified(
        handle: UInt16, value: [UInt8], handles: ANCSHandles, key: ConnectionKey, time: Double, record: Int, into out: inout [ExtractedRecord]
    ) {
        let characteristic: CaptureCharacteristic
        if handle == handles.notificationSource { characteristic = .ns }
        else if handle == handles.dataSource { characteristic = .ds }
        else { return }
        emit(.value(time: time, characteristic: characteristic, bytes: value, attError: nil), key: key, record: record, peer: nil, into: &out)
    }
}

/// One value per direction of a link, without hashing.
struct DirectionPair<Value: Sendable>: Sendable {
    private var sent: Value
    private var received: Value

    init(_ initial: Value) {
        sent = initial
        received = initial
    }

    subscript(direction: HCIDirection) -> Value {
        get { direction == .sent ? sent : received }
        _modify {
            if direction == .sent { yield &sent } else { yield &received }
        }
    }
}

func hex4(_ value: UInt16) -> String {
    let digits = Array("0123456789abcdef")
    return "0x" + String([12, 8, 4, 0].map { digits[Int(value >> UInt16($0) & 0xF)] })
}

func hex2(_ value: UInt8) -> String {
    let digits = Array("0123456789abcdef")
    return "0x" + String([digits[Int(value >> 4)], digits[Int(value & 0xF)]])
}

extension String {
    var trimmingSpaces: String {
        var slice = Substring(self)
        while slice.first == " " { slice.removeFirst() }
        while slice.last == " " { slice.removeLast() }
        return String(slice)
    }
}

extension Array where Element == UInt8 {
    /// `withUnsafeBufferPointer` for a body that throws a `BtsnoopError` (without relying on the
    /// standard library's typed throws there, which older toolchains lack).
    func withBytes(_ body: (UnsafeBufferPointer<UInt8>) throws(BtsnoopError) -> Void) throws(BtsnoopError) {
        var failure: BtsnoopError? = nil
        withUnsafeBufferPointer { bytes in
            do throws(BtsnoopError) {
                try body(bytes)
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
    }
}
