import CDBus
@testable import DBus
import Glibc
import TestSupport
import Testing


/// libdbus's own validators (these report, they do not abort).
enum LibDBus {
    static func check(_ s: String, _ f: (UnsafePointer<CChar>, UnsafeMutablePointer<CDBus.DBusError>) -> dbus_bool_t) -> Bool {
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        return s.withCString { f($0, &error) } != 0
    }
    static func path(_ s: String) -> Bool { check(s) { dbus_validate_path($0, $1) } }
    static func interface(_ s: String) -> Bool { check(s) { dbus_validate_interface($0, $1) } }
    static func member(_ s: String) -> Bool { check(s) { dbus_validate_member($0, $1) } }
    static func errorName(_ s: String) -> Bool { check(s) { dbus_validate_error_name($0, $1) } }
    static func busName(_ s: String) -> Bool { check(s) { dbus_validate_bus_name($0, $1) } }
    static func signature(_ s: String) -> Bool { check(s) { dbus_signature_validate($0, $1) } }
}

extension DBusTests {
    @Suite struct Validation {
        @Test func objectPaths() throws {
            for good in ["/", "/a", "/org/bluez/hci0", "/a_b/C9", "/0"] {
                #expect(ObjectPath(validating: good) != nil, "\(good)")
            }
            for bad in ["", "a", "//", "/a/", "/a//b", "/a-b", "/a.b", "/é", "/a b", "/a\0b"] {
                #expect(ObjectPath(validating: bad) == nil, "\(bad)")
                #expect(throws: DBusError.self) { try ObjectPath(bad) }
            }
            #expect(try ObjectPath("/a").appending("b") == "/a/b")
            #expect(try ObjectPath.root.appending("b") == "/b")
            #expect(throws: DBusError.self) { try ObjectPath.root.appending("b/c/") }
            #expect(ObjectPath("/a/b/c").parent == "/a/b")
            #expect(ObjectPath("/a").parent == .root)
            #expect(ObjectPath.root.parent == nil)
            #expect(ObjectPath("/a/b").isDescendant(ofOrEqualTo: "/a"))
            #expect(!ObjectPath("/ab").isDescendant(ofOrEqualTo: "/a"))
        }

        @Test func names() {
            for good in ["org.bluez", "org.bluez.Device1", "a._b", "_a.B9"] {
                #expect(InterfaceName(validating: good) != nil, "\(good)")
                #expect(ErrorName(validating: good) != nil, "\(good)")
            }
            for bad in ["", "org", ".org.x", "org.", "org..x", "org.9x", "org.x-y", "org.é", String(repeating: "a.", count: 128) + "a"] {
                #expect(InterfaceName(validating: bad) == nil, "\(bad)")
                #expect(ErrorName(validating: bad) == nil, "\(bad)")
            }
            for good in ["Ping", "_x", "StartNotify", "a9"] {
                #expect(MemberName(validating: good) != nil, "\(good)")
            }
            for bad in ["", "9a", "a.b", "a-b", "é", String(repeating: "a", count: 256)] {
                #expect(MemberName(validating: bad) == nil, "\(bad)")
            }
            for good in ["org.bluez", ":1.42", ":1.0", "a-b.c-d", "org.x_1", ":a.9-x"] {
                #expect(BusName(validating: good) != nil, "\(good)")
            }
            for bad in ["", "org", ":1", "org.9a", "org..b", ".a.b", "a.b.", ":", "org.bl uez"] {
                #expect(BusName(validating: bad) == nil, "\(bad)")
            }
            #expect(BusName(":1.1").isUnique)
            #expect(!BusName("org.bluez").isUnique)
        }

        @Test func signatures() {
            for good in ["", "y", "a{sv}", "(hq)", "a(oa{sa{sv}})", "aay", "v", "a{ya{s(ib)}}", "sss"] {
                #expect(Signature(validating: good) != nil, "\(good)")
            }
            for bad in ["a", "{sv}", "a{vs}", "a{s}", "a{sss}", "()", "(", ")", "z", "a{(s)s}", "aa", "(s", "s)"] {
                #expect(Signature(validating: bad) == nil, "\(bad)")
            }
            let deepArray = String(repeating: "a", count: 32) + "y"
            #expect(Signature(validating: deepArray) != nil)
            #expect(Signature(validating: "a" + deepArray) == nil)
            let deepStruct = String(repeating: "(", count: 32) + "y" + String(repeating: ")", count: 32)
            #expect(Signature(validating: deepStruct) != nil)
            #expect(Signature(validating: "(" + deepStruct + ")") == nil)
            #expect(Signature(validating: String(repeating: "y", count: 255)) != nil)
            #expect(Signature(validating: String(repeating: "y", count: 256)) == nil)
            #expect(Signature("a{sv}i(hq)").completeTypes == ["a{sv}", "i", "(hq)"])
            #expect(Signature("a{sv}").isSingleCompleteType)
            #expect(!Signature("ss").isSingleCompleteType)
        }

        /// Our validators agree with libdbus's on many random strings.
        @Test func agreesWithLibDBus() {
            var rng = SplitMix64(seed: 42)
            let nameAlphabet = Array("aZ_09-.:/é ")
            for _ in 0..<20_000 {
                let length = Int.random(in: 0...10, using: &rng)
                let s = String((0..<length).map { _ in nameAlphabet.randomElement(using: &rng)! })
                #expect((ObjectPath(validating: s) != nil) == LibDBus.path(s), "path \(s)")
                #expect((InterfaceName(validating: s) != nil) == LibDBus.interface(s), "interface \(s)")
                #expect((MemberName(validating: s) != nil) == LibDBus.member(s), "member \(s)")
                #expect((ErrorName(validating: s) != nil) == LibDBus.errorName(s), "error \(s)")
                // libdbus accepts unique names the specification does not (":", ":1"); we
                // follow the specification there, and agree exactly everywhere else.
                if s.hasPrefix(":") {
                    #expect(BusName(validating: s) == nil || LibDBus.busName(s), "bus \(s)")
                } else {
                    #expect((BusName(validating: s) != nil) == LibDBus.busName(s), "bus \(s)")
                }
            }
            let sigAlphabet = Array("ybnqiuxtdsoghva(){}a(z")
            for _ in 0..<20_000 {
                let length = Int.random(in: 0...8, using: &rng)
                let s = String((0..<length).map { _ in sigAlphabet.randomElement(using: &rng)! })
                #expect((Signature(validating: s) != nil) == LibDBus.signature(s), "signature \(s)")
            }
            let nestAlphabet = Array("aaa((({{}})))ysv")
            for _ in 0..<20_000 {
                let length = Int.random(in: 0...40, using: &rng)
                let s = String((0..<length).map { _ in nestAlphabet.randomElement(using: &rng)! })
                #expect((Signature(validating: s) != nil) == LibDBus.signature(s), "signature \(s)")
            }
            for s in [String(repeating: "a", count: 33) + "y",
                      String(repeating: "a(", count: 32) + "y" + String(repeating: ")", count: 32),
                      String(repeating: "a(", count: 33) + "y" + String(repeating: ")", count: 33),
                      String(repeating: "a{sa{s", count: 20) + "y" + String(repeating: "}}", count: 20), String(repeating: "y", count: 256),
                      String(repeating: "(", count: 33) + "y" + String(repeating: ")", count: 33),
                      String(repeating: "a{sa", count: 17) + "y" + String(repeating: "}", count: 17)] {
                #expect((Signature(validating: s) != nil) == LibDBus.signature(s), "signature \(s)")
            }
            for n in [254, 255, 256] {
                let name = "a." + String(repeating: "b", count: n - 2)
                #expect((InterfaceName(validating: name) != nil) == LibDBus.interface(name))
                #expect((BusName(validating: name) != nil) == LibDBus.busName(name))
            }
        }

        @Test func valueSignaturesAndEquality() throws {
            let v = DBusValue.dictionary(
                key: "s", value: "v",
                [(.string("a"), .variant(.structure([.int32(1), .byteArray([1, 2])])))])
            #expect(v.signature == "a{sv}")
            #expect(DBusValue.structure([.objectPath("/x"), .array("as", [])]).signature == "(oaas)")
            #expect(DBusValue.byteArray([1, 2]) == .array("y", [.byte(1), .byte(2)]))
            #expect(DBusValue.array("y", [.byte(1)]) == .byteArray([1]))
            #expect(DBusValue.byteArray([1]) != .array("i", [.int32(1)]))
            #expect(DBusValue.double(.nan) == .double(.nan))
            #expect(DBusValue.int32(1) != .uint32(1))
            #expect(DBusValue.variantDictionary(["b": .int32(2), "a": .bool(true)]).stringKeyedDictionary
                    == ["a": .bool(true), "b": .int32(2)])
            #expect(DBusValue.variant(.variant(.string("x"))).unwrapped == .string("x"))
            #expect(DBusValue.byteArray([1, 2]).bytes == [1, 2])
            #expect(DBusValue.array("y", [.byte(3)]).bytes == [3])
            #expect(DBusValue.stringArray(["a"]).stringArray == ["a"])
        }

        @Test func invalidValuesAreRefused() {
            let bad: [(String, DBusValue)] = [
                ("NUL in string", .string("a\0b")),
                ("mismatched array element", .array("s", [.int32(1)])),
                ("array element signature of two types", .array("ss", [])),
                ("non-basic dict key", .dictionary(key: "v", value: "s", [])),
                ("dict entry of the wrong type", .dictionary(key: "s", value: "i", [(.string("a"), .string("b"))])),
                ("empty struct", .structure([])),
                ("NUL nested in a variant", .variant(.array("s", [.string("\0")]))),
                ("too deep", (0..<70).reduce(DBusValue.int32(0)) { v, _ in .variant(v) }),
            ]
            for (what, value) in bad {
                #expect(throws: DBusError.self, "\(what)") { try value.validate() }
            }
            let closed = UnixFD(adopting: -1)
            #expect(throws: DBusError.self) { try DBusValue.unixFD(closed).validate() }
            // A struct nested 33 deep has a signature libdbus rejects.
            let deep = (0..<33).reduce(DBusValue.int32(0)) { v, _ in .structure([v]) }
            #expect(throws: DBusError.self) { _ = try DBusValue.validate(arguments: [deep]) }
            // Arrays over 64 MiB (libdbus aborts on a fixed array that long).
            #expect(throws: DBusError.self) { try DBusValue.byteArray([UInt8](repeating: 0, count: (64 << 20) + 1)).validate() }
            #expect(throws: DBusError.self) {
                try DBusValue.array("ay", [.byteArray([UInt8](repeating: 0, count: 40 << 20)), .byteArray([UInt8](repeating: 0, count: 40 << 20))]).validate()
            }
            #expect(throws: Never.self) { try DBusValue.byteArray([UInt8](repeating: 0, count: 1 << 20)).validate() }
            // Too long a signature in total.
            #expect(throws: DBusError.self) { _ = try DBusValue.validate(arguments: Array(repeating: .int32(0), count: 256)) }
        }

        @Test func matchRuleQuoting() throws {
            let rule = MatchRule(interface: "org.x.Y", member: "Changed", path: "/a")
                .argument(0, "it's, a \\ test")
                .argumentPath(1, "/a/")
            #expect(rule.string == #"type='signal',interface='org.x.Y',member='Changed',path='/a',arg0='it'\''s, a \ test',arg1path='/a/'"#)
            #expect(MatchRule(type: nil).string == "")
            #expect(MatchRule.nameOwnerChanged(name: "org.bluez").string
                    == "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',path='/org/freedesktop/DBus',arg0='org.bluez'")
            #expect(throws: DBusError.self) { try MatchRule().argument(64, "x").validate() }
            #expect(throws: DBusError.self) { try MatchRule().argument(0, "a\0").validate() }
            #expect(throws: DBusError.self) { try MatchRule(path: "/a", pathNamespace: "/b").validate() }
            #expect(throws: DBusError.self) { try MatchRule().argument(0, String(repeating: "x", count: 1100)).validate() }
        }

        @Test func addresses() throws {
            #expect(try BusAddress.address("unix:path=/x").resolve() == "unix:path=/x")
            #expect(throws: DBusError.self) { try BusAddress.address("unix:path=/x\0y").resolve() }
        }

        @Test func unixFDClosesOnce() throws {
            var fds: [Int32] = [0, 0]
            #expect(pipe(&fds) == 0)
            let r = UnixFD(adopting: fds[0])
            let w = try UnixFD(duplicating: fds[1])
            close(fds[1])
            #expect(r.fileDescriptor == fds[0])
            let taken = w.take()
            #expect(taken != nil)
            #expect(w.take() == nil)
            #expect(w.fileDescriptor == nil)
            w.close()  // no-op
            if let taken { close(taken) }
            r.close()
            r.close()
            #expect(r.fileDescriptor == nil)
            #expect(fcntl(fds[0], F_GETFD) == -1)
            #expect(throws: DBusError.self) { try UnixFD(duplicating: -1) }
        }
    }
}
