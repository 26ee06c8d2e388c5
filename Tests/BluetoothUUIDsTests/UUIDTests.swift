import BluetoothUUIDs
import Testing

@Suite struct UUIDTests {
    @Test func uuids() throws {
        #expect(ANCSUUID.service.description == "7905f431-b5ce-4e99-a40f-4b1e122d00d0")
        #expect(ANCSUUID.notificationSource.description == "9fbf120d-6301-42d9-8c58-25e699a21dbd")
        #expect(ANCSUUID.controlPoint.description == "69d1d8f3-45e1-49a8-9821-9bbdfdaad9d9")
        #expect(ANCSUUID.dataSource.description == "22eac6e9-24d6-4bb5-be44-b36ace7c7bfb")
        #expect(BluetoothUUID("7905F431-B5CE-4E99-A40F-4B1E122D00D0") == ANCSUUID.service)
        let le = ANCSUUID.service.littleEndianBytes
        #expect(le.first == 0xD0 && le.last == 0x79)
        #expect(BluetoothUUID(littleEndianBytes: le) == ANCSUUID.service)
        #expect(BluetoothUUID(littleEndianBytes: le.dropLast()) == nil)
        for bad in ["", "7905F431B5CE4E99A40F4B1E122D00D0", "7905F431-B5CE-4E99-A40F-4B1E122D00D", "7905F431-B5CE-4E99-A40F-4B1E122D00D0F",
                    "7905F431-B5CE-4E99-A40F_4B1E122D00D0", "g905F431-B5CE-4E99-A40F-4B1E122D00D0", "7905F431-B5CE-4E99-A40F-4B1E122D00Dé"] {
            #expect(BluetoothUUID(bad) == nil, "\(bad)")
        }
    }
}
