/// A D-Bus value of any type, with its signature.
///
/// Byte arrays (`ay`) have their own case, `.byteArray`, so that they are carried as one
/// `[UInt8]` and marshalled as a block (`dbus_message_iter_append_fixed_array` /
/// `get_fixed_array`); decoding always produces `.byteArray` for `ay`, and
/// `.array("y", [.byte…])` compares equal to the same `.byteArray`.
public enum DBusValue: Sendable {
    /// `y`
    case byte(UInt8)
    /// `b`
    case bool(Bool)
    /// `n`
    case int16(Int16)
    /// `q`
    case uint16(UInt16)
    /// `i`
    case int32(Int32)
    /// `u`
    case uint32(UInt32)
    /// `x`
    case int64(Int64)
    /// `t`
    case uint64(UInt64)
    /// `d`
    case double(Double)
    /// `s`: must not contain NUL (refused before marshalling).
    case string(String)
    /// `o`
    case objectPath(ObjectPath)
    /// `g`
    case signature(Signature)
    /// `h`: an owned file descriptor.
    case unixFD(UnixFD)
    /// `aT`: an array whose elements all have the single complete type `T`.
    indirect case array(Signature, [DBusValue])
    /// `ay`, marshalled as a block.
    case byteArray([UInt8])
    /// `a{KV}`: ordered key/value pairs; `K` must be a basic type.
    indirect case dictionary(key: Signature, value: Signature, [(key: DBusValue, value: DBusValue)])
    /// `(T…)`: a struct of at least one field.
    case structure([DBusValue])
    /// `v`: a value together with its own signature.
    indirect case variant(DBusValue)

    /// The signature of this value (one complete type).
    public var signature: Signature { Signature(unchecked: signatureString) }

    var signatureString: String {
        var out = ""
        appendSignature(to: &out)
        return out
    }

    func appendSignature(to out: inout String) {
        if let code = basicTypeCode { return out.unicodeScalars.append(Unicode.Scalar(code)) }
        switch self {
        case .array(let element, _): out += "a"; out += element.rawValue
        case .byteArray: out += "ay"
        case .dictionary(let key, let value, _): out += "a{"; out += key.rawValue; out += value.rawValue; out += "}"
        case .structure(let fields):
            out += "("
            for f in fields { f.appendSignature(to: &out) }
            out += ")"
        case .byte, .bool, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature,
            .unixFD, .variant:
            break  // written above
        }
    }
}

// MARK: - Typed accessors

extension DBusValue {
    /// The payload of `.byte`.
    public var byteValue: UInt8? { if case .byte(let v) = self { v } else { nil } }
    /// The payload of `.bool`.
    public var boolValue: Bool? { if case .bool(let v) = self { v } else { nil } }
    /// The payload of `.int16`.
    public var int16Value: Int16? { if case .int16(let v) = self { v } else { nil } }
    /// The payload of `.uint16`.
    public var uint16Value: UInt16? { if case .uint16(let v) = self { v } else { nil } }
    /// The payload of `.int32`.
    public var int32Value: Int32? { if case .int32(let v) = self { v } else { nil } }
    /// The payload of `.uint32`.
    public var uint32Value: UInt32? { if case .uint32(let v) = self { v } else { nil } }
    /// The payload of `.int64`.
    public var int64Value: Int64? { if case .int64(let v) = self { v } else { nil } }
    /// The payload of `.uint64`.
    public var uint64Value: UInt64? { if case .uint64(let v) = self { v } else { nil } }
    /// The payload of `.double`.
    public var doubleValue: Double? { if case .double(let v) = self { v } else { nil } }
    /// The payload of `.string`.
    public var stringValue: String? { if case .string(let v) = self { v } else { nil } }
    /// The payload of `.objectPath`.
    public var objectPathValue: ObjectPath? { if case .objectPath(let v) = self { v } else { nil } }
    /// The payload of `.signature`.
    public var signatureValue: Signature? { if case .signature(let v) = self { v } else { nil } }
    /// True if this value is or contains a file descriptor.
    var holdsUnixFD: Bool {
        switch self {
        case .unixFD: true
        case .array(_, let items), .structure(let items): items.contains(where: \.holdsUnixFD)
        case .dictionary(_, _, let entries): entries.contains { $0.key.holdsUnixFD || $0.value.holdsUnixFD }
        case .variant(let inner): inner.holdsUnixFD
        case .byte, .bool, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature,
            .byteArray:
            false
        }
    }

    /// The payload of `.unixFD`.
    public var unixFDValue: UnixFD? { if case .unixFD(let v) = self { v } else { nil } }
    /// The contents of an `ay` (either representation).
    public var bytes: [UInt8]? {
        switch self {
        case .byteArray(let b): return b
        case .array(let sig, let items) where sig.rawValue == "y":
            var out: [UInt8] = []
            out.reserveCapacity(items.count)
            for item in items {
                guard case .byte(let b) = item else { return nil }
                out.append(b)
            }
            return out
        default: return nil
        }
    }
    /// The elements of any array (`ay` gives `.byte` elements).
    public var arrayValue: [DBusValue]? {
        switch self {
        case .array(_, let items): items
        case .byteArray(let b): b.map { .byte($0) }
        default: nil
        }
    }
    /// The entries of a dictionary.
    public var dictionaryValue: [(key: DBusValue, value: DBusValue)]? {
        if case .dictionary(_, _, let entries) = self { entries } else { nil }
    }
    /// The fields of a struct.
    public var structureValue: [DBusValue]? { if case .structure(let v) = self { v } else { nil } }
    /// The contents of a variant (one level).
    public var variantValue: DBusValue? { if case .variant(let v) = self { v } else { nil } }
    /// This value with all enclosing variants removed.
    public var unwrapped: DBusValue {
        var v = self
        while case .variant(let inner) = v { v = inner }
        return v
    }
    /// An array of strings (`as`).
    public var stringArray: [String]? {
        guard case .array(_, let items) = self else { return nil }
        var out: [String] = []
        out.reserveCapacity(items.count)
        for item in items {
            guard case .string(let s) = item else { return nil }
            out.append(s)
        }
        return out
    }
    /// A dictionary with string keys (`a{sT}`), variant values unwrapped one level:
    /// the usual shape of D-Bus property sets (`a{sv}`). Later duplicates win.
    public var stringKeyedDictionary: [String: DBusValue]? {
        guard case .dictionary(_, _, let entries) = self else { return nil }
        var out: [String: DBusValue] = [:]
        for (k, v) in entries {
            guard case .string(let key) = k else { return nil }
            out[key] = v.variantValue ?? v
        }
        return out
    }
}

// MARK: - Convenience constructors

extension DBusValue {
    /// An `a{sv}` from a Swift dictionary, keys sorted for a stable wire order.
    public static func variantDictionary(_ dict: [String: DBusValue]) -> DBusValue {
        .dictionary(
            key: Signature(unchecked: "s"), value: Signature(unchecked: "v"),
            dict.sorted { $0.key < $1.key }.map { (key: .string($0.key), value: .variant($0.value)) })
    }

    /// An `as`.
    public static func stringArray(_ strings: [String]) -> DBusValue {
        .array(Signature(unchecked: "s"), strings.map { .string($0) })
    }

    /// An `ao`.
    public static func objectPathArray(_ paths: [ObjectPath]) -> DBusValue {
        .array(Signature(unchecked: "o"), paths.map { .objectPath($0) })
    }
}

// MARK: - Equality

extension DBusValue: Equatable {
    /// Structural equality. Doubles compare by value or identical bits (so NaN equals
    /// itself), file descriptors by identity, and `.array("y", …)` equals `.byteArray`.
    public static func == (a: DBusValue, b: DBusValue) -> Bool {
        switch (a, b) {
        case (.byte(let x), .byte(let y)): return x == y
        case (.bool(let x), .bool(let y)): return x == y
        case (.int16(let x), .int16(let y)): return x == y
        case (.uint16(let x), .uint16(let y)): return x == y
        case (.int32(let x), .int32(let y)): return x == y
        case (.uint32(let x), .uint32(let y)): return x == y
        case (.int64(let x), .int64(let y)): return x == y
        case (.uint64(let x), .uint64(let y)): return x == y
        case (.double(let x), .double(let y)): return x == y || x.bitPattern == y.bitPattern
        case (.string(let x), .string(let y)): return x == y
        case (.objectPath(let x), .objectPath(let y)): return x == y
        case (.signature(let x), .signature(let y)): return x == y
        case (.unixFD(let x), .unixFD(let y)): return x === y
        case (.byteArray(let x), .byteArray(let y)): return x == y
        case (.byteArray(let x), .array(let s, _)): return s.rawValue == "y" && b.bytes == x
        case (.array(let s, _), .byteArray(let y)): return s.rawValue == "y" && a.bytes == y
        case (.array(let s1, let x), .array(let s2, let y)): return s1 == s2 && x == y
        case (.dictionary(let k1, let v1, let x), .dictionary(let k2, let v2, let y)):
            guard k1 == k2, v1 == v2, x.count == y.count else { return false }
            for (p, q) in zip(x, y) where p.key != q.key || p.value != q.value { return false }
            return true
        case (.structure(let x), .structure(let y)): return x == y
        case (.variant(let x), .variant(let y)): return x == y
        default: return false
        }
    }
}

// MARK: - Description

extension DBusValue: CustomStringConvertible {
    /// A compact GVariant-like rendering, for logs and test failures.
    public var description: String {
        switch self {
        case .byte(let v): return "byte \(v)"
        case .bool(let v): return v ? "true" : "false"
        case .int16(let v): return "int16 \(v)"
        case .uint16(let v): return "uint16 \(v)"
        case .int32(let v): return "\(v)"
        case .uint32(let v): return "uint32 \(v)"
        case .int64(let v): return "int64 \(v)"
        case .uint64(let v): return "uint64 \(v)"
        case .double(let v): return "\(v)"
        case .string(let v): return quoted(v)
        case .objectPath(let v): return "objectpath \(quoted(v.rawValue))"
        case .signature(let v): return "signature \(quoted(v.rawValue))"
        case .unixFD(let v): return v.description
        case .byteArray(let b):
            return b.count > 32 ? "bytes[\(b.count)]" : "bytes[" + b.map { String($0, radix: 16) }.joined(separator: " ") + "]"
        case .array(let s, let items):
            return items.isEmpty ? "@a\(s) []" : "[" + items.map(\.description).joined(separator: ", ") + "]"
        case .dictionary(let k, let v, let entries):
            return entries.isEmpty
                ? "@a{\(k)\(v)} {}"
                : "{" + entries.map { "\($0.key.description): \($0.value.description)" }.joined(separator: ", ") + "}"
        case .structure(let fields): return "(" + fields.map(\.description).joined(separator: ", ") + ")"
        case .variant(let v): return "<\(v.description)>"
        }
    }
}

// MARK: - Validation

extension DBusValue {
    /// Maximum nesting of containers (arrays, structs, dict entries, variants) in one
    /// message body that the bus accepts.
    static let maximumTotalDepth = 64

    /// Checks everything libdbus would abort on (or the bus would reject) before the
    /// value is marshalled, and returns an upper bound of its marshalled size, so that
    /// arrays over 64 MiB and bodies over 128 MiB are refused here too.
    @discardableResult
    func validate(depth: Int = 0) throws(DBusError) -> Int {
        switch self {
        case .byte: return 1
        case .int16, .uint16: return 4
        case .bool, .int32, .uint32: return 8
        case .int64, .uint64, .double: return 16
        case .string(let s):
            try checkNoNUL(s, what: "string argument")
            return s.utf8.count + 8
        case .objectPath(let p): return p.rawValue.utf8.count + 8
        case .signature(let g): return g.rawValue.utf8.count + 2
        case .unixFD(let fd):
            guard fd.fileDescriptor != nil else { throw .invalidArgument("unix fd argument is closed") }
            return 8
        case .byteArray(let b):
            guard depth + 1 <= DBusValue.maximumTotalDepth else { throw DBusError.tooDeep }
            try DBusValue.checkArrayLength(b.count)
            return b.count + 8
        case .array(let element, let items):
            guard depth + 1 <= DBusValue.maximumTotalDepth else { throw DBusError.tooDeep }
            guard element.isSingleCompleteType else {
                throw .invalidArgument("array element signature \(quoted(element.rawValue)) is not one complete type")
            }
            let expected = element.rawValue
            var size = 0
            for item in items {
                guard item.hasSignature(expected) else {
                    throw .invalidArgument(
                        "array of \(quoted(expected)) holds an element of type \(quoted(item.signatureString))")
                }
                size += try item.validate(depth: depth + 1)
            }
            try DBusValue.checkArrayLength(size)
            return size + 16
        case .dictionary(let key, let value, let entries):
            guard depth + 2 <= DBusValue.maximumTotalDepth else { throw DBusError.tooDeep }
            guard key.rawValue.utf8.count == 1, let k = key.rawValue.utf8.first, TypeCode.basic.contains(k) else {
                throw .invalidArgument("dictionary key signature \(quoted(key.rawValue)) is not a basic type")
            }
            guard value.isSingleCompleteType else {
                throw .invalidArgument("dictionary value signature \(quoted(value.rawValue)) is not one complete type")
            }
            var size = 0
            for (k, v) in entries {
                guard k.hasSignature(key.rawValue), v.hasSignature(value.rawValue) else {
                    throw .invalidArgument(
                        "dictionary a{\(key)\(value)} holds an entry of types \(quoted(k.signatureString)), \(quoted(v.signatureString))")
                }
                size += try k.validate(depth: depth + 2) + v.validate(depth: depth + 2) + 8
            }
            try DBusValue.checkArrayLength(size)
            return size + 16
        case .structure(let fields):
            guard !fields.isEmpty else { throw .invalidArgument("a struct needs at least one field") }
            guard depth + 1 <= DBusValue.maximumTotalDepth else { throw DBusError.tooDeep }
            var size = 8
            for f in fields { size += try f.validate(depth: depth + 1) }
            return size
        case .variant(let inner):
            guard depth + 1 <= DBusValue.maximumTotalDepth else { throw DBusError.tooDeep }
            let signatureLength: Int
            if inner.basicTypeCode != nil {
                // One basic type code (or `v`): a valid signature by construction.
                signatureLength = 1
            } else {
                let sig = inner.signatureString
                guard SignatureParser.completeTypeCount(sig) != nil else {
                    throw .invalidArgument("variant contents have an invalid signature \(quoted(sig))")
                }
                signatureLength = sig.utf8.count
            }
            return try inner.validate(depth: depth + 1) + signatureLength + 10
        }
    }

    /// The type code of a basic value or a variant, nil for containers.
    var basicTypeCode: UInt8? {
        switch self {
        case .byte: UInt8(ascii: "y")
        case .bool: UInt8(ascii: "b")
        case .int16: UInt8(ascii: "n")
        case .uint16: UInt8(ascii: "q")
        case .int32: UInt8(ascii: "i")
        case .uint32: UInt8(ascii: "u")
        case .int64: UInt8(ascii: "x")
        case .uint64: UInt8(ascii: "t")
        case .double: UInt8(ascii: "d")
        case .string: UInt8(ascii: "s")
        case .objectPath: UInt8(ascii: "o")
        case .signature: UInt8(ascii: "g")
        case .unixFD: UInt8(ascii: "h")
        case .variant: UInt8(ascii: "v")
        case .array, .byteArray, .dictionary, .structure: nil
        }
    }

    /// Whether this value's signature is `signature`, without building it for one-letter ones.
    func hasSignature(_ signature: String) -> Bool {
        let utf8 = signature.utf8
        if utf8.count == 1 { return basicTypeCode == utf8.first }
        return signatureString == signature
    }

    private static func checkArrayLength(_ bytes: Int) throws(DBusError) {
        guard bytes <= Int(maximumArrayLength) else {
            throw .invalidArgument("array of about \(bytes) bytes exceeds the D-Bus maximum of 64 MiB")
        }
    }

    static let maximumArrayLength: Int32 = 67_108_864

    /// Validates a whole argument list: each value, and their concatenated signature. Returns
    /// an upper bound of the body's marshalled size.
    @discardableResult
    static func validate(arguments: [DBusValue]) throws(DBusError) -> Int {
        // The signature is written into a buffer on the stack, not built as a string: one byte
        // more than a valid signature may have, so that a longer one is seen to be too long.
        let valid = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: SignatureParser.maximumLength + 1) { storage in
            var signature = SignatureBuffer(storage: storage)
            for a in arguments { a.appendSignature(to: &signature) }
            return !signature.overflowed && SignatureParser.completeTypeCount(signature.bytes) != nil
        }
        guard valid else {
            var signature = ""
            for a in arguments { a.appendSignature(to: &signature) }
            throw .invalidArgument("arguments have an invalid signature \(quoted(signature))")
        }
        var size = 0
        for a in arguments { size += try a.validate() }
        // The whole message may not exceed 128 MiB; leave room for the header.
        guard size <= 128 * 1024 * 1024 - 65536 else {
            throw .invalidArgument("message body of about \(size) bytes exceeds the D-Bus maximum of 128 MiB")
        }
        return size
    }
}

/// Signature bytes written into storage of a fixed size; what does not fit is dropped and noted.
struct SignatureBuffer {
    let storage: UnsafeMutableBufferPointer<UInt8>
    private(set) var count = 0
    /// Some byte did not fit.
    private(set) var overflowed = false

    init(storage: UnsafeMutableBufferPointer<UInt8>) { self.storage = storage }

    /// The bytes written.
    var bytes: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: storage[..<count]) }

    mutating func append(_ byte: UInt8) {
        guard count < storage.count else { return overflowed = true }
        storage[count] = byte
        count += 1
    }

    mutating func append(_ signature: Signature) {
        for byte in signature.rawValue.utf8 { append(byte) }
    }
}

extension DBusValue {
    /// Appends this value's signature (one complete type) to `out`.
    func appendSignature(to out: inout SignatureBuffer) {
        if let code = basicTypeCode { return out.append(code) }
        switch self {
        case .array(let element, _):
            out.append(UInt8(ascii: "a"))
            out.append(element)
        case .byteArray:
            out.append(UInt8(ascii: "a"))
            out.append(UInt8(ascii: "y"))
        case .dictionary(let key, let value, _):
            out.append(UInt8(ascii: "a"))
            out.append(UInt8(ascii: "{"))
            out.append(key)
            out.append(value)
            out.append(UInt8(ascii: "}"))
        case .structure(let fields):
            out.append(UInt8(ascii: "("))
            for f in fields { f.appendSignature(to: &out) }
            out.append(UInt8(ascii: ")"))
        case .byte, .bool, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature,
            .unixFD, .variant:
            break  // written above
        }
    }
}

extension DBusError {
    static let tooDeep = DBusError.invalidArgument("containers nested deeper than D-Bus allows (64)")
}
