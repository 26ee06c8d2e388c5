// libFuzzer target for the JSON parser and writer (make fuzz). The control socket parses whatever
// a member of the ancsd group sends, so the parser must refuse anything malformed without
// trapping. Traps (a crash to libFuzzer) when:
// - a parsed value, written and parsed again, is not the same value, or writing is not stable;
// - `scanFlatObject` accepts a text the parser refuses, or hands out other members than it reads;
// - the writer's text for the input bytes as a string does not read back as the repaired string.
import JSON

func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeBufferPointer(start: data, count: size)
    let parsed = try? JSONValue(parsing: input)
    if let parsed {
        let text = parsed.serialized
        let again = try? JSONValue(parsing: text)
        check(again != nil, "written text does not parse: \(text)")
        if let again {
            check(again.serialized == text, "writing is not stable: \(text)")
            check(sameShape(again, parsed), "round trip changed the value: \(text)")
        }
    }

    var members: [(String, JSONValue)] = []
    let flat = JSONValue.scanFlatObject(input) { key, value in
        let decoded: JSONValue
        switch value {
        case .string(let bytes): decoded = .string(String(decoding: bytes, as: UTF8.self))
        case .scalar(let scalar): decoded = scalar
        }
        members.append((String(decoding: key, as: UTF8.self), decoded))
        return true
    }
    if flat {
        guard let object = parsed?.objectValue else { fatalError("scanFlatObject accepted what the parser refuses") }
        check(object.members.count == members.count, "scanFlatObject saw other members")
        for (member, scanned) in zip(object.members, members) {
            check(member.key == scanned.0 && sameShape(member.value, scanned.1), "scanFlatObject saw member \(scanned.0) differently")
        }
    }

    var writer = JSONWriter()
    writer.writeString(utf8: input)
    let repaired = String(decoding: input, as: UTF8.self)
    let read = writer.withBytes { try? JSONValue(parsing: $0) }
    check(read == .string(repaired), "the writer's string does not read back")
    return 0
}

/// Equal, counting NaN-free doubles by bit pattern (the parser never makes NaN).
func sameShape(_ a: JSONValue, _ b: JSONValue) -> Bool { a == b }
