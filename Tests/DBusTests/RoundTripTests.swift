import DBus
import Foundation
import Synchronization
import Testing

/// Values of every D-Bus type, with edge cases.
let sampleValues: [DBusValue] = {
    var values: [DBusValue] = [
        .byte(0), .byte(255), .bool(true), .bool(false),
        .int16(.min), .int16(.max), .uint16(0), .uint16(.max),
        .int32(.min), .int32(.max), .uint32(.max), .int64(.min), .int64(.max), .uint64(.max),
        .double(-0.0), .double(.pi), .double(.infinity), .double(-.infinity), .double(.nan),
        .double(.leastNonzeroMagnitude),
        .string(""), .string("héllo wörld ✓ 🎉 „quotes“ … \u{200E}+33\u{200F}"), .string(String(String.UnicodeScalarView([0xFFFE, 0xFDD0, 0x10FFFF].compactMap(Unicode.Scalar.init)))),
        .string("line\nbreak\ttab\u{1}"),
        .objectPath("/"), .objectPath("/org/bluez/hci0/dev_00_11_22_33_44_55"),
        .signature(""), .signature("a{sv}(hq)aay"),
        .byteArray([]), .byteArray([0, 1, 127, 128, 255]),
        .array("b", []), .array("b", [.bool(true), .bool(false)]),
        .array("n", [.int16(-1), .int16(.max)]), .array("q", [.uint16(7)]),
        .array("i", []), .array("i", [.int32(1), .int32(-1), .int32(.min)]),
        .array("u", [.uint32(.max)]), .array("x", [.int64(.min)]), .array("t", [.uint64(.max), .uint64(0)]),
        .array("d", [.double(1.5), .double(-0.0)]),
        .array("s", []), .stringArray(["a", "", "ü"]),
        .objectPathArray(["/a", "/b/c"]), .array("g", [.signature("s"), .signature("")]),
        .array("as", [.stringArray(["x"]), .stringArray([])]),
        .array("ay", [.byteArray([1]), .byteArray([])]),
        .array("aay", [.array("ay", [.byteArray([9])])]),
        .array("v", [.variant(.int32(1)), .variant(.string("s")), .variant(.byteArray([]))]),
        .dictionary(key: "s", value: "v", []),
        .variantDictionary([
            "a": .int32(1), "b": .stringArray(["x"]),
            "c": .variantDictionary(["n": .bool(true), "m": .array("a{sv}", [])]),
        ]),
        .dictionary(key: "y", value: "s", [(.byte(1), .string("one")), (.byte(2), .string("two"))]),
        .dictionary(key: "b", value: "b", [(.bool(true), .bool(false))]),
        .dictionary(key: "n", value: "q", [(.int16(-3), .uint16(3))]),
        .dictionary(key: "u", value: "x", [(.uint32(1), .int64(-1))]),
        .dictionary(key: "t", value: "d", [(.uint64(1), .double(0.5))]),
        .dictionary(key: "d", value: "ay", [(.double(2.5), .byteArray([1, 2]))]),
        .dictionary(key: "o", value: "as", [(.objectPath("/x"), .stringArray(["i"]))]),
        .dictionary(key: "g", value: "v", [(.signature("ai"), .variant(.array("i", [.int32(4)])))]),
        .dictionary(
            key: "i", value: "a{s(ib)}",
            [(.int32(7), .dictionary(key: "s", value: "(ib)", [(.string("k"), .structure([.int32(1), .bool(true)]))]))]),
        .dictionary(key: "o", value: "a{sa{sv}}", [
            (.objectPath("/org/bluez/hci0"), .dictionary(key: "s", value: "a{sv}", [
                (.string("org.bluez.Adapter1"), .variantDictionary(["Powered": .bool(true), "Address": .string("00:11")])),
            ])),
        ]),
        .structure([.int32(1)]),
        .structure([.string("a"), .structure([.byteArray([1]), .variant(.objectPath("/x"))]), .uint64(9)]),
        .array("(is)", [.structure([.int32(1), .string("a")]), .structure([.int32(2), .string("b")])]),
        .array("(is)", []),
        .variant(.int32(3)), .variant(.variant(.variant(.string("deep")))), .variant(.byteArray([1, 2])),
        .variant(.array("a{sv}", [])), .variant(.structure([.signature("v"), .variant(.bool(false))])),
    ]
    // 30 nested arrays, and 20 nested structs inside variants.
    values.append((0..<30).reduce(DBusValue.array("i", [.int32(1)])) { v, _ in .array(v.signature, [v]) })
    values.append((0..<20).reduce(DBusValue.int32(1)) { v, _ in .variant(.structure([v])) })
    return values
}()

/// An object echoing each sample value with a method of exactly its signature.
func echoObject() -> ExportedObject {
    var methods: [ExportedMethod] = []
    for (i, value) in sampleValues.enumerated() {
        methods.append(.immediate(MemberName(validating: "Echo\(i)")!, input: value.signature, output: value.signature) { call in
            call.arguments
        })
    }
    for (i, value) in sampleValues.enumerated() {
        methods.append(.immediate(
            MemberName(validating: "AfterBytes\(i)")!, input: Signature(validating: "ay" + value.signature.rawValue)!,
            output: Signature(validating: "ay" + value.signature.rawValue)!
        ) { $0.arguments })
    }
    methods.append(ExportedMethod("EchoAsync", input: "v", output: "v") { call in
        await Task.yield()
        return call.arguments
    })
    methods.append(.immediate("EchoBytes", input: "ay", output: "ay") { $0.arguments })
    methods.append(.immediate("EchoString", input: "s", output: "s") { $0.arguments })
    methods.append(.immediate("EchoAll", input: Signature(validating: sampleValues.map(\.signature.rawValue).prefix(20).joined())!,
                              output: Signature(validating: sampleValues.map(\.signature.rawValue).prefix(20).joined())!) { $0.arguments })
    return ExportedObject(ExportedInterface("com.example.Echo", methods: methods))
}

let echoPath: ObjectPath = "/com/example/echo"

extension DBusTests {
    @Suite struct RoundTrip {
        @Test func everyTypeThroughAnExportedObject() async throws {
            try await withPair { pair in
                try await pair.server.export(echoObject(), at: echoPath)
                for (i, value) in sampleValues.enumerated() {
                    let reply = try await pair.client.call(
                        destination: pair.serverName, path: echoPath, interface: "com.example.Echo",
                        member: MemberName(validating: "Echo\(i)")!, arguments: [value])
                    #expect(reply.arguments == [value], "value \(i): \(value)")
                    #expect(reply.signature == value.signature)
                    // The same value inside a variant, through an asynchronous handler.
                    let viaAsync = try await pair.client.call(
                        destination: pair.serverName, path: echoPath, interface: "com.example.Echo",
                        member: "EchoAsync", arguments: [.variant(value)], expecting: "v")
                    #expect(viaAsync == [.variant(value)], "value \(i) in a variant")
                }
                // Many arguments in one message.
                let all = Array(sampleValues.prefix(20))
                let reply = try await pair.client.call(
                    destination: pair.serverName, path: echoPath, interface: "com.example.Echo",
                    member: "EchoAll", arguments: all)
                #expect(reply.arguments == all)
            }
        }

        /// A byte array, then any value (as in BlueZ's `WriteValue(ay, a{sv})`): the array's
        /// length puts the value at every alignment.
        @Test func everyTypeAfterByteArraysOfEveryLength() async throws {
            try await withPair { pair in
                try await pair.server.export(echoObject(), at: echoPath)
                for (i, value) in sampleValues.enumerated() {
                    for count in 0..<8 {
                        let arguments: [DBusValue] = [.byteArray(Array(repeating: 0xA5, count: count)), value]
                        let reply = try await pair.client.call(
                            destination: pair.serverName, path: echoPath, interface: "com.example.Echo",
                            member: MemberName(validating: "AfterBytes\(i)")!, arguments: arguments)
                        #expect(reply.arguments == arguments, "value \(i) after \(count) bytes")
                    }
                }
            }
        }

        @Test func everyTypeThroughSignals() async throws {
            try await withPair { pair in
                let stream = try await pair.client.signals(
                    matching: MatchRule(sender: pair.serverName, interface: "com.example.Values", member: "Value"))
                for value in sampleValues {
                    try await pair.server.emitSignal(path: "/v", interface: "com.example.Values", member: "Value", arguments: [value])
                }
                let received = try await next(sampleValues.count, from: stream)
                #expect(received.map(\.arguments) == sampleValues.map { [$0] })
                #expect(received.allSatisfy { $0.sender == pair.server.uniqueName && $0.path == "/v" })
            }
        }

        @Test func largeMessages() async throws {
            try await withPair { pair in
                try await pair.server.export(echoObject(), at: echoPath)
                let bytes = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
                let reply = try await pair.client.call(
                    destination: pair.serverName, path: echoPath, interface: "com.example.Echo",
                    member: "EchoBytes", arguments: [.byteArray(bytes)], expecting: "ay")
                #expect(reply[0].bytes == bytes)
                let text = String(repeating: "abcdefgh✓", count: (1 << 20) / 11)
                let echoed = try await pair.client.call(
                    destination: pair.serverName, path: echoPath, interface: "com.example.Echo",
                    member: "EchoString", arguments: [.string(text)], expecting: "s")
                #expect(echoed[0].stringValue == text)
            }
        }

        @Test func fileDescriptorsBothWays() async throws {
            try await withPair { pair in
                let serverKept = Mutex<[UnixFD]>([])
                let object = ExportedObject(ExportedInterface("com.example.FD", methods: [
                    // Like BlueZ's AcquireNotify: returns (h fd, q mtu).
                    .immediate("Acquire", output: "hq") { _ in
                        var fds: [Int32] = [0, 0]
                        guard pipe(&fds) == 0 else { throw DBusError.failed("pipe") }
                        let message = Array("notification".utf8)
                        _ = message.withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
                        close(fds[1])
                        let fd = UnixFD(adopting: fds[0])
                        serverKept.withLock { $0.append(fd) }
                        return [.unixFD(fd), .uint16(517)]
                    },
                    // Reads everything from the fd it is given.
                    .immediate("ReadAll", input: "h", output: "s") { call in
                        guard let fd = call.arguments[0].unixFDValue?.take() else { throw DBusError.failed("no fd") }
                        defer { close(fd) }
                        var out: [UInt8] = []
                        var buf = [UInt8](repeating: 0, count: 256)
                        while true {
                            let n = read(fd, &buf, buf.count)
                            if n <= 0 { break }
                            out += buf[0..<n]
                        }
                        return [.string(String(decoding: out, as: UTF8.self))]
                    },
                ]))
                try await pair.server.export(object, at: "/fd")
                let openBefore = openFDCount()
                for _ in 0..<50 {
                    let reply = try await pair.client.call(
                        destination: pair.serverName, path: "/fd", interface: "com.example.FD", member: "Acquire",
                        expecting: "hq")
                    #expect(reply[1] == .uint16(517))
                    let fd = try #require(reply[0].unixFDValue)
                    let raw = try #require(fd.fileDescriptor)
                    var buf = [UInt8](repeating: 0, count: 64)
                    let n = read(raw, &buf, buf.count)
                    #expect(String(decoding: buf[0..<max(0, n)], as: UTF8.self) == "notification")
                    fd.close()

                    var fds: [Int32] = [0, 0]
                    #expect(pipe(&fds) == 0)
                    let readEnd = UnixFD(adopting: fds[0])
                    _ = Array("ping".utf8).withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
                    close(fds[1])
                    let text = try await pair.client.call(
                        destination: pair.serverName, path: "/fd", interface: "com.example.FD", member: "ReadAll",
                        arguments: [.unixFD(readEnd)], expecting: "s")
                    #expect(text == [.string("ping")])
                    // libdbus sent a dup: ours is still open and still ours.
                    #expect(readEnd.fileDescriptor.map { fcntl($0, F_GETFD) } != -1)
                    readEnd.close()
                }
                // The server still owns what it sent; close those, then nothing leaked.
                serverKept.withLock { fds in
                    #expect(fds.allSatisfy { $0.fileDescriptor != nil })
                    fds.forEach { $0.close() }
                    fds = []
                }
                #expect(openFDCount() <= openBefore + 2)
            }
        }
    }
}

func openFDCount() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
}
