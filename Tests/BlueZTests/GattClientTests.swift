import BlueZ
import DBus
import Synchronization
import Testing
import TestSupport

/// `GattClient.startWriteRequest` against characteristics that play bluetoothd's part: the
/// Control Point write as the daemon makes it, through the ordinary call path.
@Suite(.serialized) struct GattClientTests {
    static let controlPoint: ObjectPath = "/org/bluez/hci0/dev_00_11_22_33_44_55/service0010/char0015"
    /// A characteristic whose WriteValue (wrongly) answers with a value.
    static let answering: ObjectPath = "/org/bluez/hci0/dev_00_11_22_33_44_55/service0010/char0017"

    final class Writes: Sendable {
        let received = Mutex<[[DBusValue]]>([])
    }

    static func characteristic(_ writes: Writes) -> ExportedObject {
        ExportedObject(ExportedInterface(InterfaceName(stringLiteral: BlueZ.gattCharacteristicInterface), methods: [
            .immediate("WriteValue", input: "aya{sv}") { call in
                writes.received.withLock { $0.append(call.arguments) }
                if call.arguments.first?.bytes == [0xA2] {
                    throw DBusError.remote(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0xa2")
                }
                return []
            },
        ]))
    }

    static let answeringCharacteristic = ExportedObject(ExportedInterface(
        InterfaceName(stringLiteral: BlueZ.gattCharacteristicInterface),
        methods: [.immediate("WriteValue", input: "aya{sv}", output: "s") { _ in [.string("unexpected")] }]))

    /// One write's outcome, as the completion gives it.
    func write(_ gatt: GattClient, _ path: ObjectPath, _ bytes: [UInt8]) async throws -> Result<Void, any Error> {
        return await withCheckedContinuation { continuation in
            do {
                try gatt.startWriteRequest(path, bytes) { continuation.resume(returning: $0) }
            } catch {
                continuation.resume(returning: .failure(error))
            }
        }
    }

    @Test func writesArriveAndRepliesBecomeResults() async throws {
        let bus = try PrivateBus()
        defer { bus.stop() }
        let bluez = try await DBusConnection.connect(to: .address(bus.address))
        let client = try await DBusConnection.connect(to: .address(bus.address))
        _ = try await bluez.requestName(BlueZ.service)
        let writes = Writes()
        try await bluez.export(Self.characteristic(writes), at: Self.controlPoint)
        try await bluez.export(Self.answeringCharacteristic, at: Self.answering)
        let gatt = GattClient(connection: client, timeout: .seconds(5))

        // Every length from empty to past the 8-byte alignment of what follows the array.
        let values = (0..<20).map { count in (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 37) } }
        for value in values { try await write(gatt, Self.controlPoint, value).get() }
        let options = DBusValue.variantDictionary([:])
        #expect(writes.received.withLock { $0 } == values.map { [.byteArray($0), options] })

        do {
            try await write(gatt, Self.controlPoint, [0xA2]).get()
            Issue.record("an ATT error reply succeeded")
        } catch let error as DBusError {
            #expect(attErrorCode(in: error) == 0xA2)
        }
        do {
            try await write(gatt, Self.answering, [1]).get()
            Issue.record("a reply with a value succeeded")
        } catch let error as DBusError {
            #expect(error == .unexpectedSignature(expected: "", actual: "s"))
        }
        await client.close()
        await bluez.close()
    }
}
