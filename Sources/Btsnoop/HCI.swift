/// Which way an HCI packet went, as the host sees it.
public enum HCIDirection: Hashable, Sendable {
    /// Host to controller (sent over the air by this machine).
    case sent
    /// Controller to host (received from the peer).
    case received

    var opposite: HCIDirection { self == .sent ? .received : .sent }
}

/// The HCI packets of a btsnoop record that matter for ATT.
public enum HCIPacket: Hashable, Sendable {
    /// An ACL data packet: connection handle (12 bits), packet boundary flag, payload.
    case acl(controller: UInt16, direction: HCIDirection, handle: UInt16, boundary: UInt8, payload: [UInt8])
    /// An HCI event: code and parameters.
    case event(controller: UInt16, code: UInt8, parameters: [UInt8])
    /// The controller went away (monitor DEL_INDEX): its connections end.
    case controllerRemoved(UInt16)
    /// Anything else (commands, SCO, ISO, notes, index info).
    case other

    /// Classifies a record of a file with this datalink. Throws on bytes that cannot be an HCI
    /// packet of the type the record claims.
    public init(record: BtsnoopRecord, datalink: BtsnoopDatalink) throws(BtsnoopError) {
        func fail(_ reason: String) -> BtsnoopError { BtsnoopError(record: record.number, reason: "corrupt: \(reason)") }
        let controller: UInt16
        let direction: HCIDirection
        let body: ArraySlice<UInt8>
        let kind: UInt8  // 2 ACL, 4 event, 0 other
        switch datalink {
        case .h4:
            guard let type = record.data.first else { throw fail("an H4 record without its packet type byte") }
            controller = 0
            direction = record.flags & 1 == 1 ? .received : .sent
            body = record.data.dropFirst()
            kind = type == 0x02 || type == 0x04 ? type : 0
        case .monitor:
            controller = UInt16(record.flags >> 16)
            body = record.data[...]
            switch MonitorOpcode(rawValue: UInt16(record.flags & 0xFFFF)) {
            case .deleteIndex:
                self = .controllerRemoved(controller)
                return
            case .event: kind = 0x04; direction = .received
            case .aclSent: kind = 0x02; direction = .sent
            case .aclReceived: kind = 0x02; direction = .received
            default: kind = 0; direction = .sent
            }
        }
        switch kind {
        case 0x02:
            guard body.count >= 4 else { throw fail("an ACL packet of \(body.count) bytes, shorter than its 4-byte header") }
            let start = body.startIndex
            let handleAndFlags = UInt16(body[start]) | UInt16(body[start + 1]) << 8
            let length = Int(body[start + 2]) | Int(body[start + 3]) << 8
            guard length == body.count - 4 else {
                throw fail("the ACL header says \(length) bytes of data, \(body.count - 4) follow")
            }
            self = .acl(controller: controller, direction: direction, handle: handleAndFlags & 0x0FFF,
                        boundary: UInt8(handleAndFlags >> 12 & 0x3), payload: Array(body.dropFirst(4)))
        case 0x04:
            guard body.count >= 2 else { throw fail("an HCI event of \(body.count) bytes, shorter than its 2-byte header") }
            let start = body.startIndex
            let length = Int(body[start + 1])
            guard length == body.count - 2 else {
                throw fail("the HCI event header says \(length) bytes of parameters, \(body.count - 2) follow")
            }
            self = .event(controller: controller, code: body[start], parameters: Array(body.dropFirst(2)))
        default:
            self = .other
        }
    }
}

/// A connection change told by an HCI event.
enum LinkEvent: Hashable, Sendable {
    case connected(handle: UInt16, peer: String)
    case disconnected(handle: UInt16)

    /// LE Connection Complete (LE Meta 0x3E, subevents 0x01, 0x0A, 0x29) and Disconnection
    /// Complete (0x05), when their status is success.
    init?(code: UInt8, parameters p: [UInt8]) {
        switch code {
        case 0x05:
            guard p.count >= 4, p[0] == 0 else { return nil }
            self = .disconnected(handle: (UInt16(p[1]) | UInt16(p[2]) << 8) & 0x0FFF)
        case 0x3E:
            guard p.count >= 12, [0x01, 0x0A, 0x29].contains(p[0]), p[1] == 0 else { return nil }
            let handle = (UInt16(p[2]) | UInt16(p[3]) << 8) & 0x0FFF
            let address = p[6..<12].reversed().map { byte in
                let digits = Array("0123456789ABCDEF")
                return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
            }.joined(separator: ":")
            self = .connected(handle: handle, peer: address)
        default:
            return nil
        }
    }
}

/// Reassembles L2CAP frames from ACL fragments of one connection and direction.
struct L2CAPReassembler: Sendable {
    private var buffer: [UInt8] = []
    private var active = false

    /// Feeds one ACL payload; returns the channel and payload of a frame it completes.
    /// Boundary flag 0b01 continues a frame; 0b00, 0b10 and 0b11 start one. A continuation
    /// without a start (the capture began mid-frame) is dropped; a start while a frame is
    /// incomplete drops the incomplete one (the controller flushed it).
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
