import BluetoothUUIDs

/// Replaces what is personal in a btsnoop file's records with same-length placeholders, keeping
/// everything a reader needs to follow the exchange: what `ancsd report --capture` does to the
/// capture it attaches. Pure: records in, records and counts out.
///
/// **Default deny.** Every record keeps its header, length and timing; inside, only what is known
/// to be structure stays:
/// - ATT (channel 0x0004): opcodes, handles, lengths, errors, MTUs and GATT discovery (service and
///   characteristic declarations, Find Information) stay. A value stays only when its
///   characteristic is known (from the capture's discovery, or `defaultHandles` for the phone's
///   ANCS and AMS) to hold structure: the Notification Source, AMS Remote Command, writes of AMS
///   registrations and commands, descriptors such as the Client Characteristic Configuration,
///   HID and GAP structure (report map, HID information, appearance, …). The Data Source keeps
///   its command, UID, attribute IDs and lengths, with every attribute value replaced, followed
///   across notifications from the Control Point request that asked for it (a response that does
///   not match its request is replaced whole from there on); a Control Point request keeps
///   everything but the app identifier; AMS Entity Update keeps its 3-byte header, Entity
///   Attribute reads are replaced whole. Every other value (a handle the capture does not
///   describe, the GAP Device Name, reads by UUID, signed writes) is replaced. An ATT value cut
///   across ACL fragments is replaced in every fragment.
/// - SMP (0x0006, 0x0007): the pairing exchange stays; the distributed keys (Encryption
///   Information's LTK, Central Identification's EDIV and Rand, Identity Information's IRK,
///   Signing Information's CSRK) become zeros. L2CAP signaling (0x0001, 0x0005) stays. The
///   payload of any other channel (EATT bearers, RFCOMM, SDP, …) is replaced whole.
/// - HCI commands and events: local and remote names and the Local Name AD structures of
///   advertising, scan response, extended advertising and EIR data become `x`s; the keys of LE
///   Long Term Key Request Reply, LE Enable Encryption, Link Key Request Reply and Link Key
///   Notification, PIN codes, OOB data, resolving-list IRKs, LE Encrypt's key and DHKeys become
///   zeros. SCO and ISO audio, vendor diagnostics and the management channel's parameters are
///   replaced; the text of user-space log messages (bluetoothd's) is replaced, their ident kept.
///
/// Placeholders: `x` (0x78) for text and values, 0x00 for keys. A record that cannot be parsed
/// is replaced whole after its packet type. `counts` says what was replaced.
public struct BtsnoopScrubber: Sendable {
    /// The byte that replaces content and names.
    public static let placeholder: UInt8 = 0x78
    /// The byte that replaces keys.
    public static let keyPlaceholder: UInt8 = 0x00

    public let datalink: BtsnoopDatalink
    /// The phone's ANCS and AMS value handles, for connections whose discovery the capture does
    /// not hold (a bonded phone is usually not discovered again).
    public let defaultHandles: ANCSHandles
    /// What was replaced so far.
    public internal(set) var counts = ScrubCounts()

    /// The records given so far, scrubbed; a record's bytes may still change while an L2CAP
    /// frame it started is incomplete, so take them with `finish()`.
    private var records: [BtsnoopRecord] = []
    private var frames: [FrameKey: PendingFrame] = [:]
    var links: [ConnectionKey: Link] = [:]
    /// What each phone's GATT server was learnt to hold, by controller and peer address, for its
    /// next connection.
    var known: [String: [HCIDirection: [UInt16: AttributeKind]]] = [:]

    public init(datalink: BtsnoopDatalink, defaultHandles: ANCSHandles = ANCSHandles()) {
        self.datalink = datalink
        self.defaultHandles = defaultHandles
    }

    /// Scrubs a whole file's records at once.
    public static func scrub(_ records: [BtsnoopRecord], datalink: BtsnoopDatalink, defaultHandles: ANCSHandles = ANCSHandles())
        -> (records: [BtsnoopRecord], counts: ScrubCounts)
    {
        var scrubber = BtsnoopScrubber(datalink: datalink, defaultHandles: defaultHandles)
        for record in records { scrubber.add(record) }
        let scrubbed = scrubber.finish()
        return (scrubbed, scrubber.counts)
    }

    /// Scrubs a whole btsnoop file: the file header kept, each record scrubbed. Throws when the
    /// file cannot be read as btsnoop.
    public static func scrub(file: [UInt8], defaultHandles: ANCSHandles = ANCSHandles()) throws(BtsnoopError)
        -> (file: [UInt8], counts: ScrubCounts)
    {
        var reader = BtsnoopReader()
        reader.append(file)
        var records: [BtsnoopRecord] = []
        while let record = try reader.next(atEnd: true) { records.append(record) }
        let datalink = reader.datalink ?? .monitor
        let (scrubbed, counts) = scrub(records, datalink: datalink, defaultHandles: defaultHandles)
        var out = BtsnoopWriter.fileHeader(datalink)
        for record in scrubbed { out += BtsnoopWriter.record(record) }
        return (out, counts)
    }

    /// Takes the next record of the file.
    public mutating func add(_ record: BtsnoopRecord) {
        records.append(record)
        process(records.count - 1)
    }

    /// The records, scrubbed. An L2CAP frame still incomplete at the end is replaced whole.
    public mutating func finish() -> [BtsnoopRecord] {
        for key in frames.keys { dropFrame(key) }
        return records
    }

    // MARK: Records

    private mutating func process(_ index: Int) {
        let data = records[index].data
        let flags = records[index].flags
        switch datalink {
        case .h4:
            guard let type = data.first else { return }
            let direction: HCIDirection = flags & 1 == 1 ? .received : .sent
            switch type {
            case 0x01: command(index, at: 1)
            case 0x02: acl(index, at: 1, controller: 0, direction: direction)
            case 0x03: audio(index, at: 1, headerLength: 3)
            case 0x04: event(index, at: 1, controller: 0)
            case 0x05: audio(index, at: 1, headerLength: 4)
            default: replaceAll(index, from: 1)
            }
        case .monitor:
            let controller = UInt16(flags >> 16)
            switch MonitorOpcode(rawValue: UInt16(flags & 0xFFFF)) {
            case .newIndex, .deleteIndex, .openIndex, .closeIndex, .indexInfo, .systemNote:
                break
            case .command: command(index, at: 0)
            case .event: event(index, at: 0, controller: controller)
            case .aclSent: acl(index, at: 0, controller: controller, direction: .sent)
            case .aclReceived: acl(index, at: 0, controller: controller, direction: .received)
            case .scoSent, .scoReceived: audio(index, at: 0, headerLength: 3)
            case .userLogging: logMessage(index)
            case MonitorOpcode(rawValue: 14), MonitorOpcode(rawValue: 15):
                break  // a management socket opened or closed: cookie, version, the program's name
            case MonitorOpcode(rawValue: 16), MonitorOpcode(rawValue: 17):
                replaceAll(index, from: 6)  // a management command or event: cookie and opcode kept
            case MonitorOpcode(rawValue: 18), MonitorOpcode(rawValue: 19):
                audio(index, at: 0, headerLength: 4)
            default:
                replaceAll(index, from: 0)
            }
        }
    }

    /// Replaces a record's bytes from `start` on (content, as a payload).
    private mutating func replaceAll(_ index: Int, from start: Int) {
        guard start < records[index].data.count else { return }
        fill(index, start..<records[index].data.count, Self.placeholder)
        counts.payloads += 1
    }

    private mutating func fill(_ index: Int, _ range: Range<Int>, _ byte: UInt8) {
        let clamped = range.clamped(to: 0..<records[index].data.count)
        guard !clamped.isEmpty else { return }
        for position in clamped { records[index].data[position] = byte }
        counts.bytes += clamped.count
    }

    /// SCO or ISO data: the header (handle, length) kept, the audio replaced.
    private mutating func audio(_ index: Int, at offset: Int, headerLength: Int) {
        replaceAll(index, from: offset + headerLength)
    }

    /// A user-space log message (priority, ident length, ident, text): the text replaced, its
    /// terminating NUL kept.
    private mutating func logMessage(_ index: Int) {
        let data = records[index].data
        guard data.count >= 2 else { return replaceAll(index, from: 0) }
        let start = 2 + Int(data[1])
        guard start < data.count else { return }
        let end = data[start...].firstIndex(of: 0) ?? data.count
        guard start < end else { return }
        fill(index, start..<end, Self.placeholder)
        counts.logMessages += 1
    }

    // MARK: HCI commands and events

    private mutating func command(_ index: Int, at offset: Int) {
        let data = records[index].data
        guard data.count >= offset + 3 else { return replaceAll(index, from: offset) }
        let opcode = UInt16(data[offset]) | UInt16(data[offset + 1]) << 8
        let p = offset + 3  // the parameters
        let end = data.count
        func zero(_ range: Range<Int>) {
            guard range.lowerBound < end else { return }
            fill(index, range, Self.keyPlaceholder)
            counts.keys += 1
        }
        switch opcode {
        case 0x0C13: name(index, p..<min(end, p + 248))  // Write Local Name
        case 0x0C52: advertisingData(index, p + 1..<end)  // Write Extended Inquiry Response: FEC, EIR
        case 0x2008, 0x2009:  // LE Set Advertising / Scan Response Data: length, data
            guard p < end else { return }
            advertisingData(index, p + 1..<min(end, p + 1 + Int(data[p])))
        case 0x2037, 0x2038:  // LE Set Extended Advertising / Scan Response Data: handle, operation, preference, length, data
            advertisingData(index, p + 4..<end)
        case 0x203F:  // LE Set Periodic Advertising Data: handle, operation, length, data
            advertisingData(index, p + 3..<end)
        case 0x201A: zero(p + 2..<p + 18)  // LE Long Term Key Request Reply: handle, LTK
        case 0x2019: zero(p + 2..<p + 28)  // LE Enable Encryption: handle, Rand, EDIV, LTK
        case 0x040B: zero(p + 6..<p + 22)  // Link Key Request Reply: address, key
        case 0x040D: zero(p + 7..<p + 23)  // PIN Code Request Reply: address, length, PIN
        case 0x0430, 0x0445: zero(p + 6..<end)  // Remote OOB (Extended) Data Request Reply: address, C, R
        case 0x0C11:  // Write Stored Link Key: count, {address, key}
            guard p < end else { return }
            for entry in 0..<Int(data[p]) { zero(p + 1 + entry * 22 + 6..<p + 1 + entry * 22 + 22) }
        case 0x2027: zero(p + 7..<p + 39)  // LE Add Device To Resolving List: type, address, peer IRK, local IRK
        case 0x2017: zero(p..<p + 16)  // LE Encrypt: key, plaintext
        case 0x2026, 0x205E: zero(p..<end)  // LE Generate DHKey (v1, v2): the remote key, kept out with the rest
        default: break
        }
    }

    private mutating func event(_ index: Int, at offset: Int, controller: UInt16) {
        let data = records[index].data
        guard data.count >= offset + 2 else { return replaceAll(index, from: offset) }
        let code = data[offset]
        let p = offset + 2
        let end = data.count
        func zero(_ range: Range<Int>) {
            guard range.lowerBound < end else { return }
            fill(index, range, Self.keyPlaceholder)
            counts.keys += 1
        }
        switch code {
        case 0x07: name(index, p + 7..<min(end, p + 255))  // Remote Name Request Complete: status, address, name
        case 0x0E:  // Command Complete: count, opcode, return parameters
            guard end >= p + 3 else { return }
            let r = p + 3
            switch UInt16(data[p + 1]) | UInt16(data[p + 2]) << 8 {
            case 0x0C14: name(index, r + 1..<min(end, r + 249))  // Read Local Name: status, name
            case 0x0C51: advertisingData(index, r + 2..<end)  // Read Extended Inquiry Response: status, FEC, EIR
            case 0x0C57, 0x0C7D: zero(r + 1..<end)  // Read Local OOB (Extended) Data
            default: break
            }
        case 0x18: zero(p + 6..<p + 22)  // Link Key Notification: address, key, type
        case 0x2F: advertisingData(index, p + 15..<end)  // Extended Inquiry Result
        case 0x05:  // Disconnection Complete
            if end >= p + 4, data[p] == 0 { disconnected(ConnectionKey(controller: controller, handle: (UInt16(data[p + 1]) | UInt16(data[p + 2]) << 8) & 0x0FFF)) }
        case 0x3E:
            guard p < end else { return }
            switch data[p] {
            case 0x01, 0x0A, 0x29:
                let parameters = Array(data[p..<end])
                let link = parameters.withUnsafeBufferPointer { LinkEvent(code: 0x3E, parameters: $0) }
                if case .connected(let handle, let peer)? = link { connected(ConnectionKey(controller: controller, handle: handle), peer: "\(controller)/\(peer)") }
            case 0x02:  // Advertising Report: count, {type, address type, address, length, data, RSSI}
                guard p + 1 < end else { return }
                var position = p + 2
                for _ in 0..<Int(data[p + 1]) {
                    guard position + 9 <= end else { return replaceAll(index, from: position) }
                    let length = Int(data[position + 8])
                    advertisingData(index, position + 9..<min(end, position + 9 + length))
                    position += 10 + length
                }
            case 0x0D:  // Extended Advertising Report: count, {23 bytes, length, data}
                guard p + 1 < end else { return }
                var position = p + 2
                for _ in 0..<Int(data[p + 1]) {
                    guard position + 24 <= end else { return replaceAll(index, from: position) }
                    let length = Int(data[position + 23])
                    advertisingData(index, position + 24..<min(end, position + 24 + length))
                    position += 24 + length
                }
            case 0x0F: advertisingData(index, p + 8..<end)  // Periodic Advertising Report
            case 0x09, 0x1E: zero(p + 2..<end)  // LE Generate DHKey Complete: status, DHKey
            default: break
            }
        default: break
        }
    }

    /// A NUL-terminated name in a fixed field: its bytes before the NUL become `x`s.
    private mutating func name(_ index: Int, _ range: Range<Int>) {
        let data = records[index].data
        let range = range.clamped(to: 0..<data.count)
        guard !range.isEmpty else { return }
        let end = data[range].firstIndex(of: 0) ?? range.upperBound
        guard range.lowerBound < end else { return }
        fill(index, range.lowerBound..<end, Self.placeholder)
        counts.deviceNames += 1
    }

    /// Advertising, scan response or EIR data: the values of the Shortened and Complete Local
    /// Name and Broadcast Name structures become `x`s; a structure that runs past the data is
    /// replaced whole.
    private mutating func advertisingData(_ index: Int, _ range: Range<Int>) {
        let range = range.clamped(to: 0..<records[index].data.count)
        var position = range.lowerBound
        while position < range.upperBound {
            let length = Int(records[index].data[position])
            if length == 0 { break }
            guard position + 1 + length <= range.upperBound else {
                fill(index, position..<range.upperBound, Self.placeholder)
                counts.payloads += 1
                return
            }
            let type = records[index].data[position + 1]
            if (type == 0x08 || type == 0x09 || type == 0x30) && length > 1 {
                fill(index, position + 2..<position + 1 + length, Self.placeholder)
                counts.deviceNames += 1
            }
            position += 1 + length
        }
    }

    // MARK: Connections

    private mutating func connected(_ key: ConnectionKey, peer: String) {
        disconnected(key)
        var link = Link(peer: peer)
        if let learnt = known[peer] { link.servers = learnt }
        links[key] = link
    }

    private mutating func disconnected(_ key: ConnectionKey) {
        for direction in [HCIDirection.sent, .received] {
            let frame = FrameKey(connection: key, direction: direction)
            if frames[frame] != nil { dropFrame(frame) }
        }
        if let link = links.removeValue(forKey: key), let peer = link.peer { known[peer] = link.servers }
    }

    // MARK: ACL and L2CAP

    private struct FrameKey: Hashable, Sendable {
        var connection: ConnectionKey
        var direction: HCIDirection
    }

    /// Where a fragment's bytes are: the record and the range of its data.
    private struct Fragment: Sendable {
        var record: Int
        var range: Range<Int>
    }

    /// An L2CAP frame being reassembled: its bytes so far and where each came from.
    private struct PendingFrame: Sendable {
        var fragments: [Fragment] = []
        var bytes: [UInt8] = []
    }

    private mutating func acl(_ index: Int, at offset: Int, controller: UInt16, direction: HCIDirection) {
        let data = records[index].data
        guard data.count >= offset + 4 else { return replaceAll(index, from: offset) }
        let handleAndFlags = UInt16(data[offset]) | UInt16(data[offset + 1]) << 8
        let key = FrameKey(connection: ConnectionKey(controller: controller, handle: handleAndFlags & 0x0FFF), direction: direction)
        let boundary = UInt8(handleAndFlags >> 12 & 0x3)
        let fragment = Fragment(record: index, range: offset + 4..<data.count)
        if boundary == 0x01 {
            guard frames[key] != nil else {  // a continuation without its start: unknown content
                fill(index, fragment.range, Self.placeholder)
                counts.payloads += 1
                return
            }
        } else if frames[key] != nil {
            dropFrame(key)  // a start while a frame is incomplete: the controller flushed it
        }
        frames[key, default: PendingFrame()].fragments.append(fragment)
        frames[key, default: PendingFrame()].bytes += data[fragment.range]
        guard let bytes = frames[key]?.bytes, bytes.count >= 4 else { return }
        let length = Int(bytes[0]) | Int(bytes[1]) << 8
        guard bytes.count >= 4 + length, let pending = frames.removeValue(forKey: key) else { return }
        var ranges = frame(Array(bytes[0..<4 + length]), key: key)
        if bytes.count > 4 + length { ranges.append((4 + length..<bytes.count, Self.placeholder)) }  // bytes past the frame
        apply(ranges, to: pending.fragments)
    }

    /// An incomplete frame that will not complete: every fragment replaced.
    private mutating func dropFrame(_ key: FrameKey) {
        guard let pending = frames.removeValue(forKey: key) else { return }
        apply([(0..<pending.bytes.count, Self.placeholder)], to: pending.fragments)
        counts.payloads += 1
    }

    /// Fills ranges of a frame's bytes in the fragments they came from.
    private mutating func apply(_ ranges: [(Range<Int>, UInt8)], to fragments: [Fragment]) {
        for (range, byte) in ranges where !range.isEmpty {
            var base = 0
            for fragment in fragments {
                let here = base..<base + fragment.range.count
                let overlap = range.clamped(to: here)
                if !overlap.isEmpty {
                    let shift = fragment.range.lowerBound - base
                    fill(fragment.record, overlap.lowerBound + shift..<overlap.upperBound + shift, byte)
                }
                base = here.upperBound
            }
        }
    }

    /// A whole L2CAP frame (header and payload): the ranges to fill, in the frame's bytes.
    private mutating func frame(_ frame: [UInt8], key: FrameKey) -> [(Range<Int>, UInt8)] {
        let cid = UInt16(frame[2]) | UInt16(frame[3]) << 8
        let payload = Array(frame[4...])
        let shifted = { (ranges: [(Range<Int>, UInt8)]) in ranges.map { ($0.0.lowerBound + 4..<$0.0.upperBound + 4, $0.1) } }
        switch cid {
        case 0x0001, 0x0005:
            return []  // signaling
        case 0x0004:
            return shifted(att(payload, connection: key.connection, direction: key.direction))
        case 0x0006, 0x0007:
            return shifted(smp(payload))
        default:
            guard !payload.isEmpty else { return [] }
            counts.payloads += 1
            return [(4..<frame.count, Self.placeholder)]
        }
    }

    /// SMP: the keys of the key distribution zeroed.
    private mutating func smp(_ pdu: [UInt8]) -> [(Range<Int>, UInt8)] {
        guard let code = pdu.first, [0x06, 0x07, 0x08, 0x0A].contains(code), pdu.count > 1 else { return [] }
        counts.keys += 1
        return [(1..<pdu.count, Self.keyPlaceholder)]
    }

    // MARK: What is known of attributes and links

    /// What a characteristic's (or descriptor's) value is, for scrubbing.
    enum AttributeKind: Hashable, Sendable {
        /// Structure only: kept.
        case structure
        case notificationSource, controlPoint, dataSource
        case remoteCommand, entityUpdate, entityAttribute
        case deviceName
    }

    /// What the scrubber knows of one connection.
    struct Link: Sendable {
        var peer: String?
        /// Per GATT server (the direction of its responses and notifications): handle to kind.
        var servers: [HCIDirection: [UInt16: AttributeKind]] = [:]
        /// The last Read or Read Blob Request's handle, per client direction.
        var readHandle: [HCIDirection: UInt16] = [:]
        /// The last Read By Type Request's type, per client direction.
        var readByType: [HCIDirection: BluetoothUUID] = [:]
        /// The Data Source stream, per server direction.
        var dataSource: [HCIDirection: DataSourceScrubber] = [:]
    }
}
