import ANCSCapture
import BluetoothUUIDs

/// An ATT PDU as the extractor reads it: its bytes (the opcode first), the record it came in
/// (which a malformed PDU's error names), and what its connection tells of it.
struct ATTPDU {
    let bytes: UnsafeBufferPointer<UInt8>
    let record: Int
    /// The handles in use on the connection (discovered over the defaults).
    let handles: ANCSHandles
    /// Whether the PDU comes from the GATT server, or from the client: both, until discovery
    /// told which side is the server.
    let fromServer: Bool
    let fromClient: Bool

    var opcode: UInt8 { bytes[0] }

    /// The little-endian 16-bit field at `index`.
    func u16(_ index: Int) -> UInt16 { UInt16(bytes[index]) | UInt16(bytes[index + 1]) << 8 }

    /// The error for a PDU that is not what its opcode says: `what` it is instead.
    func corrupt(_ what: String) -> BtsnoopError {
        BtsnoopError(record: record, reason: "corrupt: \(what) (ATT opcode \(hex2(opcode)), \(bytes.count) bytes)")
    }
}

/// ATT: what GATT discovery teaches, the values notified, the writes held for their answers,
/// the AMS reads.
extension BtsnoopExtractor {
    /// An ATT PDU on `bearer` (0x0004, or the EATT channel's CID on the host's side).
    mutating func handleATT(
        _ pdu: UnsafeBufferPointer<UInt8>, bearer: UInt16, key: ConnectionKey, direction: HCIDirection, time: Double, record: Int,
        into out: inout [ExtractedRecord]
    ) throws(BtsnoopError) {
        guard let opcode = pdu.first else { return }
        // Read in place (`ConnectionTable` yields the connection; nothing is copied): in a
        // function that does not mutate, `handles(of:)` for one, the connection is copied.
        let handles = defaultHandles.overlaid(with: states[key]?.discovered ?? ANCSHandles())
        let server = states[key]?.server
        let att = ATTPDU(bytes: pdu, record: record, handles: handles, fromServer: server.map { $0 == direction } ?? true,
                         fromClient: server.map { $0 != direction } ?? true)
        switch opcode {
        case 0x11, 0x09, 0x05:  // the discovery responses
            try learnFromDiscovery(att, key: key, direction: direction)
        case 0x1B, 0x1D, 0x23:  // notifications and indications
            try notifications(att, key: key, direction: direction, time: time, into: &out)
        case 0x12, 0x52, 0x16, 0x18:  // writes
            try write(att, bearer: bearer, key: key, direction: direction, time: time, into: &out)
        case 0x13, 0x19:  // Write Response / Execute Write Response
            guard states[key]?.held.waiting(on: bearer)?.direction == direction.opposite else { return }
            out += states[key]?.held.answer(bearer: bearer, attError: nil) ?? []
        case 0x01:  // Error Response: request opcode, handle, error code
            try errorResponse(att, bearer: bearer, key: key, direction: direction, into: &out)
        case 0x0A, 0x0C, 0x0B, 0x0D:  // reads
            readPDU(att, bearer: bearer, key: key, direction: direction, time: time, into: &out)
        case 0x02:  // Exchange MTU Request: Client Rx MTU
            guard bearer == 0x0004, pdu.count >= 3 else { return }
            endRead(bearer: bearer, key: key, direction: direction, into: &out)
            readStates[key, default: ReadState()].clientMTU = att.u16(1)
        case 0x03:  // Exchange MTU Response: Server Rx MTU
            guard bearer == 0x0004, pdu.count >= 3 else { return }
            readStates[key, default: ReadState()].serverMTU = att.u16(1)
        case 0x04, 0x06, 0x08, 0x0E, 0x10, 0x20:  // the other requests
            endRead(bearer: bearer, key: key, direction: direction, into: &out)
        default:
            break
        }
    }

    /// The handles and the server's side that a discovery response names (Read By Group Type,
    /// Read By Type, Find Information).
    private mutating func learnFromDiscovery(_ att: ATTPDU, key: ConnectionKey, direction: HCIDirection) throws(BtsnoopError) {
        let pdu = att.bytes
        switch att.opcode {
        case 0x11:  // Read By Group Type Response: length, {start, end, UUID}
            guard pdu.count >= 2, pdu[1] >= 6, (pdu.count - 2) % Int(pdu[1]) == 0 else { throw att.corrupt("a malformed Read By Group Type Response") }
            let length = Int(pdu[1])
            for entry in stride(from: 2, to: pdu.count, by: length) where length == 20 {
                if let uuid = BluetoothUUID(littleEndianBytes: pdu[entry + 4..<entry + 20]),
                   uuid == ANCSUUID.service || uuid == AMSAttributeUUID.service {
                    states[key]?.server = direction
                }
            }
        case 0x09:  // Read By Type Response: length, {handle, value}
            guard pdu.count >= 2, pdu[1] >= 2, (pdu.count - 2) % Int(pdu[1]) == 0 else { throw att.corrupt("a malformed Read By Type Response") }
            let length = Int(pdu[1])
            guard length == 21 else { return }  // a characteristic declaration with a 128-bit UUID
            for entry in stride(from: 2, to: pdu.count, by: length) {
                let valueHandle = att.u16(entry + 3)
                learn(BluetoothUUID(littleEndianBytes: pdu[entry + 5..<entry + 21]), handle: valueHandle, key: key, direction: direction)
            }
        case 0x05:  // Find Information Response: format, {handle, UUID}
            guard pdu.count >= 2, pdu[1] == 1 || pdu[1] == 2 else { throw att.corrupt("a malformed Find Information Response") }
            let length = pdu[1] == 1 ? 4 : 18
            guard (pdu.count - 2) % length == 0 else { throw att.corrupt("a malformed Find Information Response") }
            guard length == 18 else { return }
            for entry in stride(from: 2, to: pdu.count, by: length) {
                learn(BluetoothUUID(littleEndianBytes: pdu[entry + 2..<entry + 18]), handle: att.u16(entry), key: key, direction: direction)
            }
        default:
            break
        }
    }

    /// A Handle Value Notification or Indication, or a Multiple Handle Value Notification: the
    /// values the server sent on ANCS's and AMS's handles.
    private mutating func notifications(
        _ att: ATTPDU, key: ConnectionKey, direction: HCIDirection, time: Double, into out: inout [ExtractedRecord]
    ) throws(BtsnoopError) {
        let pdu = att.bytes
        let handles = att.handles
        if att.opcode != 0x23 {  // Handle Value Notification / Indication: handle, value
            guard pdu.count >= 3 else { throw att.corrupt("a Handle Value Notification without its handle") }
            guard att.fromServer else { return }
            notified(handle: att.u16(1), value: UnsafeBufferPointer(rebasing: pdu[3...]), handles: handles, key: key, time: time,
                     record: att.record, into: &out)
            return
        }
        // Multiple Handle Value Notification: {handle, length, value}
        var index = 1
        var values: [(UInt16, Range<Int>)] = []
        while index < pdu.count {
            guard index + 4 <= pdu.count else { throw att.corrupt("a Multiple Handle Value Notification cut inside a handle-length pair") }
            let handle = att.u16(index), length = Int(att.u16(index + 2))
            guard index + 4 + length <= pdu.count else {
                throw att.corrupt("a Multiple Handle Value Notification whose value for handle \(hex4(handle)) claims \(length) bytes")
            }
            values.append((handle, index + 4..<index + 4 + length))
            index += 4 + length
        }
        guard att.fromServer else { return }
        for (handle, range) in values {
            notified(handle: handle, value: UnsafeBufferPointer(rebasing: pdu[range]), handles: handles, key: key, time: time,
                     record: att.record, into: &out)
        }
    }

    /// A write to the Control Point or an AMS characteristic: a Write Request or Command, or a
    /// prepared write (Prepare Write Request, Execute Write Request).
    private mutating func write(
        _ att: ATTPDU, bearer: UInt16, key: ConnectionKey, direction: HCIDirection, time: Double, into out: inout [ExtractedRecord]
    ) throws(BtsnoopError) {
        let pdu = att.bytes
        let handles = att.handles
        switch att.opcode {
        case 0x12, 0x52:  // Write Request / Write Command: handle, value
            guard pdu.count >= 3 else { throw att.corrupt("a write without its handle") }
            if att.opcode == 0x12 { endRead(bearer: bearer, key: key, direction: direction, into: &out) }
            let handle = att.u16(1)
            guard att.fromClient, handle == handles.controlPoint || handles.amsCharacteristic(handle) != nil else { return }
            holdWrite(Array(pdu[3...]), handle: handle, handles: handles, bearer: bearer, key: key, direction: direction, time: time,
                      record: att.record, into: &out)
            if att.opcode == 0x52 { out += states[key]?.held.answer(bearer: bearer, attError: nil) ?? [] }  // no answer comes
        case 0x16:  // Prepare Write Request: handle, offset, part
            guard pdu.count >= 5 else { throw att.corrupt("a Prepare Write Request without its handle and offset") }
            endRead(bearer: bearer, key: key, direction: direction, into: &out)
            let handle = att.u16(1)
            guard att.fromClient, handle == handles.controlPoint || handles.amsCharacteristic(handle) != nil else { return }
            var bytes = states[key]?.prepared[bearer].flatMap { $0.handle == handle ? $0.bytes : nil } ?? []
            if att.u16(3) == 0 { bytes = [] }
            bytes += pdu[5...]
            states[key]?.prepared[bearer] = (direction, handle, bytes)
        case 0x18:  // Execute Write Request: flags
            guard pdu.count >= 2 else { throw att.corrupt("an Execute Write Request without its flags") }
            endRead(bearer: bearer, key: key, direction: direction, into: &out)
            guard let prepared = states[key]?.prepared[bearer], prepared.direction == direction else { return }
            states[key]?.prepared[bearer] = nil
            guard pdu[1] == 1 else { return }
            holdWrite(prepared.bytes, handle: prepared.handle, handles: handles, bearer: bearer, key: key, direction: direction, time: time,
                      record: att.record, into: &out)
        default:
            break
        }
    }

    /// An Error Response: the answer to a write held for it, or the refusal of a read.
    private mutating func errorResponse(
        _ att: ATTPDU, bearer: UInt16, key: ConnectionKey, direction: HCIDirection, into out: inout [ExtractedRecord]
    ) throws(BtsnoopError) {
        let pdu = att.bytes
        guard pdu.count >= 5 else { throw att.corrupt("an Error Response shorter than 5 bytes") }
        let request = pdu[1]
        if request == 0x16 { states[key]?.prepared[bearer] = nil }
        if request == 0x0A || request == 0x0C {
            readRefused(bearer: bearer, handle: att.u16(2), attError: pdu[4], key: key, direction: direction, into: &out)
            return
        }
        guard [0x12, 0x16, 0x18].contains(request), let write = states[key]?.held.waiting(on: bearer), write.direction == direction.opposite,
              request != 0x12 || att.u16(2) == write.handle
        else { return }
        out += states[key]?.held.answer(bearer: bearer, attError: pdu[4]) ?? []
    }


    private mutating func learn(_ uuid: BluetoothUUID?, handle: UInt16, key: ConnectionKey, direction: HCIDirection) {
        guard let uuid else { return }
        switch uuid {
        case ANCSUUID.notificationSource: states[key]?.discovered.notificationSource = handle
        case ANCSUUID.controlPoint: states[key]?.discovered.controlPoint = handle
        case ANCSUUID.dataSource: states[key]?.discovered.dataSource = handle
        default:
            if uuid == AMSAttributeUUID.remoteCommand { states[key]?.discovered.remoteCommand = handle }
            else if uuid == AMSAttributeUUID.entityUpdate { states[key]?.discovered.entityUpdate = handle }
            else if uuid == AMSAttributeUUID.entityAttribute { states[key]?.discovered.entityAttribute = handle }
            else { return }
        }
        states[key]?.server = direction
    }

    /// A value notified on `handle`: a record if the handle is ANCS's or AMS's (the bytes are
    /// copied only then: most notifications of a capture are other services').
    private mutating func notified(
        handle: UInt16, value: UnsafeBufferPointer<UInt8>, handles: ANCSHandles, key: ConnectionKey, time: Double, record: Int,
        into out: inout [ExtractedRecord]
    ) {
        let characteristic: CaptureCharacteristic
        if handle == handles.notificationSource { characteristic = .ns }
        else if handle == handles.dataSource { characteristic = .ds }
        else if let ams = handles.amsCharacteristic(handle) {
            let value = AMSRecord(time: time, characteristic: ams, direction: .notification, bytes: Array(value))
            return emit(.ams(value), key: key, record: record, peer: nil, into: &out)
        } else { return }
        emit(.value(time: time, characteristic: characteristic, bytes: Array(value), attError: nil), key: key, record: record, peer: nil, into: &out)
    }
}
