import ANCS
import BluetoothUUIDs
import DBus
@testable import GattPhone
import PhoneSimulator
import Synchronization
import Testing

/// The strict (iOS) phone's decisions that need no Bluetooth stack: which advertisement it
/// lists, and how a silent drop starts and ends. The rest is proven by `make system-test`.
@Suite struct StrictPhoneTests {
    static let ancsLE = ANCSUUID.service.littleEndianBytes
    static let hid = "00001812-0000-1000-8000-00805f9b34fb"

    static func advertisingData(_ entries: [UInt8: [UInt8]]) -> DBusValue {
        .variant(.dictionary(key: "y", value: "v", entries.map { (key: .byte($0.key), value: .variant(.byteArray($0.value))) }))
    }

    @Test(arguments: ["1812", "0x1812", "00001812", hid, hid.uppercased()])
    func theHIDServiceUUIDIsFoundInEveryForm(uuid: String) {
        #expect(AdvertisementListing(uuids: [uuid], advertisingData: nil).hid)
    }

    static let keyboardMap: [UInt8] = [
        0x05, 0x01, 0x09, 0x06, 0xA1, 0x01, 0x85, 0x01, 0x05, 0x07, 0x19, 0xE0, 0x29, 0xE7, 0x15, 0x00, 0x25, 0x01, 0x75, 0x01,
        0x95, 0x08, 0x81, 0x02, 0x75, 0x08, 0x95, 0x01, 0x81, 0x01, 0x05, 0x07, 0x19, 0x00, 0x29, 0x65, 0x15, 0x00, 0x25, 0x65,
        0x75, 0x08, 0x95, 0x06, 0x81, 0x00, 0xC0,
    ]
    static let remoteMap: [UInt8] = [
        0x05, 0x0C, 0x09, 0x01, 0xA1, 0x01, 0x85, 0x01, 0x15, 0x00, 0x26, 0xFF, 0x03, 0x19, 0x00, 0x2A, 0xFF, 0x03, 0x75, 0x10,
        0x95, 0x01, 0x81, 0x00, 0xC0,
    ]
    static let keypadMap: [UInt8] = [0x05, 0x01, 0x09, 0x07, 0xA1, 0x01, 0x05, 0x07, 0x19, 0x00, 0x29, 0x65, 0x81, 0x00, 0xC0]

    /// The Report Map the HID host read, checked against the shape asked for: a Keyboard usage
    /// is flagged only when the remote was asked for; a Keypad usage is no keyboard.
    @Test(arguments: [
        (keyboardMap, AskedAccessory.keyboard, true, false),
        (keyboardMap, .remote, true, true),
        (remoteMap, .remote, false, false),
        (remoteMap, .keyboard, false, false),
        (keypadMap, .remote, false, false),
    ])
    func theReportMapIsCheckedAgainstTheShapeAskedFor(map: [UInt8], asked: AskedAccessory, keyboard: Bool, flagged: Bool) throws {
        let check = try #require(ReportMapCheck(map, asked: asked))
        #expect(check.keyboard == keyboard)
        #expect(check.flagged == flagged)
        #expect(check.applications == [map == Self.remoteMap ? "0xC:0x1" : map == Self.keypadMap ? "0x1:0x7" : "0x1:0x6"])
        #expect(ReportMapCheck([0x05, 0x0C, 0x26, 0xFF], asked: asked) == nil, "a map cut short")
    }

    @Test func aHIDAdvertisementWithTheANCSSolicitationIsListed() {
        let listing = AdvertisementListing(uuids: [Self.hid], advertisingData: Self.advertisingData([0x15: Self.ancsLE, 0x19: [0x80, 0x01]]))
        #expect(listing == AdvertisementListing(hid: true, solicitation: .ancs))
        #expect(listing.listed)
    }

    @Test func withoutTheHIDServiceNothingIsListed() {
        // ancsd's advertisement before the accessory, or with --accessory none.
        let listing = AdvertisementListing(uuids: [], advertisingData: Self.advertisingData([0x15: Self.ancsLE]))
        #expect(!listing.listed)
        #expect(!AdvertisementListing(uuids: ["0000180f-0000-1000-8000-00805f9b34fb"], advertisingData: nil).listed)
    }

    @Test func aSolicitationOfAnotherServiceIsNotListed() {
        let other = Array(Self.ancsLE.reversed())
        let listing = AdvertisementListing(uuids: [Self.hid], advertisingData: Self.advertisingData([0x15: other]))
        #expect(listing.solicitation == .other)
        #expect(!listing.listed)
        let two = AdvertisementListing(uuids: [Self.hid], advertisingData: Self.advertisingData([0x15: other + Self.ancsLE]))
        #expect(two.solicitation == .ancs)
    }

    /// bluetoothd 5.66 exposes no solicitation on the scanning side: the gap is named, and the
    /// HID service alone lists the accessory.
    @Test func whereBlueZHidesTheSolicitationTheGapIsReported() {
        let listing = AdvertisementListing(uuids: [Self.hid], advertisingData: Self.advertisingData([0xFF: [0x4C, 0x00]]))
        #expect(listing.solicitation == .notExposed)
        #expect(listing.listed)
    }

    private func rewrite(_ drop: inout SilentDropState, _ role: ANCSCharacteristicRole, _ enabled: Bool) -> Bool {
        drop.notify(role, enabled: enabled)
    }

    @Test func aSilentDropLastsUntilTheCCCDsAreRewritten() {
        var drop = SilentDropState()
        drop.drop(all: true)
        #expect(drop.dropped == [.notificationSource, .dataSource] && drop.controlPointSilent)
        // A StartNotify without a StopNotify first (a repeated CCC write) rewrites nothing.
        #expect(!rewrite(&drop, .notificationSource, true))
        #expect(drop.dropped.contains(.notificationSource))
        #expect(!rewrite(&drop, .notificationSource, false))
        #expect(rewrite(&drop, .notificationSource, true))
        #expect(!drop.controlPointSilent, "the Control Point answers again once the Notification Source is rewritten")
        #expect(drop.dropped == [.dataSource])
        #expect(!rewrite(&drop, .dataSource, false))
        #expect(rewrite(&drop, .dataSource, true))
        #expect(!drop.active)
        var partial = SilentDropState()
        partial.drop(all: false)
        #expect(!partial.controlPointSilent)
    }

    /// A silently dropped phone sends nothing although subscribed, and the StopNotify/StartNotify
    /// of a re-subscription ends it and replays what it holds, the dropped notification too.
    @Test func aDroppedNotificationComesWithTheReplayOfTheResubscription() throws {
        final class Events: Sendable { let list = Mutex<[String]>([]) }
        let events = Events()
        let phone = try GattPhone(
            .init(adapter: "hci1", peer: "AA:BB:CC:DD:EE:FF", bus: .system, settings: ScenarioSettings()),
            report: { object in
                events.list.withLock { $0.append(object["event"]?.stringValue ?? "") }
            })
        phone.state.withLock { $0.connected = true }
        phone.notifyChanged(.notificationSource, true)
        phone.state.withLock { $0.silentDrop.drop(all: false) }
        phone.state.withLock { s in _ = s.model.add(NotificationSpec(uid: 7, attributes: [.title: "Dropped"])) }
        phone.notifyChanged(.notificationSource, false)
        phone.notifyChanged(.notificationSource, true)
        let names = events.list.withLock { $0 }
        #expect(names.filter { $0 == "consumer_subscribed" }.count == 2)
        #expect(names.contains("silent_drop_ended"))
        #expect(!phone.state.withLock { $0.silentDrop.dropped.contains(.notificationSource) })
    }
}
