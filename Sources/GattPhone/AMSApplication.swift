import BlueZ
import DBus
import PhoneSimulator

/// The three characteristics of the Apple Media Service an iPhone serves (Apple's AMS
/// specification). The UUIDs are written here from the specification, not taken from ancsd's
/// AMS module, so that the phone stays an independent oracle for it.
enum AMSCharacteristicRole: String, CaseIterable, Sendable {
    case remoteCommand = "remote_command"
    case entityUpdate = "entity_update"
    case entityAttribute = "entity_attribute"

    var uuid: String {
        switch self {
        case .remoteCommand: "9b3c81d8-57b1-4a8a-b8df-0e56f7ca51c2"
        case .entityUpdate: "2f7cabce-808d-411f-9a0c-bb92ba96c102"
        case .entityAttribute: "c6b2f38c-23ab-46d8-a6ab-a3a870bbd5d7"
        }
    }

    /// BlueZ flags: Remote Command is written and notifies, Entity Update is written with a
    /// response and notifies, Entity Attribute is written and read; as ANCS's, only over an
    /// encrypted link.
    var flags: [String] {
        switch self {
        case .remoteCommand, .entityUpdate: ["write", "encrypt-write", "notify", "encrypt-notify"]
        case .entityAttribute: ["read", "encrypt-read", "write", "encrypt-write"]
        }
    }

    var notifies: Bool { self != .entityAttribute }

    var path: ObjectPath {
        switch self {
        case .remoteCommand: "/org/ancsd/phone/ams/rc"
        case .entityUpdate: "/org/ancsd/phone/ams/eu"
        case .entityAttribute: "/org/ancsd/phone/ams/ea"
        }
    }

    /// The scenario's name for it (`ams_characteristics`, docs/simulator.md).
    var scenarioCharacteristic: PhoneCharacteristic {
        switch self {
        case .remoteCommand: .remoteCommand
        case .entityUpdate: .entityUpdate
        case .entityAttribute: .entityAttribute
        }
    }
}

/// What bluetoothd asks of the AMS characteristics; each handler runs on the connection's loop.
struct AMSApplicationHandlers: Sendable {
    /// A write: the characteristic, the value and the options bluetoothd passed (`mtu`, `device`, ...).
    var write: @Sendable (_ role: AMSCharacteristicRole, _ value: [UInt8], _ options: [String: DBusValue]) throws -> Void
    /// A read of the Entity Attribute from `offset` (bluetoothd's long reads: one call per Read Blob).
    var read: @Sendable (_ offset: Int, _ options: [String: DBusValue]) throws -> [UInt8]
    /// A client enabled (true) or disabled (false) notifications of a characteristic.
    var notify: @Sendable (_ role: AMSCharacteristicRole, _ enabled: Bool) -> Void
}

/// The iPhone's Apple Media Service in the same GATT application as its ANCS service
/// (`ANCSApplication.root`): the primary service and the characteristics the scenario offers
/// (all three unless `ams_characteristics` says otherwise). Notifications leave as
/// `PropertiesChanged` of `Value`, through the phone's one outbox.
enum AMSApplication {
    static let service: ObjectPath = "/org/ancsd/phone/ams"
    static let uuid = "89d3502b-0f36-433a-8ef4-c502ad55f8dc"

    static func export(
        on connection: isolated DBusConnection, owner: BlueZOwner, roles: [AMSCharacteristicRole], handlers: AMSApplicationHandlers
    ) throws {
        try connection.export(
            ExportedObject(ExportedInterface(ANCSApplication.serviceInterface, properties: [
                ExportedProperty("UUID", value: .string(uuid)),
                ExportedProperty("Primary", value: .bool(true)),
            ])),
            at: service)
        for role in roles { try connection.export(characteristic(role, owner: owner, handlers: handlers), at: role.path) }
    }

    private static func characteristic(_ role: AMSCharacteristicRole, owner: BlueZOwner, handlers: AMSApplicationHandlers) -> ExportedObject {
        @Sendable func fromBlueZ(_ call: MethodCall) throws { try ANCSApplication.requireBlueZ(call, owner: owner) }
        @Sendable func options(_ call: MethodCall) -> [String: DBusValue] { call.arguments.last?.stringKeyedDictionary ?? [:] }
        var methods: [ExportedMethod] = [
            .immediate("ReadValue", input: "a{sv}", output: "ay") { call in
                try fromBlueZ(call)
                guard role == .entityAttribute else {
                    throw DBusError.remote(name: "org.bluez.Error.NotPermitted", message: "Read Not Permitted")
                }
                let options = options(call)
                // bluetoothd passes `offset` (uint16) for each Read Blob of a long read.
                let offset = options["offset"]?.unwrapped.uint16Value.map(Int.init) ?? 0
                return [.byteArray(try handlers.read(offset, options))]
            },
            .immediate("WriteValue", input: "aya{sv}") { call in
                try fromBlueZ(call)
                guard let value = call.arguments.first?.bytes else {
                    throw DBusError.remote(name: "org.bluez.Error.InvalidArguments", message: "Invalid Arguments")
                }
                try handlers.write(role, value, options(call))
                return []
            },
        ]
        if role.notifies { methods += ANCSApplication.notifyMethods(owner: owner) { handlers.notify(role, $0) } }
        var properties = [
            ExportedProperty("UUID", value: .string(role.uuid)),
            ExportedProperty("Service", value: .objectPath(service)),
            ExportedProperty("Flags", value: .stringArray(role.flags)),
        ]
        if role.notifies { properties.append(ExportedProperty("Value", value: .byteArray([]))) }
        return ExportedObject(ExportedInterface(ANCSApplication.characteristicInterface, methods: methods, properties: properties))
    }
}
