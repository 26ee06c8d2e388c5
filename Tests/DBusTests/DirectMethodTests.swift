import DBus
import Synchronization
import Testing
import TestSupport

extension DBusTests {
    /// `ExportedMethod.direct`: arguments read from the message, dispatch by the header's
    /// strings, the general path's errors, empty replies from a per-caller template.
    @Suite struct DirectMethods {
        static let path: ObjectPath = "/com/example/direct"
        static let interface: InterfaceName = "com.example.Direct"

        /// Records what each `Write` read: its bytes and its `type` option.
        final class Log: Sendable {
            let writes = Mutex<[([UInt8], String?)]>([])
        }

        static func object(_ log: Log) -> ExportedObject {
            ExportedObject(ExportedInterface(interface, methods: [
                .direct("Write", input: "aya{sv}") { call in
                    let bytes = call.byteArray(at: 0) ?? []
                    log.writes.withLock { $0.append((bytes, call.stringOption("type", at: 1))) }
                    if bytes == [0xFF] { throw DBusError.error("com.example.Error.Refused", "refused") }
                    return []
                },
                .direct("Sender", output: "s") { call in [.string(call.sender)] },
                // What the readers give for arguments of another type or past the last one.
                .direct("Probe", input: "sa{sv}", output: "bbbb") { call in
                    [.bool(call.byteArray(at: 0) == nil), .bool(call.stringOption("type", at: 0) == nil),
                     .bool(call.byteArray(at: 2) == nil && call.stringOption("type", at: 2) == nil),
                     .bool(call.stringOption("type", at: 1) == "x")]
                },
                .direct("Wrong", output: "s") { _ in [] },
            ]))
        }

        static func write(_ client: DBusConnection, _ server: BusName, _ bytes: [UInt8], _ options: DBusValue,
                          interface: InterfaceName? = interface) async throws {
            _ = try await client.call(
                destination: server, path: path, interface: interface, member: "Write",
                arguments: [.byteArray(bytes), options], expecting: .empty, timeout: .seconds(5))
        }

        @Test func argumentsRepliesAndErrors() async throws {
            try await withPair { pair in
                let log = Log()
                try await pair.server.export(Self.object(log), at: Self.path)
                let other = try await DBusConnection.connect(to: .address(pair.bus.address))
                // Two callers in turn: each reply (a copy of the last one to that caller, or a
                // new one) must reach its own call.
                for i in 0..<20 {
                    let caller = i % 3 == 0 ? other : pair.client
                    try await Self.write(caller, pair.serverName, [UInt8(i)], .variantDictionary(["type": .string("t\(i)")]))
                }
                #expect(log.writes.withLock { $0.map(\.0) } == (0..<20).map { [UInt8($0)] })
                #expect(log.writes.withLock { $0.map(\.1) } == (0..<20).map { "t\($0)" })
                log.writes.withLock { $0.removeAll() }

                let entries: [(key: DBusValue, value: DBusValue)] = [
                    (.string("type"), .variant(.string("first"))), (.string("x"), .variant(.uint32(1))),
                    (.string("type"), .variant(.variant(.string("last")))),
                ]
                try await Self.write(pair.client, pair.serverName, [], .dictionary(key: "s", value: "v", entries))
                try await Self.write(pair.client, pair.serverName, [1, 2], .variantDictionary(["type": .int32(3)]))
                try await Self.write(pair.client, pair.serverName, [3], .variantDictionary([:]), interface: nil)
                #expect(log.writes.withLock { $0.map(\.0) } == [[], [1, 2], [3]])
                #expect(log.writes.withLock { $0.map(\.1) } == ["last", nil, nil])

                await expectDBusError(.remote(name: "com.example.Error.Refused", message: "refused")) {
                    try await Self.write(pair.client, pair.serverName, [0xFF], .variantDictionary([:]))
                }
                await expectErrorName(DBusError.Names.invalidArgs) {
                    _ = try await pair.client.call(
                        destination: pair.serverName, path: Self.path, interface: Self.interface, member: "Write",
                        arguments: [.byteArray([1])])
                }
                await expectErrorName(DBusError.Names.failed) {
                    _ = try await pair.client.call(
                        destination: pair.serverName, path: Self.path, interface: Self.interface, member: "Wrong")
                }
                let sender = try await pair.client.call(
                    destination: pair.serverName, path: Self.path, interface: Self.interface, member: "Sender", expecting: "s")
                #expect(sender == [.string(pair.client.uniqueName)])
                let probe = try await pair.client.call(
                    destination: pair.serverName, path: Self.path, interface: Self.interface, member: "Probe",
                    arguments: [.string("type"), .variantDictionary(["type": .string("x")])], expecting: "bbbb")
                #expect(probe == [.bool(true), .bool(true), .bool(true), .bool(true)])

                // Gone with its object.
                await pair.server.unexport(Self.path)
                await expectErrorName(DBusError.Names.unknownObject) {
                    try await Self.write(pair.client, pair.serverName, [1], .variantDictionary([:]))
                }
                await other.close()
            }
        }
    }
}
