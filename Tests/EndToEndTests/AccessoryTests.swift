import DBus
import Foundation
import JSON
import Synchronization
import Testing
import TestSupport

/// A minimal bluetoothd written in the test: it owns org.bluez on a private bus, serves one
/// adapter and one device, records what ancsd asks of it, and reads what ancsd registers the
/// way bluetoothd does (GetAll of the advertisement, GetManagedObjects of the application).
/// For what the phone simulator cannot show: a device object named after a resolvable private
/// address, `Pair()` calls, the GATT application ancsd registers.
final class FakeBlueZ: Sendable {
    static let adapter: ObjectPath = "/org/bluez/hci0"
    /// The device object, named after the private address the phone first connected with.
    static let device: ObjectPath = "/org/bluez/hci0/dev_4A_11_22_33_44_55"
    static let privateAddress = "4A:11:22:33:44:55"
    static let identityAddress = "F0:11:22:33:44:55"
    static let ancs = "7905f431-b5ce-4e99-a40f-4b1e122d00d0"

    struct Record: Sendable {
        var calls: [String] = []
        var advertisement: [String: DBusValue]?
        var application: [ObjectPath: [String: [String: DBusValue]]]?
        var pairCalls = 0
    }

    final class Box: Sendable {
        let state = Mutex(Record())
        func withLock<T: Sendable>(_ body: (inout sending Record) -> sending T) -> T { state.withLock(body) }
    }

    let bus: PrivateBus
    let connection: DBusConnection
    private let record = Box()

    var calls: [String] { record.withLock { $0.calls } }
    var advertisement: [String: DBusValue]? { record.withLock { $0.advertisement } }
    var application: [ObjectPath: [String: [String: DBusValue]]]? { record.withLock { $0.application } }
    var pairCalls: Int { record.withLock { $0.pairCalls } }

    /// `paired`: the device is bonded and serves ANCS (for `ancsd run`); else it is connected
    /// and not paired (a phone in `ancsd pair`'s window before it bonds).
    init(paired: Bool, address: String) async throws {
        bus = try PrivateBus()
        connection = try await DBusConnection.connect(to: .address(bus.address))
        _ = try await connection.requestName("org.bluez")
        await connection.exportObjectManager(at: .root)
        let note: @Sendable (String) -> Void = { [record] entry in record.withLock { $0.calls.append(entry) } }
        let accept: @Sendable (DBusValue, MethodCall) throws -> Void = { value, call in note("set \(value.unwrapped)") }
        let connection = self.connection
        let record = self.record

        try await connection.export(ExportedObject(ExportedInterface("org.bluez.AgentManager1", methods: [
            .immediate("RegisterAgent", input: "os") { note("RegisterAgent \($0.arguments[0].objectPathValue?.rawValue ?? "")"); return [] },
            .immediate("UnregisterAgent", input: "o") { note("UnregisterAgent \($0.arguments[0].objectPathValue?.rawValue ?? "")"); return [] },
            .immediate("RequestDefaultAgent", input: "o") { _ in note("RequestDefaultAgent"); return [] },
        ])), at: "/org/bluez")

        try await connection.export(ExportedObject([
            ExportedInterface("org.bluez.Adapter1", properties: [
                ExportedProperty("Address", value: .string("00:1A:7D:DA:71:13")),
                ExportedProperty("Alias", value: .string("desk")),
                ExportedProperty("Powered", value: .bool(true)),
                ExportedProperty("Discoverable", value: .bool(false)),
                ExportedProperty("Pairable", value: .bool(false), access: .readWrite, onSet: accept),
                ExportedProperty("PairableTimeout", value: .uint32(0), access: .readWrite, onSet: accept),
            ]),
            ExportedInterface("org.bluez.LEAdvertisingManager1", methods: [
                ExportedMethod("RegisterAdvertisement", input: "oa{sv}") { call in
                    guard let path = call.arguments[0].objectPathValue else { throw DBusError.invalidArgument("path") }
                    let properties = try await connection.getAllProperties(
                        destination: BusName(validating: call.sender), path: path, interface: "org.bluez.LEAdvertisement1")
                    record.withLock {
                        $0.calls.append("RegisterAdvertisement \(path)")
                        $0.advertisement = properties
                    }
                    return []
                },
                .immediate("UnregisterAdvertisement", input: "o") { note("UnregisterAdvertisement \($0.arguments[0].objectPathValue?.rawValue ?? "")"); return [] },
            ]),
            ExportedInterface("org.bluez.GattManager1", methods: [
                ExportedMethod("RegisterApplication", input: "oa{sv}") { call in
                    guard let root = call.arguments[0].objectPathValue else { throw DBusError.invalidArgument("path") }
                    let objects = try await connection.getManagedObjects(destination: BusName(validating: call.sender), path: root)
                    record.withLock {
                        $0.calls.append("RegisterApplication \(root)")
                        $0.application = objects
                    }
                    return []
                },
                .immediate("UnregisterApplication", input: "o") { note("UnregisterApplication \($0.arguments[0].objectPathValue?.rawValue ?? "")"); return [] },
            ]),
        ]), at: Self.adapter)

        var uuids = ["00001800-0000-1000-8000-00805f9b34fb"]
        if paired { uuids.append(Self.ancs) }
        try await connection.export(ExportedObject(ExportedInterface(
            "org.bluez.Device1",
            methods: [
                .immediate("Pair") { _ in
                    record.withLock { $0.pairCalls += 1; $0.calls.append("Pair") }
                    // The phone began pairing itself on reading an encrypted attribute.
                    throw DBusError.remote(name: "org.bluez.Error.InProgress", message: "In Progress")
                },
            ],
            properties: [
                ExportedProperty("Address", value: .string(address)),
                ExportedProperty("AddressType", value: .string("random")),
                ExportedProperty("Alias", value: .string("iPhone")),
                ExportedProperty("Adapter", value: .objectPath(Self.adapter)),
                ExportedProperty("Connected", value: .bool(true)),
                ExportedProperty("Paired", value: .bool(paired)),
                ExportedProperty("Bonded", value: .bool(paired)),
                ExportedProperty("Trusted", value: .bool(paired)),
                ExportedProperty("ServicesResolved", value: .bool(true)),
                ExportedProperty("UUIDs", value: .stringArray(uuids)),
            ])), at: Self.device)

        guard paired else { return }
        let service = ObjectPath(validating: Self.device.rawValue + "/service0010")!
        try await connection.export(ExportedObject(ExportedInterface("org.bluez.GattService1", properties: [
            ExportedProperty("UUID", value: .string(Self.ancs)),
            ExportedProperty("Device", value: .objectPath(Self.device)),
            ExportedProperty("Primary", value: .bool(true)),
        ])), at: service)
        let characteristics: [(String, String)] = [
            ("char0011", "9fbf120d-6301-42d9-8c58-25e699a21dbd"),
            ("char0014", "69d1d8f3-45e1-49a8-9821-9bbdfdaad9d9"),
            ("char0017", "22eac6e9-24d6-4bb5-be44-b36ace7c7bfb"),
        ]
        for (name, uuid) in characteristics {
            try await connection.export(ExportedObject(ExportedInterface(
                "org.bluez.GattCharacteristic1",
                methods: [
                    .immediate("AcquireNotify", input: "a{sv}", output: "hq") { _ in
                        throw DBusError.remote(name: "org.bluez.Error.NotSupported", message: "Not Supported")
                    },
                    .immediate("StartNotify") { _ in note("StartNotify \(name)"); return [] },
                    .immediate("StopNotify") { _ in note("StopNotify \(name)"); return [] },
                    .immediate("WriteValue", input: "aya{sv}") { _ in [] },
                ],
                properties: [
                    ExportedProperty("UUID", value: .string(uuid)),
                    ExportedProperty("Service", value: .objectPath(service)),
                    ExportedProperty("Value", value: .byteArray([])),
                ])), at: ObjectPath(validating: service.rawValue + "/" + name)!)
        }
    }

    /// Changes a property of the device, as bluetoothd does (PropertiesChanged).
    func setDevice(_ name: String, _ value: DBusValue) async throws {
        try await connection.setExportedProperty(path: Self.device, interface: "org.bluez.Device1", name: name, value: value)
    }

    func close() async {
        await connection.close()
        bus.stop()
    }
}

/// Waits for a child to exit without blocking a cooperative thread.
func exitStatus(of child: ChildProcess, timeout: Duration = .seconds(30)) async throws -> Int32 {
    try await eventually("\(child) to exit", timeout: timeout) { !child.isRunning }
    return try child.wait(timeout: .seconds(5))
}

/// `ancsd pair`'s window against the test's bluetoothd: the accessory it registers and the
/// Pair() it asks of a connected, unpaired phone.
@Suite(.serialized) struct PairAccessoryTests {
    /// `ancsd pair` with a 3 s window and a 0.5 s wait for the phone to begin pairing by itself.
    func pair(_ bluez: FakeBlueZ, _ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", bluez.bus.address, "pair", "--yes", "--timeout", "3"] + arguments,
            environment: shortSecurityRequestDelay(0.5))
    }

    static let hidService = "00001812-0000-1000-8000-00805f9b34fb"

    /// The characteristics' UUIDs (16-bit, lower-case hex) under the HID service, by path.
    static func characteristics(_ objects: [ObjectPath: [String: [String: DBusValue]]]) -> [String: String] {
        var found: [String: String] = [:]
        for (path, interfaces) in objects {
            guard let uuid = interfaces["org.bluez.GattCharacteristic1"]?["UUID"]?.unwrapped.stringValue else { continue }
            found[path.rawValue] = String(uuid.dropFirst(4).prefix(4))
        }
        return found
    }

    @Test func registersTheHIDAccessoryAndAsksThePhoneToPairOnce() async throws {
        let bluez = try await FakeBlueZ(paired: false, address: FakeBlueZ.privateAddress)
        let ancsd = try pair(bluez, [])
        try await eventually("Pair()") { bluez.pairCalls == 1 }
        // Another change of the device makes the window look again: no second Pair().
        try await bluez.setDevice("Alias", .string("Ada's iPhone"))
        let status = try await exitStatus(of: ancsd)
        #expect(status == 3, "the window times out: \(ancsd.standardError)")
        #expect(bluez.pairCalls == 1, "\(bluez.calls)")
        #expect(ancsd.standardError.contains("\(FakeBlueZ.privateAddress)) connected unpaired: asking it to pair"), "\(ancsd.standardError)")

        // The application went to the adapter the advertisement went to, before it.
        let calls = bluez.calls
        let app = try #require(calls.firstIndex(of: "RegisterApplication /org/ancsd/accessory"), "\(calls)")
        let advert = try #require(calls.firstIndex(of: "RegisterAdvertisement /org/ancsd/pair/advertisement0"), "\(calls)")
        #expect(app < advert)
        #expect(calls.contains("UnregisterApplication /org/ancsd/accessory"))
        #expect(calls.contains("UnregisterAdvertisement /org/ancsd/pair/advertisement0"))
        // The keyboard by default: Protocol Mode beside the HID characteristics.
        let objects = try #require(bluez.application)
        #expect(objects["/org/ancsd/accessory/hid"]?["org.bluez.GattService1"]?["UUID"]?.unwrapped == .string(Self.hidService))
        #expect(objects["/org/ancsd/accessory/hid/report_map"]?["org.bluez.GattCharacteristic1"]?["Flags"]?.unwrapped == .stringArray(["encrypt-read"]))
        #expect(Set(Self.characteristics(objects).values) == ["2a4a", "2a4b", "2a4c", "2a4e", "2a4d"])

        let ad = try #require(bluez.advertisement)
        #expect(ad["ServiceUUIDs"]?.unwrapped == .stringArray([Self.hidService]))
        #expect(ad["SolicitUUIDs"]?.unwrapped == .stringArray([FakeBlueZ.ancs]))
        #expect(ad["Appearance"]?.unwrapped == .uint16(0x03C1), "Keyboard")
        let said = ancsd.lines.map(\.text).joined(separator: "\n")
        #expect(said.contains("tap \"desk\" (listed as a keyboard)"), "\(said)")
        #expect(said.contains("hides its on-screen keyboard") && said.contains("--accessory remote"), "what keyboard costs, and the way out")
        #expect(ancsd.standardError.contains("registered the HID accessory /org/ancsd/accessory on hci0: keyboard (a keyboard)"))
        #expect(ad["Discoverable"]?.unwrapped == .bool(true))
        #expect(ad["LocalName"]?.unwrapped == .string("desk"))
        // The adapter is put back: Pairable false, timeout 0, after the window's own settings.
        #expect(calls.filter { $0.hasPrefix("set ") }.suffix(2) == ["set uint32 0", "set false"], "\(calls)")
        await bluez.close()
    }

    /// `remote`, and `hid` its old name: the Consumer Control map without Protocol Mode, appearance
    /// 0x0180, and the user told to look for a remote.
    @Test(arguments: ["remote", "hid"])
    func remoteIsTheMediaRemote(name: String) async throws {
        let bluez = try await FakeBlueZ(paired: false, address: FakeBlueZ.privateAddress)
        let ancsd = try pair(bluez, ["--accessory", name])
        let status = try await exitStatus(of: ancsd)
        #expect(status == 3, "\(ancsd.standardError)")
        let objects = try #require(bluez.application)
        #expect(Set(Self.characteristics(objects).values) == ["2a4a", "2a4b", "2a4c", "2a4d"])
        let ad = try #require(bluez.advertisement)
        #expect(ad["ServiceUUIDs"]?.unwrapped == .stringArray([Self.hidService]))
        #expect(ad["Appearance"]?.unwrapped == .uint16(0x0180))
        let said = ancsd.lines.map(\.text).joined(separator: "\n")
        #expect(said.contains("(listed as a remote; the on-screen"), "\(said)")
        await bluez.close()
    }

    @Test func aBadShapeIsAUsageError() throws {
        let result = try AncsdProcess.run(["pair", "--accessory", "mouse"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("--accessory must be keyboard, remote or none, not 'mouse'"), "\(result.stderr)")
    }

    @Test func accessoryNoneIsTheOldAdvertisement() async throws {
        let bluez = try await FakeBlueZ(paired: false, address: FakeBlueZ.privateAddress)
        let ancsd = try pair(bluez, ["--accessory", "none"])
        let status = try await exitStatus(of: ancsd)
        #expect(status == 3, "\(ancsd.standardError)")
        #expect(!bluez.calls.contains { $0.contains("Application") }, "\(bluez.calls)")
        let ad = try #require(bluez.advertisement)
        #expect(ad["ServiceUUIDs"] == nil)
        #expect(ad["Appearance"]?.unwrapped == .uint16(0x0080))
        #expect(bluez.pairCalls == 1, "the security request does not depend on the accessory")
        await bluez.close()
    }
}

/// `ancsd status` and `doctor` say which shape `ancsd run` registered, and where.
@Suite(.serialized) struct RunAccessoryStatusTests {
    @Test(arguments: [("keyboard", "keyboard", "the shape seen listed by iOS 26"), ("hid", "remote", "inferred, not seen listed by an iPhone")])
    func statusNamesTheShape(asked: String, shape: String, evidence: String) async throws {
        let directory = NSTemporaryDirectory() + "ancsd-shape-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bluez = try await FakeBlueZ(paired: true, address: FakeBlueZ.identityAddress)
        let ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", bluez.bus.address, "run", "--config", "/dev/null", "--format", "json", "--control", directory + "/control",
             "--state-dir", directory, "--accessory", asked])
        try await eventually("the accessory registered") { bluez.calls.contains("RegisterApplication /org/ancsd/accessory") }
        var report = try JSONValue(parsing: "{}")
        try await eventually("status naming the adapter") {
            let status = try? AncsdProcess.run(["status", "--json", "--control", directory + "/control"])
            report = (try? JSONValue(parsing: status?.stdout ?? "")) ?? .null
            return report["accessory"]?["registered_on"]?.stringValue == "hci0"
        }
        #expect(report["accessory"]?["shape"]?.stringValue == shape, "\(report.serialized)")
        let text = try AncsdProcess.run(["status", "--control", directory + "/control"])
        #expect(text.stdout.contains("accessory: \(shape) (\(evidence)), registered on hci0"), "\(text.stdout)")
        let doctor = try AncsdProcess.run(["--bus", bluez.bus.address, "doctor", "--control", directory + "/control", "--fifo", "/nonexistent"])
        #expect(doctor.stdout.contains("the HID accessory: \(shape) (\(evidence)), registered on hci0"), "\(doctor.stdout)")
        ancsd.signal(SIGTERM)
        #expect(try await exitStatus(of: ancsd) == 0)
        await bluez.close()
    }
}

extension RunAccessoryStatusTests {
    /// A reload (SIGHUP) that changes `accessory =` registers the other shape: the keyboard's
    /// objects go (no Protocol Mode left), the remote's come, and status says so.
    @Test func aReloadChangesTheShape() async throws {
        let directory = NSTemporaryDirectory() + "ancsd-reshape-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = directory + "/ancsd.conf"
        try "accessory = keyboard\n".write(toFile: config, atomically: true, encoding: .utf8)
        let bluez = try await FakeBlueZ(paired: true, address: FakeBlueZ.identityAddress)
        let ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", bluez.bus.address, "run", "--config", config, "--format", "json", "--control", directory + "/control",
             "--state-dir", directory])
        try await eventually("the keyboard registered") {
            bluez.application?["/org/ancsd/accessory/hid/protocol_mode"] != nil
        }
        try "accessory = remote\n".write(toFile: config, atomically: true, encoding: .utf8)
        ancsd.signal(SIGHUP)
        try await eventually("the remote registered") {
            bluez.calls.filter { $0 == "RegisterApplication /org/ancsd/accessory" }.count == 2
        }
        let objects = try #require(bluez.application)
        #expect(objects["/org/ancsd/accessory/hid/protocol_mode"] == nil, "the keyboard's objects are gone")
        #expect(objects["/org/ancsd/accessory/hid/report_map"] != nil)
        // The advertisement is registered again after the application: waited for, not read at once.
        try await eventually("the remote advertised") { bluez.advertisement?["Appearance"]?.unwrapped == .uint16(0x0180) }
        let status = try AncsdProcess.run(["status", "--json", "--control", directory + "/control"])
        let report = try JSONValue(parsing: status.stdout)
        #expect(report["accessory"]?["shape"]?.stringValue == "remote", "\(status.stdout)")
        ancsd.signal(SIGTERM)
        #expect(try await exitStatus(of: ancsd) == 0)
        await bluez.close()
    }
}

/// Everything `ancsd run` shows is keyed on the phone's identity address, the `Address`
/// property, never on the private address its device object is named after.
@Suite(.serialized) struct IdentityAddressTests {
    /// `ancsd run` with its control socket and state in `directory`.
    func run(_ bluez: FakeBlueZ, _ directory: String, _ arguments: [String]) throws -> ChildProcess {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", bluez.bus.address, "run", "--config", "/dev/null", "--format", "json", "--control", directory + "/control",
             "--state-dir", directory] + arguments)
    }

    func events(_ child: ChildProcess) -> [JSONValue] {
        child.lines.compactMap { try? JSONValue(parsing: $0.text) }
    }

    func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "ancsd-identity-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// `dev_4A_…` whose Address is the identity address: the filter, the events, `list` and
    /// `status` use the identity address.
    @Test func theAddressPropertyIsThePhone() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bluez = try await FakeBlueZ(paired: true, address: FakeBlueZ.identityAddress)
        let ancsd = try run(bluez, directory, ["--device", FakeBlueZ.identityAddress, "--no-advertise"])
        try await eventually("connected") { events(ancsd).contains { $0["type"]?.stringValue == "connected" } }
        let connected = try #require(events(ancsd).first { $0["type"]?.stringValue == "connected" })
        #expect(connected["device"]?.stringValue == FakeBlueZ.identityAddress)
        let status = try AncsdProcess.run(["status", "--json", "--control", directory + "/control"])
        #expect(status.stdout.contains("\"\(FakeBlueZ.identityAddress)\""), "\(status.stdout)")
        #expect(!status.stdout.contains(FakeBlueZ.privateAddress) && !status.stdout.contains("4A_11"), "\(status.stdout)")
        let list = try AncsdProcess.run(["list", "--json", "--control", directory + "/control"])
        #expect(list.status == 0 && list.stdout.contains("\"\(FakeBlueZ.identityAddress)\""), "\(list.stdout)\(list.stderr)")
        ancsd.signal(SIGTERM)
        #expect(try await exitStatus(of: ancsd) == 0)
        await bluez.close()
    }

    /// The device bonded under a private address and BlueZ then changed `Address` to the
    /// identity (PropertiesChanged, same object path): a `--device` filter for the identity
    /// takes the phone from that moment, and a running link follows the change.
    @Test func followsTheAddressChangeAtBonding() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bluez = try await FakeBlueZ(paired: true, address: FakeBlueZ.privateAddress)
        let filtered = try run(bluez, directory + "/filtered", ["--device", FakeBlueZ.identityAddress, "--no-advertise"])
        let open = try run(bluez, directory, ["--no-advertise", "--record", directory])
        try await eventually("the open daemon's session") { events(open).contains { $0["type"]?.stringValue == "connected" } }
        #expect(events(open).first?["device"]?.stringValue == FakeBlueZ.privateAddress)
        try await Task.sleep(for: .milliseconds(300))
        #expect(!events(filtered).contains { $0["type"]?.stringValue == "connected" }, "the private address is not the phone asked for")

        try await bluez.setDevice("Address", .string(FakeBlueZ.identityAddress))
        try await eventually("the filtered daemon's session") { events(filtered).contains { $0["type"]?.stringValue == "connected" } }
        #expect(events(filtered).first { $0["type"]?.stringValue == "connected" }?["device"]?.stringValue == FakeBlueZ.identityAddress)
        // The open daemon's running link follows: `status` names the identity address only.
        var status = try AncsdProcess.run(["status", "--json", "--control", directory + "/control"])
        let deadline = ContinuousClock.now + .seconds(5)
        while !status.stdout.contains("\"\(FakeBlueZ.identityAddress)\""), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            status = try AncsdProcess.run(["status", "--json", "--control", directory + "/control"])
        }
        #expect(status.stdout.contains("\"\(FakeBlueZ.identityAddress)\"") && !status.stdout.contains(FakeBlueZ.privateAddress), "\(status.stdout)")
        #expect(open.standardError.contains("\(FakeBlueZ.privateAddress) is now \(FakeBlueZ.identityAddress)"))
        // The recording goes on in a file named after the identity address.
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".jsonl") }
        #expect(files.contains { $0.hasPrefix("F0-11-22-33-44-55_") }, "\(files)")

        try await bluez.setDevice("Connected", .bool(false))
        try await eventually("disconnected") { events(open).contains { $0["type"]?.stringValue == "disconnected" } }
        #expect(events(open).first { $0["type"]?.stringValue == "disconnected" }?["device"]?.stringValue == FakeBlueZ.identityAddress)
        for child in [open, filtered] {
            child.signal(SIGTERM)
            #expect(try await exitStatus(of: child) == 0)
        }
        await bluez.close()
    }
}
