import ANCS
import BlueZ
import BluetoothUUIDs
import DBus
import PhoneSimulator

/// How the phone on real BlueZ treats the accessory (docs/system-test.md, "The phone").
public enum PhonePolicy: String, Sendable {
    /// As iOS does, the default: it connects only to a listed advertisement (the HID service
    /// UUID and the ANCS solicitation), never calls `Pair()` (its bluetoothd's HID host pairs
    /// when it meets the accessory's encrypted attributes, or the accessory asks for security),
    /// registers ANCS only once bonded, and leaves reconnecting to its bluetoothd, which
    /// auto-connects to a bonded HID device that advertises connectable.
    case strict
    /// The phone of earlier versions: ANCS registered from the start, connects to `--peer`
    /// whatever it advertises, pairs itself once services are resolved, reconnects itself.
    case lenient
}

/// What the phone's bluetoothd shows of an advertisement, and whether iOS would list it.
struct AdvertisementListing: Equatable, Sendable {
    /// The HID service UUID (0x1812) is among the device's `UUIDs` (service UUIDs of its
    /// advertising data, as bluetoothd collects them).
    var hid: Bool
    /// What bluetoothd exposes of the 128-bit solicitation (AD type 0x15).
    var solicitation: Solicitation

    enum Solicitation: String, Sendable {
        /// `AdvertisingData` holds type 0x15 with the ANCS service UUID.
        case ancs
        /// `AdvertisingData` holds type 0x15 without ANCS.
        case other
        /// bluetoothd exposes no type 0x15: 5.66's `eir_parse` keeps no solicitation and its
        /// `AdvertisingData` leaves the type out (src/shared/ad.c rejects it), so the phone
        /// cannot see it on the scanning side. The system test checks the solicitation in the
        /// received PDU from the HCI capture instead.
        case notExposed = "not_exposed"
    }

    /// iOS lists an accessory advertising HID with the ANCS solicitation; where bluetoothd does
    /// not expose solicitations, on HID alone (the gap is reported with each listing).
    var listed: Bool { hid && solicitation != .other }

    /// HID Service, 0x1812, in the base UUID.
    static let hidService = BluetoothUUID("00001812-0000-1000-8000-00805f9b34fb")
    static let solicit128: UInt8 = 0x15

    /// From a Device1's `UUIDs` and `AdvertisingData` (a{yv}) properties.
    init(uuids: [String], advertisingData: DBusValue?) {
        hid = uuids.contains { Self.normalised($0) == Self.hidService }
        var solicited: [UInt8]?
        for entry in advertisingData?.unwrapped.dictionaryValue ?? [] {
            guard case .byte(Self.solicit128) = entry.key.unwrapped else { continue }
            solicited = entry.value.unwrapped.bytes ?? []
        }
        guard let solicited else {
            solicitation = .notExposed
            return
        }
        let ancs = ANCSUUID.service.littleEndianBytes
        var found = false
        var offset = 0
        while offset + 16 <= solicited.count {
            if Array(solicited[offset..<offset + 16]) == ancs { found = true }
            offset += 16
        }
        solicitation = found ? .ancs : .other
    }

    init(hid: Bool, solicitation: Solicitation) {
        self.hid = hid
        self.solicitation = solicitation
    }

    /// A UUID in any of the forms a stack may spell: 16-bit (`1812`, `0x1812`), 32-bit or the
    /// full 128-bit text, into the 128-bit value (Bluetooth base UUID for the short forms).
    static func normalised(_ text: String) -> BluetoothUUID? {
        var hex = Substring(text)
        if hex.hasPrefix("0x") || hex.hasPrefix("0X") { hex = hex.dropFirst(2) }
        if hex.count == 4 || hex.count == 8, hex.allSatisfy(\.isHexDigit) {
            return BluetoothUUID(String(repeating: "0", count: 8 - hex.count) + hex + "-0000-1000-8000-00805f9b34fb")
        }
        return BluetoothUUID(String(hex))
    }
}

/// What the phone makes of the Report Map its HID host read, against the shape the scenario
/// asked ancsd for (`"accessory"`): a Keyboard usage (Generic Desktop 0x06; a Keypad, 0x07, is
/// none: iOS keeps its on-screen keyboard for one) is flagged only when the remote was asked for.
struct ReportMapCheck: Equatable, Sendable {
    var keyboard: Bool
    var flagged: Bool
    /// The usages of the application collections, `0x1:0x6` for a keyboard.
    var applications: [String]

    /// Nil for a descriptor that cannot be read.
    init?(_ map: [UInt8], asked: AskedAccessory) {
        guard let descriptor = try? HIDReportDescriptor(map) else { return nil }
        keyboard = descriptor.declaresKeyboard
        flagged = keyboard && asked == .remote
        applications = descriptor.applicationCollections.map(\.description)
    }
}

/// Which of the phone's ANCS pushes a `silent_drop` step has stopped: what PebbleOS reports
/// of iOS (subscriptions gone without a Service Changed or a disconnect). Each characteristic
/// comes back when its CCCD is rewritten, i.e. bluetoothd calls StopNotify and then StartNotify
/// on it; the Control Point of `silent_drop_all` answers again once the Notification Source's is.
struct SilentDropState: Equatable, Sendable {
    /// Characteristics whose values are not sent although subscribed.
    var dropped: Set<ANCSCharacteristicRole> = []
    /// Of those, the ones bluetoothd has called StopNotify on since the drop.
    var stopped: Set<ANCSCharacteristicRole> = []
    /// Control Point writes get no answer (`silent_drop_all`).
    var controlPointSilent = false

    /// Starts a drop of the Notification Source and Data Source (and the Control Point's answers).
    mutating func drop(all: Bool) {
        dropped = [.notificationSource, .dataSource]
        stopped = []
        controlPointSilent = all
    }

    /// bluetoothd's StartNotify (true) or StopNotify (false) on `role`; true when this ends
    /// the drop of `role` (a rewrite: StopNotify, then StartNotify).
    mutating func notify(_ role: ANCSCharacteristicRole, enabled: Bool) -> Bool {
        guard dropped.contains(role) else { return false }
        guard enabled else {
            stopped.insert(role)
            return false
        }
        guard stopped.contains(role) else { return false }
        dropped.remove(role)
        stopped.remove(role)
        if role == .notificationSource { controlPointSilent = false }
        return true
    }

    /// A new link: bluetoothd restores the bond's CCC values without a call, so a drop outlives
    /// a reconnection, as on iOS.
    var active: Bool { !dropped.isEmpty || controlPointSilent }
}
