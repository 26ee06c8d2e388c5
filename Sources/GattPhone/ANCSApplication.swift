import ANCS
import BluetoothUUIDs
import BlueZ
import DBus

/// The three ANCS characteristics a phone serves.
enum ANCSCharacteristicRole: String, CaseIterable, Sendable {
    case notificationSource = "notification_source"
    case controlPoint = "control_point"
    case dataSource = "data_source"

    var uuid: String {
        switch self {
        case .notificationSource: ANCSUUID.notificationSource.description.lowercased()
        case .controlPoint: ANCSUUID.controlPoint.description.lowercased()
        case .dataSource: ANCSUUID.dataSource.description.lowercased()
        }
    }

    /// BlueZ flags: as on an iPhone, nothing is served over a link that is not encrypted, so a
    /// first subscription makes BlueZ pair or re-encrypt from the bond.
    var flags: [String] {
        switch self {
        case .notificationSource, .dataSource: ["notify", "encrypt-notify"]
        case .controlPoint: ["write", "encrypt-write"]
        }
    }

    var path: ObjectPath {
        switch self {
        case .notificationSource: "/org/ancsd/phone/ancs/ns"
        case .controlPoint: "/org/ancsd/phone/ancs/cp"
        case .dataSource: "/org/ancsd/phone/ancs/ds"
        }
    }
}

/// What bluetoothd asks of the application; each handler runs on the connection's loop.
struct ANCSApplicationHandlers: Sendable {
    /// A Control Point write: the value and the options bluetoothd passed (`mtu`, `device`, ...).
    var write: @Sendable (_ value: [UInt8], _ options: [String: DBusValue]) async throws -> Void
    /// A client enabled (true) or disabled (false) notifications of a characteristic.
    var notify: @Sendable (_ role: ANCSCharacteristicRole, _ enabled: Bool) -> Void
}

/// The iPhone's ANCS service as a BlueZ GATT application (`org.bluez.GattManager1`,
/// doc/gatt-api.txt): an object manager at `root`, the primary service and its three
/// characteristics. Notifications leave as `PropertiesChanged` of `Value`.
enum ANCSApplication {
    static let root: ObjectPath = "/org/ancsd/phone"
    static let service: ObjectPath = "/org/ancsd/phone/ancs"
    static let serviceInterface: InterfaceName = "org.bluez.GattService1"
    static let characteristicInterface: InterfaceName = "org.bluez.GattCharacteristic1"

    /// Exports the application on `connection`; register it with `GattManager1.RegisterApplication(root, {})`.
    static func export(on connection: isolated DBusConnection, owner: BlueZOwner, handlers: ANCSApplicationHandlers) throws {
        connection.exportObjectManager(at: root)
        try connection.export(
            ExportedObject(ExportedInterface(serviceInterface, properties: [
                ExportedProperty("UUID", value: .string(ANCSUUID.service.description.lowercased())),
                ExportedProperty("Primary", value: .bool(true)),
            ])),
            at: service)
        for role in ANCSCharacteristicRole.allCases {
            try connection.export(characteristic(role, owner: owner, handlers: handlers), at: role.path)
        }
    }

    /// Only bluetoothd may drive the phone: anyone else on the bus is refused.
    static func requireBlueZ(_ call: MethodCall, owner: BlueZOwner) throws {
        guard let current = owner.current, current == call.sender else {
            throw DBusError.remote(name: DBusError.Names.accessDenied, message: "only bluetoothd may call \(call.member)")
        }
    }

    /// StartNotify and StopNotify of a characteristic that notifies, from bluetoothd only:
    /// `notify` is told which (an application's notifications are on while bluetoothd says so).
    static func notifyMethods(owner: BlueZOwner, _ notify: @escaping @Sendable (Bool) -> Void) -> [ExportedMethod] {
        [true, false].map { on in
            .immediate(on ? "StartNotify" : "StopNotify") { call in
                try requireBlueZ(call, owner: owner)
                notify(on)
                return []
            }
        }
    }

    private static func characteristic(
        _ role: ANCSCharacteristicRole, owner: BlueZOwner, handlers: ANCSApplicationHandlers
    ) -> ExportedObject {
        @Sendable func fromBlueZ(_ call: MethodCall) throws { try requireBlueZ(call, owner: owner) }
        var methods: [ExportedMethod] = [
            .immediate("ReadValue", input: "a{sv}", output: "ay") { call in
                try fromBlueZ(call)
                throw DBusError.remote(name: "org.bluez.Error.NotPermitted", message: "Read Not Permitted")
            },
        ]
        if role == .controlPoint {
            // Answered in a task of its own: a silently dropped phone holds the reply.
            methods.append(ExportedMethod("WriteValue", input: "aya{sv}") { call in
                try fromBlueZ(call)
                guard let value = call.arguments.first?.bytes else {
                    throw DBusError.remote(name: "org.bluez.Error.InvalidArguments", message: "Invalid Arguments")
                }
                try await handlers.write(value, call.arguments.last?.stringKeyedDictionary ?? [:])
                return []
            })
        } else {
            methods += notifyMethods(owner: owner) { handlers.notify(role, $0) }
        }
        var properties = [
            ExportedProperty("UUID", value: .string(role.uuid)),
            ExportedProperty("Service", value: .objectPath(service)),
            ExportedProperty("Flags", value: .stringArray(role.flags)),
        ]
        if role != .controlPoint { properties.append(ExportedProperty("Value", value: .byteArray([]))) }
        return ExportedObject(ExportedInterface(characteristicInterface, methods: methods, properties: properties))
    }
}
