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

/// The three ANCS characteristics, with the handles that make up their BlueZ paths.
public enum ANCSCharacteristic: String, CaseIterable, Sendable {
    case notificationSource = "char0011"
    case controlPoint = "char0013"
    case dataSource = "char0016"

    var uuid: BluetoothUUID {
        switch self {
        case .notificationSource: ANCSUUID.notificationSource
        case .controlPoint: ANCSUUID.controlPoint
        case .dataSource: ANCSUUID.dataSource
        }
    }

    /// BlueZ's Flags for the characteristic's properties.
    var flags: [String] { self == .controlPoint ? ["write"] : ["notify"] }

    var notifies: Bool { self != .controlPoint }
}
