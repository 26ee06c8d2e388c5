// D-Bus type signatures: validation (libdbus aborts on invalid ones) and their complete types.

/// The D-Bus type codes the signature rules and the marshalling code look up.
enum TypeCode {
    /// Basic types (`y b n q i u x t d s o g h`): dictionary keys, and one-letter complete types.
    static let basic = TypeCodeSet("ybnqiuxtdsogh")
    /// Fixed-size basic types, which libdbus can read and write as a block
    /// (`dbus_message_iter_get_fixed_array`); `h` is excluded on purpose.
    static let fixed = TypeCodeSet("ybnqiuxtd")
}

/// A set of ASCII type codes, looked up with a bit mask (a `Set` hashes the code first).
struct TypeCodeSet: Sendable {
    private var low: UInt64 = 0
    private var high: UInt64 = 0

    init(_ codes: String) {
        for code in codes.utf8 where code < 128 {
            if code < 64 { low |= 1 << UInt64(code) } else { high |= 1 << UInt64(code - 64) }
        }
    }

    @inline(__always)
    func contains(_ code: UInt8) -> Bool {
        code < 64 ? low & (1 << UInt64(code)) != 0 : code < 128 && high & (1 << UInt64(code - 64)) != 0
    }
}

/// A validated D-Bus type signature such as `a{sv}` or `(hq)`: zero or more complete types.
public struct Signature: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The signature text.
    public let rawValue: String

    /// Validates `string` with the rules of the D-Bus specification (at most 255 bytes,
    /// only complete types, array and struct nesting at most 32 deep, dict entries only
    /// directly inside arrays with a basic key type, no empty structs).
    /// - Throws: `DBusError.invalidArgument` when the signature is invalid.
    public init(_ string: String) throws(DBusError) {
        guard SignatureParser.isValid(string) else {
            throw .invalidArgument("invalid signature \(quoted(string))")
        }
        rawValue = string
    }

    /// Returns nil when `string` is not a valid signature.
    public init?(validating string: String) {
        guard SignatureParser.isValid(string) else { return nil }
        rawValue = string
    }

    /// For signatures that were produced by our own code or validated by libdbus.
    init(unchecked string: String) { rawValue = string }

    /// A literal signature; an invalid literal is a programming error and traps.
    public init(stringLiteral value: String) {
        precondition(SignatureParser.isValid(value), "invalid signature literal \(value)")
        rawValue = value
    }

    /// The complete types this signature consists of, one signature each.
    public var completeTypes: [Signature] {
        let bytes = Array(rawValue.utf8)
        var types: [Signature] = []
        _ = SignatureParser.forEachCompleteType(in: rawValue) { range in
            types.append(Signature(unchecked: String(decoding: bytes[range], as: UTF8.self)))
        }
        return types
    }

    /// True when the signature is exactly one complete type (as array elements,
    /// variant contents and property types must be).
    public var isSingleCompleteType: Bool {
        SignatureParser.completeTypeCount(rawValue) == 1
    }

    /// True for the empty signature (no arguments).
    public var isEmpty: Bool { rawValue.isEmpty }

    public var description: String { rawValue }

    /// The empty signature.
    public static let empty = Signature(unchecked: "")
}

/// A recursive-descent check of the signature rules as libdbus's `dbus_signature_validate`
/// applies them: at most 255 bytes; complete types only; at most 32
/// *consecutive* array markers, 32 nested structs and 32 nested dict entries; dict entries
/// only directly inside an array, with a basic key and exactly one value type; no empty
/// structs. (The total nesting limit of 64 applies to message bodies and is checked on
/// values, including variants.)
enum SignatureParser {
    static let maximumLength = 255
    static let maximumDepth = 32

    /// True when `s` is a valid signature.
    static func isValid(_ s: String) -> Bool { forEachCompleteType(in: s) { _ in } }

    /// The number of complete types in `s`, or nil when it is not a valid signature.
    static func completeTypeCount(_ s: String) -> Int? {
        var count = 0
        return forEachCompleteType(in: s) { _ in count += 1 } ? count : nil
    }

    /// The number of complete types in the signature `bytes`, or nil when it is not a valid one.
    static func completeTypeCount(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        var count = 0
        return forEachCompleteType(in: bytes) { _ in count += 1 } ? count : nil
    }

    /// Calls `body` with the UTF-8 offsets of each complete type of `s`, in order; false when
    /// `s` is not a valid signature (after `body` saw the types before the fault). A one-letter
    /// signature costs no more than a table lookup.
    static func forEachCompleteType(in s: String, _ body: (Range<Int>) -> Void) -> Bool {
        let utf8 = s.utf8
        if utf8.count == 1, let c = utf8.first {
            guard TypeCode.basic.contains(c) || c == UInt8(ascii: "v") else { return false }
            body(0..<1)
            return true
        }
        guard utf8.count <= maximumLength else { return false }
        var text = s
        return text.withUTF8 { forEachCompleteType(in: $0, body) }
    }

    /// `forEachCompleteType(in:_:)` of a signature given as bytes.
    static func forEachCompleteType(in b: UnsafeBufferPointer<UInt8>, _ body: (Range<Int>) -> Void) -> Bool {
        guard b.count <= maximumLength else { return false }
        var index = 0
        while index < b.count {
            let start = index
            guard skipOne(b, &index, arrays: 0, structs: 0, dicts: 0) else { return false }
            body(start..<index)
        }
        return true
    }

    /// Advances `i` past one complete type; false if there is none.
    private static func skipOne(
        _ b: UnsafeBufferPointer<UInt8>, _ i: inout Int, arrays: Int, structs: Int, dicts: Int
    ) -> Bool {
        guard i < b.count else { return false }
        let c = b[i]
        i += 1
        switch c {
        case UInt8(ascii: "a"):
            guard arrays + 1 <= maximumDepth, i < b.count else { return false }
            if b[i] == UInt8(ascii: "{") {
                i += 1
                guard dicts + 1 <= maximumDepth, i < b.count, TypeCode.basic.contains(b[i]) else { return false }
                i += 1
                guard skipOne(b, &i, arrays: 0, structs: structs, dicts: dicts + 1),
                    i < b.count, b[i] == UInt8(ascii: "}")
                else { return false }
                i += 1
                return true
            }
            return skipOne(b, &i, arrays: arrays + 1, structs: structs, dicts: dicts)
        case UInt8(ascii: "("):
            guard structs + 1 <= maximumDepth else { return false }
            var fields = 0
            while true {
                guard i < b.count else { return false }
                if b[i] == UInt8(ascii: ")") {
                    i += 1
                    break
                }
                guard skipOne(b, &i, arrays: 0, structs: structs + 1, dicts: dicts) else { return false }
                fields += 1
            }
            return fields > 0
        case UInt8(ascii: "v"):
            return true
        default:
            return TypeCode.basic.contains(c)
        }
    }
}
