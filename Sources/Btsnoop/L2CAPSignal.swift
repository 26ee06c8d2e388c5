/// A command of the LE signaling channel (L2CAP CID 0x0005) that opens, resizes or closes a
/// credit-based channel (Bluetooth Core 5.2, Vol 3 Part A §4). One command per C-frame: code,
/// identifier, 2-byte length, data. Commands that change no channel are `other`.
enum L2CAPSignal: Hashable, Sendable {
    /// LE Credit Based Connection Request (0x14, one channel) or Credit Based Connection Request
    /// (0x17, up to five): the initiator's receive MTU and the CIDs it receives on.
    case connectionRequest(code: UInt8, identifier: UInt8, spsm: UInt16, mtu: UInt16, sourceCIDs: [UInt16])
    /// LE Credit Based Connection Response (0x15) or Credit Based Connection Response (0x18):
    /// the responder's receive MTU and the CIDs it receives on, 0x0000 for a refused channel
    /// (a refused 0x15 gives 0x0000 whatever its CID field says).
    case connectionResponse(code: UInt8, identifier: UInt8, mtu: UInt16, destinationCIDs: [UInt16])
    /// Credit Based Reconfigure Request (0x19): the sender's new receive MTU on its CIDs.
    case reconfigureRequest(mtu: UInt16, cids: [UInt16])
    /// Disconnection Request (0x06) or Response (0x07): DCID is the endpoint of the request's
    /// receiver, SCID the request's sender's (the response repeats both).
    case disconnection(response: Bool, destinationCID: UInt16, sourceCID: UInt16)
    /// Command Reject (0x01): the request with this identifier failed.
    case commandReject(identifier: UInt8)
    /// Any other command (Flow Control Credit 0x16, Connection Parameter Update, …).
    case other

    /// Parses one C-frame; throws what is wrong with a malformed one.
    init(frame: [UInt8]) throws(L2CAPSignalError) {
        guard frame.count >= 4 else { throw L2CAPSignalError("a signaling frame of \(frame.count) bytes, shorter than the 4-byte command header") }
        let code = frame[0], identifier = frame[1]
        let length = Int(frame[2]) | Int(frame[3]) << 8
        guard length == frame.count - 4 else {
            throw L2CAPSignalError("signaling command \(hex2(code)) says \(length) bytes of data, \(frame.count - 4) follow")
        }
        let data = Array(frame[4...])
        func u16(_ index: Int) -> UInt16 { UInt16(data[index]) | UInt16(data[index + 1]) << 8 }
        func list(from start: Int) -> [UInt16] { stride(from: start, to: data.count, by: 2).map(u16) }
        func expect(_ name: String, _ valid: Bool, _ rule: String) throws(L2CAPSignalError) {
            guard valid else { throw L2CAPSignalError("\(name) (\(hex2(code))) with \(data.count) bytes of data, \(rule)") }
        }
        switch code {
        case 0x14:
            try expect("an LE Credit Based Connection Request", data.count == 10, "not 10")
            self = .connectionRequest(code: code, identifier: identifier, spsm: u16(0), mtu: u16(4), sourceCIDs: [u16(2)])
        case 0x15:
            try expect("an LE Credit Based Connection Response", data.count == 10, "not 10")
            self = .connectionResponse(code: code, identifier: identifier, mtu: u16(2), destinationCIDs: [u16(8) == 0 ? u16(0) : 0])
        case 0x17:
            try expect("a Credit Based Connection Request", data.count >= 10 && data.count <= 18 && data.count % 2 == 0,
                       "not 8 and 2 for each of 1 to 5 channels")
            self = .connectionRequest(code: code, identifier: identifier, spsm: u16(0), mtu: u16(2), sourceCIDs: list(from: 8))
        case 0x18:
            try expect("a Credit Based Connection Response", data.count >= 10 && data.count <= 18 && data.count % 2 == 0,
                       "not 8 and 2 for each of 1 to 5 channels")
            self = .connectionResponse(code: code, identifier: identifier, mtu: u16(0), destinationCIDs: list(from: 8))
        case 0x19:
            try expect("a Credit Based Reconfigure Request", data.count >= 6 && data.count <= 14 && data.count % 2 == 0,
                       "not 4 and 2 for each of 1 to 5 channels")
            self = .reconfigureRequest(mtu: u16(0), cids: list(from: 4))
        case 0x06, 0x07:
            try expect(code == 0x06 ? "a Disconnection Request" : "a Disconnection Response", data.count == 4, "not 4")
            self = .disconnection(response: code == 0x07, destinationCID: u16(0), sourceCID: u16(2))
        case 0x01:
            try expect("a Command Reject", data.count >= 2, "fewer than 2")
            self = .commandReject(identifier: identifier)
        default:
            self = .other
        }
    }
}

/// What is wrong with a signaling command.
struct L2CAPSignalError: Error, Hashable, Sendable {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}
