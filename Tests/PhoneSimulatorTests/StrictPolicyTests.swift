import ANCS
import DBus
import Foundation
import PhoneSimulator
import Synchronization
import Testing
import TestSupport

/// The strict iOS policy, each rule both ways, with a hand-written accessory on the bus: an
/// agent, an advertisement and a GATT application registered the way the D-Bus contract of
/// issue 26 says ancsd registers them.
@Suite("Strict iOS policy", .serialized)
struct StrictPolicyTests {
    static let identity = "AA:BB:CC:DD:EE:01"
    static let ancs = "7905f431-b5ce-4e99-a40f-4b1e122d00d0"
    static let hid = "00001812-0000-1000-8000-00805f9b34fb"
    static let chr: InterfaceName = "org.bluez.GattCharacteristic1"

    /// A Consumer Control report map (a media remote): Usage Page 0x0C, Usage 0x01, Application
    /// collection, one 16-bit usage input report, ID 1.
    static let consumerMap: [UInt8] = [
        0x05, 0x0C, 0x09, 0x01, 0xA1, 0x01, 0x85, 0x01, 0x15, 0x00, 0x26, 0xFF, 0x03, 0x19, 0x00,
        0x2A, 0xFF, 0x03, 0x75, 0x10, 0x95, 0x01, 0x81, 0x00, 0xC0,
    ]
    /// A boot keyboard's start: Generic Desktop, Usage Keyboard.
    static let keyboardMap: [UInt8] = [0x05, 0x01, 0x09, 0x06, 0xA1, 0x01, 0x05, 0x07, 0x19, 0xE0, 0x29, 0xE7, 0x81, 0x02, 0xC0]

    /// A phone bluetoothd has never seen; temporary objects go 0.2 s after a disconnect.
    static func settings(present: Bool = false) -> ScenarioSettings {
        var device = DeviceSettings(address: identity, name: "Ada's iPhone", addressType: "public")
        if !present {
            device.present = false
            device.connected = false
            device.paired = false
            device.bonded = false
            device.trusted = false
        }
        var s = ScenarioSettings(name: "strict", devices: [device])
        s.temporaryTimeout = 0.2
        return s
    }

    /// The accessory side of the bus: what it registered and what bluetoothd asked of it.
    final class Accessory: Sendable {
        let client: DBusConnection
        let startNotifies = Atomic<Int>(0)
        let reads = Mutex<[[String: DBusValue]]>([])
        init(_ client: DBusConnection) { self.client = client }

        func call(_ path: ObjectPath, _ interface: InterfaceName, _ member: MemberName, _ arguments: [DBusValue] = []) async throws {
            _ = try await client.call(destination: "org.bluez", path: path, interface: interface, member: member, arguments: arguments, timeout: .seconds(30))
        }

        func registerAgent(reject: Bool = false) async throws {
            let path: ObjectPath = "/test/agent"
            try await client.export(ExportedObject(ExportedInterface("org.bluez.Agent1", methods: [
                .immediate("RequestConfirmation", input: "ou") { _ in
                    if reject { throw DBusError.remote(name: "org.bluez.Error.Rejected", message: "no") }
                    return []
                },
                .immediate("Release") { _ in [] }, .immediate("Cancel") { _ in [] },
            ])), at: path)
            try await call("/org/bluez", "org.bluez.AgentManager1", "RegisterAgent", [.objectPath(path), .string("DisplayYesNo")])
            try await call("/org/bluez", "org.bluez.AgentManager1", "RequestDefaultAgent", [.objectPath(path)])
        }

        func advertise(
            _ name: String = "advert", serviceUUIDs: [String] = ["1812"], solicit: Bool = true, discoverable: Bool = true,
            type: String = "peripheral"
        ) async throws {
            let path = ObjectPath(validating: "/test/" + name) ?? "/test/bad"
            var properties = [
                ExportedProperty("Type", value: .string(type)),
                ExportedProperty("ServiceUUIDs", value: .stringArray(serviceUUIDs)),
                ExportedProperty("Discoverable", value: .bool(discoverable)),
                ExportedProperty("LocalName", value: .string("ancsd")),
            ]
            if solicit { properties.append(ExportedProperty("SolicitUUIDs", value: .stringArray([StrictPolicyTests.ancs]))) }
            try await client.export(ExportedObject(ExportedInterface(
                "org.bluez.LEAdvertisement1", methods: [.immediate("Release") { _ in [] }], properties: properties)), at: path)
            try await call("/org/bluez/hci0", "org.bluez.LEAdvertisingManager1", "RegisterAdvertisement", [.objectPath(path), .variantDictionary([:])])
        }

        func unadvertise(_ name: String = "advert") async throws {
            try await call("/org/bluez/hci0", "org.bluez.LEAdvertisingManager1", "UnregisterAdvertisement", [.objectPath(ObjectPath(validating: "/test/" + name) ?? "/")])
        }

        static let root: ObjectPath = "/test/app"
        static let service: ObjectPath = "/test/app/hid"
        static let reportMap: ObjectPath = "/test/app/hid/report_map"
        static let report: ObjectPath = "/test/app/hid/report"

        /// A HID service (flags "encrypt-read" when `encrypted`, plain "read" otherwise).
        func registerApplication(encrypted: Bool = true, map: [UInt8] = StrictPolicyTests.consumerMap) async throws {
            await client.exportObjectManager(at: Self.root)
            try await client.export(ExportedObject(ExportedInterface("org.bluez.GattService1", properties: [
                ExportedProperty("UUID", value: .string(StrictPolicyTests.hid)), ExportedProperty("Primary", value: .bool(true)),
            ])), at: Self.service)
            let read = encrypted ? "encrypt-read" : "read"
            func characteristic(_ uuid: String, _ flags: [String], _ value: [UInt8], notify: Bool) -> ExportedObject {
                var methods: [ExportedMethod] = [
                    .immediate("ReadValue", input: "a{sv}", output: "ay") { [self] call in
                        let options = call.arguments.first?.stringKeyedDictionary ?? [:]
                        reads.withLock { $0.append(options) }
                        let offset = Int(options["offset"]?.unwrapped.uint16Value ?? 0)
                        return [.byteArray(Array(value.dropFirst(offset)))]
                    },
                ]
                if notify {
                    methods.append(.immediate("StartNotify") { [self] _ in
                        startNotifies.add(1, ordering: .relaxed)
                        return []
                    })
                    methods.append(.immediate("StopNotify") { _ in [] })
                }
                var properties = [
                    ExportedProperty("UUID", value: .string(uuid)), ExportedProperty("Service", value: .objectPath(Self.service)),
                    ExportedProperty("Flags", value: .stringArray(flags)),
                ]
                if notify { properties.append(ExportedProperty("Value", value: .byteArray([]))) }
                return ExportedObject(ExportedInterface("org.bluez.GattCharacteristic1", methods: methods, properties: properties))
            }
            try await client.export(characteristic("00002a4b-0000-1000-8000-00805f9b34fb", [read], map, notify: false), at: Self.reportMap)
            try await client.export(characteristic("00002a4d-0000-1000-8000-00805f9b34fb", [read, "notify"], [0, 0], notify: true), at: Self.report)
            try await call("/org/bluez/hci0", "org.bluez.GattManager1", "RegisterApplication", [.objectPath(Self.root), .variantDictionary([:])])
        }

        /// The phone's Device1: path, Address, AddressType (nil when bluetoothd shows none).
        func phone() async throws -> (path: ObjectPath, address: String, type: String)? {
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            for (path, interfaces) in objects {
                guard let d = interfaces["org.bluez.Device1"], d["Name"]?.stringValue == "Ada's iPhone" else { continue }
                return (path, d["Address"]?.stringValue ?? "", d["AddressType"]?.stringValue ?? "")
            }
            return nil
        }

        func hasANCS() async throws -> Bool {
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            return objects.values.contains { $0["org.bluez.GattService1"]?["UUID"]?.stringValue == StrictPolicyTests.ancs }
        }
    }

    static func withAccessory(
        _ settings: ScenarioSettings = settings(),
        _ body: @escaping @Sendable (PhoneSimulator, Accessory) async throws -> Void
    ) async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let simulator = PhoneSimulator(settings: settings, bus: .address(bus.address), log: { _ in })
        try await withTimeout(40, "the test") {
            try await simulator.start()
            let client = try await DBusConnection.connect(to: .address(bus.address))
            do {
                try await body(simulator, Accessory(client))
            } catch {
                await client.close()
                await simulator.stop()
                throw error
            }
            await client.close()
            await simulator.stop()
        }
    }

    static func state(_ simulator: PhoneSimulator, timeout: Double = 5, _ configure: (inout StateExpectation) -> Void) async throws {
        var e = StateExpectation()
        configure(&e)
        try await simulator.execute(.waitState(e, timeout: timeout))
    }

    static func isRPA(_ address: String) -> Bool {
        guard let first = UInt8(address.prefix(2), radix: 16) else { return false }
        return (0x40...0x7F).contains(first) && address.count == 17
    }

    // MARK: Listing

    @Test("lists only a discoverable advertisement with HID in ServiceUUIDs and the ANCS solicitation")
    func listing() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.registerApplication()
            // What ancsd advertised before issue 26: the solicitation alone.
            try await accessory.advertise("a", serviceUUIDs: [], solicit: true)
            try await accessory.advertise("b", serviceUUIDs: ["1812"], solicit: false)
            try await accessory.advertise("c", serviceUUIDs: ["1812"], solicit: true, discoverable: false)
            try await simulator.execute(.pair(passkey: 1, expect: .notListed, timeout: 0.3))
            #expect(try await accessory.phone() == nil, "nothing connected")
            // The 16-bit short form counts as the 128-bit base UUID.
            try await accessory.advertise("d", serviceUUIDs: ["1812"], solicit: true)
            try await simulator.execute(.pair(passkey: 1, expect: .paired, timeout: 2))
        }
    }

    @Test("the 128-bit HID UUID is listed too; short forms normalise")
    func longForm() async throws {
        #expect(PhoneSimulator.normalisedUUID("1812") == Self.hid)
        #expect(PhoneSimulator.normalisedUUID("00001812") == Self.hid)
        #expect(PhoneSimulator.normalisedUUID("00001812-0000-1000-8000-00805F9B34FB") == Self.hid)
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.registerApplication()
            try await accessory.advertise(serviceUUIDs: [Self.hid.uppercased()])
            try await simulator.execute(.pair(passkey: 1, expect: .paired, timeout: 2))
        }
    }

    // MARK: Bonding

    @Test("pairs after reading an encrypted HID attribute: RPA first, identity address after, ANCS only then")
    func pairsThroughEncryptedRead() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.registerApplication(encrypted: true)
            try await Self.state(simulator) { $0.applications = 1 }
            try await accessory.advertise()
            let changes = Collector()
            _ = try await accessory.client.subscribe(to: .propertiesChanged(interface: "org.bluez.Device1"), handler: changes.handler)
            try await simulator.execute(.pair(passkey: 1, expect: .paired, timeout: 2))
            let phone = try #require(try await accessory.phone())
            #expect(phone.address == Self.identity && phone.type == "public")
            // The path is the temporary one, from the resolvable private address.
            let element = phone.path.rawValue.split(separator: "/").last.map(String.init) ?? ""
            let rpa = element.dropFirst(4).replacingOccurrences(of: "_", with: ":")
            #expect(Self.isRPA(rpa), "\(phone.path)")
            #expect(rpa != Self.identity)
            try await eventually("Address PropertiesChanged") {
                changes.signals.contains { s in
                    (try? PropertiesChanged(s)).map { $0.path == phone.path && $0.changed["Address"] == .string(Self.identity) } ?? false
                }
            }
            #expect(try await accessory.hasANCS())
            try await Self.state(simulator) { $0.bonded = true; $0.paired = true; $0.address = Self.identity }
        }
    }

    @Test("without an encrypted attribute or a security request it stays connected, unpaired, without ANCS")
    func doesNotPairUnasked() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.registerApplication(encrypted: false)
            try await accessory.advertise()
            try await simulator.execute(.pair(passkey: 1, expect: .notPaired, timeout: 0.5))
            let phone = try #require(try await accessory.phone())
            #expect(Self.isRPA(phone.address) && phone.type == "random", "\(phone)")
            let hasANCS = try await accessory.hasANCS()
            #expect(!hasANCS, "no ANCS before bonding")
            try await Self.state(simulator) { $0.connected = true; $0.paired = false }
        }
    }

    @Test("pairs on a security request: Device1.Pair() answers when the pairing ends")
    func pairsThroughPairCall() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.advertise()
            // No application at all: only Pair() can start the pairing.
            let pairing = Task { try await simulator.execute(.pair(passkey: 1, expect: .paired, timeout: 5)) }
            try await eventually("the phone connects") { try await accessory.phone() != nil }
            let phone = try #require(try await accessory.phone())
            try await accessory.call(phone.path, "org.bluez.Device1", "Pair")
            try await pairing.value
            #expect(try await accessory.phone()?.address == Self.identity)
            await expectError("org.bluez.Error.AlreadyExists", "Already Exists") {
                try await accessory.call(phone.path, "org.bluez.Device1", "Pair")
            }
        }
    }

    @Test("a refused pairing fails Pair() and drops the link; the temporary object goes away")
    func refusedPairCall() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent(reject: true)
            try await accessory.advertise()
            let pairing = Task { try await simulator.execute(.pair(passkey: 1, expect: .rejected, timeout: 5)) }
            try await eventually("the phone connects") { try await accessory.phone() != nil }
            let phone = try #require(try await accessory.phone())
            await expectError("org.bluez.Error.AuthenticationFailed", "Authentication Failed") {
                try await accessory.call(phone.path, "org.bluez.Device1", "Pair")
            }
            try await pairing.value
            try await eventually("the temporary object is removed") { try await accessory.phone() == nil }
        }
    }

    @Test("each connection before bonding comes under a fresh resolvable private address")
    func freshAddressEachConnection() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.advertise()
            try await simulator.execute(.pair(passkey: 1, expect: .notPaired, timeout: 0.2))
            let first = try #require(try await accessory.phone())
            try await simulator.execute(.disconnect)
            try await eventually("the temporary object is removed") { try await accessory.phone() == nil }
            try await simulator.execute(.pair(passkey: 1, expect: .notPaired, timeout: 0.2))
            let second = try #require(try await accessory.phone())
            #expect(Self.isRPA(first.address) && Self.isRPA(second.address))
            #expect(first.path != second.path && first.address != second.address)
        }
    }

    // MARK: After bonding: the HID service

    @Test("after bonding it reads the Report Map, subscribes to the input Report and counts input reports")
    func readsTheAccessory() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.registerApplication()
            try await accessory.advertise()
            try await simulator.execute(.pair(passkey: 1, expect: .paired, timeout: 2))
            try await Self.state(simulator) { $0.keyboard = false; $0.reportSubscribed = true; $0.inputReports = 0 }
            #expect(accessory.startNotifies.load(ordering: .relaxed) == 1)
            let options = try #require(accessory.reads.withLock { $0.first })
            #expect(options["offset"]?.unwrapped.uint16Value == 0)
            let phone = try await accessory.phone()  // outside #expect: Swift 6.0 cannot await in its autoclosure
            #expect(options["device"]?.unwrapped.objectPathValue == phone?.path)
            // An input report: counted.
            try await accessory.client.setExportedProperty(path: Accessory.report, interface: Self.chr, name: "Value", value: .byteArray([0xE9, 0x00]))
            try await Self.state(simulator) { $0.inputReports = 1 }
        }
    }

    @Test("a bonded phone subscribes to the input Report when the application appears and at every reconnection")
    func bondedPhoneSubscribes() async throws {
        try await Self.withAccessory(Self.settings(present: true)) { simulator, accessory in
            try await accessory.registerApplication()
            try await Self.state(simulator) { $0.reportSubscribed = true; $0.keyboard = false; $0.inputReports = 0 }
            #expect(accessory.startNotifies.load(ordering: .relaxed) == 1)
            try await simulator.execute(.disconnect)
            try await accessory.advertise(serviceUUIDs: ["1812"], discoverable: false)
            try await simulator.execute(.connect(timeout: 2, expectAway: false))
            try await eventually("StartNotify again") { accessory.startNotifies.load(ordering: .relaxed) == 2 }
            // One report, counted once (one match rule however often the phone subscribes).
            try await accessory.client.setExportedProperty(path: Accessory.report, interface: Self.chr, name: "Value", value: .byteArray([1, 0]))
            try await Self.state(simulator) { $0.inputReports = 1 }
            try await Task.sleep(for: .milliseconds(200))
            try await Self.state(simulator) { $0.inputReports = 1 }
        }
    }

    /// A Keypad application with key codes: no keyboard to iOS (ESP32-BLE-Keyboard#137).
    static let keypadMap: [UInt8] = [0x05, 0x01, 0x09, 0x07, 0xA1, 0x01, 0x05, 0x07, 0x19, 0x00, 0x29, 0x65, 0x81, 0x00, 0xC0]

    @Test("a Keyboard usage in the Report Map is detected; a Keypad usage is not one")
    func keyboardDetected() {
        #expect(PhoneSimulator.reportMapHasKeyboard(Self.keyboardMap))
        #expect(!PhoneSimulator.reportMapHasKeyboard(Self.consumerMap))
        #expect(!PhoneSimulator.reportMapHasKeyboard(Self.keypadMap))
        // A 4-byte usage carrying its page (0x0001_0006); Keypad in that form is no keyboard either.
        #expect(PhoneSimulator.reportMapHasKeyboard([0x0B, 0x06, 0x00, 0x01, 0x00]))
        #expect(!PhoneSimulator.reportMapHasKeyboard([0x0B, 0x07, 0x00, 0x01, 0x00]))
        // Usage 0x06 on the Consumer page is no keyboard.
        #expect(!PhoneSimulator.reportMapHasKeyboard([0x05, 0x0C, 0x09, 0x06]))
    }

    /// The phone is told the shape asked for (`"accessory"`) and reads the Report Map once
    /// bonded: a Keyboard usage is flagged only when the remote was asked for.
    @Test("the Report Map read after bonding is checked against the shape asked for", arguments: [
        (AskedAccessory.keyboard, StrictPolicyTests.keyboardMap, true, false),
        (.remote, StrictPolicyTests.consumerMap, false, false),
        (.remote, StrictPolicyTests.keyboardMap, true, true),
        (.remote, StrictPolicyTests.keypadMap, false, false),
    ])
    func shapeChecked(asked: AskedAccessory, map: [UInt8], keyboard: Bool, flagged: Bool) async throws {
        var settings = Self.settings()
        settings.accessory = asked
        try await Self.withAccessory(settings) { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.registerApplication(map: map)
            try await accessory.advertise()
            try await simulator.execute(.pair(passkey: 1, expect: .paired, timeout: 2))
            try await Self.state(simulator) { $0.keyboard = keyboard; $0.accessoryFlagged = flagged }
        }
    }

    // MARK: Reconnection

    @Test("a bonded phone reconnects only to a connectable advertisement with the HID UUID")
    func reconnects() async throws {
        try await Self.withAccessory(Self.settings(present: true)) { simulator, accessory in
            try await simulator.execute(.disconnect)
            try await simulator.execute(.connect(timeout: 0.3, expectAway: true))
            // Without expect away the step fails, saying why.
            do {
                try await simulator.execute(.connect(timeout: 0.2, expectAway: false))
                Issue.record("connect succeeded without an advertisement")
            } catch {
                #expect("\(error)".contains("stays away: no registered connectable advertisement with the HID service UUID"))
            }
            try await accessory.advertise("plain", serviceUUIDs: [], solicit: true, discoverable: false)
            try await simulator.execute(.connect(timeout: 0.3, expectAway: true))
            try await accessory.advertise("broadcast", serviceUUIDs: ["1812"], discoverable: false, type: "broadcast")
            try await simulator.execute(.connect(timeout: 0.3, expectAway: true))
            try await accessory.advertise("run", serviceUUIDs: ["1812"], discoverable: false)
            try await simulator.execute(.connect(timeout: 2, expectAway: false))
            try await Self.state(simulator) { $0.connected = true }
        }
    }

    @Test("an unbonded phone never reconnects by itself")
    func unbondedStaysAway() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.advertise()
            try await simulator.execute(.pair(passkey: 1, expect: .notPaired, timeout: 0.2))
            try await simulator.execute(.disconnect)
            try await simulator.execute(.connect(timeout: 0.3, expectAway: true))
        }
    }

    @Test("after a bluetoothd restart the bonded phone is dev_<identity>")
    func identityPathAfterRestart() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.registerApplication()
            try await accessory.advertise()
            try await simulator.execute(.pair(passkey: 1, expect: .paired, timeout: 2))
            try await simulator.execute(.restartBlueZ(downtime: 0.1))
            try await eventually("the tree is back") { try await accessory.phone() != nil }
            let phone = try #require(try await accessory.phone())
            #expect(phone.path == "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01" && phone.address == Self.identity)
        }
    }

    // MARK: GattManager1, and lenient

    @Test("GattManager1: registration read with GetManagedObjects, errors, dropped when the client leaves")
    func applications() async throws {
        try await Self.withAccessory { simulator, accessory in
            try await accessory.registerApplication()
            try await Self.state(simulator) { $0.applications = 1 }
            await expectError("org.bluez.Error.AlreadyExists", "Already Exists") {
                try await accessory.call("/org/bluez/hci0", "org.bluez.GattManager1", "RegisterApplication", [.objectPath(Accessory.root), .variantDictionary([:])])
            }
            await expectError("org.bluez.Error.DoesNotExist", "Does Not Exist") {
                try await accessory.call("/org/bluez/hci0", "org.bluez.GattManager1", "UnregisterApplication", [.objectPath("/nothing")])
            }
            try await accessory.call("/org/bluez/hci0", "org.bluez.GattManager1", "UnregisterApplication", [.objectPath(Accessory.root)])
            try await Self.state(simulator) { $0.applications = 0 }
            try await accessory.call("/org/bluez/hci0", "org.bluez.GattManager1", "RegisterApplication", [.objectPath(Accessory.root), .variantDictionary([:])])
            try await Self.state(simulator) { $0.applications = 1 }
            await accessory.client.close()
            try await Self.state(simulator) { $0.applications = 0 }
        }
    }

    @Test("lenient: pairs with no advertisement or application at all, under its identity address")
    func lenient() async throws {
        var settings = Self.settings()
        settings.ios = .lenient
        try await Self.withAccessory(settings) { simulator, accessory in
            try await accessory.registerAgent()
            try await simulator.execute(.pair(passkey: 1, expect: .paired, timeout: 0.2))
            #expect(try await accessory.phone()?.path == "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01")
            try await simulator.execute(.disconnect)
            try await simulator.execute(.connect(timeout: 0.2, expectAway: false))
            try await Self.state(simulator) { $0.connected = true }
        }
    }
}
