import DBus
import Foundation
import JSON
import PhoneSimulator
import Testing
import TestSupport

/// The simulated phone's Apple Media Service, driven over the private bus as an AMS client
/// would: the bytes checked here are written from Apple's AMS specification, not by ancsd.
@Suite("Apple Media Service on a private bus", .serialized)
struct MediaServiceTests {
    static let device: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"
    static let service: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0019"
    static let rc: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0019/char001a"
    static let eu: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0019/char001d"
    static let ea: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0019/char0020"
    static let chr: InterfaceName = "org.bluez.GattCharacteristic1"
    static let amsUUID = "89d3502b-0f36-433a-8ef4-c502ad55f8dc"

    static let song = MediaTrack(title: "Les Barricades mystérieuses", artist: "François Couperin", album: "Pièces de clavecin", duration: 172.5)
    static let next = MediaTrack(title: "Gymnopédie No. 1", artist: "Erik Satie", album: "Gymnopédies", duration: 205)

    /// One bonded phone with AMS on, at `mtu`.
    static func settings(mtu: Int = 185, characteristics: [String]? = nil) throws -> ScenarioSettings {
        var s = ScenarioSettings(name: "ams", mtu: mtu, devices: [DeviceSettings(address: "AA:BB:CC:DD:EE:01", name: "Ada's iPhone", mtu: mtu)])
        s.ams = true
        s.media.player = "Music"
        s.media.tracks = [song, next]
        s.media.volume = 0.5
        s.media.commands = [.play, .pause, .togglePlayPause, .nextTrack, .previousTrack, .volumeUp, .volumeDown, .advanceRepeatMode]
        if let characteristics {
            // Through the parser, as a scenario gives it.
            let list = characteristics.map { "\"\($0)\"" }.joined(separator: ",")
            s.amsCharacteristics = try ScenarioSettings(parsingLine: #"{"scenario":"x","ams":true,"ams_characteristics":[\#(list)]}"#).amsCharacteristics
        }
        return s
    }

    static func call(
        _ client: DBusConnection, _ path: ObjectPath, _ member: MemberName, _ arguments: [DBusValue] = [], expecting: Signature = .empty
    ) async throws -> [DBusValue] {
        try await client.call(destination: "org.bluez", path: path, interface: chr, member: member, arguments: arguments, expecting: expecting, timeout: .seconds(5))
    }

    static func write(_ client: DBusConnection, _ path: ObjectPath, _ value: [UInt8]) async throws {
        _ = try await call(client, path, "WriteValue", [.byteArray(value), .variantDictionary(["type": .string("request")])])
    }

    static func read(_ client: DBusConnection, offset: UInt16? = nil) async throws -> String {
        let options: [String: DBusValue] = offset.map { ["offset": .uint16($0)] } ?? [:]
        let reply = try await call(client, ea, "ReadValue", [.variantDictionary(options)], expecting: "ay")
        return String(decoding: reply[0].bytes ?? [], as: UTF8.self)
    }

    /// An Entity Update notification: entity, attribute, truncated, value.
    struct Update: Equatable, CustomStringConvertible {
        var entity: UInt8
        var attribute: UInt8
        var truncated: Bool
        var value: String

        init(_ entity: UInt8, _ attribute: UInt8, _ value: String, truncated: Bool = false) {
            (self.entity, self.attribute, self.value, self.truncated) = (entity, attribute, value, truncated)
        }

        init(_ bytes: [UInt8]) throws {
            guard bytes.count >= 3 else { throw TestFailure("an Entity Update of \(bytes.count) bytes") }
            self.init(bytes[0], bytes[1], String(decoding: bytes[3...], as: UTF8.self), truncated: bytes[2] & 1 != 0)
            #expect(bytes[2] & 0xFE == 0, "reserved flags are zero")
        }

        var description: String { "\(entity)/\(attribute)\(truncated ? " (truncated)" : ""): \(value)" }
    }

    /// Subscribes (StartNotify) to `path`'s values into a new collector.
    static func subscribe(_ client: DBusConnection, _ path: ObjectPath) async throws -> Collector {
        let collector = Collector()
        _ = try await client.subscribe(to: .propertiesChanged(sender: "org.bluez", path: path), handler: collector.handler)
        _ = try await call(client, path, "StartNotify")
        return collector
    }

    static func updates(_ collector: Collector, _ count: Int) async throws -> [Update] {
        try await collector.waitForValues(count, at: eu).map(Update.init)
    }

    @Test("the AMS objects as bluetoothd shows them, and none without \"ams\"")
    func tree() async throws {
        try await IntegrationTests.withSimulator(try Self.settings()) { _, _, client in
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            let service = try #require(objects[Self.service]?["org.bluez.GattService1"])
            #expect(service["UUID"] == .string(Self.amsUUID))
            #expect(service["Primary"] == .bool(true))
            #expect(service["Device"] == .objectPath(Self.device))
            let expected: [(ObjectPath, String, [String])] = [
                (Self.rc, "9b3c81d8-57b1-4a8a-b8df-0e56f7ca51c2", ["write", "notify"]),
                (Self.eu, "2f7cabce-808d-411f-9a0c-bb92ba96c102", ["write", "notify"]),
                (Self.ea, "c6b2f38c-23ab-46d8-a6ab-a3a870bbd5d7", ["read", "write"]),
            ]
            for (path, uuid, flags) in expected {
                let c = try #require(objects[path]?[Self.chr.rawValue])
                #expect(c["UUID"] == .string(uuid))
                #expect(c["Flags"]?.stringArray == flags)
                #expect(c["Service"] == .objectPath(Self.service))
                #expect((c["Notifying"] != nil) == flags.contains("notify"))
            }
            let uuids = objects[Self.device]?["org.bluez.Device1"]?["UUIDs"]?.stringArray ?? []
            #expect(uuids.contains(Self.amsUUID))
            // The ANCS service is where it was.
            #expect(objects["/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010/char0011"] != nil)
            await expectError("org.bluez.Error.NotSupported", "Operation is not supported") {
                _ = try await Self.call(client, Self.ea, "StartNotify")
            }
            await expectError("org.bluez.Error.NotPermitted", "Read not permitted") {
                _ = try await Self.call(client, Self.eu, "ReadValue", [.variantDictionary([:])], expecting: "ay")
            }
        }
        try await IntegrationTests.withSimulator { _, simulator, client in
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            #expect(objects[Self.service] == nil && objects[Self.rc] == nil)
            let uuids = objects[Self.device]?["org.bluez.Device1"]?["UUIDs"]?.stringArray ?? []
            #expect(uuids.contains(Self.amsUUID) == false)
            #expect(simulator.mediaPlayer() == nil)
        }
    }

    @Test("a registration gets the current values at once, then each change; a later one replaces it")
    func registration() async throws {
        try await IntegrationTests.withSimulator(try Self.settings()) { _, simulator, client in
            let updates = try await Self.subscribe(client, Self.eu)
            try await Self.write(client, Self.eu, [2, 0, 1, 2, 3])
            #expect(try await Self.updates(updates, 4) == [
                Update(2, 0, "François Couperin"), Update(2, 1, "Pièces de clavecin"),
                Update(2, 2, "Les Barricades mystérieuses"), Update(2, 3, "172.5"),
            ])
            try await Self.write(client, Self.eu, [0, 0, 1, 2])
            try await Self.write(client, Self.eu, [1, 0, 1, 2, 3])
            #expect(try await Self.updates(updates, 11).suffix(7) == [
                Update(0, 0, "Music"), Update(0, 1, "0,0.0,0.000"), Update(0, 2, "0.5"),
                Update(1, 0, "0"), Update(1, 1, "2"), Update(1, 2, "0"), Update(1, 3, "0"),
            ])
            updates.clear()

            // The phone's user changes the track: each registered Track attribute separately, then
            // the playback info (the elapsed time went back to 0).
            try await simulator.execute(.media(.track(MediaTrack(title: "Pavane", artist: "Gabriel Fauré", album: "", duration: 390))))
            #expect(try await Self.updates(updates, 5) == [
                Update(2, 0, "Gabriel Fauré"), Update(2, 1, ""), Update(2, 2, "Pavane"), Update(2, 3, "390.0"),
                Update(0, 1, "0,0.0,0.000"),
            ])
            updates.clear()
            try await simulator.execute(.media(.volume(0.75)))
            try await simulator.execute(.media(.volume(0.75)))  // no change: nothing sent
            try await simulator.execute(.media(.play))
            let played = try await Self.updates(updates, 2)
            #expect(played[0] == Update(0, 2, "0.75"))
            #expect(played[1].entity == 0 && played[1].attribute == 1 && played[1].value.hasPrefix("1,1.0,"))
            updates.clear()

            // A later registration of the Track replaces the earlier: only the title now.
            try await Self.write(client, Self.eu, [2, 2])
            #expect(try await Self.updates(updates, 1) == [Update(2, 2, "Pavane")])
            try await simulator.execute(.media(.track(Self.next)))
            let after = try await Self.updates(updates, 3)
            #expect(after[1] == Update(2, 2, "Gymnopédie No. 1"))
            #expect(after[2].entity == 0 && after[2].attribute == 1)
            // The updates come in order: the volume's, after the track's, finds nothing between.
            try await simulator.execute(.media(.volume(0.5)))
            let then = try await Self.updates(updates, 4)
            #expect(then.count == 4 && then[3] == Update(0, 2, "0.5"), "no artist, album or duration any more: \(then)")
        }
    }

    @Test("a value longer than the MTU allows is cut on a character boundary with the Truncated flag; the Entity Attribute reads it whole")
    func truncation() async throws {
        var settings = try Self.settings(mtu: 23)
        // Bytes 15…17 are the "—": a cut at 17 bytes would split it.
        settings.media.tracks[0].title = "Les Barricades — mystérieuses"
        try await IntegrationTests.withSimulator(settings) { _, _, client in
            // AcquireNotify this time: one datagram per notification.
            let reply = try await Self.call(client, Self.eu, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            let fd = try #require(reply[0].unixFDValue?.take())
            defer { close(fd) }
            #expect(reply[1] == .uint16(23))
            try await Self.write(client, Self.eu, [2, 0, 2, 3])
            var got: [[UInt8]] = []
            for _ in 0..<3 { got.append(try #require(try await readDatagram(fd))) }
            #expect(got.map(\.count) == [20, 18, 8], "MTU 23: at most 20 bytes per notification")
            // "François Couperin" is 18 bytes: the first 17, and the flag.
            #expect(try Update(got[0]) == Update(2, 0, "François Couperi", truncated: true))
            #expect(try Update(got[1]) == Update(2, 2, "Les Barricades ", truncated: true))
            #expect(try Update(got[2]) == Update(2, 3, "172.5"))

            // The whole title through the Entity Attribute, and from an offset (bluetoothd's long read).
            try await Self.write(client, Self.ea, [2, 2])
            #expect(try await Self.read(client) == "Les Barricades — mystérieuses")
            #expect(try await Self.read(client, offset: 15) == "— mystérieuses")
            #expect(try await Self.read(client, offset: 32) == "")
            await expectError("org.bluez.Error.InvalidArguments", "Invalid offset") {
                _ = try await Self.read(client, offset: 33)
            }
            await expectError("org.bluez.Error.InvalidArguments", "Invalid arguments in method call") {
                _ = try await Self.call(client, Self.ea, "ReadValue", [.variantDictionary(["offset": .uint32(1)])], expecting: "ay")
            }
        }
    }

    @Test("ATT errors: 0xA0 before the Entity Update subscription, 0xA1 for a malformed write, 0xA2 for an empty attribute")
    func errors() async throws {
        var settings = try Self.settings()
        settings.media.tracks[0].album = ""
        try await IntegrationTests.withSimulator(settings) { _, simulator, client in
            let invalidState = ("org.bluez.Error.Failed", "Operation failed with ATT error: 0xa0")
            let invalidCommand = ("org.bluez.Error.Failed", "Operation failed with ATT error: 0xa1")
            await expectError(invalidState.0, invalidState.1) { try await Self.write(client, Self.eu, [2, 2]) }
            await expectError(invalidState.0, invalidState.1) { try await Self.write(client, Self.ea, [2, 2]) }
            await expectError(invalidState.0, invalidState.1) { _ = try await Self.read(client) }
            _ = try await Self.call(client, Self.eu, "StartNotify")
            // Subscribed, but nothing selected yet.
            await expectError(invalidState.0, invalidState.1) { _ = try await Self.read(client) }
            let malformed: [(ObjectPath, [UInt8])] = [
                (Self.eu, []), (Self.eu, [2]), (Self.eu, [3, 0]), (Self.eu, [0, 3]), (Self.eu, [2, 0, 4]),
                (Self.ea, []), (Self.ea, [2]), (Self.ea, [2, 2, 2]), (Self.ea, [3, 0]), (Self.ea, [1, 4]),
                (Self.rc, []), (Self.rc, [0, 1]),
            ]
            for (path, value) in malformed {
                await expectError(invalidCommand.0, invalidCommand.1) { try await Self.write(client, path, value) }
            }
            try await Self.write(client, Self.ea, [2, 1])
            await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0xa2") { _ = try await Self.read(client) }
            try await Self.write(client, Self.ea, [2, 0])
            #expect(try await Self.read(client) == "François Couperin")

            // A command the player does not support: the write succeeds and nothing happens.
            let before = try #require(simulator.mediaPlayer())
            try await Self.write(client, Self.rc, [MediaCommand.skipForward.rawValue])
            try await Self.write(client, Self.rc, [200])
            #expect(simulator.mediaPlayer() == before)
            #expect(simulator.receivedMediaCommands().map(\.performed) == [false, false])
            #expect(simulator.receivedMediaCommands().map(\.command) == [.skipForward, nil])
            // Only "request" writes, as on the Control Point.
            await expectError("org.bluez.Error.NotSupported", "Operation is not supported") {
                _ = try await Self.call(client, Self.rc, "WriteValue", [.byteArray([0]), .variantDictionary(["type": .string("command")])])
            }
            try await simulator.execute(.disconnect)
            await expectError("org.bluez.Error.Failed", "Not connected") { try await Self.write(client, Self.rc, [0]) }
            await expectError("org.bluez.Error.Failed", "Not connected") { _ = try await Self.read(client) }
        }
    }

    @Test("Remote Commands change the player; the notifications follow; the events log names each command")
    func commands() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let path = NSTemporaryDirectory() + "ams-events-\(UUID().uuidString).jsonl"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let events = try #require(Timeline(path: path))
        let simulator = PhoneSimulator(settings: try Self.settings(), bus: .address(bus.address), events: events, log: { _ in })
        try await withTimeout(20, "the test") {
            try await simulator.start()
            let client = try await DBusConnection.connect(to: .address(bus.address))
            let commands = try await Self.subscribe(client, Self.rc)
            // The supported commands as soon as the notifications are on, one byte each.
            #expect(try await commands.waitForValues(1, at: Self.rc) == [[0, 1, 2, 3, 4, 5, 6, 7]])
            let updates = try await Self.subscribe(client, Self.eu)
            try await Self.write(client, Self.eu, [0, 1, 2])
            try await Self.write(client, Self.eu, [1, 0, 3])
            try await Self.write(client, Self.eu, [2, 2, 3])
            _ = try await Self.updates(updates, 6)
            updates.clear()

            try await Self.write(client, Self.rc, [MediaCommand.play.rawValue])
            let playing = try await Self.updates(updates, 1)[0]
            #expect(playing.entity == 0 && playing.attribute == 1 && playing.value.hasPrefix("1,1.0,"))
            #expect(simulator.mediaPlayer()?.playing == true)
            // The elapsed time moves on the simulator's clock while playing.
            var info: [Substring] = []
            try await eventually("the elapsed time past 0.1 s: \(info)") {
                try await Self.write(client, Self.ea, [0, 1])
                info = try await Self.read(client).split(separator: ",")
                return info.count == 3 && (Double(info[2]) ?? 0) >= 0.1
            }
            #expect(info[0] == "1" && info[1] == "1.0")
            updates.clear()

            try await Self.write(client, Self.rc, [MediaCommand.volumeUp.rawValue])
            try await Self.write(client, Self.rc, [MediaCommand.nextTrack.rawValue])
            try await Self.write(client, Self.rc, [MediaCommand.advanceRepeatMode.rawValue])
            let after = try await Self.updates(updates, 6)
            #expect(after[0] == Update(0, 2, "0.5625"))
            // The track: its registered attributes separately, then the queue index, then the playback info.
            #expect(after[1] == Update(2, 2, "Gymnopédie No. 1"))
            #expect(after[2] == Update(2, 3, "205.0"))
            #expect(after[3] == Update(1, 0, "1"))
            #expect(after[4].entity == 0 && after[4].attribute == 1 && after[4].value.hasPrefix("1,1.0,0.0"))
            #expect(after[5] == Update(1, 3, "1"))
            updates.clear()
            try await Self.write(client, Self.rc, [MediaCommand.togglePlayPause.rawValue])
            #expect(try await Self.updates(updates, 1)[0].value.hasPrefix("0,0.0,"))
            try await Self.write(client, Self.rc, [MediaCommand.pause.rawValue])  // already paused: no change
            #expect(simulator.receivedMediaCommands().map(\.command) == [.play, .volumeUp, .nextTrack, .advanceRepeatMode, .togglePlayPause, .pause])
            #expect(simulator.receivedMediaCommands().filter { !$0.performed }.isEmpty)
            // The next change's update comes after anything the pause sent: nothing.
            try await simulator.execute(.media(.volume(0.25)))
            let then = try await Self.updates(updates, 2)
            #expect(then.count == 2 && then[1] == Update(0, 2, "0.25"), "\(then)")
            await client.close()
            await simulator.stop()
        }
        events.close()
        let records = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map { line in
            try #require(try JSONValue(parsing: String(line)).objectValue)
        }
        let sent = records.filter { $0["kind"] == "media_command" }
        #expect(sent.compactMap { $0["command"]?.stringValue } == ["play", "volume_up", "next", "repeat", "toggle", "pause"])
        #expect(sent.allSatisfy { $0["outcome"] == "performed" && $0["dev"] == .int(0) })
        #expect(records.first { $0["kind"] == "media_commands" }?["commands"] == .array(
            ["play", "pause", "toggle", "next", "previous", "volume_up", "volume_down", "repeat"].map { .string($0) }))
        #expect(records.filter { $0["kind"] == "media_register" }.count == 3)
        let titles = records.filter { $0["kind"] == "media_update" && $0["entity"] == .int(2) && $0["attribute"] == .int(2) }
        #expect(titles.compactMap { $0["value"]?.stringValue } == ["Les Barricades mystérieuses", "Gymnopédie No. 1"])
    }

    @Test("the supported commands are notified at subscription and whenever they change")
    func supportedCommands() async throws {
        try await IntegrationTests.withSimulator(try Self.settings()) { _, simulator, client in
            // Changed while nobody listens: nothing is sent, the next subscription gets the list.
            try await simulator.execute(.media(.commands([.togglePlayPause, .play])))
            let commands = try await Self.subscribe(client, Self.rc)
            #expect(try await commands.waitForValues(1, at: Self.rc) == [[0, 2]])
            try await simulator.execute(.media(.commands([.play, .togglePlayPause])))  // the same set
            try await simulator.execute(.media(.commands([.skipForward, .skipBackward, .likeTrack])))
            try await simulator.execute(.media(.commands([])))
            let lists = try await commands.waitForValues(3, at: Self.rc)
            #expect(lists == [[0, 2], [9, 10, 11], []])
            // Skip is supported no more: ignored.
            try await Self.write(client, Self.rc, [MediaCommand.skipForward.rawValue])
            let received = simulator.receivedMediaCommands()
            #expect(received.map(\.id) == [9] && received.map(\.performed) == [false])
            // StopNotify: no more lists; the next subscription gets the one then current.
            _ = try await Self.call(client, Self.rc, "StopNotify")
            try await simulator.execute(.media(.commands([.play])))
            try await simulator.execute(.media(.commands([.pause])))
            _ = try await Self.call(client, Self.rc, "StartNotify")
            #expect(try await commands.waitForValues(4, at: Self.rc) == [[0, 2], [9, 10, 11], [], [1]])
        }
    }

    @Test("a subset of the characteristics: only those are shown, and without the Entity Update the Entity Attribute needs no subscription")
    func subset() async throws {
        try await IntegrationTests.withSimulator(try Self.settings(characteristics: ["entity_attribute", "remote_command"])) { _, _, client in
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            #expect(objects[Self.service] != nil && objects[Self.rc] != nil && objects[Self.ea] != nil)
            #expect(objects[Self.eu] == nil)
            try await Self.write(client, Self.ea, [2, 2])
            #expect(try await Self.read(client) == "Les Barricades mystérieuses")
            await expectError("org.freedesktop.DBus.Error.UnknownObject", "No such object path '\(Self.eu)'") {
                try await Self.write(client, Self.eu, [2, 2])
            }
        }
        try await IntegrationTests.withSimulator(try Self.settings(characteristics: ["entity_update"])) { _, _, client in
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            #expect(objects[Self.eu] != nil && objects[Self.rc] == nil && objects[Self.ea] == nil)
        }
    }

    @Test("the phone withdraws AMS and offers it again: sockets hang up, objects go and come, registrations start afresh")
    func serviceChanged() async throws {
        try await IntegrationTests.withSimulator(try Self.settings()) { _, simulator, client in
            let added = Collector(), removed = Collector(), device = Collector()
            _ = try await client.subscribe(to: .interfacesAdded(sender: "org.bluez"), handler: added.handler)
            _ = try await client.subscribe(to: .interfacesRemoved(sender: "org.bluez"), handler: removed.handler)
            _ = try await client.subscribe(to: .propertiesChanged(sender: "org.bluez", path: Self.device), handler: device.handler)
            let reply = try await Self.call(client, Self.eu, "AcquireNotify", [.variantDictionary([:])], expecting: "hq")
            let fd = try #require(reply[0].unixFDValue?.take())
            defer { close(fd) }
            try await Self.write(client, Self.eu, [2, 2])
            #expect(try Update(try #require(try await readDatagram(fd))) == Update(2, 2, "Les Barricades mystérieuses"))

            try await simulator.execute(.media(.service(present: false)))
            #expect(try await readDatagram(fd) == nil, "the acquired socket hangs up")
            try await eventually("four objects removed") { removed.signals.count >= 4 }
            let gone = try removed.signals.map { try InterfacesRemoved($0).object }
            #expect(gone == [Self.rc, Self.eu, Self.ea, Self.service], "the characteristics, then the service")
            try await eventually("UUIDs without AMS") {
                device.signals.contains { s in
                    (try? PropertiesChanged(s))?.changed["UUIDs"]?.stringArray.map { !$0.contains(Self.amsUUID) } ?? false
                }
            }
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            #expect(objects[Self.service] == nil && objects[Self.eu] == nil)
            #expect(objects["/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010"] != nil, "ANCS stays")
            // The player goes on meanwhile.
            try await simulator.execute(.media(.play))

            try await simulator.execute(.media(.service(present: true)))
            try await eventually("four objects added") { added.signals.count >= 4 }
            let back = try added.signals.map { try InterfacesAdded($0).object }
            #expect(back == [Self.service, Self.rc, Self.eu, Self.ea], "the service, then the characteristics")
            let eu = try #require(try await client.getManagedObjects(destination: "org.bluez")[Self.eu]?[Self.chr.rawValue])
            #expect(eu["NotifyAcquired"] == .bool(false) && eu["Notifying"] == .bool(false))
            // A new service: subscribe and register again.
            await expectError("org.bluez.Error.Failed", "Operation failed with ATT error: 0xa0") {
                try await Self.write(client, Self.eu, [0, 1])
            }
            let updates = try await Self.subscribe(client, Self.eu)
            try await Self.write(client, Self.eu, [0, 1])
            // Nothing registered in the new service: the registration's update is the first.
            let first = try await Self.updates(updates, 1)
            #expect(first.count == 1 && first[0].value.hasPrefix("1,1.0,"), "\(first)")
        }
    }

    @Test("a strict phone shows AMS only once bonded, with ANCS")
    func onlyOnceBonded() async throws {
        var settings = StrictPolicyTests.settings()
        settings.ams = true
        try await StrictPolicyTests.withAccessory(settings) { simulator, accessory in
            try await accessory.registerAgent()
            try await accessory.registerApplication(encrypted: true)
            try await StrictPolicyTests.state(simulator) { $0.applications = 1 }
            try await accessory.advertise()
            try await simulator.execute(.appear)
            func services() async throws -> [String] {
                try await accessory.client.getManagedObjects(destination: "org.bluez").values.compactMap {
                    $0["org.bluez.GattService1"]?["UUID"]?.stringValue
                }
            }
            #expect(try await services().isEmpty, "nothing before bonding")
            try await simulator.execute(.pair(passkey: 1, expect: .paired, timeout: 2))
            #expect(try await services().sorted() == [StrictPolicyTests.ancs, Self.amsUUID].sorted())
        }
    }

    @Test("the shipped scenarios/media.jsonl, as a subscribed client sees it")
    func shippedScenario() async throws {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("scenarios/media.jsonl"), encoding: .utf8)
        let scenario = try Scenario(parsing: text)
        try await IntegrationTests.withSimulator(scenario.settings) { _, simulator, client in
            let updates = try await Self.subscribe(client, Self.eu)
            let commands = try await Self.subscribe(client, Self.rc)
            try await Self.write(client, Self.eu, [2, 2])
            try await Self.write(client, Self.eu, [0, 1, 2])
            _ = try await Self.call(client, "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010/char0011", "StartNotify")
            // Without the pauses between the steps.
            let steps = scenario.steps.map { step in
                var quick = step
                quick.after = 0
                return quick
            }
            #expect(await simulator.run(steps) == .ended)
            let got = try await Self.updates(updates, 8)
            #expect(got.map(\.attribute) == [2, 1, 2, 1, 2, 2, 1, 1])
            #expect(got[0] == Update(2, 2, "Clair de lune") && got[2] == Update(0, 2, "0.5") && got[4] == Update(0, 2, "0.75"))
            #expect(got[5] == Update(2, 2, "Les Barricades mystérieuses, a title long enough to be cut at a small MTU"))
            #expect(got.map { $0.value.prefix(2) }[3] == "0," && got[7].value.hasPrefix("1,1.0,"))
            #expect(try await commands.waitForValues(2, at: Self.rc) == [[0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2, 9, 10]])
            let objects = try await client.getManagedObjects(destination: "org.bluez")
            #expect(objects[Self.eu]?[Self.chr.rawValue]?["Notifying"] == .bool(false), "a new service after media_service")
        }
    }

    @Test("steps from a scenario: the media steps, wait_state on the player and the commands received")
    func scenarioSteps() async throws {
        let scenario = try Scenario(parsing: """
            {"scenario":"ams","ams":true,"media":{"title":"Clair de lune","artist":"Claude Debussy","duration":300,"state":"paused","commands":["play","pause"]},"devices":[{"address":"AA:BB:CC:DD:EE:01","name":"Ada's iPhone"}]}
            {"do":"wait_state","media_state":"playing","media_commands_received":1,"timeout":10}
            {"do":"media_volume","value":0.25}
            {"do":"end"}
            """)
        try await IntegrationTests.withSimulator(scenario.settings) { _, simulator, client in
            let run = Task { await simulator.run(scenario.steps) }
            _ = try await Self.call(client, Self.eu, "StartNotify")
            try await Self.write(client, Self.rc, [MediaCommand.play.rawValue])
            #expect(await run.value == .ended)
            #expect(simulator.mediaPlayer()?.volume == 0.25)
            #expect(simulator.mediaPlayer()?.track.album == "")
        }
    }
}
