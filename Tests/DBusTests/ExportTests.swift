import DBus
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Synchronization
import Testing
import TestSupport

/// A thermostat-like object with every kind of property.
func deviceObject(refuse: Bool = false) -> ExportedObject {
    ExportedObject(
        ExportedInterface(
            "com.example.Device1",
            methods: [
                .immediate("Greet", input: "s", output: "s", inputNames: ["name"], outputNames: ["greeting"]) { call in
                    [.string("hello " + (call.arguments[0].stringValue ?? ""))]
                },
                .immediate("Nothing") { _ in [] },
            ],
            properties: [
                ExportedProperty("Name", value: .string("dev")),
                ExportedProperty("Level", value: .int32(5), access: .readWrite) { value, _ in
                    if refuse || (value.int32Value ?? 0) < 0 {
                        throw DBusError.error("com.example.Error.OutOfRange", "level must be ≥ 0")
                    }
                },
                ExportedProperty("Secret", value: .string("s3cr3t"), access: .write),
                ExportedProperty("Value", value: .byteArray([]), access: .read, changeSignal: .emits),
                ExportedProperty("Cache", value: .uint32(0), access: .readWrite, changeSignal: .invalidates),
                ExportedProperty("Quiet", value: .bool(false), access: .readWrite, changeSignal: .none),
            ],
            signals: [ExportedSignal("Alarm", signature: "su", argumentNames: ["reason", "code"])]),
        ExportedInterface("com.example.Extra", methods: [.immediate("Ping2") { _ in [] }]))
}

extension DBusTests {
    @Suite struct Export {
        func dbusSend(_ bus: TestBus, _ args: [String]) async throws -> String {
            let (status, out) = try await run("/usr/bin/dbus-send", ["--bus=\(bus.address)", "--print-reply"] + args)
            #expect(status == 0, "dbus-send \(args): \(out)")
            return out
        }

        @Test func calledByDBusSend() async throws {
            try await withPair { pair in
                try await pair.server.export(deviceObject(), at: "/com/example/dev0")
                #expect(try await pair.server.requestName("com.example.Service") == .primaryOwner)
                let greet = try await dbusSend(pair.bus, [
                    "--dest=com.example.Service", "/com/example/dev0", "com.example.Device1.Greet", "string:wörld",
                ])
                #expect(greet.contains("string \"hello wörld\""), "\(greet)")
                let get = try await dbusSend(pair.bus, [
                    "--dest=com.example.Service", "/com/example/dev0", "org.freedesktop.DBus.Properties.Get",
                    "string:com.example.Device1", "string:Level",
                ])
                #expect(get.contains("variant") && get.contains("int32 5"), "\(get)")
                _ = try await dbusSend(pair.bus, [
                    "--dest=com.example.Service", "/com/example/dev0", "org.freedesktop.DBus.Properties.Set",
                    "string:com.example.Device1", "string:Level", "variant:int32:9",
                ])
                #expect(await pair.server.exportedProperty(path: "/com/example/dev0", interface: "com.example.Device1", name: "Level") == .int32(9))
                // Peer is answered too.
                _ = try await dbusSend(pair.bus, ["--dest=com.example.Service", "/com/example/dev0", "org.freedesktop.DBus.Peer.Ping"])
                // Errors reach dbus-send as D-Bus errors.
                let (status, out) = try await run("/usr/bin/dbus-send", [
                    "--bus=\(pair.bus.address)", "--print-reply", "--dest=com.example.Service", "/com/example/dev0",
                    "com.example.Device1.Missing",
                ])
                #expect(status != 0 && out.contains("org.freedesktop.DBus.Error.UnknownMethod"), "\(out)")
            }
        }

        @Test func introspection() async throws {
            try await withPair { pair in
                try await pair.server.export(deviceObject(), at: "/com/example/dev0")
                try await pair.server.export(ExportedObject(ExportedInterface("com.example.Leaf")), at: "/com/example/sub/leaf")
                await pair.server.exportObjectManager(at: "/com/example")
                let out = try await dbusSend(pair.bus, [
                    "--dest=\(pair.server.uniqueName)", "/com/example/dev0", "org.freedesktop.DBus.Introspectable.Introspect",
                ])
                #expect(out.contains("com.example.Device1"))

                func introspect(_ path: ObjectPath) async throws -> XMLElement {
                    let xml = try await pair.client.call(
                        destination: pair.serverName, path: path, interface: "org.freedesktop.DBus.Introspectable",
                        member: "Introspect", expecting: "s")[0].stringValue ?? ""
                    let doc = try XMLDocument(xmlString: xml, options: [])
                    return try #require(doc.rootElement())
                }
                let dev = try await introspect("/com/example/dev0")
                #expect(dev.name == "node")
                let interfaces = (dev.elements(forName: "interface")).compactMap { $0.attribute(forName: "name")?.stringValue }
                #expect(interfaces.contains("com.example.Device1"))
                #expect(interfaces.contains("com.example.Extra"))
                #expect(interfaces.contains("org.freedesktop.DBus.Properties"))
                #expect(interfaces.contains("org.freedesktop.DBus.Introspectable"))
                #expect(interfaces.contains("org.freedesktop.DBus.Peer"))
                let device = try #require(dev.elements(forName: "interface").first { $0.attribute(forName: "name")?.stringValue == "com.example.Device1" })
                let greet = try #require(device.elements(forName: "method").first { $0.attribute(forName: "name")?.stringValue == "Greet" })
                let args = greet.elements(forName: "arg").map {
                    [$0.attribute(forName: "name")?.stringValue, $0.attribute(forName: "type")?.stringValue, $0.attribute(forName: "direction")?.stringValue]
                }
                #expect(args == [["name", "s", "in"], ["greeting", "s", "out"]])
                let props = device.elements(forName: "property").map {
                    ($0.attribute(forName: "name")?.stringValue ?? "", $0.attribute(forName: "access")?.stringValue ?? "")
                }
                #expect(props.map(\.0) == ["Name", "Level", "Secret", "Value", "Cache", "Quiet"])
                #expect(props.map(\.1) == ["read", "readwrite", "write", "read", "readwrite", "readwrite"])
                let alarm = try #require(device.elements(forName: "signal").first)
                #expect(alarm.elements(forName: "arg").map { $0.attribute(forName: "type")?.stringValue } == ["s", "u"])

                // Parents list their children; the manager node has the ObjectManager interface.
                let root = try await introspect("/")
                #expect(root.elements(forName: "node").compactMap { $0.attribute(forName: "name")?.stringValue } == ["com"])
                let example = try await introspect("/com/example")
                #expect(example.elements(forName: "node").compactMap { $0.attribute(forName: "name")?.stringValue } == ["dev0", "sub"])
                #expect(example.elements(forName: "interface").contains { $0.attribute(forName: "name")?.stringValue == "org.freedesktop.DBus.ObjectManager" })
                await expectErrorName(DBusError.Names.unknownObject) {
                    _ = try await introspect("/nothing/here")
                }
            }
        }

        @Test func propertiesGetGetAllSet() async throws {
            try await withPair { pair in
                let path: ObjectPath = "/com/example/dev0"
                try await pair.server.export(deviceObject(), at: path)
                let c = pair.client
                let dest = pair.serverName
                #expect(try await c.getProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Name") == .string("dev"))
                let all = try await c.getAllProperties(destination: dest, path: path, interface: "com.example.Device1")
                #expect(all == ["Name": .string("dev"), "Level": .int32(5), "Value": .byteArray([]), "Cache": .uint32(0), "Quiet": .bool(false)])
                let changes = try await c.signals(matching: .propertiesChanged(sender: dest, path: path))

                try await c.setProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Level", value: .int32(7))
                #expect(try await c.getProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Level") == .int32(7))
                await expectErrorName("com.example.Error.OutOfRange") {
                    try await c.setProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Level", value: .int32(-1))
                }
                await expectErrorName(DBusError.Names.invalidArgs) {
                    try await c.setProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Level", value: .string("x"))
                }
                await expectErrorName(DBusError.Names.propertyReadOnly) {
                    try await c.setProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Name", value: .string("x"))
                }
                await expectErrorName(DBusError.Names.accessDenied) {
                    _ = try await c.getProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Secret")
                }
                await expectErrorName(DBusError.Names.unknownProperty) {
                    _ = try await c.getProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Nope")
                }
                await expectErrorName(DBusError.Names.unknownInterface) {
                    _ = try await c.getAllProperties(destination: dest, path: path, interface: "com.example.Nope")
                }
                try await c.setProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Secret", value: .string("new"))
                try await c.setProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Cache", value: .uint32(1))
                try await c.setProperty(destination: dest, path: path, interface: "com.example.Device1", name: "Quiet", value: .bool(true))
                // Local updates, like a GATT characteristic's Value changing.
                try await pair.server.setExportedProperty(path: path, interface: "com.example.Device1", name: "Value", value: .byteArray([1, 2, 3]))
                await #expect(throws: DBusError.self) {
                    try await pair.server.setExportedProperty(path: path, interface: "com.example.Device1", name: "Value", value: .string("x"))
                }
                await #expect(throws: DBusError.self) {
                    try await pair.server.setExportedProperty(path: path, interface: "com.example.Device1", name: "Missing", value: .string("x"))
                }

                let signals = try await next(4, from: changes).map { try PropertiesChanged($0) }
                #expect(signals.map(\.interface) == Array(repeating: "com.example.Device1", count: 4))
                #expect(signals[0].changed == ["Level": .int32(7)] && signals[0].invalidated.isEmpty)
                #expect(signals[1].changed == ["Secret": .string("new")])
                #expect(signals[2].changed.isEmpty && signals[2].invalidated == ["Cache"])
                #expect(signals[3].changed == ["Value": .byteArray([1, 2, 3])])
                #expect(signals.allSatisfy { $0.path == path && $0.sender == pair.server.uniqueName })
            }
        }

        @Test func computedPropertiesAndGroupedChanges() async throws {
            try await withPair { pair in
                let path: ObjectPath = "/com/example/player"
                let clock = Mutex<Int64>(10)
                try await pair.server.export(ExportedObject(ExportedInterface("com.example.Player", properties: [
                    ExportedProperty("Status", value: .string("Stopped")),
                    ExportedProperty("Title", value: .string("")),
                    ExportedProperty("Art", value: .string(""), changeSignal: .invalidates),
                    ExportedProperty("Hidden", value: .int32(0), changeSignal: .none),
                    ExportedProperty.computed("Position", value: .int64(0)) { .int64(clock.withLock { $0 }) },
                    ExportedProperty.computed("Broken", value: .int64(7)) { .string("not an int64") },
                ])), at: path)
                let c = pair.client
                let dest = pair.serverName
                // Read at each call, by Get and GetAll alike; a value of the wrong type is not sent.
                #expect(try await c.getProperty(destination: dest, path: path, interface: "com.example.Player", name: "Position") == .int64(10))
                clock.withLock { $0 = 25 }
                #expect(try await c.getProperty(destination: dest, path: path, interface: "com.example.Player", name: "Position") == .int64(25))
                let all = try await c.getAllProperties(destination: dest, path: path, interface: "com.example.Player")
                #expect(all["Position"] == .int64(25) && all["Broken"] == .int64(7))
                await expectErrorName(DBusError.Names.propertyReadOnly) {
                    try await c.setProperty(destination: dest, path: path, interface: "com.example.Player", name: "Position", value: .int64(1))
                }

                let changes = try await c.signals(matching: .propertiesChanged(sender: dest, path: path))
                try await pair.server.setExportedProperties(path: path, interface: "com.example.Player", values: [
                    ("Status", .string("Playing")), ("Title", .string("Song")), ("Art", .string("a.png")), ("Hidden", .int32(1)),
                ])
                // One refused value: nothing changes, nothing is emitted.
                await #expect(throws: DBusError.self) {
                    try await pair.server.setExportedProperties(path: path, interface: "com.example.Player", values: [
                        ("Status", .string("Paused")), ("Title", .int32(3)),
                    ])
                }
                // Only .none properties: no signal.
                try await pair.server.setExportedProperties(path: path, interface: "com.example.Player", values: [("Hidden", .int32(2))])
                try await pair.server.setExportedProperty(path: path, interface: "com.example.Player", name: "Status", value: .string("Paused"))
                let signals = try await next(2, from: changes).map { try PropertiesChanged($0) }
                #expect(signals[0].changed == ["Status": .string("Playing"), "Title": .string("Song")] && signals[0].invalidated == ["Art"])
                #expect(signals[1].changed == ["Status": .string("Paused")], "the refused update and the silent one emitted nothing")
                #expect(await pair.server.exportedProperty(path: path, interface: "com.example.Player", name: "Hidden") == .int32(2))
                #expect(await pair.server.exportedProperty(path: path, interface: "com.example.Player", name: "Title") == .string("Song"))
            }
        }

        @Test func objectManager() async throws {
            try await withPair { pair in
                let added = try await pair.client.signals(matching: .interfacesAdded(sender: pair.serverName))
                let removed = try await pair.client.signals(matching: .interfacesRemoved(sender: pair.serverName))
                await pair.server.exportObjectManager(at: "/")
                try await pair.server.export(deviceObject(), at: "/org/example/hci0")

                let objects = try await pair.client.getManagedObjects(destination: pair.serverName)
                #expect(Array(objects.keys) == ["/org/example/hci0"])
                let dev = try #require(objects["/org/example/hci0"])
                #expect(dev["com.example.Device1"]?["Level"] == .int32(5))
                #expect(dev["com.example.Device1"]?["Secret"] == nil)
                #expect(dev["com.example.Extra"] == [:])

                try await pair.server.export(ExportedObject(ExportedInterface("com.example.Leaf", properties: [
                    ExportedProperty("UUID", value: .string("7905f431")),
                ])), at: "/org/example/hci0/leaf")
                let both = try await next(2, from: added).map { try InterfacesAdded($0) }
                #expect(both[0].object == "/org/example/hci0")
                #expect(both[0].interfaces["com.example.Device1"]?["Name"] == .string("dev"))
                let a = both[1]
                #expect(a.object == "/org/example/hci0/leaf")
                #expect(a.interfaces["com.example.Leaf"] == ["UUID": .string("7905f431")])
                #expect(try await pair.client.getManagedObjects(destination: pair.serverName).count == 2)

                await pair.server.unexport("/org/example/hci0/leaf")
                let r = try InterfacesRemoved(try #require(try await next(1, from: removed).first))
                #expect(r.object == "/org/example/hci0/leaf")
                #expect(r.interfaces.contains("com.example.Leaf"))
                await expectErrorName(DBusError.Names.unknownObject) {
                    _ = try await pair.client.call(
                        destination: pair.serverName, path: "/org/example/hci0/leaf", interface: "com.example.Leaf", member: "X")
                }
                // Exporting twice at one path, or a reserved interface, is refused.
                await #expect(throws: DBusError.self) { try await pair.server.export(deviceObject(), at: "/org/example/hci0") }
                await #expect(throws: DBusError.self) {
                    try await pair.server.export(ExportedObject(ExportedInterface("org.freedesktop.DBus.Properties")), at: "/p")
                }
                await #expect(throws: DBusError.self) {
                    try await pair.server.export(ExportedObject(ExportedInterface("a.B"), ExportedInterface("a.B")), at: "/p")
                }
            }
        }
    }
}
