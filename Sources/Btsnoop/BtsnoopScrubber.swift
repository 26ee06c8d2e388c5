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
    public private(set) var counts = ScrubCounts()

    /// The records given so far, scrubbed; a record's bytes may still change while an L2CAP
    /// frame it started is incomplete, so take them with `finish()`.
    private var records: [BtsnoopRecord] = []
    private var frames: [FrameKey: PendingFrame] = [:]
    private var links: [ConnectionKey: Link] = [:]
    /// What each phone's GATT server was learnt to hold, by controller and peer address, for its
    /// next connection.
    private var known: [String: [HCIDirection: [UInt16: AttributeKind]]] = [:]

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

    // MARK: ATT

    /// What a characteristic's (or descriptor's) value is, for scrubbing.
    enum AttributeKind: Hashable, Sendable {
        /// Structure only: kept.
        case structure
        case notificationSource, controlPoint, dataSource
        case remoteCommand, entityUpdate, entityAttribute
        case deviceName
    }

    /// What the scrubber knows of one connection.
    private struct Link: Sendable {
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

    private static let declarationUUID = BluetoothUUID(uuid16: 0x2803)
    private static let includeUUID = BluetoothUUID(uuid16: 0x2802)
    private static let deviceNameUUID = BluetoothUUID(uuid16: 0x2A00)
    /// Descriptors and characteristics whose values are structure, not anyone's data.
    private static let structural: Set<UInt16> = [
        0x2800, 0x2801, 0x2802, 0x2803,  // declarations
        0x2900, 0x2902, 0x2903, 0x2904, 0x2908,  // extended properties, configurations, format, report reference
        0x2A01, 0x2A04, 0x2A05, 0x2AA6, 0x2AC9, 0x2B29, 0x2B2A, 0x2B3A,  // GAP and GATT
        0x2A19, 0x2A4A, 0x2A4B, 0x2A4C, 0x2A4E, 0x2A50,  // battery level, HID, PnP ID
    ]

    private static let structuralUUIDs = Set(structural.map { BluetoothUUID(uuid16: $0) })

    private static func kind(of uuid: BluetoothUUID) -> AttributeKind? {
        switch uuid {
        case ANCSUUID.notificationSource: return .notificationSource
        case ANCSUUID.controlPoint: return .controlPoint
        case ANCSUUID.dataSource: return .dataSource
        case AMSAttributeUUID.remoteCommand: return .remoteCommand
        case AMSAttributeUUID.entityUpdate: return .entityUpdate
        case AMSAttributeUUID.entityAttribute: return .entityAttribute
        case deviceNameUUID: return .deviceName
        default:
            return structuralUUIDs.contains(uuid) ? .structure : nil
        }
    }

    /// The kind of `handle` on the server whose responses go `server`.
    private func kind(_ handle: UInt16, server: HCIDirection, connection: ConnectionKey) -> AttributeKind? {
        if let kind = links[connection]?.servers[server]?[handle] { return kind }
        guard server == .received, handle != 0 else { return nil }
        switch handle {
        case defaultHandles.notificationSource: return .notificationSource
        case defaultHandles.controlPoint: return .controlPoint
        case defaultHandles.dataSource: return .dataSource
        case defaultHandles.remoteCommand: return .remoteCommand
        case defaultHandles.entityUpdate: return .entityUpdate
        case defaultHandles.entityAttribute: return .entityAttribute
        default: return nil
        }
    }

    private mutating func learn(_ uuid: BluetoothUUID?, handle: UInt16, server: HCIDirection, connection: ConnectionKey) {
        guard let uuid, let kind = Self.kind(of: uuid) else { return }
        if links[connection] == nil { links[connection] = Link() }
        links[connection]?.servers[server, default: [:]][handle] = kind
    }

    /// How a value is read: what is replaced depends on whether it was notified, read or written.
    private enum Access { case notified, read, written }

    /// An ATT PDU: the ranges of it to fill.
    private mutating func att(_ pdu: [UInt8], connection: ConnectionKey, direction: HCIDirection) -> [(Range<Int>, UInt8)] {
        guard let opcode = pdu.first else { return [] }
        let x = Self.placeholder
        func u16(_ index: Int) -> UInt16 { UInt16(pdu[index]) | UInt16(pdu[index + 1]) << 8 }
        func rest(_ from: Int) -> [(Range<Int>, UInt8)] {
            guard from < pdu.count else { return [] }
            counts.otherValues += 1
            return [(from..<pdu.count, x)]
        }
        if links[connection] == nil { links[connection] = Link() }
        switch opcode {
        case 0x01, 0x02, 0x03, 0x04, 0x06, 0x07, 0x0E, 0x10, 0x11, 0x13, 0x18, 0x19, 0x1E, 0x20:
            return []  // errors, MTU, discovery requests and responses without values, acknowledgements
        case 0x05:  // Find Information Response: format, {handle, UUID}
            guard pdu.count >= 2, pdu[1] == 1 || pdu[1] == 2 else { return rest(1) }
            let length = pdu[1] == 1 ? 4 : 18
            for entry in stride(from: 2, to: pdu.count - length + 1, by: length) {
                learn(BluetoothUUID(attBytes: pdu[entry + 2..<entry + length]), handle: u16(entry), server: direction, connection: connection)
            }
            return []
        case 0x08:  // Read By Type Request: range, type
            if pdu.count == 7 || pdu.count == 21 {
                links[connection]?.readByType[direction] = BluetoothUUID(attBytes: pdu[5...])
            }
            return []
        case 0x09:  // Read By Type Response: length, {handle, value}
            guard pdu.count >= 2, pdu[1] >= 2, (pdu.count - 2) % Int(pdu[1]) == 0 else { return rest(1) }
            let length = Int(pdu[1])
            let type = links[connection]?.readByType[direction.opposite]
            if type == Self.declarationUUID && (length == 7 || length == 21) {
                for entry in stride(from: 2, to: pdu.count, by: length) {
                    learn(BluetoothUUID(attBytes: pdu[entry + 5..<entry + length]), handle: u16(entry + 3), server: direction,
                          connection: connection)
                }
                return []
            }
            if type == Self.includeUUID || type == Self.declarationUUID { return [] }
            var ranges: [(Range<Int>, UInt8)] = []
            for entry in stride(from: 2, to: pdu.count, by: length) where length > 2 {
                ranges.append((entry + 2..<entry + length, x))
                if type == Self.deviceNameUUID { counts.deviceNames += 1 } else { counts.otherValues += 1 }
            }
            return ranges
        case 0x0A, 0x0C:  // Read Request, Read Blob Request: handle
            if pdu.count >= 3 { links[connection]?.readHandle[direction] = u16(1) }
            return []
        case 0x0B, 0x0D:  // Read Response, Read Blob Response: value
            guard let handle = links[connection]?.readHandle[direction.opposite] else { return rest(1) }
            return value(1..<pdu.count, of: pdu, handle: handle, access: .read, server: direction, connection: connection)
        case 0x12, 0x52:  // Write Request, Write Command: handle, value
            guard pdu.count >= 3 else { return rest(1) }
            return value(3..<pdu.count, of: pdu, handle: u16(1), access: .written, server: direction.opposite, connection: connection)
        case 0x16, 0x17:  // Prepare Write Request, Response: handle, offset, part (a part of a value is replaced unless structure)
            guard pdu.count >= 5 else { return rest(1) }
            let server = opcode == 0x16 ? direction.opposite : direction
            if kind(u16(1), server: server, connection: connection) == .structure { return [] }
            return rest(5)
        case 0x1B, 0x1D:  // Handle Value Notification, Indication: handle, value
            guard pdu.count >= 3 else { return rest(1) }
            return value(3..<pdu.count, of: pdu, handle: u16(1), access: .notified, server: direction, connection: connection)
        case 0x23:  // Multiple Handle Value Notification: {handle, length, value}
            var index = 1
            var ranges: [(Range<Int>, UInt8)] = []
            while index < pdu.count {
                guard index + 4 <= pdu.count, index + 4 + Int(u16(index + 2)) <= pdu.count else { return ranges + rest(index) }
                let end = index + 4 + Int(u16(index + 2))
                ranges += value(index + 4..<end, of: pdu, handle: u16(index), access: .notified, server: direction, connection: connection)
                index = end
            }
            return ranges
        default:  // Read Multiple (Variable) Responses, signed writes, opcodes not known here
            return rest(1)
        }
    }

    /// One attribute value at `range` of `pdu`: the ranges to fill.
    private mutating func value(
        _ range: Range<Int>, of pdu: [UInt8], handle: UInt16, access: Access, server: HCIDirection, connection: ConnectionKey
    ) -> [(Range<Int>, UInt8)] {
        guard !range.isEmpty else { return [] }
        let x = Self.placeholder
        let bytes = Array(pdu[range])
        let shift = { (ranges: [Range<Int>]) in ranges.map { ($0.lowerBound + range.lowerBound..<$0.upperBound + range.lowerBound, x) } }
        switch kind(handle, server: server, connection: connection) {
        case .structure?, .notificationSource?, .remoteCommand?:
            return []
        case .controlPoint? where access == .written:
            var stream = links[connection]?.dataSource[server] ?? DataSourceScrubber()
            let ranges = stream.request(bytes)
            links[connection]?.dataSource[server] = stream
            if !ranges.isEmpty { counts.ancsValues += 1 }
            return shift(ranges)
        case .dataSource? where access == .notified:
            var stream = links[connection]?.dataSource[server] ?? DataSourceScrubber()
            let (ranges, values) = stream.notification(bytes)
            links[connection]?.dataSource[server] = stream
            counts.ancsValues += values
            return shift(ranges)
        case .entityUpdate? where access == .notified:
            guard bytes.count > 3 else { return [] }
            counts.amsValues += 1
            return shift([3..<bytes.count])
        case .entityUpdate?, .entityAttribute?:
            guard access != .written else { return [] }  // registrations and the attribute asked for
            counts.amsValues += 1
            return shift([0..<bytes.count])
        case .deviceName?:
            counts.deviceNames += 1
            return shift([0..<bytes.count])
        case .controlPoint?, .dataSource?, nil:
            counts.otherValues += 1
            return shift([0..<bytes.count])
        }
    }
}

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
