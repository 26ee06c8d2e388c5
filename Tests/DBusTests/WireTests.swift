import CDBus
@testable import DBus
import Testing

/// Method calls serialized by `Wire` are the very bytes libdbus's iterators make.
@Suite struct WireTests {
    /// Both builders' messages, numbered alike and marshalled by libdbus.
    private func bothWays(
        _ arguments: [DBusValue], destination: BusName? = "org.bluez", interface: InterfaceName? = "org.bluez.GattCharacteristic1",
        noReply: Bool = false, autoStart: Bool = true
    ) throws -> (wire: [UInt8], iterators: [UInt8], decoded: Message) {
        let path: ObjectPath = "/org/bluez/hci0/dev_00_11_22_33_44_55/service0010/char0015"
        let signature = try DBusValue.validate(arguments: arguments)
        let bytes = try #require(Wire.methodCall(
            destination: destination?.rawValue, path: path.rawValue, interface: interface?.rawValue, member: "WriteValue",
            signature: signature, arguments: arguments,
            flags: (noReply ? Wire.noReplyExpected : 0) | (autoStart ? 0 : Wire.noAutoStart)))
        let wire = OwnedMessage(adopting: try #require(Wire.message(from: bytes), "libdbus refused the wire bytes"))
        let iterators = try OwnedMessage.iteratorMethodCall(
            destination: destination, path: path, interface: interface, member: "WriteValue", arguments: arguments,
            noReply: noReply, autoStart: autoStart)
        #expect(dbus_message_get_serial(wire.raw) == 0)
        return (marshalled(wire), marshalled(iterators), try Message.decode(wire.raw))
    }

    @Test func aControlPointWrite() throws {
        let (wire, iterators, decoded) = try bothWays([.byteArray([0, 1, 2, 3, 4, 0, 1, 0xFF, 0xFF]), .variantDictionary(["type": .string("request")])])
        #expect(wire == iterators)
        #expect(decoded.member?.rawValue == "WriteValue" && decoded.signature == "aya{sv}")
    }

    @Test(arguments: sampleValues.indices)
    func everySampleValueAtEveryAlignment(_ index: Int) throws {
        let value = sampleValues[index]
        // After 0 to 7 bytes of something else, so that every padding rule is exercised.
        for lead in 0..<8 {
            let arguments = Array(repeating: DBusValue.byte(1), count: lead) + [value, .byte(2)]
            let (wire, iterators, decoded) = try bothWays(arguments)
            #expect(wire == iterators, "\(value.signatureString) after \(lead) bytes")
            #expect(decoded.arguments.count == arguments.count)
        }
    }

    @Test func headerVariants() throws {
        for (destination, interface) in [(nil, nil), ("org.bluez", nil), (nil, "org.freedesktop.DBus.Properties")] as [(BusName?, InterfaceName?)] {
            for (noReply, autoStart) in [(false, true), (true, true), (false, false), (true, false)] {
                let (wire, iterators, decoded) = try bothWays(
                    [.string("a"), .uint32(1)], destination: destination, interface: interface,
                    noReply: noReply, autoStart: autoStart)
                #expect(wire == iterators)
                #expect(decoded.noReplyExpected == noReply)
            }
        }
        let (wire, iterators, _) = try bothWays([])
        #expect(wire == iterators)
    }

    @Test func unixFDsAreLeftToTheIterators() throws {
        let fd = try UnixFD(duplicating: 0)
        #expect(Wire.methodCall(
            destination: nil, path: "/", interface: nil, member: "M", signature: "h", arguments: [.unixFD(fd)], flags: 0) == nil)
    }
}

/// A message as libdbus marshals it, numbered 7 so that builders' messages compare alike.
func marshalled(_ message: OwnedMessage) -> [UInt8] {
    dbus_message_set_serial(message.raw, 7)
    var buffer: UnsafeMutablePointer<CChar>?
    var length: Int32 = 0
    guard dbus_message_marshal(message.raw, &buffer, &length) != 0, let buffer else { return [] }
    defer { dbus_free(buffer) }
    return Array(UnsafeRawBufferPointer(start: buffer, count: Int(length)))
}
