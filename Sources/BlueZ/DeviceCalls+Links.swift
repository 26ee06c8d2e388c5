public import DBus

extension DeviceCalls {
    /// `CancelPairing()`: ends a pairing that *this* side started with `Pair()`. bluetoothd
    /// (src/device.c, `cancel_pairing`) cancels only its own bonding request: for a pairing the
    /// peer started there is none, and it answers `org.bluez.Error.DoesNotExist` — then only
    /// `disconnect` ends it.
    public func cancelPairing(_ device: ObjectPath) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: device, interface: InterfaceName(BlueZ.deviceInterface),
            member: "CancelPairing", arguments: [], expecting: .empty, timeout: .seconds(10))
    }

    /// `Disconnect()`: drops the link to the device (every profile, and the LE link with it).
    public func disconnect(_ device: ObjectPath) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: device, interface: InterfaceName(BlueZ.deviceInterface),
            member: "Disconnect", arguments: [], expecting: .empty, timeout: .seconds(10))
    }
}
