import ANCS
import DBus
import JSON
import Foundation
import PhoneSimulator
import Testing
import TestSupport

/// The simulator on a private bus, driven in-process, with a client on our own D-Bus layer.
@Suite("Simulator on a private bus", .serialized)
struct IntegrationTests {
    static let device: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"
    static let service: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010"
    static let ns: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010/char0011"
    static let cp: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010/char0013"
    static let ds: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010/char0016"
    static let chr: InterfaceName = "org.bluez.GattCharacteristic1"

    static let settings = ScenarioSettings(
        name: "test", mtu: 23,
        devices: [DeviceSettings(address: "AA:BB:CC:DD:EE:01", name: "Ada's iPhone", mtu: 23)],
        apps: ["com.apple.MobileSMS": "Messages"])

    static let sms = NotificationSpec(
        uid: 1, category: .social, flags: [.positiveAction, .negativeAction],
        attributes: [.appIdentifier: "com.apple.MobileSMS", .title: "Grace Hopper",
                     .message: "Found the bug — a moth in relay 70 🦋", .date: "20261130T101200",
                     .positiveActionLabel: "Reply", .negativeActionLabel: "Clear"])

    /// `sms` as the phone sends it.
    static let smsWire: [NotificationAttributeID: [UInt8]] = {
        var out = sms.attributes.mapValues { Array($0.utf8) }
        out[.messageSize] = Array(String(sms.attributes[.message]?.utf8.count ?? 0).utf8)
        return out
    }()

    static let request = ControlPointRequest.getNotificationAttributes(uid: 1, attributes: [
        NotificationAttributeRequest(.appIdentifier), NotificationAttributeRequest(.title, maxLength: 64),
        NotificationAttributeRequest(.message, maxLength: 20), NotificationAttributeRequest(.messageSize),
        NotificationAttributeRequest(.date), NotificationAttributeRequest(.positiveActionLabel),
        NotificationAttributeRequest(.negativeActionLabel),
    ])

    /// Runs `body` with a bus, a started simulator and a client connection; tears all down.
    static func withSimulator(
        _ settings: ScenarioSettings = settings,
        _ body: @escaping @Sendable (TestBus, PhoneSimulator, DBusConnection) async throws -> Void
    ) async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let simulator = PhoneSimulator(settings: settings, bus: .address(bus.address), log: { _ in })
        try await withTimeout(20, "the test") {
            try await simulator.start()
            let client = try await DBusConnection.connect(to: .address(bus.address))
            do {
                try await body(bus, simulator, client)
            } catch {
                await client.close()
                await simulator.stop()
                throw error
            }
            await client.close()
            await simulator.stop()
        }
    }

    static func write(_ client: DBusConnection, _ value: [UInt8]) async throws {
        _ = try await client.call(
            destination: "org.bluez", path: cp, interface: chr, member: "WriteValue",
            arguments: [.byteArray(value), .variantDictionary(["type": .string("request")])], expecting: .empty,
            timeout: .seconds(5))
    }

    static func call(_ client: DBusConnection, _ path: ObjectPath, _ member: MemberName, _ arguments: [DBusValue] = [], expecting: Signature = .empty) async throws -> [DBusValue] {
        try await client.call(destination: "org.bluez", path: path, interface: chr, member: member, arguments: arguments, expecting: expecting, timeout: .seconds(5))
    }

    @Test("the BlueZ 5.66 object tree")
    func tree() async throws {
        try await Self.withSimulator { _, _, client in
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            let adapter = try #require(objects["/org/bluez/hci0"]?["org.bluez.Adapter1"])
            #expect(adapter["Powered"] == .bool(true))
            #expect(adapter["Address"] == .string("00:1A:7D:DA:71:13"))
            #expect(objects["/org/bluez"]?["org.bluez.AgentManager1"] != nil)
            #expect(objects["/org/bluez/hci0"]?["org.bluez.LEAdvertisingManager1"] != nil)
            let device = try #require(objects[Self.device]?["org.bluez.Device1"])
            #expect(device["Address"] == .string("AA:BB:CC:DD:EE:01"))
            #expect(device["AddressType"] == .string("random"))
            #expect(device["Name"] == .string("Ada's iPhone"))
            for key in ["Paired", "Bonded", "Trusted", "Connected", "ServicesResolved"] {
                #expect(device[key] == .bool(true), "\(key)")
            }
            #expect(device["Adapter"] == .objectPath("/org/bluez/hci0"))
            #expect(device["UUIDs"]?.stringArray?.contains("7905f431-b5ce-4e99-a40f-4b1e122d00d0") == true)
            let service = try #require(objects[Self.service]?["org.bluez.GattService1"])
            #expect(service["UUID"] == .string("7905f431-b5ce-4e99-a40f-4b1e122d00d0"))
            #expect(service["Primary"] == .bool(true))
            #expect(service["Device"] == .objectPath(Self.device))
            let expected: [(ObjectPath, String, [String])] = [
                (Self.ns, "9fbf120d-6301-42d9-8c58-25e699a21dbd", ["notify"]),
                (Self.cp, "69d1d8f3-45e1-49a8-9821-9bbdfdaad9d9", ["write"]),
                (Self.ds, "22eac6e9-24d6-4bb5-be44-b36ace7c7bfb", ["notify"]),
            ]
            for (path, uuid, flags) in expected {
                let c = try #require(objects[path]?["org.bluez.GattCharacteristic1"])
                #expect(c["UUID"] == .string(uuid))
                #expect(c["Flags"]?.stringArray == flags)
                #expect(c["Service"] == .objectPath(Self.service))
                #expect((c["Notifying"] != nil) == (flags == ["notify"]), "Notifying only on notify characteristics")
                #expect((c["NotifyAcquired"] != nil) == (flags == ["notify"]))
                #expect(c["WriteAcquired"] == nil, "no write-without-response, so no WriteAcquired")
            }
        }
    }

    @Test("StartNotify, replay of queued notifications, CP write and the Data Source bytes")
    func startNotifyFlow() async throws {
        try await Self.withSimulator { _, simulator, client in
            // Added before anyone subscribed: the phone keeps it and replays it.
            try await simulator.execute(.add(Self.sms))
            let collector = Collector()
            _ = try await client.subscribe(to: .propertiesChanged(sender: "org.bluez", pathNamespace: Self.device), handler: collector.handler)
            _ = try await Self.call(client, Self.ds, "StartNotify")
            #expect(!simulator.isSubscribed())
            _ = try await Self.call(client, Self.ns, "StartNotify")
            #expect(simulator.isSubscribed())
            #expect(try await client.getProperty(destination: "org.bluez", path: Self.ns, interface: Self.chr, name: "Notifying") == .bool(true))
            // StartNotify again from the same client succeeds, as in bluetoothd.
            _ = try await Self.call(client, Self.ns, "StartNotify")

            let replayed = try NotificationSourceEvent(decoding: try await collector.waitForValues(1, at: Self.ns)[0])
            #expect(replayed == NotificationSourceEvent(
                eventID: .notificationAdded, flags: [.preExisting, .positiveAction, .negativeAction], categoryID: .social,
                categoryCount: 1, notificationUID: 1))

            try await Self.write(client, try Self.request.encoded())
            let expected = try #require(DataSourceEncoder.response(to: Self.request, notificationAttributes: Self.smsWire))
            try await eventually("the whole response") {
                collector.values(at: Self.ds).reduce(0) { $0 + $1.count } >= expected.count
            }
            var reassembler = DataSourceReassembler()
            try reassembler.expect(Self.request)
            var response: DataSourceResponse?
            for fragment in collector.values(at: Self.ds) {
                #expect(fragment.count <= 20, "MTU 23 carries 20 bytes per notification")
                let output = reassembler.feed(fragment)
                #expect(output.error == nil)
                if let r = output.response { response = r }
            }
            collector.clear()
            let r = try #require(response)
            #expect(r.isComplete)
            #expect(r.value(of: .title) == Array("Grace Hopper".utf8))
            let message = try #require(r.value(of: .message))
            #expect(message.count <= 20 && Array(message.suffix(3)) == DataSourceEncoder.ellipsis)
            #expect(r.value(of: .messageSize) == Array(String("Found the bug — a moth in relay 70 🦋".utf8.count).utf8))
            #expect(r.value(of: .date) == Array("20261130T101200".utf8))
            #expect(r.value(of: .positiveActionLabel) == Array("Reply".utf8))

            // App attributes.
            let app = ControlPointRequest.getAppAttributes(appIdentifier: "com.apple.MobileSMS", attributes: [.displayName])
            try await Self.write(client, try app.encoded())
            let appBytes = try #require(DataSourceEncoder.response(to: app, appAttributes: [.displayName: Array("Messages".utf8)]))
            try await eventually("the app response") {
                collector.values(at: Self.ds).reduce(0) { $0 + $1.count } >= appBytes.count
            }
            let dsValues = collector.values(at: Self.ds)
            #expect(dsValues.count == 2, "32 bytes at MTU 23: two notifications")
            var appReassembler = DataSourceReassembler()
            try appReassembler.expect(app)
            let output = appReassembler.feed(dsValues.flatMap { $0 })
            #expect(output.response?.value(of: .displayName) == Array("Messages".utf8))
            collector.clear()

            // A live add arrives as Added without pre-existing; a removal as Removed.
            var second = Self.sms
            second.uid = 2
            try await simulator.execute(.add(second))
            try await simulator.execute(.remove(uid: 2))
            let events = try await collector.waitForValues(2, at: Self.ns).map { try NotificationSourceEvent(decoding: $0) }
            #expect(events.map(\.eventID) == [.notificationAdded, .notificationRemoved])
            #expect(events.map(\.notificationUID) == [2, 2])
            #expect(events.map(\.categoryCount) == [2, 1])
            #expect(!events[0].flags.contains(.preExisting))

            // StopNotify ends the session; a second StopNotify has none to end.
            _ = try await Self.call(client, Self.ns, "StopNotify")
            #expect(!simulator.isSubscribed())
            await expectError("org.bluez.Error.Failed", "No notify session started") {
                _ = try await Self.call(client, Self.ns, "StopNotify")
            }
        }
    }

    @Test("ATT errors map to BlueZ's D-Bus errors")
    func errors() async throws {
        try await Self.withSimulator { _, simulator, client in
            try await simulator.execute(.add(Self.sms))
            let valid = try Self.request.encoded()
            await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0xa1") {
                try await Self.write(client, [0x00, 0x01])  // truncated UID
            }
            await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0xa0") {
                try await Self.write(client, [0x07, 0x01])
            }
            await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0xa2") {
                try await Self.write(client, try ControlPointRequest.getNotificationAttributes(
                    uid: 99, attributes: [NotificationAttributeRequest(.title, maxLength: 10)]).encoded())
            }
            var plain = Self.sms
            plain.uid = 3
            plain.flags = []
            try await simulator.execute(.add(plain))
            await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0xa3") {
                try await Self.write(client, try ControlPointRequest.performNotificationAction(uid: 3, action: .positive).encoded())
            }
            try await Self.write(client, try ControlPointRequest.performNotificationAction(uid: 1, action: .positive).encoded())
            try await simulator.execute(.cpError(code: 0xA2, count: 2))
            for _ in 0..<2 {
                await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0xa2") {
                    try await Self.write(client, valid)
                }
            }
            try await Self.write(client, valid)  // the injected errors are used up
            try await simulator.execute(.cpError(code: 0x05, count: 1))
            await expectError("org.bluez.Error.NotPermitted", "Not paired") { try await Self.write(client, valid) }
            try await simulator.execute(.denySharing)
            await expectError("org.bluez.Error.NotPermitted", "Write not permitted") { try await Self.write(client, valid) }
            try await simulator.execute(.allowSharing)
            try await Self.write(client, valid)
            await expectError("org.bluez.Error.NotPermitted", "Write not permitted") {
                _ = try await Self.call(client, Self.ns, "WriteValue", [.byteArray([1]), .variantDictionary([:])])
            }
            await expectError("org.bluez.Error.NotSupported", "Operation is not supported") {
                _ = try await Self.call(client, Self.cp, "StartNotify")
            }
            await expectError("org.bluez.Error.NotPermitted", "Read not permitted") {
                _ = try await Self.call(client, Self.ns, "ReadValue", [.variantDictionary([:])], expecting: "ay")
            }
            // Disconnected: ServicesResolved goes false at once, Connected a moment later (as
            // bluetoothd does); every call fails meanwhile, except StartNotify, which bluetoothd
            // accepts on a link that is down.
            try await simulator.execute(.disconnect)
            #expect(try await client.getProperty(destination: "org.bluez", path: Self.device, interface: "org.bluez.Device1", name: "ServicesResolved") == .bool(false))
            await expectError("org.bluez.Error.Failed", "Not connected") { try await Self.write(client, valid) }
            _ = try await Self.call(client, Self.ns, "StartNotify")
            try await eventually("Connected false") {
                try await client.getProperty(destination: "org.bluez", path: Self.device, interface: "org.bluez.Device1", name: "Connected") == .bool(false)
            }
            await expectError("org.bluez.Error.Failed", "Not connected") {
                _ = try await Self.call(client, Self.ns, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            }
        }
    }

    @Test("WriteValue options: type, several entries, nested variants; no interface, wrong signature, unknown method")
    func writeValueOptions() async throws {
        try await Self.withSimulator { _, simulator, client in
            try await simulator.execute(.add(Self.sms))
            let valid = try Self.request.encoded()
            /// A WriteValue of `valid` with these options, in this order (values wrapped in a variant).
            func write(_ options: [(String, DBusValue)], interface: InterfaceName? = Self.chr) async throws {
                let dict = DBusValue.dictionary(
                    key: "s", value: "v", options.map { (key: .string($0.0), value: .variant($0.1)) })
                _ = try await client.call(
                    destination: "org.bluez", path: Self.cp, interface: interface, member: "WriteValue",
                    arguments: [.byteArray(valid), dict], expecting: .empty, timeout: .seconds(5))
            }
            let notSupported = ("org.bluez.Error.NotSupported", "Operation is not supported")
            let invalid = ("org.bluez.Error.InvalidArguments", "Invalid arguments in method call")
            try await write([])
            try await write([("type", .string("request"))])
            for type in ["command", "reliable"] {
                await expectError(notSupported.0, notSupported.1) { try await write([("type", .string(type))]) }
            }
            await expectError(invalid.0, invalid.1) { try await write([("type", .string("Request"))]) }
            // A `type` that is not a string counts as none.
            try await write([("type", .uint32(1))])
            try await write([("type", .objectPath("/command"))])
            // Of several entries the last `type` decides; other keys are ignored.
            try await write([("offset", .uint16(0)), ("type", .string("command")), ("type", .string("request"))])
            await expectError(notSupported.0, notSupported.1) {
                try await write([("type", .string("request")), ("mtu", .uint16(23)), ("type", .string("command"))])
            }
            try await write([("type", .string("command")), ("type", .byte(0))])
            // Variants inside the variant are looked through.
            await expectError(notSupported.0, notSupported.1) { try await write([("type", .variant(.variant(.string("command"))))]) }
            await expectError(invalid.0, invalid.1) { try await write([("type", .variant(.string("")))]) }
            try await write([("type", .variant(.variant(.int32(7))))])
            // A call that names no interface finds the method all the same, with the same answers.
            try await write([("type", .string("request"))], interface: nil)
            await expectError(notSupported.0, notSupported.1) { try await write([("type", .string("command"))], interface: nil) }
            await expectError("org.freedesktop.DBus.Error.InvalidArgs", "Method 'WriteValue' takes signature 'aya{sv}', got 'ay'") {
                _ = try await Self.call(client, Self.cp, "WriteValue", [.byteArray(valid)])
            }
            await expectError("org.freedesktop.DBus.Error.InvalidArgs", "Method 'WriteValue' takes signature 'aya{sv}', got 'aya{ss}'") {
                _ = try await Self.call(client, Self.cp, "WriteValue", [
                    .byteArray(valid), .dictionary(key: "s", value: "s", [(key: .string("type"), value: .string("request"))]),
                ])
            }
            await expectError("org.freedesktop.DBus.Error.UnknownMethod", "No such method 'WriteValues' in 'org.bluez.GattCharacteristic1'") {
                _ = try await Self.call(client, Self.cp, "WriteValues", [.byteArray(valid), .variantDictionary([:])])
            }
            await expectError("org.freedesktop.DBus.Error.UnknownInterface",
                              "No such interface 'org.bluez.GattCharacteristic2' at '\(Self.cp)'") {
                _ = try await client.call(
                    destination: "org.bluez", path: Self.cp, interface: "org.bluez.GattCharacteristic2", member: "WriteValue",
                    arguments: [.byteArray(valid), .variantDictionary([:])], expecting: .empty, timeout: .seconds(5))
            }
            // Not the Control Point: the `type` check comes first, as in bluetoothd.
            await expectError(notSupported.0, notSupported.1) {
                _ = try await Self.call(client, Self.ns, "WriteValue", [.byteArray([1]), .variantDictionary(["type": .string("command")])])
            }
        }
    }

    @Test("AcquireNotify: a socket per characteristic, exclusive, released on close, HUP on disconnect")
    func acquireNotify() async throws {
        try await Self.withSimulator { _, simulator, client in
            try await simulator.execute(.add(Self.sms))
            let reply = try await Self.call(client, Self.ns, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            let fd = try #require(reply[0].unixFDValue?.take())
            defer { close(fd) }
            #expect(reply[1] == .uint16(23))
            #expect(try await client.getProperty(destination: "org.bluez", path: Self.ns, interface: Self.chr, name: "NotifyAcquired") == .bool(true))
            #expect(simulator.isSubscribed())
            // The replay arrives as one datagram per notification.
            let first = try #require(try await readDatagram(fd))
            #expect(try NotificationSourceEvent(decoding: first).flags.contains(.preExisting))

            // Exclusive, with bluetoothd's errors.
            await expectError("org.bluez.Error.NotPermitted", "Notify acquired") {
                _ = try await Self.call(client, Self.ns, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            }
            await expectError("org.bluez.Error.NotPermitted", "Notify acquired") { _ = try await Self.call(client, Self.ns, "StartNotify") }
            _ = try await Self.call(client, Self.ds, "StartNotify")
            await expectError("org.bluez.Error.InProgress", "In Progress") {
                _ = try await Self.call(client, Self.ds, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            }
            _ = try await Self.call(client, Self.ds, "StopNotify")
            let dsReply = try await Self.call(client, Self.ds, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            let dsFD = try #require(dsReply[0].unixFDValue?.take())
            defer { close(dsFD) }

            // A CP write answered in datagrams of at most mtu - 3 bytes.
            try await Self.write(client, try Self.request.encoded())
            var reassembler = DataSourceReassembler()
            try reassembler.expect(Self.request)
            var response: DataSourceResponse?
            while response == nil {
                let datagram = try #require(try await readDatagram(dsFD))
                #expect(datagram.count <= 20)
                let output = reassembler.feed(datagram)
                #expect(output.error == nil)
                response = output.response
            }
            #expect(response?.value(of: .negativeActionLabel) == Array("Clear".utf8))

            // Live events on the NS socket.
            try await simulator.execute(.modify(uid: 1, NotificationChange(attributes: [.message: "changed"])))
            let modified = try NotificationSourceEvent(decoding: try #require(try await readDatagram(fd)))
            #expect(modified.eventID == .notificationModified && modified.notificationUID == 1)

            // Closing our end releases the acquisition.
            close(dsFD)
            try await eventually("NotifyAcquired false after close") {
                try await client.getProperty(destination: "org.bluez", path: Self.ds, interface: Self.chr, name: "NotifyAcquired") == .bool(false)
            }

            // Disconnect: our end sees EOF (HUP), the state is dropped, a new session replays
            // with new UIDs.
            try await simulator.execute(.disconnect)
            #expect(try await readDatagram(fd) == nil)
            #expect(!simulator.isSubscribed())
            // A strict phone comes back only to a connectable HID advertisement (as `ancsd run` registers).
            try await advertiseHID(client)
            try await simulator.execute(.connect(timeout: 5, expectAway: false))
            let again = try await Self.call(client, Self.ns, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            let fd2 = try #require(again[0].unixFDValue?.take())
            defer { close(fd2) }
            let replay = try NotificationSourceEvent(decoding: try #require(try await readDatagram(fd2)))
            #expect(replay.flags.contains(.preExisting))
            #expect(replay.notificationUID != 1, "renumbered in the new session")
            #expect(simulator.currentUID(ofKey: 1) == replay.notificationUID)
        }
    }

    @Test("mid-response disconnect and the omitted tuple")
    func misbehaviour() async throws {
        try await Self.withSimulator { _, simulator, client in
            try await simulator.execute(.add(Self.sms))
            let collector = Collector()
            _ = try await client.subscribe(to: .propertiesChanged(sender: "org.bluez", pathNamespace: Self.device), handler: collector.handler)
            _ = try await Self.call(client, Self.ds, "StartNotify")
            try await simulator.execute(.omit(.positiveActionLabel))
            try await Self.write(client, try Self.request.encoded())
            let omitted = try #require(DataSourceEncoder.response(
                to: Self.request, notificationAttributes: Self.smsWire,
                options: DataSourceEncodingOptions(omittedAttributes: [.positiveActionLabel])))
            try await eventually("the response without its PositiveActionLabel") {
                collector.values(at: Self.ds).reduce(0) { $0 + $1.count } == omitted.count
            }
            var reassembler = DataSourceReassembler()
            try reassembler.expect(Self.request)
            for v in collector.values(at: Self.ds) {
                let output = reassembler.feed(v)
                #expect(output.response == nil && output.error == nil)
            }
            collector.clear()
            let finished = reassembler.finishEarly()
            let partial = try #require(finished)
            #expect(partial.missingAttributeIDs == [6])
            #expect(partial.value(of: .negativeActionLabel) == Array("Clear".utf8))

            try await simulator.execute(.omit(nil))
            try await simulator.execute(.midResponseDisconnect)
            try await Self.write(client, try Self.request.encoded())
            try await eventually("the link drops") {
                try await client.getProperty(destination: "org.bluez", path: Self.device, interface: "org.bluez.Device1", name: "Connected") == .bool(false)
            }
            let halfBytes = collector.values(at: Self.ds).reduce(0) { $0 + $1.count }
            let whole = try #require(DataSourceEncoder.response(to: Self.request, notificationAttributes: Self.smsWire))
            #expect(halfBytes == whole.count / 2)
        }
    }

    @Test("timeline lines are written after the send path: a burst arrives before any, all come in order at stop")
    func timelineAfterSends() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let path = NSTemporaryDirectory() + "timeline-\(UUID().uuidString).jsonl"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let timeline = try #require(Timeline(path: path))
        let simulator = PhoneSimulator(
            settings: Self.settings, bus: .address(bus.address), timeline: timeline, logFlushDelay: .seconds(60), log: { _ in })
        let count = 200
        try await withTimeout(20, "the test") {
            try await simulator.start()
            let client = try await DBusConnection.connect(to: .address(bus.address))
            let reply = try await Self.call(client, Self.ns, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            let fd = try #require(reply[0].unixFDValue?.take())
            defer { close(fd) }
            try await simulator.execute(.burst(count: count, startUID: 500, rate: 0, category: .social, app: "com.apple.MobileSMS"))
            var uids: [UInt32] = []
            while uids.count < count, let datagram = try await readDatagram(fd) {
                uids.append(try NotificationSourceEvent(decoding: datagram).notificationUID)
            }
            #expect(uids == (0..<UInt32(count)).map { 500 + $0 })
            #expect(try String(contentsOfFile: path, encoding: .utf8).isEmpty, "nothing written while the flush waits")
            await client.close()
            await simulator.stop()
        }
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == count)
        let records = try lines.map { try #require(try JSONValue(parsing: String($0)).objectValue) }
        #expect(records.map { $0["uid"] } == (0..<count).map { .int(500 + $0) })
        #expect(records.allSatisfy { $0["event"] == .string("added") })
        let stamps = records.compactMap { $0["t_ns"]?.intValue }
        #expect(stamps.count == count && stamps == stamps.sorted())
        timeline.close()
    }

    @Test("a request never answered, a write that loses the link, and the events log of both")
    func silentRequestsAndWriteDisconnects() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let path = NSTemporaryDirectory() + "events-\(UUID().uuidString).jsonl"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let events = try #require(Timeline(path: path))
        let simulator = PhoneSimulator(settings: Self.settings, bus: .address(bus.address), events: events, log: { _ in })
        try await withTimeout(20, "the test") {
            try await simulator.start()
            let client = try await DBusConnection.connect(to: .address(bus.address))
            try await simulator.execute(.add(Self.sms))
            let collector = Collector()
            _ = try await client.subscribe(to: .propertiesChanged(sender: "org.bluez", pathNamespace: Self.device), handler: collector.handler)
            _ = try await Self.call(client, Self.ns, "StartNotify")
            _ = try await Self.call(client, Self.ds, "StartNotify")
            _ = try await collector.waitForValues(1, at: Self.ns)

            // Acknowledged, never answered: nothing comes on the Data Source; the next one is answered.
            try await simulator.execute(.cpTimeout(count: 1))
            try await Self.write(client, try Self.request.encoded())
            try await Task.sleep(for: .milliseconds(300))
            #expect(collector.values(at: Self.ds).isEmpty)
            let whole = try #require(DataSourceEncoder.response(to: Self.request, notificationAttributes: Self.smsWire))
            try await Self.write(client, try Self.request.encoded())
            try await eventually("the second request's answer") {
                collector.values(at: Self.ds).reduce(0) { $0 + $1.count } == whole.count
            }

            // heal switches the misbehaviour off.
            try await simulator.execute(.cpTimeout(count: 5))
            try await simulator.execute(.heal)
            collector.clear()
            try await Self.write(client, try Self.request.encoded())
            try await eventually("an answer once healed") {
                collector.values(at: Self.ds).reduce(0) { $0 + $1.count } == whole.count
            }

            // The link drops with the write in flight: the call fails, the phone is disconnected.
            try await simulator.execute(.disconnectOnWrite)
            await expectError("org.bluez.Error.Failed", "Operation failed") {
                try await Self.write(client, try Self.request.encoded())
            }
            try await eventually("Connected false") {
                try await client.getProperty(destination: "org.bluez", path: Self.device, interface: "org.bluez.Device1", name: "Connected") == .bool(false)
            }
            await client.close()
            await simulator.stop()
        }
        events.close()
        let records = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map { line in
            try #require(try JSONValue(parsing: String(line)).objectValue)
        }
        let kinds = records.compactMap { $0["kind"]?.stringValue }
        #expect(kinds == ["subscribed", "ns", "cp", "cp", "cp", "cp", "link"])
        #expect(records[1]["event"] == .string("added") && records[1]["uid"] == .int(1) && records[1]["session"] == .int(0))
        #expect(records[2]["outcome"] == .string("silent") && records[2]["request"] == .string("notification"))
        #expect(records[3]["outcome"] == .string("accepted") && records[3]["uid"] == .int(1))
        // The attributes as the answer carried them: the message cut to the 20 bytes asked for.
        let attributes = try #require(records[3]["attributes"]?.objectValue)
        #expect(attributes["1"] == .string("Grace Hopper"))
        #expect(attributes["3"]?.stringValue?.utf8.count ?? 99 <= 20)
        #expect(records[4]["outcome"] == .string("accepted"))
        #expect(records[5]["outcome"] == .string("disconnect"))
        #expect(records[6]["up"] == .bool(false) && records[6]["session"] == .int(1))
        #expect(records.allSatisfy { ($0["t_ns"]?.intValue ?? 0) > 0 })
    }

    @Test("a bluetoothd restart: the name goes, comes back with a new owner and the same tree")
    func restart() async throws {
        try await Self.withSimulator { _, simulator, client in
            try await simulator.execute(.add(Self.sms))
            let before = try #require(try await client.nameOwner("org.bluez"))
            let changes = Collector()
            _ = try await client.subscribe(to: .nameOwnerChanged(name: "org.bluez"), handler: changes.handler)
            let reply = try await Self.call(client, Self.ns, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            let fd = try #require(reply[0].unixFDValue?.take())
            defer { close(fd) }
            _ = try await readDatagram(fd)
            let restart = Task { try await simulator.execute(.restartBlueZ(downtime: 0.3)) }
            #expect(try await readDatagram(fd) == nil, "the socket hangs up")
            try await restart.value
            try await eventually("owner lost and regained") { changes.signals.count >= 2 }
            let decoded = try changes.signals.map { try NameOwnerChanged($0) }
            #expect(decoded[0].oldOwner == before && decoded[0].newOwner == nil)
            #expect(decoded[1].oldOwner == nil && decoded[1].newOwner != nil && decoded[1].newOwner != before)
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            #expect(objects[Self.ns] != nil)
            #expect(objects[Self.device]?["org.bluez.Device1"]?["Connected"] == .bool(true))
            #expect(objects[Self.ns]?[Self.chr.rawValue]?["NotifyAcquired"] == .bool(false))
            _ = try await Self.call(client, Self.ns, "StartNotify")
            #expect(simulator.isSubscribed())
        }
    }
}
