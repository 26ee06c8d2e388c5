public import ANCS
import BluetoothUUIDs
public import DBus

/// The D-Bus errors bluetoothd 5.66 replies with, with its exact messages (src/error.c).
public enum BlueZError {
    public static func failed(_ message: String) -> DBusError { .remote(name: "org.bluez.Error.Failed", message: message) }
    public static func notPermitted(_ message: String) -> DBusError {
        .remote(name: "org.bluez.Error.NotPermitted", message: message)
    }
    public static let notConnected = failed("Not connected")
    public static let inProgress = DBusError.remote(name: "org.bluez.Error.InProgress", message: "In Progress")
    public static let notSupported = DBusError.remote(name: "org.bluez.Error.NotSupported", message: "Operation is not supported")
    public static let notAuthorized = DBusError.remote(name: "org.bluez.Error.NotAuthorized", message: "Operation Not Authorized")
    public static func invalidArguments(_ message: String = "Invalid arguments in method call") -> DBusError {
        .remote(name: "org.bluez.Error.InvalidArguments", message: message)
    }

    /// How bluetoothd turns the ATT error of a failed GATT operation into a D-Bus error
    /// (`create_gatt_dbus_error` in src/gatt-client.c).
    public static func forATT(_ code: ATTErrorCode) -> DBusError {
        switch code.rawValue {
        case 0x00: failed("Operation failed")
        case 0x02: notPermitted("Read not permitted")
        case 0x03: notPermitted("Write not permitted")
        case 0x05, 0x0F, 0x0C: notPermitted("Not paired")
        case 0x07: invalidArguments("Invalid offset")
        case 0x0D: invalidArguments("Invalid Length")
        case 0x08: notAuthorized
        case 0x06: notSupported
        default: failed("Operation failed with ATT error: " + hex(code.rawValue))
        }
    }

    static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return "0x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0x0F)])
    }
}

/// Names and paths of the simulated BlueZ tree.
enum BlueZ {
    static let busName: BusName = "org.bluez"
    static let adapter1: InterfaceName = "org.bluez.Adapter1"
    static let device1: InterfaceName = "org.bluez.Device1"
    static let gattService1: InterfaceName = "org.bluez.GattService1"
    static let gattCharacteristic1: InterfaceName = "org.bluez.GattCharacteristic1"
    static let agentManager1: InterfaceName = "org.bluez.AgentManager1"
    static let leAdvertisingManager1: InterfaceName = "org.bluez.LEAdvertisingManager1"
    static let gattManager1: InterfaceName = "org.bluez.GattManager1"

    static let root: ObjectPath = "/org/bluez"
    static let adapterPath: ObjectPath = "/org/bluez/hci0"
}

/// The characteristics a simulated phone serves: ANCS's three and the Apple Media Service's
/// three, with the handles that make up their BlueZ paths.
public enum PhoneCharacteristic: String, CaseIterable, Sendable {
    case notificationSource = "char0011"
    case controlPoint = "char0013"
    case dataSource = "char0016"
    case remoteCommand = "char001a"
    case entityUpdate = "char001d"
    case entityAttribute = "char0020"

    /// ANCS's characteristics.
    static let ancs: [PhoneCharacteristic] = [.notificationSource, .controlPoint, .dataSource]
    /// AMS's characteristics.
    static let ams: [PhoneCharacteristic] = [.remoteCommand, .entityUpdate, .entityAttribute]
    /// The characteristics that notify: a StartNotify session or an acquired socket each.
    static let notifying: [PhoneCharacteristic] = [.notificationSource, .dataSource, .remoteCommand, .entityUpdate]

    /// The UUID as BlueZ shows it (lower case).
    var uuid: String {
        switch self {
        case .notificationSource: ANCSUUID.notificationSource.description
        case .controlPoint: ANCSUUID.controlPoint.description
        case .dataSource: ANCSUUID.dataSource.description
        case .remoteCommand: AMSUUID.remoteCommand
        case .entityUpdate: AMSUUID.entityUpdate
        case .entityAttribute: AMSUUID.entityAttribute
        }
    }

    /// BlueZ's Flags for the characteristic's properties, in bluetoothd's order.
    var flags: [String] {
        switch self {
        case .notificationSource, .dataSource: ["notify"]
        case .controlPoint: ["write"]
        case .remoteCommand, .entityUpdate: ["write", "notify"]
        case .entityAttribute: ["read", "write"]
        }
    }

    var notifies: Bool { flags.contains("notify") }

    /// A characteristic of the Apple Media Service.
    var isAMS: Bool { Self.ams.contains(self) }

    /// Its name in the settings' `ams_characteristics` and in logs.
    var name: String {
        switch self {
        case .notificationSource: "notification_source"
        case .controlPoint: "control_point"
        case .dataSource: "data_source"
        case .remoteCommand: "remote_command"
        case .entityUpdate: "entity_update"
        case .entityAttribute: "entity_attribute"
        }
    }
}

/// The Apple Media Service's UUIDs, as BlueZ shows them, from Apple's specification. Written
/// here rather than imported: the simulator is an oracle independent of ancsd's AMS client.
enum AMSUUID {
    static let service = "89d3502b-0f36-433a-8ef4-c502ad55f8dc"
    static let remoteCommand = "9b3c81d8-57b1-4a8a-b8df-0e56f7ca51c2"
    static let entityUpdate = "2f7cabce-808d-411f-9a0c-bb92ba96c102"
    static let entityAttribute = "c6b2f38c-23ab-46d8-a6ab-a3a870bbd5d7"
}
