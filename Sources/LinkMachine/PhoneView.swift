public import GattSession

/// A GATT service as bluetoothd's tree shows it under a phone: its object and those of the
/// characteristics its description names (by the description's UUIDs).
public struct ServiceObjects: Hashable, Sendable {
    /// The service's object path.
    public var path: String
    /// The characteristics found, by the description's UUID, to their object paths.
    public var characteristics: [CharacteristicUUID: String]

    public init(path: String, characteristics: [CharacteristicUUID: String]) {
        self.path = path
        self.characteristics = characteristics
    }
}

/// One device of bluetoothd's tree as the link machine needs it: the daemon makes one for
/// every device each time the tree changes (`LinkMachine.Input.devices`).
public struct PhoneView: Hashable, Sendable {
    /// The device's object path: the key of its link.
    public var path: String
    /// Its `Address` (the identity address once bonded).
    public var address: String
    public var name: String?
    public var connected: Bool
    public var bonded: Bool
    /// The options allow it (address and adapter filters).
    public var allowed: Bool
    /// Its ANCS service, when all three characteristics are there.
    public var ancs: ServiceObjects?
    /// The services beside ANCS it offers (`LinkMachine.Settings.services`), by service UUID:
    /// the first instance with at least one of the description's characteristics.
    public var services: [CharacteristicUUID: ServiceObjects]

    public init(
        path: String, address: String, name: String? = nil, connected: Bool, bonded: Bool, allowed: Bool = true,
        ancs: ServiceObjects?, services: [CharacteristicUUID: ServiceObjects] = [:]
    ) {
        self.path = path
        self.address = address
        self.name = name
        self.connected = connected
        self.bonded = bonded
        self.allowed = allowed
        self.ancs = ancs
        self.services = services
    }
}

/// A call on one of the phone's characteristics the machine asks the daemon to make
/// (`org.bluez.GattCharacteristic1`, or its `Notifying` property).
public enum GattCall: Hashable, Sendable {
    case acquireNotify(String)
    case startNotify(String)
    case stopNotify(String)
    /// Read the characteristic's `Notifying` property.
    case readNotifying(String)

    /// The characteristic's object path.
    public var characteristic: String {
        switch self {
        case .acquireNotify(let path), .startNotify(let path), .stopNotify(let path), .readNotifying(let path): path
        }
    }
}

/// How a `GattCall` ended.
public enum CallOutcome: Hashable, Sendable {
    /// It succeeded (StartNotify, StopNotify).
    case done
    /// AcquireNotify gave a socket, with this MTU; the daemon holds it until the machine says
    /// `keepSocket` (else it closes it).
    case acquired(mtu: UInt16)
    /// The `Notifying` property's value.
    case notifying(Bool)
    case failed(CallError)
    /// The call was dropped before its reply (the bus went away, ancsd is stopping).
    case cancelled
}

/// A failed call: the D-Bus error's name and message (empty when it was not a D-Bus error
/// reply) and its text for logs.
public struct CallError: Hashable, Sendable, CustomStringConvertible {
    public var name: String
    public var message: String
    public var description: String

    public init(name: String, message: String, description: String) {
        self.name = name
        self.message = message
        self.description = description
    }

    /// bluetoothd's answer to AcquireNotify and StartNotify while a socket of the
    /// characteristic is acquired.
    var isNotifyAcquired: Bool { name == "org.bluez.Error.NotPermitted" && message == "Notify acquired" }

    /// No answer came: the call timed out (bluetoothd may still be carrying it out).
    var isNoAnswer: Bool {
        name == "org.freedesktop.DBus.Error.Timeout" || name == "org.freedesktop.DBus.Error.NoReply"
    }

    /// An AcquireNotify failure after which StartNotify cannot work either: the link is down,
    /// or the characteristic's socket is held.
    var startNotifyCannotHelp: Bool {
        switch (name, message) {
        case ("org.bluez.Error.Failed", "Not connected"), ("org.bluez.Error.NotConnected", _): true
        default: isNotifyAcquired
        }
    }
}
