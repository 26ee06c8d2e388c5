import CDBus
@testable import DBus
import Testing

extension DBusTests {
    /// Calls copied from the last call to the same method, their byte arrays written over
    /// (`CallHeaders`): the same bytes on the wire as a call built anew, whatever came before.
    @Suite struct CallCopies {
        static let path: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0030/char0034"

        /// A method call as `headers` makes it, then its wire bytes (with serial 7, as the
        /// connection would number it) and its arguments read back.
        static func build(
            _ headers: CallHeaders, _ arguments: [DBusValue], member: MemberName = "WriteValue", noReply: Bool = false
        ) throws -> (wire: [UInt8], arguments: [DBusValue], noReply: Bool) {
            let message = try OwnedMessage.methodCall(
                headers: headers, destination: BusName(validating: "org.bluez"), path: path,
                interface: InterfaceName(validating: "org.bluez.GattCharacteristic1"), member: member,
                arguments: arguments, noReply: noReply)
            dbus_message_set_serial(message.raw, 7)
            var buffer: UnsafeMutablePointer<CChar>?
            var length: Int32 = 0
            #expect(dbus_message_marshal(message.raw, &buffer, &length) != 0)
            defer { dbus_free(buffer) }
            let wire = try #require(buffer).withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
                Array(UnsafeBufferPointer(start: $0, count: Int(length)))
            }
            return (wire, try Marshal.readArguments(message.raw), dbus_message_get_no_reply(message.raw) != 0)
        }

        /// Control Point requests of two lengths, interleaved and in runs, some with
        /// no reply expected: each call the same as one built anew by headers that never saw a
        /// call before.
        @Test func copiesAreTheCallsBuiltAnew() throws {
            let headers = CallHeaders()
            var uid: UInt32 = 0x0001_0000
            for round in 0..<40 {
                uid &+= 0x0101_0101
                let uidBytes = withUnsafeBytes(of: uid.littleEndian, Array.init)
                let request: [UInt8] = round % 7 < 4
                    ? [0] + uidBytes + [0, 1, 0xFF, 0xFF, 3, 0, 1]
                    : [2] + uidBytes + [UInt8(round)]
                let arguments: [DBusValue] = [.byteArray(request), .variantDictionary([:])]
                let noReply = round % 5 == 4
                let copied = try Self.build(headers, arguments, noReply: noReply)
                let anew = try Self.build(CallHeaders(), arguments, noReply: noReply)
                #expect(copied.wire == anew.wire, "round \(round)")
                #expect(copied.arguments == arguments, "round \(round)")
                #expect(copied.noReply == noReply, "round \(round): the flags are the call's own")
            }
        }

        /// Only byte arrays are written over: a call whose other arguments differ, or whose array
        /// has another length, is built anew.
        @Test func otherDifferencesAreBuiltAnew() throws {
            let headers = CallHeaders()
            let calls: [[DBusValue]] = [
                [.byteArray([1, 2, 3]), .variantDictionary(["type": .variant(.string("request"))])],
                [.byteArray([4, 5, 6]), .variantDictionary(["type": .variant(.string("command"))])],
                [.byteArray([7, 8, 9]), .variantDictionary(["type": .variant(.string("command"))])],
                [.byteArray([7, 8, 9, 10]), .variantDictionary(["type": .variant(.string("command"))])],
                [.byteArray([]), .variantDictionary([:])],
                [.byteArray([1]), .variantDictionary([:])],
                [.byteArray([1]), .variantDictionary([:]), .string("more")],
                [.array("y", [.byte(1)]), .variantDictionary([:]), .string("more")],
                [.byteArray([2]), .variantDictionary([:]), .string("more")],
                [.byteArray([3]), .variantDictionary([:]), .string("less")],
            ]
            for (index, arguments) in calls.enumerated() {
                let member = MemberName(validating: "Write\(arguments.count)")!
                let copied = try Self.build(headers, arguments, member: member)
                let fresh = try Self.build(CallHeaders(), arguments, member: member)
                #expect(copied.wire == fresh.wire, "call \(index)")
                #expect(copied.arguments == arguments, "call \(index)")
            }
        }

        /// Through a bus: a burst of calls whose byte array changes each time, each echoed back
        /// as it was sent.
        @Test func aBurstOfCopiesThroughTheBus() async throws {
            try await withPair { pair in
                try await pair.server.export(echoObject(), at: echoPath)
                let options = DBusValue.variantDictionary([:])
                let echo = try #require(sampleValues.firstIndex(of: options).flatMap { MemberName(validating: "AfterBytes\($0)") })
                for index in 0..<200 {
                    let bytes = (0..<8).map { UInt8(truncatingIfNeeded: index &* 31 &+ $0) }
                    let arguments: [DBusValue] = [.byteArray(bytes), options]
                    let reply = try await pair.client.call(
                        destination: pair.serverName, path: echoPath, interface: "com.example.Echo", member: echo,
                        arguments: arguments)
                    #expect(reply.arguments == arguments, "call \(index)")
                }
            }
        }
    }
}
