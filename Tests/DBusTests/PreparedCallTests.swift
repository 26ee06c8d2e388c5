import CDBus
@testable import DBus
import Synchronization
import Testing

/// Calls prepared once and sent with a different leading byte array each time
/// (`DBusConnection.prepareCall`, `startCall(_:byteArray:completion:)`).
@Suite struct PreparedCallTests {
    private let path: ObjectPath = "/org/bluez/hci0/dev_00_11_22_33_44_55/service0010/char0015"
    private let options = DBusValue.variantDictionary(["type": .string("request")])

    private func prepared(_ trailing: [DBusValue], autoStart: Bool = true) throws -> DBusConnection.PreparedCall {
        try DBusConnection.PreparedCall(
            destination: "org.bluez", path: path, interface: "org.bluez.GattCharacteristic1", member: "WriteValue",
            trailing: trailing, timeoutMilliseconds: 1000, autoStart: autoStart)
    }

    /// The prepared bytes are those of the general writer, and the message libdbus makes of
    /// them is the one its own iterators build.
    private func expectSameAsGeneral(_ array: [UInt8], _ trailing: [DBusValue], autoStart: Bool = true) throws {
        let call = try prepared(trailing, autoStart: autoStart)
        let arguments = [DBusValue.byteArray(array)] + trailing
        let signature = try DBusValue.validate(arguments: arguments)
        let flags = autoStart ? 0 : Wire.noAutoStart
        let general = try #require(Wire.methodCall(
            destination: "org.bluez", path: path.rawValue, interface: "org.bluez.GattCharacteristic1",
            member: "WriteValue", signature: signature, arguments: arguments, flags: flags))
        #expect(call.wire.bytes(array) == general, "\(array.count) bytes, then \(signature)")
        let iterators = try OwnedMessage.iteratorMethodCall(
            destination: "org.bluez", path: path, interface: "org.bluez.GattCharacteristic1", member: "WriteValue",
            arguments: arguments, autoStart: autoStart)
        let message = try call.message(array)
        #expect(dbus_message_get_serial(message.raw) == 0)
        #expect(marshalled(message) == marshalled(iterators), "\(array.count) bytes, then \(signature)")
        let decoded = try Message.decode(message.raw)
        #expect(decoded.arguments == arguments)
    }

    @Test func controlPointWritesOfEveryLength() throws {
        for count in 0..<20 {
            try expectSameAsGeneral((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37) }, [options])
        }
        try expectSameAsGeneral([0, 1, 2, 3, 4, 1, 0xFF, 0xFF], [options], autoStart: false)
    }

    @Test(arguments: sampleValues.indices)
    func everySampleValueAfterArraysOfEveryLength(_ index: Int) throws {
        let value = sampleValues[index]
        // The array's length puts what follows at every offset modulo 8.
        for count in 0..<12 {
            try expectSameAsGeneral(Array(repeating: 0xA5, count: count), [value, .byte(2)])
        }
    }

    @Test func nothingAfterTheArray() throws {
        for count in 0..<10 { try expectSameAsGeneral(Array(repeating: 1, count: count), []) }
    }

    @Test func invalidArgumentsAreRefused() throws {
        let fd = try UnixFD(duplicating: 0)
        defer { fd.close() }
        #expect(throws: DBusError.self) { try prepared([.unixFD(fd)]) }  // not written in wire form
        #expect(throws: DBusError.self) { try prepared([.structure([])]) }
        #expect(throws: DBusError.self) { try prepared([.array("x", [.string("not an int64")])]) }
        #expect(throws: DBusError.self) { try prepared([.variant(.dictionary(key: "v", value: "s", []))]) }
        let call = try prepared([options])
        #expect(throws: DBusError.self) { try call.message([UInt8](repeating: 0, count: Int(DBusValue.maximumArrayLength) + 1)) }
    }
}

private let writablePath: ObjectPath = "/com/example/char"

/// An object with WriteValue-like methods: one that keeps what it got, one that answers with
/// a value, one that fails.
private final class Received: Sendable {
    let calls = Mutex<[[DBusValue]]>([])
}

private func writableObject(_ received: Received = Received()) -> ExportedObject {
    ExportedObject(ExportedInterface("com.example.Char", methods: [
        .immediate("Write", input: "aya{sv}", output: "") { call in
            received.calls.withLock { $0.append(call.arguments) }
            return []
        },
        .immediate("WriteAnswering", input: "aya{sv}", output: "s") { _ in [.string("unexpected")] },
        .immediate("WriteFailing", input: "aya{sv}", output: "") { _ in
            throw DBusError.remote(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0xa2")
        },
        ExportedMethod("Hang", input: "ay", output: "") { _ in
            try await Task.sleep(for: .seconds(5))
            return []
        },
    ]))
}

extension DBusTests {
    @Suite struct PreparedCalls {
        private func start(
            _ pair: Pair, _ member: MemberName, _ bytes: [UInt8], timeout: Duration = .seconds(5)
        ) async throws -> Result<Void, any Error> {
            let call = try pair.client.prepareCall(
                destination: pair.serverName, path: writablePath, interface: "com.example.Char", member: member,
                trailing: [.variantDictionary(["type": .string("request")])], timeout: timeout)
            let (stream, continuation) = AsyncStream<Result<Void, any Error>>.makeStream()
            try pair.client.startCall(call, byteArray: bytes) { continuation.yield($0); continuation.finish() }
            var outcome: Result<Void, any Error>?
            for await o in stream { outcome = o }
            return try #require(outcome)
        }

        @Test func anEmptyReplyIsSuccessAndTheBytesArrive() async throws {
            try await withPair { pair in
                let received = Received()
                try await pair.server.export(writableObject(received), at: writablePath)
                for bytes: [UInt8] in [[], [0], [0, 1, 2, 3, 4, 1, 0xFF, 0xFF, 3]] {
                    try await start(pair, "Write", bytes).get()
                }
                #expect(received.calls.withLock { $0 } == [[], [0], [0, 1, 2, 3, 4, 1, 0xFF, 0xFF, 3]].map {
                    [.byteArray($0), .variantDictionary(["type": .string("request")])]
                })
                #expect(await pair.client.pendingCallCount == 0)
            }
        }

        @Test func aReplyWithArgumentsOrAnErrorFails() async throws {
            try await withPair { pair in
                try await pair.server.export(writableObject(), at: writablePath)
                await expectDBusError(.unexpectedSignature(expected: "", actual: "s")) {
                    try await start(pair, "WriteAnswering", [1]).get()
                }
                await expectDBusError(.remote(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0xa2")) {
                    try await start(pair, "WriteFailing", [1]).get()
                }
                await expectErrorName(DBusError.Names.unknownMethod) { try await start(pair, "Missing", [1]).get() }
            }
        }

        @Test func aCancelledCallFailsWithCancellation() async throws {
            try await withPair { pair in
                try await pair.server.export(writableObject(), at: writablePath)
                // Answered only after 5 s: the call waits until it is cancelled.
                let call = try pair.client.prepareCall(
                    destination: pair.serverName, path: writablePath, interface: "com.example.Char", member: "Hang",
                    trailing: [])
                let (stream, continuation) = AsyncStream<Result<Void, any Error>>.makeStream()
                let pending = try pair.client.startCall(call, byteArray: [1]) { continuation.yield($0); continuation.finish() }
                pair.client.cancelCall(pending)
                var outcome: Result<Void, any Error>?
                for await o in stream { outcome = o }
                #expect(throws: CancellationError.self) { try outcome?.get() }
                #expect(await pair.client.pendingCallCount == 0)
            }
        }
    }
}
