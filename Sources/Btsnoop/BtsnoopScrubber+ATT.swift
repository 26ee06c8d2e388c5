import BluetoothUUIDs

/// ATT on channel 0x0004: what each PDU keeps and what is replaced, by the kind of attribute
/// (learnt from the capture's discovery, or `defaultHandles`) and how its value was reached.
extension BtsnoopScrubber {
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
    mutating func att(_ pdu: [UInt8], connection: ConnectionKey, direction: HCIDirection) -> [(Range<Int>, UInt8)] {
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
