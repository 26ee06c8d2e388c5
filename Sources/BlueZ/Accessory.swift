public import DBus

/// What `ancsd pair` and `ancsd run` show the phone besides the ANCS solicitation
/// (`--accessory`, `accessory =`).
public enum AccessoryKind: String, Sendable, Hashable, CaseIterable {
    /// A HID-over-GATT keyboard that never sends a key (`Accessory.Shape.keyboard`): the only
    /// shape a report shows iOS 26 listing and bonding (docs/field-evidence.md). The default.
    /// iOS hides its on-screen keyboard while it is connected.
    case keyboard
    /// A HID-over-GATT media remote (`Accessory.Shape.remote`), Consumer Control only: the
    /// on-screen keyboard stays, but that iOS lists it is inferred, not seen.
    case remote
    /// Nothing but the ANCS solicitation: for desktops whose own Bluetooth stack already makes
    /// the phone list and reconnect; iOS may never list it.
    case disabled = "none"

    /// The words `--accessory` and `accessory =` take, in this order.
    public static let names = allCases.map(\.rawValue)

    /// From the text of `--accessory` or `accessory =`, in any case of letters; `hid`, the
    /// name of the remote before there were two shapes, still means `remote`.
    public init?(parsing text: String) {
        let lower = text.lowercased()
        if lower == "hid" {
            self = .remote
        } else if let kind = AccessoryKind(rawValue: lower) {
            self = kind
        } else {
            return nil
        }
    }

    /// The HID application served and advertised; nil for `none`.
    public var shape: Accessory.Shape? {
        switch self {
        case .keyboard: .keyboard
        case .remote: .remote
        case .disabled: nil
        }
    }

    /// The shape to try when a phone does not list this one; nil for `none`.
    public var other: AccessoryKind? {
        switch self {
        case .keyboard: .remote
        case .remote: .keyboard
        case .disabled: nil
        }
    }
}

/// The GATT application ancsd registers so that iOS treats it as an accessory: a minimal
/// HID-over-GATT service (HOGP) in one of two shapes (`Shape`), whose every read needs an
/// encrypted link, and which never sends an input report.
///
/// Why a HID service: iOS lists an LE accessory in Settings > Bluetooth by what it advertises
/// and serves (HID; the ANCS solicitation alone is an iOS 7-era report), starts pairing when an
/// attribute it reads demands encryption, and reconnects by itself to a bonded HID accessory
/// that advertises connectable (docs/field-evidence.md). Why two shapes: the keyboard is the
/// one a report shows iOS 26 listing and bonding, but iOS hides its on-screen keyboard while a
/// HID keyboard is connected; the Consumer Control remote keeps the on-screen keyboard, and
/// that iOS lists it is inferred from the same mechanism, not seen. ancsd never sends an input
/// report: the report characteristic's value never changes and no notification is emitted.
///
/// What is left out, and why:
/// - Device Information (0x180A): bluetoothd already serves one in its own GATT database, with
///   the PnP ID of main.conf's `DeviceID` (by default USB-IF, Linux Foundation 0x1D6B, BlueZ
///   0x0246: src/gatt-database.c `populate_devinfo_service`); a second instance would only give
///   the phone two conflicting answers.
/// - Battery (0x180F): HOGP asks a HID device for one, but ancsd has no battery to report; a
///   made-up level would show in the iPhone's Batteries widget as a device that is always full
///   (or always empty), which is worse than no entry. The field report that lists, bonds and
///   reconnects (ancs-bridge, iOS 26.6) served a HID service without one.
/// - Protocol Mode (0x2A4E) on the remote: optional for a device that supports only the report
///   protocol. The keyboard serves it, as the proven shape does.
///
/// Object tree (the contract the test phones check; all UUIDs lower-case 128-bit):
/// ```
/// /org/ancsd/accessory                         ObjectManager
/// /org/ancsd/accessory/hid                     GattService1 0x1812, Primary
///   …/hid/info            0x2A4A HID Information   ["encrypt-read"]
///   …/hid/report_map      0x2A4B Report Map        ["encrypt-read"]
///   …/hid/control_point   0x2A4C HID Control Point ["write-without-response", "encrypt-write"]
///   …/hid/protocol_mode   0x2A4E Protocol Mode     ["encrypt-read", "write-without-response", "encrypt-write"]  keyboard only
///   …/hid/report          0x2A4D Report (input)    ["encrypt-read", "notify"]
///   …/hid/report/reference  GattDescriptor1 0x2908 Report Reference ["encrypt-read"] = [1, 0x01]
/// ```
/// bluetoothd enforces the `encrypt-*` flags itself (an unencrypted read gets ATT Insufficient
/// Encryption, which makes the phone pair); every method also refuses callers other than
/// the current owner of `org.bluez`.
public enum Accessory {
    public static let root: ObjectPath = "/org/ancsd/accessory"
    public static let service: ObjectPath = "/org/ancsd/accessory/hid"

    /// The HID service, 0x1812.
    public static let hidServiceUUID = "00001812-0000-1000-8000-00805f9b34fb"

    /// The one input report's id, in both shapes.
    public static let reportID: UInt8 = 1

    /// HID Information: bcdHID 1.11, country code 0 (not localised), flags 0x02
    /// NormallyConnectable (it advertises while bonded and not connected; no remote wake).
    public static let hidInformation: [UInt8] = [0x11, 0x01, 0x00, 0x02]

    /// Report Reference: report id, report type 0x01 (input).
    public static let reportReference: [UInt8] = [reportID, 0x01]

    /// Protocol Mode's value: 0x01, Report Protocol (the only one served).
    public static let reportProtocol: [UInt8] = [0x01]

    /// The input report characteristic and its Report Reference descriptor.
    public static let report: ObjectPath = "/org/ancsd/accessory/hid/report"
    public static let reportReferencePath: ObjectPath = "/org/ancsd/accessory/hid/report/reference"

    /// What a HID accessory is: its report map, the appearance it advertises and the
    /// characteristics it serves.
    public struct Shape: Sendable, Hashable, CustomStringConvertible {
        /// `keyboard` or `remote`.
        public var kind: AccessoryKind
        /// The Report Map, read by the phone's HID host once bonded.
        public var reportMap: [UInt8]
        /// The GAP appearance advertised, matching the report map.
        public var appearance: UInt16
        /// The input report's value as a read shows it: nothing pressed. It never changes.
        public var idleReport: [UInt8]
        /// The characteristics, in the order they are served.
        public var characteristics: [Characteristic]
        /// What the user looks for in the iPhone's Settings > Bluetooth.
        public var listing: String
        /// Whether a report shows iOS listing and bonding this shape (else it is inferred).
        public var proven: Bool

        /// The keyboard of ancs-bridge (src/bluetooth/hid.rs; iPhone 15 Pro, iOS 26.6, BlueZ
        /// 5.87), the one shape reported listed and bonded by iOS 26: a boot-style keyboard map
        /// (47 bytes; Report ID 1: 8 modifier bits, a reserved byte, 6 key slots; no Consumer
        /// page), Protocol Mode, appearance 0x03C1 Keyboard. It never sends a key.
        public static let keyboard = Shape(
            kind: .keyboard,
            reportMap: [
                0x05, 0x01,        // Usage Page (Generic Desktop)
                0x09, 0x06,        // Usage (Keyboard)
                0xA1, 0x01,        // Collection (Application)
                0x85, reportID,    //   Report ID (1)
                0x05, 0x07,        //   Usage Page (Keyboard/Keypad)
                0x19, 0xE0,        //   Usage Minimum (Left Control)
                0x29, 0xE7,        //   Usage Maximum (Right GUI)
                0x15, 0x00,        //   Logical Minimum (0)
                0x25, 0x01,        //   Logical Maximum (1)
                0x75, 0x01,        //   Report Size (1)
                0x95, 0x08,        //   Report Count (8)
                0x81, 0x02,        //   Input (Data, Variable, Absolute): the modifier bits
                0x75, 0x08,        //   Report Size (8)
                0x95, 0x01,        //   Report Count (1)
                0x81, 0x01,        //   Input (Constant): the reserved byte
                0x05, 0x07,        //   Usage Page (Keyboard/Keypad)
                0x19, 0x00,        //   Usage Minimum (0)
                0x29, 0x65,        //   Usage Maximum (0x65)
                0x15, 0x00,        //   Logical Minimum (0)
                0x25, 0x65,        //   Logical Maximum (0x65)
                0x75, 0x08,        //   Report Size (8)
                0x95, 0x06,        //   Report Count (6)
                0x81, 0x00,        //   Input (Data, Array, Absolute): six key slots
                0xC0,              // End Collection
            ],
            appearance: 0x03C1,
            idleReport: [UInt8](repeating: 0, count: 8),
            characteristics: [.information, .reportMap, .controlPoint, .protocolMode, .report],
            listing: "a keyboard",
            proven: true)

        /// A media remote: one Consumer Control application collection with a 16-bit usage
        /// array (Consumer page usages 0–0x3FF: play/pause, volume, …) in input report 1, 25
        /// bytes, no Generic Desktop usage at all (no host takes it for a keyboard, keypad,
        /// mouse or joystick); appearance 0x0180 Generic Remote Control.
        public static let remote = Shape(
            kind: .remote,
            reportMap: [
                0x05, 0x0C,        // Usage Page (Consumer)
                0x09, 0x01,        // Usage (Consumer Control)
                0xA1, 0x01,        // Collection (Application)
                0x85, reportID,    //   Report ID (1)
                0x15, 0x00,        //   Logical Minimum (0)
                0x26, 0xFF, 0x03,  //   Logical Maximum (0x3FF)
                0x19, 0x00,        //   Usage Minimum (0)
                0x2A, 0xFF, 0x03,  //   Usage Maximum (0x3FF)
                0x75, 0x10,        //   Report Size (16)
                0x95, 0x01,        //   Report Count (1)
                0x81, 0x00,        //   Input (Data, Array, Absolute)
                0xC0,              // End Collection
            ],
            appearance: 0x0180,
            idleReport: [0x00, 0x00],
            characteristics: [.information, .reportMap, .controlPoint, .report],
            listing: "a remote",
            proven: false)

        public var description: String { kind.rawValue }

        /// The value a read of `characteristic` answers; nil for one that cannot be read.
        public func value(of characteristic: Characteristic) -> [UInt8]? {
            switch characteristic.uuid16 {
            case 0x2A4A: hidInformation
            case 0x2A4B: reportMap
            case 0x2A4E: reportProtocol
            case 0x2A4D: idleReport
            default: nil
            }
        }
    }

    static let serviceInterface: InterfaceName = "org.bluez.GattService1"
    static let characteristicInterface: InterfaceName = "org.bluez.GattCharacteristic1"
    static let descriptorInterface: InterfaceName = "org.bluez.GattDescriptor1"

    /// One characteristic of the service.
    public struct Characteristic: Sendable, Hashable {
        public var path: ObjectPath
        /// 16-bit assigned number.
        public var uuid16: UInt16
        public var flags: [String]

        public var uuid: String { fullUUID(uuid16) }

        public static let information = Characteristic(path: "/org/ancsd/accessory/hid/info", uuid16: 0x2A4A, flags: ["encrypt-read"])
        public static let reportMap = Characteristic(path: "/org/ancsd/accessory/hid/report_map", uuid16: 0x2A4B, flags: ["encrypt-read"])
        public static let controlPoint = Characteristic(
            path: "/org/ancsd/accessory/hid/control_point", uuid16: 0x2A4C, flags: ["write-without-response", "encrypt-write"])
        public static let protocolMode = Characteristic(
            path: "/org/ancsd/accessory/hid/protocol_mode", uuid16: 0x2A4E,
            flags: ["encrypt-read", "write-without-response", "encrypt-write"])
        public static let report = Characteristic(path: Accessory.report, uuid16: 0x2A4D, flags: ["encrypt-read", "notify"])
    }

    /// `0000xxxx-0000-1000-8000-00805f9b34fb` for a 16-bit assigned number.
    public static func fullUUID(_ short: UInt16) -> String {
        let hex = String(short, radix: 16)
        return "0000" + String(repeating: "0", count: 4 - hex.count) + hex + "-0000-1000-8000-00805f9b34fb"
    }

    /// Exports `shape` on `connection` (an object manager at `root` and the objects below
    /// it); register it per adapter with `GattManager.register(Accessory.root)`.
    public static func export(_ shape: Shape, on connection: DBusConnection, owner: BlueZOwner) async throws {
        await connection.exportObjectManager(at: root)
        try await connection.export(
            ExportedObject(ExportedInterface(serviceInterface, properties: [
                ExportedProperty("UUID", value: .string(hidServiceUUID)),
                ExportedProperty("Primary", value: .bool(true)),
            ])),
            at: service)
        for characteristic in shape.characteristics {
            try await connection.export(object(characteristic, value: shape.value(of: characteristic), owner: owner), at: characteristic.path)
        }
        try await connection.export(
            ExportedObject(ExportedInterface(
                descriptorInterface,
                methods: [readValue(reportReference, owner: owner)],
                properties: [
                    ExportedProperty("UUID", value: .string(fullUUID(0x2908))),
                    ExportedProperty("Characteristic", value: .objectPath(report)),
                    ExportedProperty("Flags", value: .stringArray(["encrypt-read"])),
                ])),
            at: reportReferencePath)
    }

    /// Removes what `export(shape, …)` exported.
    public static func unexport(_ shape: Shape, on connection: DBusConnection) async {
        await connection.unexport(reportReferencePath)
        for characteristic in shape.characteristics.reversed() { await connection.unexport(characteristic.path) }
        await connection.unexport(service)
        await connection.unexportObjectManager(at: root)
    }

    private static func object(_ characteristic: Characteristic, value: [UInt8]?, owner: BlueZOwner) -> ExportedObject {
        var methods: [ExportedMethod] = []
        if let value {
            methods.append(readValue(value, owner: owner))
        } else {
            methods.append(ExportedMethod("ReadValue", input: "a{sv}", output: "ay", inputNames: ["options"]) { call in
                try await owner.requireBlueZ(call)
                throw DBusError.remote(name: "org.bluez.Error.NotPermitted", message: "Read not permitted")
            })
        }
        if characteristic.flags.contains("write-without-response") {
            // HID Control Point: Suspend (0) or Exit Suspend (1); Protocol Mode: Boot (0) or
            // Report (1). A device that never reports has nothing to suspend or switch: the
            // write is accepted and otherwise ignored (Protocol Mode still reads Report).
            methods.append(ExportedMethod("WriteValue", input: "aya{sv}", inputNames: ["value", "options"]) { call in
                try await owner.requireBlueZ(call)
                return []
            })
        }
        if characteristic.flags.contains("notify") {
            // A subscription is accepted; no input report ever follows it.
            for name: MemberName in ["StartNotify", "StopNotify"] {
                methods.append(ExportedMethod(name) { call in
                    try await owner.requireBlueZ(call)
                    return []
                })
            }
        }
        return ExportedObject(ExportedInterface(
            characteristicInterface, methods: methods,
            properties: [
                ExportedProperty("UUID", value: .string(characteristic.uuid)),
                ExportedProperty("Service", value: .objectPath(service)),
                ExportedProperty("Flags", value: .stringArray(characteristic.flags)),
            ]))
    }

    /// `ReadValue(options) → ay` answering `value` from the options' `offset`, for bluetoothd only.
    private static func readValue(_ value: [UInt8], owner: BlueZOwner) -> ExportedMethod {
        ExportedMethod("ReadValue", input: "a{sv}", output: "ay", inputNames: ["options"], outputNames: ["value"]) { call in
            try await owner.requireBlueZ(call)
            let options = call.arguments.first?.stringKeyedDictionary ?? [:]
            let offset = Int(options["offset"]?.unwrapped.uint16Value ?? 0)
            guard offset <= value.count else {
                throw DBusError.remote(name: "org.bluez.Error.InvalidOffset", message: "Invalid offset")
            }
            return [.byteArray(Array(value[offset...]))]
        }
    }
}

/// `org.bluez.GattManager1` calls on one adapter (doc/gatt-api.txt).
public struct GattManager: Sendable {
    public let connection: DBusConnection
    public let adapter: ObjectPath

    public init(connection: DBusConnection, adapter: ObjectPath) {
        self.connection = connection
        self.adapter = adapter
    }

    /// `RegisterApplication(root, {})`; bluetoothd reads the objects (GetManagedObjects at
    /// `root`) before it answers. An application already registered on this adapter by this
    /// connection answers `org.bluez.Error.AlreadyExists`.
    public func register(_ root: ObjectPath) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: adapter, interface: InterfaceName(BlueZ.gattManagerInterface),
            member: "RegisterApplication", arguments: [.objectPath(root), .variantDictionary([:])],
            expecting: .empty, timeout: .seconds(10))
    }

    /// `UnregisterApplication(root)`.
    public func unregister(_ root: ObjectPath) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: adapter, interface: InterfaceName(BlueZ.gattManagerInterface),
            member: "UnregisterApplication", arguments: [.objectPath(root)], expecting: .empty, timeout: .seconds(10))
    }
}

/// `org.bluez.Device1` calls.
public struct DeviceCalls: Sendable {
    public let connection: DBusConnection

    public init(connection: DBusConnection) { self.connection = connection }

    /// `Pair()` on a device. On a connection where the adapter is the peripheral (a phone
    /// connected to our advertisement) bluetoothd's SMP sends a Security Request, which makes
    /// the phone start pairing; the call answers when pairing ends. Errors it may answer:
    /// `org.bluez.Error.AlreadyExists` (already paired), `InProgress` (the phone started
    /// pairing first, e.g. on reading an encrypted attribute), `AuthenticationCanceled`,
    /// `AuthenticationRejected`, `AuthenticationFailed`, `ConnectionAttemptFailed`, `Failed`.
    public func pair(_ device: ObjectPath, timeout: Duration) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: device, interface: InterfaceName(BlueZ.deviceInterface),
            member: "Pair", arguments: [], expecting: .empty, timeout: timeout)
    }
}
