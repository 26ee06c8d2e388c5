import BluetoothUUIDs
public import ANCSCapture

/// The attribute handles of the characteristics' values `ancsd decode` reads on one phone:
/// ANCS's (Notification Source, Control Point, Data Source) and Apple Media Service's (Remote
/// Command, Entity Update, Entity Attribute).
///
/// Kept as six plain `UInt16`s, 0 for unknown (no attribute has handle 0): as small as the three
/// optionals of ANCS alone were, for the connection state every ATT PDU reads (a larger one
/// costs the hot path an allocation per access).
public struct ANCSHandles: Hashable, Sendable, CustomStringConvertible {
    private var ns: UInt16 = 0, cp: UInt16 = 0, ds: UInt16 = 0, rc: UInt16 = 0, eu: UInt16 = 0, ea: UInt16 = 0

    public var notificationSource: UInt16? {
        get { ns == 0 ? nil : ns }
        set { ns = newValue ?? 0 }
    }
    public var controlPoint: UInt16? {
        get { cp == 0 ? nil : cp }
        set { cp = newValue ?? 0 }
    }
    public var dataSource: UInt16? {
        get { ds == 0 ? nil : ds }
        set { ds = newValue ?? 0 }
    }
    /// AMS's Remote Command.
    public var remoteCommand: UInt16? {
        get { rc == 0 ? nil : rc }
        set { rc = newValue ?? 0 }
    }
    /// AMS's Entity Update.
    public var entityUpdate: UInt16? {
        get { eu == 0 ? nil : eu }
        set { eu = newValue ?? 0 }
    }
    /// AMS's Entity Attribute.
    public var entityAttribute: UInt16? {
        get { ea == 0 ? nil : ea }
        set { ea = newValue ?? 0 }
    }

    public init(notificationSource: UInt16? = nil, controlPoint: UInt16? = nil, dataSource: UInt16? = nil,
                remoteCommand: UInt16? = nil, entityUpdate: UInt16? = nil, entityAttribute: UInt16? = nil) {
        self.notificationSource = notificationSource
        self.controlPoint = controlPoint
        self.dataSource = dataSource
        self.remoteCommand = remoteCommand
        self.entityUpdate = entityUpdate
        self.entityAttribute = entityAttribute
    }

    /// Parses `ns=0x0010,cp=0x0013,ds=0x0016,rc=0x0020,eu=0x0023,ea=0x0026` (hex with 0x, or
    /// decimal; any subset).
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
            case "rc": remoteCommand = handle
            case "eu": entityUpdate = handle
            case "ea": entityAttribute = handle
            default: return nil
            }
        }
        guard self != ANCSHandles() else { return nil }
    }

    /// `ns=0x0010,cp=0x0013,ds=0x0016,rc=0x0020,eu=0x0023,ea=0x0026`, the known ones.
    public var description: String {
        [("ns", notificationSource), ("cp", controlPoint), ("ds", dataSource),
         ("rc", remoteCommand), ("eu", entityUpdate), ("ea", entityAttribute)]
            .compactMap { name, handle in handle.map { "\(name)=\(hex4($0))" } }.joined(separator: ",")
    }

    /// True if any of AMS's handles is known.
    public var hasAMS: Bool { rc | eu | ea != 0 }

    /// The AMS characteristic whose value has this handle, if any.
    func amsCharacteristic(_ handle: UInt16) -> AMSRecord.Characteristic? {
        guard handle != 0 else { return nil }
        if handle == rc { return .rc }
        if handle == eu { return .eu }
        if handle == ea { return .ea }
        return nil
    }

    /// `self` with the handles `other` knows put over it.
    @inline(__always)
    func overlaid(with other: ANCSHandles) -> ANCSHandles {
        var result = self
        if other.ns != 0 { result.ns = other.ns }
        if other.cp != 0 { result.cp = other.cp }
        if other.ds != 0 { result.ds = other.ds }
        if other.rc != 0 { result.rc = other.rc }
        if other.eu != 0 { result.eu = other.eu }
        if other.ea != 0 { result.ea = other.ea }
        return result
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

/// A record taken out of a btsnoop file, with where it came from.
public struct ExtractedRecord: Hashable, Sendable {
    /// What a record of a btsnoop file gave.
    public enum Content: Hashable, Sendable {
        /// An ANCS value or a connection event, as an `ancs-capture/1` line holds it.
        case capture(CaptureRecord)
        /// A value of an Apple Media Service characteristic (not part of `ancs-capture/1`).
        case ams(AMSRecord)
    }

    /// The btsnoop record (1-based) that carried it; for a write, the request's; for a read,
    /// its first response's.
    public var recordNumber: Int
    public var connection: ConnectionKey
    public var content: Content
    /// The peer's address, on a `connected` event.
    public var peer: String?

    public init(recordNumber: Int, connection: ConnectionKey, content: Content, peer: String? = nil) {
        self.recordNumber = recordNumber
        self.connection = connection
        self.content = content
        self.peer = peer
    }

    /// The ANCS value or connection event; nil for an AMS value.
    public var record: CaptureRecord? {
        if case .capture(let record) = content { return record }
        return nil
    }

    /// The AMS value; nil for an ANCS value or a connection event.
    public var ams: AMSRecord? {
        if case .ams(let record) = content { return record }
        return nil
    }
}

/// Turns the records of a btsnoop file into ANCS capture records and Apple Media Service
/// values, per connection. Pure.
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
/// so the order stays request-then-response (`HeldRecords`). The AMS handles are learnt the same
/// way (the AMS service UUID, its characteristics' declarations, or `defaultHandles`): Handle
/// Value Notifications of Remote Command and Entity Update, writes to any of the three (held
/// for their answer as Control Point writes are), and reads (a Read Request and the Read Blob
/// Requests that continue it, their responses joined into one value, complete when a part is
/// shorter than the bearer's ATT MTU less one) become `AMSRecord`s. Malformed L2CAP signaling and
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

    struct Connection: Sendable {
        var peer: String?
        var discovered = ANCSHandles()
        /// The side that is the GATT server (the phone), once discovery told.
        var server: HCIDirection?
        var reassemblers = DirectionPair<L2CAPReassembler>(L2CAPReassembler())
        var channels = EATTChannels()
        var held = HeldRecords()
        /// Prepared writes to the Control Point or an AMS characteristic, per ATT bearer.
        var prepared: [UInt16: (direction: HCIDirection, handle: UInt16, bytes: [UInt8])] = [:]
    }

    /// What reading AMS values needs of a connection, beside `Connection`: in a table of its
    /// own, as `Connection`'s size is what every ACL packet pays for.
    struct ReadState: Sendable {
        /// Reads of an AMS characteristic in progress, per ATT bearer.
        var reads: [UInt16: PendingRead] = [:]
        /// The MTUs of channel 0x0004 that Exchange MTU named: the client's, the server's.
        var clientMTU: UInt16?
        var serverMTU: UInt16?
    }

    /// A read of an AMS characteristic whose value is not complete yet.
    struct PendingRead: Sendable {
        var characteristic: AMSRecord.Characteristic
        var handle: UInt16
        /// The way the requests go (the client's); the responses come the other way.
        var direction: HCIDirection
        /// The parts so far, joined.
        var value: [UInt8] = []
        /// A request (Read, or Read Blob) waits for its response.
        var asked = true
        /// The first response's record and time (0 before it).
        var record = 0
        var time = 0.0
        /// The request's record and time, for a read refused or never answered.
        var requestRecord: Int
        var requestTime: Double
    }

    var states = ConnectionTable<Connection>()
    /// The connections' reads and MTUs (`ReadState`), while they last.
    var readStates: [ConnectionKey: ReadState] = [:]
    /// Handles and server side learnt per controller and peer address.
    private var known: [String: (handles: ANCSHandles, server: HCIDirection?)] = [:]
    private var pendingWarnings: [BtsnoopError] = []
    /// How many AMS reads are in progress on all connections: while none is, no ATT PDU looks
    /// for one (`startRead`, `takeRead`).
    var openReads = 0
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
        for key in states.keys.sorted() {
            endReads(key: key, into: &out)
            out += states[key]?.held.answerAll() ?? []
        }
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

    mutating func end(_ key: ConnectionKey, time: Double, record: Int, event: Bool, into out: inout [ExtractedRecord]) {
        guard let state = states[key] else {
            if event { emit(.event(time: time, .disconnected), key: key, record: record, peer: nil, into: &out) }
            return
        }
        endReads(key: key, into: &out)
        out += states[key]?.held.answerAll() ?? []
        if let peer = state.peer, state.discovered != ANCSHandles() {
            known["\(key.controller)/\(peer)"] = (state.discovered, state.server)
        }
        if event { emit(.event(time: time, .disconnected), key: key, record: record, peer: nil, into: &out) }
        states[key] = nil
        readStates[key] = nil
    }

    mutating func emit(
        _ record: consuming CaptureRecord, key: ConnectionKey, record number: Int, peer: String?, into out: inout [ExtractedRecord]
    ) {
        emit(.capture(record), key: key, record: number, peer: peer, into: &out)
    }

    // The values are consumed, not borrowed: the record is made of them without a copy.
    mutating func emit(
        _ content: consuming ExtractedRecord.Content, key: ConnectionKey, record number: Int, peer: String?,
        into out: inout [ExtractedRecord]
    ) {
        if !connections.contains(key) { connections.append(key) }
        let extracted = ExtractedRecord(recordNumber: number, connection: key, content: content, peer: peer)
        if states[key]?.held.isEmpty ?? true {
            out.append(extracted)  // nothing waits: no array of its own
        } else {
            out += states[key]?.held.add(extracted) ?? [extracted]
        }
    }

    /// A write of `bytes` to `handle` (the Control Point's, or an AMS characteristic's) on
    /// `bearer`, held until its answer.
    mutating func holdWrite(
        _ bytes: [UInt8], handle: UInt16, handles: ANCSHandles, bearer: UInt16, key: ConnectionKey, direction: HCIDirection, time: Double,
        record: Int, into out: inout [ExtractedRecord]
    ) {
        let write: ExtractedRecord
        if handle == handles.controlPoint {
            write = ExtractedRecord(recordNumber: record, connection: key,
                                    content: .capture(.value(time: time, characteristic: .cp, bytes: bytes, attError: nil)))
        } else if let characteristic = handles.amsCharacteristic(handle) {
            write = ExtractedRecord(recordNumber: record, connection: key,
                                    content: .ams(AMSRecord(time: time, characteristic: characteristic, direction: .write, bytes: bytes)))
        } else {
            return
        }
        if !connections.contains(key) { connections.append(key) }
        out += states[key]?.held.hold(HeldRecords.Write(bearer: bearer, direction: direction, handle: handle, record: write)) ?? []
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
                endReads(key: key, bearer: bearer, into: &out)
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
