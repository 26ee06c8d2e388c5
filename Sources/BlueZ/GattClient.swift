public import DBus

/// Calls on `org.bluez.GattCharacteristic1` objects.
///
/// The calls run in the caller's isolation (`isolation`, which `#isolation` fills in: Swift
/// 6.2's `nonisolated(nonsending)`, in a form Swift 6.0 accepts too): on the caller's executor
/// (an actor's, or the task's preferred one) instead of hopping to Swift's global executor and
/// back around the one hop that matters, to the bus connection.
public struct GattClient: Sendable {
    public let connection: DBusConnection
    /// How long one GATT call may take; BlueZ's own ATT timeout is 30 s.
    public var timeout: Duration

    public init(connection: DBusConnection, timeout: Duration = .seconds(10)) {
        self.connection = connection
        self.timeout = timeout
    }

    /// `AcquireNotify`: a SOCK_SEQPACKET descriptor that carries one datagram per notification, and the MTU.
    public func acquireNotify(
        _ characteristic: ObjectPath, isolation: isolated (any Actor)? = #isolation
    ) async throws -> (fd: UnixFD, mtu: UInt16) {
        let reply = try await connection.call(
            destination: BlueZ.service, path: characteristic, interface: Self.interface,
            member: "AcquireNotify", arguments: [.variantDictionary([:])], expecting: "hq", timeout: timeout)
        guard let fd = reply[0].unixFDValue, let mtu = reply[1].uint16Value else {
            throw DBusError.unexpectedSignature(expected: "hq", actual: reply.map(\.signature.description).joined())
        }
        return (fd, mtu)
    }

    /// `StartNotify`: notifications then arrive as PropertiesChanged of `Value`.
    public func startNotify(_ characteristic: ObjectPath, isolation: isolated (any Actor)? = #isolation) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: characteristic, interface: Self.interface,
            member: "StartNotify", expecting: .empty, timeout: timeout)
    }

    /// `StopNotify`.
    public func stopNotify(_ characteristic: ObjectPath, isolation: isolated (any Actor)? = #isolation) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: characteristic, interface: Self.interface,
            member: "StopNotify", expecting: .empty, timeout: timeout)
    }

    /// `org.bluez.GattCharacteristic1`, validated once rather than for every call.
    private static let interface = InterfaceName(validating: BlueZ.gattCharacteristicInterface)!
    /// `WriteValue`, validated once (a literal is validated where it is used).
    private static let writeValue: MemberName = "WriteValue"

    /// `WriteValue` as a write request (a write with response, as the Control Point needs).
    public func writeRequest(
        _ characteristic: ObjectPath, _ value: [UInt8], isolation: isolated (any Actor)? = #isolation
    ) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: characteristic, interface: Self.interface,
            member: Self.writeValue, arguments: Self.writeRequestArguments(value), expecting: .empty, timeout: timeout)
    }

    /// `writeRequest` without a task, for code on the connection's loop: the write is sent
    /// before this returns there, and `completion` gets its result on the loop (an error
    /// reply, or `DBusError.unexpectedSignature` for a reply that is not empty, as a failure).
    /// - Throws: `DBusError.invalidArgument` when the call cannot be made (no completion then).
    @discardableResult
    public func startWriteRequest(
        _ characteristic: ObjectPath, _ value: [UInt8], completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) throws(DBusError) -> DBusConnection.PendingCall {
        try connection.startCall(
            destination: BlueZ.service, path: characteristic,
            interface: Self.interface, member: Self.writeValue,
            arguments: Self.writeRequestArguments(value), timeout: timeout
        ) { reply in
            completion(reply.flatMap { message in
                message.signature == .empty
                    ? .success(()) : .failure(DBusError.unexpectedSignature(expected: "", actual: message.signature.rawValue))
            })
        }
    }

    /// `ReadValue` without a task, for code on the connection's loop: `completion` gets the
    /// whole value on the loop (BlueZ reads a long value with Read Blob requests), an error
    /// reply, or `DBusError.unexpectedSignature` for a reply that is not `ay`.
    /// - Throws: `DBusError.invalidArgument` when the call cannot be made (no completion then).
    @discardableResult
    public func startReadValue(
        _ characteristic: ObjectPath, completion: @escaping @Sendable (Result<[UInt8], any Error>) -> Void
    ) throws(DBusError) -> DBusConnection.PendingCall {
        try connection.startCall(
            destination: BlueZ.service, path: characteristic,
            interface: InterfaceName(BlueZ.gattCharacteristicInterface), member: "ReadValue",
            arguments: [.variantDictionary([:])], timeout: timeout
        ) { reply in
            completion(reply.flatMap { message in
                guard message.signature.rawValue == "ay", let bytes = message.arguments.first?.bytes else {
                    return .failure(DBusError.unexpectedSignature(expected: "ay", actual: message.signature.rawValue))
                }
                return .success(bytes)
            })
        }
    }

    /// `AcquireNotify` without a task, for code on the connection's loop: `completion` gets the
    /// socket and the MTU, an error reply, or `DBusError.unexpectedSignature` for a reply that is not `hq`.
    /// - Throws: `DBusError.invalidArgument` when the call cannot be made (no completion then).
    @discardableResult
    public func startAcquireNotify(
        _ characteristic: ObjectPath, completion: @escaping @Sendable (Result<(fd: UnixFD, mtu: UInt16), any Error>) -> Void
    ) throws(DBusError) -> DBusConnection.PendingCall {
        try connection.startCall(
            destination: BlueZ.service, path: characteristic, interface: Self.interface, member: "AcquireNotify",
            arguments: [.variantDictionary([:])], timeout: timeout
        ) { reply in
            completion(reply.flatMap { message in
                let arguments = message.arguments
                guard message.signature.rawValue == "hq", let fd = arguments.first?.unixFDValue, let mtu = arguments.last?.uint16Value else {
                    return .failure(DBusError.unexpectedSignature(expected: "hq", actual: message.signature.rawValue))
                }
                return .success((fd, mtu))
            })
        }
    }

    /// `StartNotify` (`start`) or `StopNotify` without a task, for code on the connection's
    /// loop: `completion` gets its result there.
    /// - Throws: `DBusError.invalidArgument` when the call cannot be made (no completion then).
    @discardableResult
    public func startNotifyCall(
        _ characteristic: ObjectPath, start: Bool, completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) throws(DBusError) -> DBusConnection.PendingCall {
        try connection.startCall(
            destination: BlueZ.service, path: characteristic, interface: Self.interface, member: start ? "StartNotify" : "StopNotify",
            timeout: timeout
        ) { reply in completion(reply.map { _ in () }) }
    }

    /// The characteristic's `Notifying` property without a task, for code on the connection's
    /// loop: `completion` gets its value there (nil for a reply that holds no boolean).
    /// - Throws: `DBusError.invalidArgument` when the call cannot be made (no completion then).
    @discardableResult
    public func startReadNotifying(
        _ characteristic: ObjectPath, completion: @escaping @Sendable (Result<Bool?, any Error>) -> Void
    ) throws(DBusError) -> DBusConnection.PendingCall {
        try connection.startCall(
            destination: BlueZ.service, path: characteristic, interface: "org.freedesktop.DBus.Properties", member: "Get",
            arguments: [.string(BlueZ.gattCharacteristicInterface), .string("Notifying")], timeout: timeout
        ) { reply in
            completion(reply.map { message in
                let value = message.arguments.first
                return (value?.variantValue ?? value)?.boolValue
            })
        }
    }

    private static func writeRequestArguments(_ value: [UInt8]) -> [DBusValue] {
        [.byteArray(value), writeRequestOptions]
    }

    /// No options: BlueZ (src/gatt-client.c, `characteristic_write_value`) makes a write request
    /// when no `type` is given and the characteristic has the write property, as the Control
    /// Point has, so this asks what `{"type": <"request">}` asks. The entry cost 6,000
    /// instructions of libdbus's marshalling per write (callgrind, instructions per burst
    /// notification: 150,374 with it, 144,414 without).
    private static let writeRequestOptions = DBusValue.variantDictionary([:])
}

/// The ATT error code inside a BlueZ error, if any.
///
/// BlueZ reports ATT errors of a write as `org.bluez.Error.Failed` "Operation failed with ATT
/// error: 0xa2", ATT 0x03 as `org.bluez.Error.NotPermitted` "Write not permitted", and the
/// authentication and encryption errors as `NotPermitted` "Not paired" (or similar).
public func attErrorCode(in error: DBusError) -> UInt8? {
    guard case .remote(let name, let message) = error else { return nil }
    if let range = message.firstRange(of: "ATT error: 0x") {
        let digits = message[range.upperBound...].prefix { $0.isHexDigit }
        if let code = UInt8(digits, radix: 16) { return code }
    }
    if name == "org.bluez.Error.NotPermitted" {
        let text = message.lowercased()
        if text.contains("write not permitted") { return 0x03 }
        if text.contains("not paired") || text.contains("authentication") { return 0x05 }
        if text.contains("encrypt") { return 0x0F }
    }
    return nil
}
