public import Btsnoop

/// Builds btsnoop files from known ATT traffic between a host (the ANCS consumer) and phones.
public struct SnoopBuilder: Sendable {
    public enum Side: Sendable { case phone, host }

    public let datalink: BtsnoopDatalink
    public var bytes: [UInt8]
    /// The btsnoop timestamp of the next record.
    public var timestamp: Int64 = btsnoopUnixEpoch + 1_780_000_000_000_000
    /// Microseconds between records.
    public var step: Int64 = 1_000
    /// The most ACL payload bytes per packet: longer L2CAP frames are fragmented.
    public var aclPayloadLimit = 27
    /// How many records were written.
    public private(set) var recordCount = 0

    public init(_ datalink: BtsnoopDatalink) {
        self.datalink = datalink
        bytes = BtsnoopWriter.fileHeader(datalink)
    }

    /// Appends a raw record.
    public mutating func record(flags: UInt32, data: [UInt8]) {
        bytes += BtsnoopWriter.record(flags: flags, timestamp: timestamp, data: data)
        timestamp += step
        recordCount += 1
    }

    /// A monitor NEW_INDEX record for a controller (ignored by the H4 datalink).
    public mutating func newIndex(controller: UInt16) {
        guard datalink == .monitor else { return }
        record(flags: UInt32(controller) << 16, data: [0x01, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06] + Array("hci\(controller)".utf8) + [0, 0, 0, 0])
    }

    /// An HCI event from a controller.
    public mutating func event(controller: UInt16 = 0, code: UInt8, parameters: [UInt8]) {
        let packet = [code, UInt8(parameters.count)] + parameters
        switch datalink {
        case .h4: record(flags: 0x03, data: [0x04] + packet)
        case .monitor: record(flags: UInt32(controller) << 16 | 3, data: packet)
        }
    }

    /// LE Connection Complete (the host as central).
    public mutating func connect(controller: UInt16 = 0, handle: UInt16, peer: [UInt8] = [0x01, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA]) {
        event(controller: controller, code: 0x3E, parameters: [0x01, 0x00, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x00, 0x01]
              + peer + [0x18, 0x00, 0x00, 0x00, 0x48, 0x00, 0x00])
    }

    /// Disconnection Complete.
    public mutating func disconnect(controller: UInt16 = 0, handle: UInt16, reason: UInt8 = 0x13) {
        event(controller: controller, code: 0x05, parameters: [0x00, UInt8(handle & 0xFF), UInt8(handle >> 8), reason])
    }

    /// One ACL packet as it is, with the packet boundary flag given.
    public mutating func acl(controller: UInt16 = 0, handle: UInt16, from side: Side, boundary: UInt8, payload: [UInt8]) {
        let field = handle & 0x0FFF | UInt16(boundary) << 12
        let packet = [UInt8(field & 0xFF), UInt8(field >> 8), UInt8(payload.count & 0xFF), UInt8(payload.count >> 8)] + payload
        let received = side == .phone
        switch datalink {
        case .h4: record(flags: received ? 0x01 : 0x00, data: [0x02] + packet)
        case .monitor: record(flags: UInt32(controller) << 16 | (received ? 5 : 4), data: packet)
        }
    }

    /// An ATT PDU on channel 4, fragmented into ACL packets of at most `aclPayloadLimit` bytes.
    public mutating func att(_ pdu: [UInt8], controller: UInt16 = 0, handle: UInt16, from side: Side) {
        l2cap(pdu, cid: 0x0004, controller: controller, handle: handle, from: side)
    }

    /// An L2CAP basic frame on `cid`, fragmented into ACL packets of at most `aclPayloadLimit` bytes.
    public mutating func l2cap(_ payload: [UInt8], cid: UInt16, controller: UInt16 = 0, handle: UInt16, from side: Side) {
        let frame = le(UInt16(payload.count)) + le(cid) + payload
        var offset = 0
        while offset < frame.count {
            let end = min(frame.count, offset + aclPayloadLimit)
            acl(controller: controller, handle: handle, from: side, boundary: offset == 0 ? 0x02 : 0x01, payload: Array(frame[offset..<end]))
            offset = end
        }
    }

    // MARK: LE credit-based channels (EATT)

    /// An LE signaling command on channel 0x0005: code, identifier, length, data.
    public mutating func signal(code: UInt8, identifier: UInt8, _ data: [UInt8], controller: UInt16 = 0, handle: UInt16, from side: Side) {
        l2cap([code, identifier] + le(UInt16(data.count)) + data, cid: 0x0005, controller: controller, handle: handle, from: side)
    }

    /// An SDU on an LE credit-based channel: K-frames on `cid` of at most `mps` payload bytes,
    /// the first starting with the 2-byte SDU length.
    public mutating func sdu(_ sdu: [UInt8], cid: UInt16, mps: Int = 23, controller: UInt16 = 0, handle: UInt16, from side: Side) {
        let bytes = le(UInt16(sdu.count)) + sdu
        var offset = 0
        repeat {
            let end = min(bytes.count, offset + mps)
            l2cap(Array(bytes[offset..<end]), cid: cid, controller: controller, handle: handle, from: side)
            offset = end
        } while offset < bytes.count
    }

    // MARK: ANCS traffic

    public static let serviceUUID: [UInt8] = [0xD0, 0x00, 0x2D, 0x12, 0x1E, 0x4B, 0x0F, 0xA4, 0x99, 0x4E, 0xCE, 0xB5, 0x31, 0xF4, 0x05, 0x79]
    public static let nsUUID: [UInt8] = [0xBD, 0x1D, 0xA2, 0x99, 0xE6, 0x25, 0x58, 0x8C, 0xD9, 0x42, 0x01, 0x63, 0x0D, 0x12, 0xBF, 0x9F]
    public static let cpUUID: [UInt8] = [0xD9, 0xD9, 0xAA, 0xFD, 0xBD, 0x9B, 0x21, 0x98, 0xA8, 0x49, 0xE1, 0x45, 0xF3, 0xD8, 0xD1, 0x69]
    public static let dsUUID: [UInt8] = [0xFB, 0x7B, 0x7C, 0xCE, 0x6A, 0xB3, 0x44, 0xBE, 0xB5, 0x4B, 0xD6, 0x24, 0xE9, 0xC6, 0xEA, 0x22]

    /// GATT discovery as BlueZ does it: primary services, then characteristic declarations.
    /// The value handles are `ns`, `cp`, `ds`; each declaration sits one handle before its value.
    public mutating func discovery(controller: UInt16 = 0, handle: UInt16, ns: UInt16, cp: UInt16, ds: UInt16, useFindInformation: Bool = false) {
        let start = min(ns, cp, ds) - 2, end = max(ns, cp, ds) + 2
        att([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28], controller: controller, handle: handle, from: .host)
        att([0x11, 0x06, 0x01, 0x00, 0x05, 0x00, 0x00, 0x18], controller: controller, handle: handle, from: .phone)  // GAP, 16-bit
        att([0x10, 0x06, 0x00, 0xFF, 0xFF, 0x00, 0x28], controller: controller, handle: handle, from: .host)
        att([0x11, 0x14] + le(start) + le(end) + Self.serviceUUID, controller: controller, handle: handle, from: .phone)
        if useFindInformation {
            att([0x04] + le(start) + le(end), controller: controller, handle: handle, from: .host)
            var response: [UInt8] = [0x05, 0x02]
            for (value, uuid) in [(ns, Self.nsUUID), (cp, Self.cpUUID), (ds, Self.dsUUID)] { response += le(value) + uuid }
            att(response, controller: controller, handle: handle, from: .phone)
        } else {
            att([0x08] + le(start) + le(end) + [0x03, 0x28], controller: controller, handle: handle, from: .host)
            var response: [UInt8] = [0x09, 21]
            for (value, uuid, properties) in [(ns, Self.nsUUID, UInt8(0x10)), (cp, Self.cpUUID, 0x08), (ds, Self.dsUUID, 0x10)] {
                response += le(value - 1) + [properties] + le(value) + uuid
            }
            att(response, controller: controller, handle: handle, from: .phone)
        }
    }

    public mutating func notify(controller: UInt16 = 0, handle: UInt16, attribute: UInt16, _ value: [UInt8]) {
        att([0x1B] + le(attribute) + value, controller: controller, handle: handle, from: .phone)
    }

    public mutating func write(controller: UInt16 = 0, handle: UInt16, attribute: UInt16, _ value: [UInt8]) {
        att([0x12] + le(attribute) + value, controller: controller, handle: handle, from: .host)
    }

    public mutating func writeResponse(controller: UInt16 = 0, handle: UInt16) {
        att([0x13], controller: controller, handle: handle, from: .phone)
    }

    /// An Error Response to a request (`request`: its opcode, a Write Request by default).
    public mutating func errorResponse(controller: UInt16 = 0, handle: UInt16, request: UInt8 = 0x12, attribute: UInt16, code: UInt8) {
        att([0x01, request] + le(attribute) + [code], controller: controller, handle: handle, from: .phone)
    }

    // MARK: Apple Media Service traffic

    public static let amsServiceUUID: [UInt8] = [0xDC, 0xF8, 0x55, 0xAD, 0x02, 0xC5, 0xF4, 0x8E, 0x3A, 0x43, 0x36, 0x0F, 0x2B, 0x50, 0xD3, 0x89]
    public static let rcUUID: [UInt8] = [0xC2, 0x51, 0xCA, 0xF7, 0x56, 0x0E, 0xDF, 0xB8, 0x8A, 0x4A, 0xB1, 0x57, 0xD8, 0x81, 0x3C, 0x9B]
    public static let euUUID: [UInt8] = [0x02, 0xC1, 0x96, 0xBA, 0x92, 0xBB, 0x0C, 0x9A, 0x1F, 0x41, 0x8D, 0x80, 0xCE, 0xAB, 0x7C, 0x2F]
    public static let eaUUID: [UInt8] = [0xD7, 0xD5, 0xBB, 0x70, 0xA8, 0xA3, 0xAB, 0xA6, 0xD8, 0x46, 0xAB, 0x23, 0x8C, 0xF3, 0xB2, 0xC6]

    /// GATT discovery of AMS as BlueZ does it (after `discovery` of ANCS, or alone): the primary
    /// service, then its characteristic declarations (or Find Information). The value handles
    /// are `rc`, `eu`, `ea`; each declaration sits one handle before its value.
    public mutating func amsDiscovery(controller: UInt16 = 0, handle: UInt16, rc: UInt16, eu: UInt16, ea: UInt16, useFindInformation: Bool = false) {
        let start = min(rc, eu, ea) - 2, end = max(rc, eu, ea) + 2
        att([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28], controller: controller, handle: handle, from: .host)
        att([0x11, 0x14] + le(start) + le(end) + Self.amsServiceUUID, controller: controller, handle: handle, from: .phone)
        if useFindInformation {
            att([0x04] + le(start) + le(end), controller: controller, handle: handle, from: .host)
            var response: [UInt8] = [0x05, 0x02]
            for (value, uuid) in [(rc, Self.rcUUID), (eu, Self.euUUID), (ea, Self.eaUUID)] { response += le(value) + uuid }
            att(response, controller: controller, handle: handle, from: .phone)
        } else {
            att([0x08] + le(start) + le(end) + [0x03, 0x28], controller: controller, handle: handle, from: .host)
            var response: [UInt8] = [0x09, 21]
            for (value, uuid, properties) in [(rc, Self.rcUUID, UInt8(0x18)), (eu, Self.euUUID, 0x18), (ea, Self.eaUUID, 0x0A)] {
                response += le(value - 1) + [properties] + le(value) + uuid
            }
            att(response, controller: controller, handle: handle, from: .phone)
        }
    }

    /// Exchange MTU: the host's Request with `client`, the phone's Response with `server`.
    public mutating func exchangeMTU(controller: UInt16 = 0, handle: UInt16, client: UInt16, server: UInt16) {
        att([0x02] + le(client), controller: controller, handle: handle, from: .host)
        att([0x03] + le(server), controller: controller, handle: handle, from: .phone)
    }

    /// A Read Request from the host.
    public mutating func read(controller: UInt16 = 0, handle: UInt16, attribute: UInt16) {
        att([0x0A] + le(attribute), controller: controller, handle: handle, from: .host)
    }

    /// A Read Response from the phone.
    public mutating func readResponse(controller: UInt16 = 0, handle: UInt16, _ value: [UInt8]) {
        att([0x0B] + value, controller: controller, handle: handle, from: .phone)
    }

    /// A Read Blob Request from the host.
    public mutating func readBlob(controller: UInt16 = 0, handle: UInt16, attribute: UInt16, offset: UInt16) {
        att([0x0C] + le(attribute) + le(offset), controller: controller, handle: handle, from: .host)
    }

    /// A Read Blob Response from the phone.
    public mutating func readBlobResponse(controller: UInt16 = 0, handle: UInt16, _ value: [UInt8]) {
        att([0x0D] + value, controller: controller, handle: handle, from: .phone)
    }

    /// A long value read as BlueZ reads it: a Read Request, then Read Blob Requests at the
    /// offsets reached while a response comes full (`mtu` - 1 bytes).
    public mutating func readLong(controller: UInt16 = 0, handle: UInt16, attribute: UInt16, _ value: [UInt8], mtu: Int) {
        let part = mtu - 1
        read(controller: controller, handle: handle, attribute: attribute)
        readResponse(controller: controller, handle: handle, Array(value.prefix(part)))
        var offset = part
        while offset <= value.count, value.count >= part {
            readBlob(controller: controller, handle: handle, attribute: attribute, offset: UInt16(offset))
            let chunk = Array(value[offset..<min(value.count, offset + part)])
            readBlobResponse(controller: controller, handle: handle, chunk)
            if chunk.count < part { break }
            offset += part
        }
    }
}

/// Little-endian bytes of a 16-bit value.
public func le(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }
