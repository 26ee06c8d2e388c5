import BluetoothUUIDs
import BlueZ
import DBus
import Testing

private let device: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"

private func phoneTree(bonded: Bool? = nil, paired: Bool = true, connected: Bool = true) -> BlueZObjectTree {
    var deviceProperties: [String: DBusValue] = [
        "Address": .string("aa:bb:cc:dd:ee:01"), "Name": .string("iPhone"), "Alias": .string("Ada's iPhone"),
        "Adapter": .objectPath("/org/bluez/hci0"), "Paired": .bool(paired), "Trusted": .bool(true),
        "Connected": .bool(connected), "ServicesResolved": .bool(connected),
    ]
    if let bonded { deviceProperties["Bonded"] = .bool(bonded) }
    func characteristic(_ uuid: BluetoothUUID, service: ObjectPath) -> BlueZObjectTree.Interfaces {
        [BlueZ.gattCharacteristicInterface: ["UUID": .string(uuid.description), "Service": .objectPath(service)]]
    }
    let service = ObjectPath(stringLiteral: device.rawValue + "/service0010")
    return BlueZObjectTree([
        "/org/bluez/hci0": [BlueZ.adapterInterface: ["Address": .string("00:11:22:33:44:55")]],
        device: [BlueZ.deviceInterface: deviceProperties],
        service: [BlueZ.gattServiceInterface: ["UUID": .string(ANCSUUID.service.description.uppercased()), "Device": .objectPath(device)]],
        ObjectPath(stringLiteral: service.rawValue + "/char0011"): characteristic(ANCSUUID.notificationSource, service: service),
        ObjectPath(stringLiteral: service.rawValue + "/char0013"): characteristic(ANCSUUID.controlPoint, service: service),
        ObjectPath(stringLiteral: service.rawValue + "/char0016"): characteristic(ANCSUUID.dataSource, service: service),
    ])
}

@Suite struct ObjectTreeTests {
    @Test func findsThePhoneAndItsANCSCharacteristics() throws {
        let tree = phoneTree()
        let phone = try #require(tree.device(at: device))
        #expect(phone.address == "AA:BB:CC:DD:EE:01")
        #expect(phone.name == "Ada's iPhone")
        #expect(phone.adapterName == "hci0")
        #expect(phone.isBonded && phone.connected && phone.servicesResolved)
        #expect(tree.adapters == ["/org/bluez/hci0"])
        let ancs = try #require(tree.ancsCharacteristics(of: device))
        #expect(ancs.notificationSource.rawValue.hasSuffix("char0011"))
        #expect(ancs.controlPoint.rawValue.hasSuffix("char0013"))
        #expect(ancs.dataSource.rawValue.hasSuffix("char0016"))
    }

    @Test func bondedWinsOverPairedWhereBlueZHasIt() throws {
        #expect(phoneTree(bonded: false, paired: true).device(at: device)?.isBonded == false)
        #expect(phoneTree(bonded: nil, paired: true).device(at: device)?.isBonded == true)
        #expect(phoneTree(bonded: nil, paired: false).device(at: device)?.isBonded == false)
    }

    @Test func followsChangesAdditionsAndRemovals() throws {
        var tree = phoneTree()
        tree.change(device, interface: BlueZ.deviceInterface, changed: ["Connected": .variant(.bool(false))], invalidated: ["Alias"])
        #expect(tree.device(at: device)?.connected == false)
        #expect(tree.device(at: device)?.name == "iPhone")
        tree.change("/nowhere", interface: BlueZ.deviceInterface, changed: ["Connected": .bool(true)], invalidated: [])
        #expect(tree.objects["/nowhere"] == nil, "changes to unknown objects are ignored")

        let dataSource = try #require(tree.ancsCharacteristics(of: device)?.dataSource)
        tree.remove(dataSource, [BlueZ.gattCharacteristicInterface])
        #expect(tree.ancsCharacteristics(of: device) == nil, "all three characteristics are needed")
        #expect(tree.objects[dataSource] == nil)
        tree.add(dataSource, [BlueZ.gattCharacteristicInterface: [
            "UUID": .string(ANCSUUID.dataSource.description), "Service": .objectPath(ObjectPath(stringLiteral: device.rawValue + "/service0010")),
        ]])
        #expect(tree.ancsCharacteristics(of: device) != nil)
        tree.clear()
        #expect(tree.devices.isEmpty)
    }

    @Test func ignoresDevicesWithoutAValidAddress() {
        let tree = BlueZObjectTree(["/org/bluez/hci0/dev_x": [BlueZ.deviceInterface: ["Address": .string("not an address")]]])
        #expect(tree.devices.isEmpty)
    }

    @Test func addresses() {
        #expect(normalizedAddress("aa:bb:cc:dd:ee:ff") == "AA:BB:CC:DD:EE:FF")
        #expect(normalizedAddress("AA-BB-CC-DD-EE-FF") == "AA:BB:CC:DD:EE:FF")
        for bad in ["", "AA:BB:CC:DD:EE", "AA:BB:CC:DD:EE:FF:00", "AA:BB:CC:DD:EE:GG", "AAA:BB:CC:DD:EE:F"] {
            #expect(normalizedAddress(bad) == nil, "\(bad)")
        }
    }
}

@Suite struct ATTErrorMappingTests {
    @Test func mapsBlueZErrorsToATTCodes() {
        #expect(attErrorCode(in: .remote(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0xa2")) == 0xA2)
        #expect(attErrorCode(in: .remote(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0xA3")) == 0xA3)
        #expect(attErrorCode(in: .remote(name: "org.bluez.Error.NotPermitted", message: "Write not permitted")) == 0x03)
        #expect(attErrorCode(in: .remote(name: "org.bluez.Error.NotPermitted", message: "Not paired")) == 0x05)
        #expect(attErrorCode(in: .remote(name: "org.bluez.Error.Failed", message: "Not connected")) == nil)
        #expect(attErrorCode(in: .remote(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x")) == nil)
        #expect(attErrorCode(in: .timeout) == nil)
    }
}
