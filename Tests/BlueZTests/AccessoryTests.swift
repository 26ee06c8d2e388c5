import BluetoothUUIDs
import BlueZ
import DBus
import Testing
import Synchronization
import TestSupport

/// The report maps iOS reads once bonded: ancs-bridge's keyboard, byte for byte, and a media
/// remote that is no keyboard.
@Suite struct ReportMapTests {
    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    @Test func keyboardIsAncsBridgesMap() throws {
        let shape = Accessory.Shape.keyboard
        #expect(Self.hex(shape.reportMap) == "05010906a1018501050719e029e71500250175019508810275089501810105071900296515002565750895068100c0")
        #expect(shape.reportMap.count == 47)
        let map = try HIDReportDescriptor(shape.reportMap)
        #expect(map.applicationCollections == [.keyboard])
        #expect(map.declaresKeyboard)
        #expect(!map.names(page: 0x0C), "no Consumer page")
        // Report ID 1: 8 modifier bits, a reserved byte, 6 key slots = 8 bytes, as the idle report.
        let inputs = map.items.filter { $0.kind == .main && $0.tag == 0x8 }
        #expect(inputs.map(\.value) == [0x02, 0x01, 0x00])
        #expect(shape.idleReport == [UInt8](repeating: 0, count: 8))
        #expect(shape.appearance == 0x03C1)
        #expect(shape.proven)
    }

    @Test func remoteIsOneConsumerControlApplication() throws {
        let shape = Accessory.Shape.remote
        #expect(Self.hex(shape.reportMap) == "050c0901a1018501150026ff0319002aff03751095018100c0")
        let map = try HIDReportDescriptor(shape.reportMap)
        #expect(map.applicationCollections == [.consumerControl])
        #expect(!map.declaresKeyboard)
        #expect(!map.names(.keyboard) && !map.names(.keypad))
        #expect(!map.names(page: 0x01), "no Generic Desktop usage at all")
        #expect(shape.idleReport == [0x00, 0x00])
        #expect(shape.appearance == 0x0180)
        #expect(!shape.proven)
    }

    /// Both: every collection closed, and the one input report has the id the Report Reference names.
    @Test(arguments: [Accessory.Shape.keyboard, .remote])
    func oneReportWithTheReferencedID(shape: Accessory.Shape) throws {
        let map = try HIDReportDescriptor(shape.reportMap)
        let collections = map.items.filter { $0.kind == .main && $0.tag == 0xA }.count
        let ends = map.items.filter { $0.kind == .main && $0.tag == 0xC }.count
        #expect(collections == 1 && ends == 1)
        let reportIDs: [UInt32] = map.items.filter { $0.kind == .global && $0.tag == 0x8 }.map(\.value)
        #expect(reportIDs == [UInt32(Accessory.reportID)])
        #expect(Accessory.reportReference == [Accessory.reportID, 0x01])
    }

    @Test func kindsParseAndNameTheOtherShape() {
        #expect(AccessoryKind(parsing: "KEYBOARD") == .keyboard)
        #expect(AccessoryKind(parsing: "remote") == .remote)
        #expect(AccessoryKind(parsing: "hid") == .remote, "hid stays the remote's alias")
        #expect(AccessoryKind(parsing: "None") == .disabled)
        #expect(AccessoryKind(parsing: "mouse") == nil)
        #expect(AccessoryKind.names == ["keyboard", "remote", "none"])
        #expect(AccessoryKind.keyboard.other == .remote && AccessoryKind.remote.other == .keyboard)
        #expect(AccessoryKind.disabled.shape == nil && AccessoryKind.disabled.other == nil)
    }

    /// The walker sees a keyboard where there is one (the HID spec's boot keyboard, Appendix B.1
    /// abridged), and a keypad inside a usage range or a 4-byte usage: the check above is not vacuous.
    @Test func walkerFindsKeyboards() throws {
        let keyboard: [UInt8] = [
            0x05, 0x01, 0x09, 0x06, 0xA1, 0x01,  // Generic Desktop, Keyboard, Collection (Application)
            0x05, 0x07, 0x19, 0xE0, 0x29, 0xE7,  //   Keyboard page, Usage Minimum/Maximum (modifiers)
            0x15, 0x00, 0x25, 0x01, 0x75, 0x01, 0x95, 0x08, 0x81, 0x02,
            0xC0,
        ]
        let parsed = try HIDReportDescriptor(keyboard)
        #expect(parsed.applicationCollections == [.keyboard])
        #expect(parsed.declaresKeyboard)
        #expect(parsed.names(page: 0x07))

        let range: [UInt8] = [0x05, 0x0C, 0x09, 0x01, 0xA1, 0x01, 0x05, 0x01, 0x19, 0x05, 0x29, 0x08, 0x81, 0x00, 0xC0]
        #expect(try HIDReportDescriptor(range).names(.keypad))
        let extended: [UInt8] = [0x05, 0x0C, 0x09, 0x01, 0xA1, 0x01, 0x0B, 0x06, 0x00, 0x01, 0x00, 0x81, 0x00, 0xC0]
        #expect(try HIDReportDescriptor(extended).names(.keyboard))
    }

    /// A Keypad application with key codes (ESP32-BLE-Keyboard#137's fix) is no keyboard to iOS.
    @Test func keypadIsNoKeyboard() throws {
        let keypad: [UInt8] = [
            0x05, 0x01, 0x09, 0x07, 0xA1, 0x01,  // Generic Desktop, Keypad, Collection (Application)
            0x05, 0x07, 0x19, 0x00, 0x29, 0x65, 0x75, 0x08, 0x95, 0x06, 0x81, 0x00,
            0xC0,
        ]
        let parsed = try HIDReportDescriptor(keypad)
        #expect(parsed.names(.keypad))
        #expect(!parsed.declaresKeyboard)
    }

    @Test func truncatedDescriptorIsAnError() {
        #expect(throws: HIDReportDescriptor.ParseError.truncated(offset: 2)) {
            try HIDReportDescriptor([0x05, 0x0C, 0x26, 0xFF])
        }
    }
}

/// The advertisement's bytes as bluetoothd 5.66 builds them (src/shared/ad.c `bt_ad_generate`).
@Suite struct AdvertisementLayoutTests {
    static let hid: [UInt8] = [0x03, 0x03, 0x12, 0x18]
    static let solicitation: [UInt8] = [
        0x11, 0x15, 0xD0, 0x00, 0x2D, 0x12, 0x1E, 0x4B, 0x0F, 0xA4, 0x99, 0x4E, 0xCE, 0xB5, 0x31, 0xF4, 0x05, 0x79,
    ]

    @Test func pairWindowBytes() {
        let advert = Advertisement(localName: "iPhone", discoverable: true)
        #expect(advert.accessory == .keyboard, "the default")
        let (data, scan) = advert.legacyLayout()
        let expected: [UInt8] = Self.hid + Self.solicitation + [0x03, 0x19, 0xC1, 0x03] + [0x02, 0x01, 0x06]  // apart: Swift 6.0 type-checks it in time
        #expect(data == expected)
        #expect(data.count == 29)
        #expect(scan == [0x07, 0x09, 0x69, 0x50, 0x68, 0x6F, 0x6E, 0x65])
        // A discoverable dual-mode adapter: no "BR/EDR not supported".
        #expect(advert.legacyLayout(adapterDiscoverable: true, adapterHasBREDR: true).advertising.suffix(3) == [0x02, 0x01, 0x02])
        #expect(advert.legacyLayout(adapterDiscoverable: true, adapterHasBREDR: false).advertising.suffix(3) == [0x02, 0x01, 0x06])
    }

    @Test func remotePairWindowBytes() {
        let advert = Advertisement(localName: "iPhone", discoverable: true, accessory: .remote)
        let data = advert.legacyLayout().advertising
        let expected: [UInt8] = Self.hid + Self.solicitation + [0x03, 0x19, 0x80, 0x01] + [0x02, 0x01, 0x06]
        #expect(data == expected)
        #expect(data.count == 29)
    }

    @Test func runBytesHaveNoFlags() {
        let advert = Advertisement(localName: "iPhone", discoverable: false)
        let data = advert.legacyLayout().advertising
        let expected: [UInt8] = Self.hid + Self.solicitation + [0x03, 0x19, 0xC1, 0x03]
        #expect(data == expected)
        #expect(!Self.types(data).contains(0x01))
    }

    @Test func withoutTheAccessoryItIsTheOldAdvertisement() {
        let advert = Advertisement(localName: "desk", discoverable: true, accessory: .disabled)
        #expect(advert.appearance == 0x0080)
        #expect(advert.properties["ServiceUUIDs"] == nil)
        #expect(advert.legacyLayout().advertising == Self.solicitation + [0x03, 0x19, 0x80, 0x00] + [0x02, 0x01, 0x06])
    }

    /// Every combination, with the longest name: both PDUs within 31 bytes, well-formed AD
    /// structures, flags only when discoverable, the name only in the scan response.
    @Test func everythingFitsIn31Bytes() {
        let longest = String(repeating: "n", count: 40)
        for accessory in AccessoryKind.allCases {
            for discoverable in [true, false] {
                for adapterDiscoverable in [true, false] {
                    let advert = Advertisement(localName: longest, discoverable: discoverable, accessory: accessory)
                    let (data, scan) = advert.legacyLayout(adapterDiscoverable: adapterDiscoverable)
                    #expect(data.count <= 31 && scan.count <= 31)
                    #expect(scan.count == 31, "a 29-byte name fills the scan response")
                    let types = Self.types(data)
                    #expect(types.contains(0x01) == discoverable)
                    #expect(types.contains(0x03) == (accessory != .disabled))
                    #expect(types.contains(0x15) && types.contains(0x19))
                    #expect(!types.contains(0x08) && !types.contains(0x09))
                    #expect(Self.types(scan) == [0x09])
                }
            }
        }
    }

    @Test func propertiesCarryTheHIDServiceAndTheSolicitation() {
        let p = Advertisement(localName: "desk", discoverable: false).properties
        #expect(p["ServiceUUIDs"] == .stringArray(["00001812-0000-1000-8000-00805f9b34fb"]))
        #expect(p["SolicitUUIDs"] == .stringArray([ANCSUUID.service.description.lowercased()]))
        #expect(p["Appearance"] == .uint16(0x03C1))
        #expect(Advertisement(localName: "desk", discoverable: false, accessory: .remote).properties["Appearance"] == .uint16(0x0180))
        #expect(p["Discoverable"] == .bool(false))
        #expect(p["Type"] == .string("peripheral"))
    }

    /// The AD types in order; records an issue if a length runs past the end.
    static func types(_ bytes: [UInt8]) -> [UInt8] {
        var types: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let length = Int(bytes[index])
            guard length > 0, index + 1 + length <= bytes.count else {
                Issue.record("malformed AD structure at \(index) in \(bytes)")
                return types
            }
            types.append(bytes[index + 1])
            index += 1 + length
        }
        return types
    }
}

/// The exported application on a private bus, as bluetoothd sees it: the contract's tree, and
/// nobody but the owner of org.bluez may use it.
@Suite(.serialized) struct AccessoryExportTests {
    /// A bus where `bluez` owns org.bluez, `ancsd` exports the application and `stranger` is
    /// any other client.
    struct Setup {
        let bus: PrivateBus
        let bluez: DBusConnection
        let ancsd: DBusConnection
        let stranger: DBusConnection
        let owner: BlueZOwner
        var ancsdName: BusName { BusName(validating: ancsd.uniqueName)! }
    }

    func withSetup(_ shape: Accessory.Shape = .keyboard, _ body: (Setup) async throws -> Void) async throws {
        let bus = try PrivateBus()
        defer { bus.stop() }
        let bluez = try await DBusConnection.connect(to: .address(bus.address))
        let ancsd = try await DBusConnection.connect(to: .address(bus.address))
        let stranger = try await DBusConnection.connect(to: .address(bus.address))
        _ = try await bluez.requestName(BlueZ.service)
        let owner = try await BlueZOwner.track(on: ancsd)
        try await Accessory.export(shape, on: ancsd, owner: owner)
        let setup = Setup(bus: bus, bluez: bluez, ancsd: ancsd, stranger: stranger, owner: owner)
        do {
            try await body(setup)
        } catch {
            Issue.record(error)
        }
        await owner.stop()
        for connection in [bluez, ancsd, stranger] { await connection.close() }
    }

    @Test(arguments: [Accessory.Shape.keyboard, .remote])
    func managedObjectsAreTheContractsTree(shape: Accessory.Shape) async throws {
        try await withSetup(shape) { s in
            let objects = try await s.bluez.getManagedObjects(destination: s.ancsdName, path: Accessory.root)
            func uuid16(_ n: String) -> DBusValue { .string("0000\(n)-0000-1000-8000-00805f9b34fb") }
            let service = try #require(objects["/org/ancsd/accessory/hid"]?["org.bluez.GattService1"])
            #expect(service["UUID"]?.unwrapped == .string("00001812-0000-1000-8000-00805f9b34fb"))
            #expect(service["Primary"]?.unwrapped == .bool(true))
            var expected: [(ObjectPath, String, [String])] = [
                ("/org/ancsd/accessory/hid/info", "2a4a", ["encrypt-read"]),
                ("/org/ancsd/accessory/hid/report_map", "2a4b", ["encrypt-read"]),
                ("/org/ancsd/accessory/hid/control_point", "2a4c", ["write-without-response", "encrypt-write"]),
            ]
            if shape.kind == .keyboard {  // as ancs-bridge serves it: read (encrypted) and write
                expected.append(
                    ("/org/ancsd/accessory/hid/protocol_mode", "2a4e", ["encrypt-read", "write-without-response", "encrypt-write"]))
            }
            expected.append(("/org/ancsd/accessory/hid/report", "2a4d", ["encrypt-read", "notify"]))
            for (path, uuid, flags) in expected {
                let c = try #require(objects[path]?["org.bluez.GattCharacteristic1"], "\(path)")
                #expect(c["UUID"]?.unwrapped == uuid16(uuid), "\(path)")
                #expect(c["Service"]?.unwrapped == .objectPath("/org/ancsd/accessory/hid"), "\(path)")
                #expect(c["Flags"]?.unwrapped == .stringArray(flags), "\(path)")
                #expect(c["Value"] == nil, "\(path): no Value property that could ever change")
            }
            let reference = try #require(objects["/org/ancsd/accessory/hid/report/reference"]?["org.bluez.GattDescriptor1"])
            #expect(reference["UUID"]?.unwrapped == uuid16("2908"))
            #expect(reference["Characteristic"]?.unwrapped == .objectPath("/org/ancsd/accessory/hid/report"))
            #expect(reference["Flags"]?.unwrapped == .stringArray(["encrypt-read"]))
            // Nothing else: no Device Information, no Battery (the remote: no Protocol Mode).
            let gatt = objects.filter { $0.value.keys.contains { $0.hasPrefix("org.bluez.Gatt") } }
            #expect(gatt.count == expected.count + 2)
        }
    }

    @Test(arguments: [Accessory.Shape.keyboard, .remote])
    func bluetoothdReadsTheValuesWithOffsets(shape: Accessory.Shape) async throws {
        try await withSetup(shape) { s in
            func read(_ path: ObjectPath, _ interface: InterfaceName = "org.bluez.GattCharacteristic1", offset: UInt16? = nil) async throws -> [UInt8]? {
                let options: [String: DBusValue] = offset.map { ["offset": .uint16($0)] } ?? [:]
                return try await s.bluez.call(
                    destination: s.ancsdName, path: path, interface: interface, member: "ReadValue",
                    arguments: [.variantDictionary(options)], expecting: "ay")[0].bytes
            }
            #expect(try await read("/org/ancsd/accessory/hid/report_map") == shape.reportMap)
            #expect(try await read("/org/ancsd/accessory/hid/report_map", offset: 4) == Array(shape.reportMap.dropFirst(4)))
            #expect(try await read("/org/ancsd/accessory/hid/info") == [0x11, 0x01, 0x00, 0x02])
            #expect(try await read("/org/ancsd/accessory/hid/report") == shape.idleReport)
            if shape.kind == .keyboard {
                #expect(try await read("/org/ancsd/accessory/hid/protocol_mode") == [0x01], "Report Protocol")
                _ = try await s.bluez.call(
                    destination: s.ancsdName, path: "/org/ancsd/accessory/hid/protocol_mode", interface: "org.bluez.GattCharacteristic1",
                    member: "WriteValue", arguments: [.byteArray([0x01]), .variantDictionary([:])], expecting: .empty)
            }
            #expect(try await read("/org/ancsd/accessory/hid/report/reference", "org.bluez.GattDescriptor1") == [1, 0x01])
            do {
                _ = try await read("/org/ancsd/accessory/hid/info", offset: 5)
                Issue.record("an offset past the end was answered")
            } catch let error as DBusError {
                #expect(error.name == "org.bluez.Error.InvalidOffset")
            }
            // bluetoothd may subscribe to the report and write the control point.
            _ = try await s.bluez.call(
                destination: s.ancsdName, path: "/org/ancsd/accessory/hid/report", interface: "org.bluez.GattCharacteristic1",
                member: "StartNotify", expecting: .empty)
            _ = try await s.bluez.call(
                destination: s.ancsdName, path: "/org/ancsd/accessory/hid/control_point", interface: "org.bluez.GattCharacteristic1",
                member: "WriteValue", arguments: [.byteArray([0x00]), .variantDictionary([:])], expecting: .empty)
        }
    }

    @Test func anyoneElseIsRefused() async throws {
        try await withSetup { s in
            let calls: [(ObjectPath, InterfaceName, MemberName, [DBusValue])] = [
                ("/org/ancsd/accessory/hid/report_map", "org.bluez.GattCharacteristic1", "ReadValue", [.variantDictionary([:])]),
                ("/org/ancsd/accessory/hid/info", "org.bluez.GattCharacteristic1", "ReadValue", [.variantDictionary([:])]),
                ("/org/ancsd/accessory/hid/report/reference", "org.bluez.GattDescriptor1", "ReadValue", [.variantDictionary([:])]),
                ("/org/ancsd/accessory/hid/report", "org.bluez.GattCharacteristic1", "StartNotify", []),
                ("/org/ancsd/accessory/hid/control_point", "org.bluez.GattCharacteristic1", "WriteValue",
                 [.byteArray([0x01]), .variantDictionary([:])]),
            ]
            for (path, interface, member, arguments) in calls {
                do {
                    _ = try await s.stranger.call(
                        destination: s.ancsdName, path: path, interface: interface, member: member, arguments: arguments,
                        timeout: .seconds(5))
                    Issue.record("\(member) on \(path) from a stranger was answered")
                } catch let error as DBusError {
                    #expect(error.name == DBusError.Names.accessDenied, "\(member) on \(path): \(error)")
                }
            }
        }
    }

    /// RegisterApplication goes to the adapter's GattManager1 with the root and no options.
    @Test func gattManagerRegistersTheRoot() async throws {
        try await withSetup { s in
            let calls = CallLog()
            try await s.bluez.export(
                ExportedObject(ExportedInterface("org.bluez.GattManager1", methods: [
                    ExportedMethod("RegisterApplication", input: "oa{sv}") { call in
                        calls.append("register \(call.arguments[0].objectPathValue?.rawValue ?? "?") \(call.arguments[1].stringKeyedDictionary?.count ?? -1)")
                        return []
                    },
                    ExportedMethod("UnregisterApplication", input: "o") { call in
                        calls.append("unregister \(call.arguments[0].objectPathValue?.rawValue ?? "?")")
                        return []
                    },
                ])),
                at: "/org/bluez/hci0")
            let manager = GattManager(connection: s.ancsd, adapter: "/org/bluez/hci0")
            try await manager.register(Accessory.root)
            try await manager.unregister(Accessory.root)
            #expect(calls.entries == ["register /org/ancsd/accessory 0", "unregister /org/ancsd/accessory"])
        }
    }
}

final class CallLog: Sendable {
    private let log = Mutex<[String]>([])
    func append(_ entry: String) { log.withLock { $0.append(entry) } }
    var entries: [String] { log.withLock { $0 } }
}
