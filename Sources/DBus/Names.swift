// Validated wrappers for the names D-Bus carries in message headers.
//
// libdbus aborts the whole process when one of its constructors is handed an invalid
// object path, interface, member, error or bus name, so every name crosses into libdbus
// only as one of these types, whose initialisers implement the rules of the D-Bus
// specification ("Valid names", "Valid object paths").

/// Validation rules of the D-Bus specification, on UTF-8 bytes.
enum NameRules {
    static let maximumNameLength = 255

    @inline(__always) static func isAlpha(_ c: UInt8) -> Bool {
        (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
    }
    @inline(__always) static func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
    @inline(__always) static func isUnderscore(_ c: UInt8) -> Bool { c == 0x5F }

    /// `/` or `/elem(/elem)*` with elements of `[A-Za-z0-9_]+`.
    static func isValidObjectPath(_ s: String) -> Bool {
        let b = s.utf8
        guard let first = b.first, first == 0x2F else { return false }
        if b.count == 1 { return true }
        var previousSlash = true
        for c in b.dropFirst() {
            if c == 0x2F {
                if previousSlash { return false }
                previousSlash = true
            } else if isAlpha(c) || isDigit(c) || isUnderscore(c) {
                previousSlash = false
            } else {
                return false
            }
        }
        return !previousSlash
    }

    /// Interface and error names: at least two dot-separated elements of
    /// `[A-Za-z_][A-Za-z0-9_]*`, at most 255 bytes.
    static func isValidInterfaceName(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard !b.isEmpty, b.count <= maximumNameLength else { return false }
        var elements = 0
        var elementStart = true
        for c in b {
            if c == 0x2E {
                if elementStart { return false }
                elementStart = true
            } else if isAlpha(c) || isUnderscore(c) {
                if elementStart { elements += 1 }
                elementStart = false
            } else if isDigit(c) {
                if elementStart { return false }
            } else {
                return false
            }
        }
        return !elementStart && elements >= 2
    }

    /// Member names: `[A-Za-z_][A-Za-z0-9_]*`, 1 to 255 bytes.
    static func isValidMemberName(_ s: String) -> Bool {
        let b = s.utf8
        guard let first = b.first, b.count <= maximumNameLength else { return false }
        guard isAlpha(first) || isUnderscore(first) else { return false }
        for c in b where !(isAlpha(c) || isDigit(c) || isUnderscore(c)) { return false }
        return true
    }

    /// Bus names: unique (`:` then elements of `[A-Za-z0-9_-]+`) or well-known
    /// (elements of `[A-Za-z_-][A-Za-z0-9_-]*`), at least two elements, at most 255 bytes.
    static func isValidBusName(_ s: String) -> Bool {
        var b = Array(s.utf8)[...]
        guard !b.isEmpty, b.count <= maximumNameLength else { return false }
        let unique = b.first == 0x3A
        if unique { b = b.dropFirst() }
        var elements = 0
        var elementStart = true
        for c in b {
            if c == 0x2E {
                if elementStart { return false }
                elementStart = true
            } else if isAlpha(c) || isUnderscore(c) || c == 0x2D {
                if elementStart { elements += 1 }
                elementStart = false
            } else if isDigit(c) {
                if elementStart {
                    if !unique { return false }
                    elements += 1
                }
                elementStart = false
            } else {
                return false
            }
        }
        return !elementStart && elements >= 2
    }
}

/// Throws `DBusError.invalidArgument` unless `s` is valid UTF-8 without NUL bytes.
///
/// Swift strings are always valid Unicode; this refuses the embedded NULs that a C string
/// would silently truncate.
func checkNoNUL(_ s: String, what: @autoclosure () -> String) throws(DBusError) {
    if s.utf8.contains(0) {
        throw .invalidArgument("\(what()) contains a NUL character")
    }
}

/// A D-Bus object path such as `/org/bluez/hci0`.
public struct ObjectPath: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The path as a string.
    public let rawValue: String

    /// Validates `string` against the D-Bus object path rules.
    /// - Throws: `DBusError.invalidArgument` when the path is invalid.
    public init(_ string: String) throws(DBusError) {
        guard NameRules.isValidObjectPath(string) else {
            throw .invalidArgument("invalid object path \(quoted(string))")
        }
        rawValue = string
    }

    /// Returns nil when `string` is not a valid object path.
    public init?(validating string: String) {
        guard NameRules.isValidObjectPath(string) else { return nil }
        rawValue = string
    }

    /// For paths libdbus has already validated.
    init(unchecked string: String) { rawValue = string }

    /// A literal path; an invalid literal is a programming error and traps.
    public init(stringLiteral value: String) {
        precondition(NameRules.isValidObjectPath(value), "invalid object path literal \(value)")
        rawValue = value
    }

    /// The root path `/`.
    public static let root = ObjectPath(unchecked: "/")

    /// The path one level deeper: `/a` + `b` → `/a/b`.
    /// - Throws: `DBusError.invalidArgument` when `element` is not a valid path element.
    public func appending(_ element: String) throws(DBusError) -> ObjectPath {
        try ObjectPath(rawValue == "/" ? "/" + element : rawValue + "/" + element)
    }

    /// True when `self` equals `other` or lies below it.
    public func isDescendant(ofOrEqualTo other: ObjectPath) -> Bool {
        if other.rawValue == "/" || rawValue == other.rawValue { return true }
        return rawValue.hasPrefix(other.rawValue + "/")
    }

    /// The parent path, nil for `/`.
    public var parent: ObjectPath? {
        guard rawValue != "/" else { return nil }
        let bytes = Array(rawValue.utf8)
        guard let slash = bytes.lastIndex(of: 0x2F) else { return nil }
        return slash == 0 ? .root : ObjectPath(unchecked: String(decoding: bytes[..<slash], as: UTF8.self))
    }

    public var description: String { rawValue }
    public static func < (a: ObjectPath, b: ObjectPath) -> Bool { a.rawValue < b.rawValue }
}

/// A D-Bus interface name such as `org.bluez.Device1`.
public struct InterfaceName: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The name as a string.
    public let rawValue: String

    /// Validates `string` against the D-Bus interface name rules.
    /// - Throws: `DBusError.invalidArgument` when the name is invalid.
    public init(_ string: String) throws(DBusError) {
        guard NameRules.isValidInterfaceName(string) else {
            throw .invalidArgument("invalid interface name \(quoted(string))")
        }
        rawValue = string
    }

    /// Returns nil when `string` is not a valid interface name.
    public init?(validating string: String) {
        guard NameRules.isValidInterfaceName(string) else { return nil }
        rawValue = string
    }

    init(unchecked string: String) { rawValue = string }

    /// A literal name; an invalid literal is a programming error and traps.
    public init(stringLiteral value: String) {
        precondition(NameRules.isValidInterfaceName(value), "invalid interface name literal \(value)")
        rawValue = value
    }

    public var description: String { rawValue }
}

/// A D-Bus member (method, signal or property) name such as `StartNotify`.
public struct MemberName: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The name as a string.
    public let rawValue: String

    /// Validates `string` against the D-Bus member name rules.
    /// - Throws: `DBusError.invalidArgument` when the name is invalid.
    public init(_ string: String) throws(DBusError) {
        guard NameRules.isValidMemberName(string) else {
            throw .invalidArgument("invalid member name \(quoted(string))")
        }
        rawValue = string
    }

    /// Returns nil when `string` is not a valid member name.
    public init?(validating string: String) {
        guard NameRules.isValidMemberName(string) else { return nil }
        rawValue = string
    }

    init(unchecked string: String) { rawValue = string }

    /// A literal name; an invalid literal is a programming error and traps.
    public init(stringLiteral value: String) {
        precondition(NameRules.isValidMemberName(value), "invalid member name literal \(value)")
        rawValue = value
    }

    public var description: String { rawValue }
}

/// A D-Bus error name such as `org.bluez.Error.Failed` (same rules as interface names).
public struct ErrorName: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The name as a string.
    public let rawValue: String

    /// Validates `string` against the D-Bus error name rules.
    /// - Throws: `DBusError.invalidArgument` when the name is invalid.
    public init(_ string: String) throws(DBusError) {
        guard NameRules.isValidInterfaceName(string) else {
            throw .invalidArgument("invalid error name \(quoted(string))")
        }
        rawValue = string
    }

    /// Returns nil when `string` is not a valid error name.
    public init?(validating string: String) {
        guard NameRules.isValidInterfaceName(string) else { return nil }
        rawValue = string
    }

    init(unchecked string: String) { rawValue = string }

    /// A literal name; an invalid literal is a programming error and traps.
    public init(stringLiteral value: String) {
        precondition(NameRules.isValidInterfaceName(value), "invalid error name literal \(value)")
        rawValue = value
    }

    public var description: String { rawValue }
}

/// A D-Bus bus name: unique (`:1.42`) or well-known (`org.bluez`).
public struct BusName: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The name as a string.
    public let rawValue: String

    /// Validates `string` against the D-Bus bus name rules.
    /// - Throws: `DBusError.invalidArgument` when the name is invalid.
    public init(_ string: String) throws(DBusError) {
        guard NameRules.isValidBusName(string) else {
            throw .invalidArgument("invalid bus name \(quoted(string))")
        }
        rawValue = string
    }

    /// Returns nil when `string` is not a valid bus name.
    public init?(validating string: String) {
        guard NameRules.isValidBusName(string) else { return nil }
        rawValue = string
    }

    init(unchecked string: String) { rawValue = string }

    /// A literal name; an invalid literal is a programming error and traps.
    public init(stringLiteral value: String) {
        precondition(NameRules.isValidBusName(value), "invalid bus name literal \(value)")
        rawValue = value
    }

    /// True for unique connection names (`:1.42`).
    public var isUnique: Bool { rawValue.utf8.first == 0x3A }

    /// The message bus itself, `org.freedesktop.DBus`.
    public static let bus = BusName(unchecked: "org.freedesktop.DBus")

    public var description: String { rawValue }
}

/// Renders untrusted text for an error message: quoted, control characters escaped, cut at 80 characters.
func quoted(_ s: String) -> String {
    var out = "\""
    var count = 0
    for scalar in s.unicodeScalars {
        if count == 80 { out += "…"; break }
        count += 1
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case _ where scalar.value < 0x20 || scalar.value == 0x7F:
            out += "\\u{" + String(scalar.value, radix: 16) + "}"
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out + "\""
}
