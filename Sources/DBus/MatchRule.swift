/// A typed D-Bus match rule (`type='signal',sender='org.bluez',…`).
///
/// Every field is optional; unset fields match anything. `string` renders the rule with
/// values quoted and escaped as the specification requires, and `matches(_:)` applies
/// the same rule locally (the bus delivers the union of all of a connection's rules, so
/// each subscription filters again on its own).
public struct MatchRule: Sendable, Hashable, CustomStringConvertible {
    /// The message type to match; signals by default.
    public var type: Message.Kind?
    /// The sender: a unique name, or a well-known name (resolved to its owner locally).
    public var sender: BusName?
    /// The interface.
    public var interface: InterfaceName?
    /// The member.
    public var member: MemberName?
    /// The exact object path.
    public var path: ObjectPath?
    /// An object path and everything below it.
    public var pathNamespace: ObjectPath?
    /// The destination.
    public var destination: BusName?
    /// `argN='value'`: string argument N equals the value.
    public var arguments: [Int: String]
    /// `argNpath='value'`: string or path argument N equals the value, or one is a
    /// `/`-terminated prefix of the other.
    public var argumentPaths: [Int: String]
    /// `arg0namespace='a.b'`: string argument 0 is `a.b` or starts with `a.b.`.
    public var arg0Namespace: String?

    /// A rule; all fields optional. Only signals unless `type` says otherwise.
    public init(
        type: Message.Kind? = .signal, sender: BusName? = nil, interface: InterfaceName? = nil,
        member: MemberName? = nil, path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil,
        destination: BusName? = nil, arguments: [Int: String] = [:], argumentPaths: [Int: String] = [:],
        arg0Namespace: String? = nil
    ) {
        self.type = type
        self.sender = sender
        self.interface = interface
        self.member = member
        self.path = path
        self.pathNamespace = pathNamespace
        self.destination = destination
        self.arguments = arguments
        self.argumentPaths = argumentPaths
        self.arg0Namespace = arg0Namespace
    }

    /// A copy that also requires string argument `index` to equal `value`.
    public func argument(_ index: Int, _ value: String) -> MatchRule {
        var copy = self
        copy.arguments[index] = value
        return copy
    }

    /// A copy that also requires path argument `index` to match `value` (see `argumentPaths`).
    public func argumentPath(_ index: Int, _ value: String) -> MatchRule {
        var copy = self
        copy.argumentPaths[index] = value
        return copy
    }

    /// Checks what the bus would refuse (argument indices 0...63, no NULs, length ≤ 1024,
    /// `path` and `pathNamespace` not both set, a valid `arg0namespace`).
    public func validate() throws(DBusError) {
        for index in arguments.keys where !(0...63).contains(index) {
            throw .invalidArgument("match rule argument index \(index) is outside 0...63")
        }
        for index in argumentPaths.keys where !(0...63).contains(index) {
            throw .invalidArgument("match rule argument index \(index) is outside 0...63")
        }
        for (_, v) in arguments { try checkNoNUL(v, what: "match rule argument") }
        for (_, v) in argumentPaths { try checkNoNUL(v, what: "match rule argument") }
        if path != nil && pathNamespace != nil {
            throw .invalidArgument("a match rule cannot have both path and path_namespace")
        }
        if let ns = arg0Namespace {
            // The bus requires a bus-name-like or interface-like prefix (one element allowed).
            let ok = NameRules.isValidBusName(ns) || NameRules.isValidBusName(ns + ".x") && !ns.hasPrefix(":")
            guard ok else { throw .invalidArgument("invalid arg0namespace \(quoted(ns))") }
        }
        guard string.utf8.count <= 1024 else {
            throw .invalidArgument("match rule longer than 1024 bytes")
        }
    }

    /// The rule as the bus's `AddMatch` expects it.
    public var string: String {
        var parts: [String] = []
        func add(_ key: String, _ value: String) { parts.append(key + "=" + MatchRule.quote(value)) }
        if let type {
            switch type {
            case .signal: add("type", "signal")
            case .methodCall: add("type", "method_call")
            case .methodReturn: add("type", "method_return")
            case .error: add("type", "error")
            }
        }
        if let sender { add("sender", sender.rawValue) }
        if let interface { add("interface", interface.rawValue) }
        if let member { add("member", member.rawValue) }
        if let path { add("path", path.rawValue) }
        if let pathNamespace { add("path_namespace", pathNamespace.rawValue) }
        if let destination { add("destination", destination.rawValue) }
        for (i, v) in arguments.sorted(by: { $0.key < $1.key }) { add("arg\(i)", v) }
        for (i, v) in argumentPaths.sorted(by: { $0.key < $1.key }) { add("arg\(i)path", v) }
        if let arg0Namespace { add("arg0namespace", arg0Namespace) }
        return parts.joined(separator: ",")
    }

    public var description: String { string }

    /// Quotes a value for a match rule: inside single quotes everything is literal
    /// (backslashes included) and a quote is written as `'\''`.
    static func quote(_ value: String) -> String {
        var out = "'"
        for ch in value.unicodeScalars {
            if ch == "'" {
                out += "'\\''"
            } else {
                out.unicodeScalars.append(ch)
            }
        }
        return out + "'"
    }

    /// Applies the rule to a received message. `resolvedSender` is the current unique owner
    /// of a well-known `sender` (nil when unknown or unowned).
    func matches(_ message: Message, resolvedSender: String?) -> Bool {
        if let type, type != message.kind { return false }
        if let sender {
            if message.sender != sender.rawValue {
                guard !sender.isUnique, let resolvedSender, message.sender == resolvedSender else { return false }
            }
        }
        if let interface, message.interface != interface { return false }
        if let member, message.member != member { return false }
        if let path, message.path != path { return false }
        if let pathNamespace {
            guard let p = message.path, p.isDescendant(ofOrEqualTo: pathNamespace) else { return false }
        }
        if let destination, message.destination != destination.rawValue { return false }
        for (i, v) in arguments {
            guard i < message.arguments.count, message.arguments[i].stringValue == v else { return false }
        }
        for (i, v) in argumentPaths {
            guard i < message.arguments.count else { return false }
            let arg: String
            switch message.arguments[i] {
            case .string(let s): arg = s
            case .objectPath(let p): arg = p.rawValue
            default: return false
            }
            let ok = arg == v || (v.hasSuffix("/") && arg.hasPrefix(v)) || (arg.hasSuffix("/") && v.hasPrefix(arg))
            if !ok { return false }
        }
        if let ns = arg0Namespace {
            guard let a0 = message.arguments.first?.stringValue, a0 == ns || a0.hasPrefix(ns + ".") else { return false }
        }
        return true
    }
}

extension MatchRule {
    /// `PropertiesChanged` signals, optionally for one sender, path (or subtree) and interface (arg0).
    public static func propertiesChanged(
        sender: BusName? = nil, path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil,
        interface: InterfaceName? = nil
    ) -> MatchRule {
        var rule = MatchRule(
            sender: sender, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
            path: path, pathNamespace: pathNamespace)
        if let interface { rule.arguments[0] = interface.rawValue }
        return rule
    }

    /// `InterfacesAdded` signals of an object manager.
    public static func interfacesAdded(sender: BusName? = nil, path: ObjectPath? = nil) -> MatchRule {
        MatchRule(sender: sender, interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded", path: path)
    }

    /// `InterfacesRemoved` signals of an object manager.
    public static func interfacesRemoved(sender: BusName? = nil, path: ObjectPath? = nil) -> MatchRule {
        MatchRule(sender: sender, interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesRemoved", path: path)
    }

    /// The bus's `NameOwnerChanged`, optionally for one name (arg0).
    public static func nameOwnerChanged(name: BusName? = nil) -> MatchRule {
        var rule = MatchRule(
            sender: .bus, interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
            path: "/org/freedesktop/DBus")
        if let name { rule.arguments[0] = name.rawValue }
        return rule
    }
}
