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
        var packet = HCIPacket.other
        try record.data.withBytes { data throws(BtsnoopError) in
            switch try HCIPacketView(number: record.number, flags: record.flags, data: data, datalink: datalink) {
            case .acl(let controller, let direction, let handle, let boundary, let payload):
                packet = .acl(controller: controller, direction: direction, handle: handle, boundary: boundary, payload: Array(payload))
            case .event(let controller, let code, let parameters):
                packet = .event(controller: controller, code: code, parameters: Array(parameters))
            case .controllerRemoved(let controller):
                packet = .controllerRemoved(controller)
            case .other:
                break
            }
        }
        self = packet
    }
}

/// `HCIPacket` with its payload in place: what the extractor reads each record as, without a copy.
enum HCIPacketView {
    case acl(controller: UInt16, direction: HCIDirection, handle: UInt16, boundary: UInt8, payload: UnsafeBufferPointer<UInt8>)
    case event(controller: UInt16, code: UInt8, parameters: UnsafeBufferPointer<UInt8>)
    case controllerRemoved(UInt16)
    case other

    /// Classifies record `number` (its flags and bytes) of a file with this datalink, as
    /// `HCIPacket(record:datalink:)` does.
    init(number: Int, flags: UInt32, data: UnsafeBufferPointer<UInt8>, datalink: BtsnoopDatalink) throws(BtsnoopError) {
        func fail(_ reason: String) -> BtsnoopError { BtsnoopError(record: number, reason: "corrupt: \(reason)") }
        let controller: UInt16
        let direction: HCIDirection
        let body: Slice<UnsafeBufferPointer<UInt8>>
        let kind: UInt8  // 2 ACL, 4 event, 0 other
        switch datalink {
        case .h4:
            guard let type = data.first else { throw fail("an H4 record without its packet type byte") }
            controller = 0
            direction = flags & 1 == 1 ? .received : .sent
            body = data.dropFirst()
            kind = type == 0x02 || type == 0x04 ? type : 0
        case .monitor:
            controller = UInt16(flags >> 16)
            body = data[...]
            switch MonitorOpcode(rawValue: UInt16(flags & 0xFFFF)) {
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
                        boundary: UInt8(handleAndFlags >> 12 & 0x3), payload: UnsafeBufferPointer(rebasing: body.dropFirst(4)))
        case 0x04:
            guard body.count >= 2 else { throw fail("an HCI event of \(body.count) bytes, shorter than its 2-byte header") }
            let start = body.startIndex
            let length = Int(body[start + 1])
            guard length == body.count - 2 else {
                throw fail("the HCI event header says \(length) bytes of parameters, \(body.count - 2) follow")
            }
            self = .event(controller: controller, code: body[start], parameters: UnsafeBufferPointer(rebasing: body.dropFirst(2)))
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
    init?(code: UInt8, parameters p: UnsafeBufferPointer<UInt8>) {
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

/// Reassembles L2CAP frames from ACL fragments of one connection and direction. A frame that
/// comes whole in one fragment is handed out in place; one in several fragments is collected in
/// a buffer that keeps its storage for the next, so a fragment costs no allocation.
struct L2CAPReassembler: Sendable {
    /// What a fragment did.
    enum Step {
        /// Nothing complete yet (or the fragment was dropped).
        case none
        /// A frame whole in this fragment: its channel and the range of its payload in the fragment.
        case whole(cid: UInt16, payload: Range<Int>)
        /// A frame completed in the buffer: its channel and payload length; take it with `takeFrame()`.
        case buffered(cid: UInt16, length: Int)
    }

    private var buffer: [UInt8] = []
    private var active = false

    /// Feeds one ACL payload. Boundary flag 0b01 continues a frame; 0b00, 0b10 and 0b11 start
    /// one. A continuation without a start (the capture began mid-frame) is dropped; a start
    /// while a frame is incomplete drops the incomplete one (the controller flushed it). Bytes
    /// past the frame's length are dropped.
    mutating func feed(boundary: UInt8, payload: UnsafeBufferPointer<UInt8>) -> Step {
        if boundary == 0x01 {
            guard active else { return .none }
            buffer.append(contentsOf: payload)
        } else {
            if payload.count >= 4 {
                let length = Int(payload[0]) | Int(payload[1]) << 8
                if payload.count >= 4 + length {
                    buffer.removeAll(keepingCapacity: true)
                    active = false
                    return .whole(cid: UInt16(payload[2]) | UInt16(payload[3]) << 8, payload: 4..<4 + length)
                }
            }
            buffer.removeAll(keepingCapacity: true)
            buffer.append(contentsOf: payload)
            active = true
        }
        guard buffer.count >= 4 else { return .none }
        let length = Int(buffer[0]) | Int(buffer[1]) << 8
        guard buffer.count >= 4 + length else { return .none }
        active = false
        return .buffered(cid: UInt16(buffer[2]) | UInt16(buffer[3]) << 8, length: length)
    }

    /// The buffer of a `.buffered` frame (its 4-byte header, then the payload), taken out so the
    /// frame can be read while its connection changes; hand it back with `giveBack(_:)`.
    mutating func takeFrame() -> [UInt8] {
        var frame: [UInt8] = []
        swap(&frame, &buffer)
        return frame
    }

    /// Returns the storage of a frame taken with `takeFrame()`, emptied, for the next frame.
    mutating func giveBack(_ storage: consuming [UInt8]) {
        storage.removeAll(keepingCapacity: true)
        if buffer.isEmpty && !active { buffer = storage }
    }
}
