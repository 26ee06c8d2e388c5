// D-Bus type signatures: validation (libdbus aborts on invalid ones) and a parsed form.

/// One complete D-Bus type, parsed from a signature.
indirect enum SignatureType: Sendable, Hashable {
    /// A basic type by its type code (`y b n q i u x t d s o g h`).
    case basic(UInt8)
    /// `v`
    case variant
    /// `aT`
    case array(SignatureType)
    /// `a{KV}`
    case dictionary(key: UInt8, value: SignatureType)
    /// `(T...)`
    case structure([SignatureType])

    /// The type's signature text.
    var string: String {
        var out = ""
        append(to: &out)
        return out
    }

    func append(to out: inout String) {
        switch self {
        case .basic(let c): out.unicodeScalars.append(Unicode.Scalar(c))
        case .variant: out += "v"
        case .array(let t): out += "a"; t.append(to: &out)
        case .dictionary(let k, let v):
            out += "a{"; out.unicodeScalars.append(Unicode.Scalar(k)); v.append(to: &out); out += "}"
        case .structure(let fields):
            out += "("
            for f in fields { f.append(to: &out) }
            out += ")"
        }
    }

    /// Fixed-size basic types, which libdbus can read and write as a block
    /// (`dbus_message_iter_get_fixed_array`); `h` is excluded on purpose.
    var fixedTypeCode: UInt8? {
        if case .basic(let c) = self, SignatureType.fixedCodes.contains(c) { return c }
        return nil
    }

    static let basicCodes: Set<UInt8> = Set("ybnqiuxtdsogh".utf8)
    static let fixedCodes: Set<UInt8> = Set("ybnqiuxtd".utf8)
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
        guard (try? SignatureParser.parse(string)) != nil else {
            throw .invalidArgument("invalid signature \(quoted(string))")
        }
        rawValue = string
    }

    /// Returns nil when `string` is not a valid signature.
    public init?(validating string: String) {
        guard (try? SignatureParser.parse(string)) != nil else { return nil }
        rawValue = string
    }

    /// For signatures that were produced by our own code or validated by libdbus.
    init(unchecked string: String) { rawValue = string }

    /// A literal signature; an invalid literal is a programming error and traps.
    public init(stringLiteral value: String) {
        precondition((try? SignatureParser.parse(value)) != nil, "invalid signature literal \(value)")
        rawValue = value
    }

    /// The complete types this signature consists of, one signature each.
    public var completeTypes: [Signature] {
        ((try? SignatureParser.parse(rawValue)) ?? []).map { Signature(unchecked: $0.string) }
    }

    /// True when the signature is exactly one complete type (as array elements,
    /// variant contents and property types must be).
    public var isSingleCompleteType: Bool {
        SignatureParser.completeTypeCount(rawValue) == 1
    }

    /// True for the empty signature (no arguments).
    public var isEmpty: Bool { rawValue.isEmpty }

    var parsed: [SignatureType] { (try? SignatureParser.parse(rawValue)) ?? [] }

    public var description: String { rawValue }

    /// The empty signature.
    public static let empty = Signature(unchecked: "")
}

/// Recursive-descent parser that enforces the signature rules exactly as libdbus's
/// `dbus_signature_validate` does: at most 255 bytes; complete types only; at most 32
/// *consecutive* array markers, 32 nested structs and 32 nested dict entries; dict entries
/// only directly inside an array, with a basic key and exactly one value type; no empty
/// structs. (The total nesting limit of 64 applies to message bodies and is checked on
/// values, including variants.)
enum SignatureParser {
    struct Invalid: Error {}

    static let maximumLength = 255
    static let maximumDepth = 32

    /// The number of complete types in `s`, or nil when it is not a valid signature: the rules
    /// of `parse`, without building the parsed form (validating a message's arguments needs
    /// no more, and a one-letter signature costs no more than a table lookup).
    static func completeTypeCount(_ s: String) -> Int? {
        let utf8 = s.utf8
        if utf8.count == 1, let c = utf8.first {
            return SignatureType.basicCodes.contains(c) || c == UInt8(ascii: "v") ? 1 : nil
        }
        guard utf8.count <= maximumLength else { return nil }
        let counted = utf8.withContiguousStorageIfAvailable { b -> Int? in
            var index = 0
            var count = 0
            while index < b.count {
                guard skipOne(b, &index, arrays: 0, structs: 0, dicts: 0) else { return nil }
                count += 1
            }
            return count
        }
        if let counted { return counted }
        return (try? parse(s))?.count
    }

    /// `parseOne` without the result: advances `i` past one complete type, false if there is none.
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
                guard dicts + 1 <= maximumDepth, i < b.count, SignatureType.basicCodes.contains(b[i]) else { return false }
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
            return SignatureType.basicCodes.contains(c)
        }
    }

    static func parse(_ s: String) throws(Invalid) -> [SignatureType] {
        let bytes = Array(s.utf8)
        guard bytes.count <= maximumLength else { throw Invalid() }
        var index = 0
        var types: [SignatureType] = []
        while index < bytes.count {
            types.append(try parseOne(bytes, &index, arrays: 0, structs: 0, dicts: 0))
        }
        return types
    }

    private static func parseOne(
        _ b: [UInt8], _ i: inout Int, arrays: Int, structs: Int, dicts: Int
    ) throws(Invalid) -> SignatureType {
        guard i < b.count else { throw Invalid() }
        let c = b[i]
        i += 1
        switch c {
        case _ where SignatureType.basicCodes.contains(c):
            return .basic(c)
        case UInt8(ascii: "v"):
            return .variant
        case UInt8(ascii: "a"):
            guard arrays + 1 <= maximumDepth, i < b.count else { throw Invalid() }
            if b[i] == UInt8(ascii: "{") {
                i += 1
                guard dicts + 1 <= maximumDepth else { throw Invalid() }
                guard i < b.count, SignatureType.basicCodes.contains(b[i]) else { throw Invalid() }
                let key = b[i]
                i += 1
                let value = try parseOne(b, &i, arrays: 0, structs: structs, dicts: dicts + 1)
                guard i < b.count, b[i] == UInt8(ascii: "}") else { throw Invalid() }
                i += 1
                return .dictionary(key: key, value: value)
            }
            return .array(try parseOne(b, &i, arrays: arrays + 1, structs: structs, dicts: dicts))
        case UInt8(ascii: "("):
            guard structs + 1 <= maximumDepth else { throw Invalid() }
            var fields: [SignatureType] = []
            while true {
                guard i < b.count else { throw Invalid() }
                if b[i] == UInt8(ascii: ")") {
                    i += 1
                    break
                }
                fields.append(try parseOne(b, &i, arrays: 0, structs: structs + 1, dicts: dicts))
            }
            guard !fields.isEmpty else { throw Invalid() }
            return .structure(fields)
        default:
            throw Invalid()
        }
    }
}
