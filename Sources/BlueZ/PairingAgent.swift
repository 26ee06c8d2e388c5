public import DBus

/// A request bluetoothd makes of an `org.bluez.Agent1` (BlueZ doc/agent-api.txt).
public enum AgentRequest: Sendable, Hashable {
    /// bluetoothd unregistered the agent (or is going away).
    case release
    case requestPinCode(device: ObjectPath)
    case displayPinCode(device: ObjectPath, pinCode: String)
    case requestPasskey(device: ObjectPath)
    case displayPasskey(device: ObjectPath, passkey: UInt32, entered: UInt16)
    /// Numeric comparison: the same six digits must show on the phone.
    case requestConfirmation(device: ObjectPath, passkey: UInt32)
    /// Just Works pairing asks whether to pair at all.
    case requestAuthorization(device: ObjectPath)
    case authorizeService(device: ObjectPath, uuid: String)
    /// The request in progress was cancelled (by the phone, or a timeout in bluetoothd).
    case cancel

    /// The device the request is about, if any.
    public var device: ObjectPath? {
        switch self {
        case .requestPinCode(let d), .displayPinCode(let d, _), .requestPasskey(let d), .displayPasskey(let d, _, _),
             .requestConfirmation(let d, _), .requestAuthorization(let d), .authorizeService(let d, _):
            d
        case .release, .cancel:
            nil
        }
    }
}

/// What an agent answers; `accepted` for the methods that return nothing.
public enum AgentAnswer: Sendable, Hashable {
    case accepted
    case pinCode(String)
    case passkey(UInt32)
}

/// An `org.bluez.Agent1` to export: every call is checked to come from bluetoothd, then handed
/// to `handler`. Throw `AgentError.rejected` or `.canceled` to say no.
public struct PairingAgent: Sendable {
    /// The interface name.
    public static let interface: InterfaceName = "org.bluez.Agent1"

    public let owner: BlueZOwner
    public let handler: @Sendable (AgentRequest) async throws -> AgentAnswer

    public init(owner: BlueZOwner, handler: @escaping @Sendable (AgentRequest) async throws -> AgentAnswer) {
        self.owner = owner
        self.handler = handler
    }

    /// The object to export.
    public var object: ExportedObject {
        let owner = self.owner, handler = self.handler
        func method(
            _ name: MemberName, input: Signature = .empty, output: Signature = .empty, names: [String] = [],
            _ make: @escaping @Sendable ([DBusValue]) throws -> AgentRequest
        ) -> ExportedMethod {
            ExportedMethod(name, input: input, output: output, inputNames: names) { call in
                try await owner.requireBlueZ(call)
                let answer = try await handler(try make(call.arguments))
                switch (answer, output.rawValue) {
                case (.accepted, ""): return []
                case (.pinCode(let code), "s"): return [.string(code)]
                case (.passkey(let key), "u"): return [.uint32(key)]
                default: throw AgentError.rejected
                }
            }
        }
        @Sendable func path(_ a: [DBusValue], _ i: Int = 0) throws -> ObjectPath {
            guard i < a.count, let p = a[i].objectPathValue else { throw DBusError.invalidArgument("expected a device path") }
            return p
        }
        return ExportedObject(ExportedInterface(Self.interface, methods: [
            method("Release") { _ in .release },
            method("RequestPinCode", input: "o", output: "s", names: ["device"]) { .requestPinCode(device: try path($0)) },
            method("DisplayPinCode", input: "os", names: ["device", "pincode"]) {
                .displayPinCode(device: try path($0), pinCode: $0[1].stringValue ?? "")
            },
            method("RequestPasskey", input: "o", output: "u", names: ["device"]) { .requestPasskey(device: try path($0)) },
            method("DisplayPasskey", input: "ouq", names: ["device", "passkey", "entered"]) {
                .displayPasskey(device: try path($0), passkey: $0[1].uint32Value ?? 0, entered: $0[2].uint16Value ?? 0)
            },
            method("RequestConfirmation", input: "ou", names: ["device", "passkey"]) {
                .requestConfirmation(device: try path($0), passkey: $0[1].uint32Value ?? 0)
            },
            method("RequestAuthorization", input: "o", names: ["device"]) { .requestAuthorization(device: try path($0)) },
            method("AuthorizeService", input: "os", names: ["device", "uuid"]) {
                .authorizeService(device: try path($0), uuid: $0[1].stringValue ?? "")
            },
            method("Cancel") { _ in .cancel },
        ]))
    }
}

/// The errors an agent answers with (doc/agent-api.txt).
public enum AgentError {
    public static let rejected = DBusError.remote(name: "org.bluez.Error.Rejected", message: "Rejected")
    public static let canceled = DBusError.remote(name: "org.bluez.Error.Canceled", message: "Canceled")
}

/// `org.bluez.AgentManager1` calls.
public struct AgentManager: Sendable {
    public let connection: DBusConnection
    public init(connection: DBusConnection) { self.connection = connection }

    private func call(_ member: MemberName, _ arguments: [DBusValue]) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: "/org/bluez", interface: InterfaceName(BlueZ.agentManagerInterface),
            member: member, arguments: arguments, expecting: .empty, timeout: .seconds(10))
    }

    /// `RegisterAgent(path, capability)`; capability e.g. "DisplayYesNo".
    public func register(_ path: ObjectPath, capability: String) async throws {
        try await call("RegisterAgent", [.objectPath(path), .string(capability)])
    }

    /// `RequestDefaultAgent(path)`: incoming pairing requests go to this agent.
    public func requestDefault(_ path: ObjectPath) async throws {
        try await call("RequestDefaultAgent", [.objectPath(path)])
    }

    /// `UnregisterAgent(path)`.
    public func unregister(_ path: ObjectPath) async throws {
        try await call("UnregisterAgent", [.objectPath(path)])
    }
}

/// Six digits, as phones show a passkey.
public func formatPasskey(_ passkey: UInt32) -> String {
    let digits = String(passkey % 1_000_000)
    return String(repeating: "0", count: max(0, 6 - digits.count)) + digits
}
