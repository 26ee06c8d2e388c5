// Clients of the standard interfaces: Properties, ObjectManager, and the bus's signals.
// The calls run in the caller's isolation, as `DBusConnection.call` does.

extension DBusConnection {
    /// `org.freedesktop.DBus.Properties.Get`: the property's value, variant unwrapped.
    public func getProperty(
        destination: BusName?, path: ObjectPath, interface: InterfaceName, name: String,
        timeout: Duration = DBusConnection.defaultTimeout, isolation: isolated (any Actor)? = #isolation
    ) async throws -> DBusValue {
        try checkNoNUL(name, what: "property name")
        let reply = try await call(
            destination: destination, path: path, interface: "org.freedesktop.DBus.Properties", member: "Get",
            arguments: [.string(interface.rawValue), .string(name)], expecting: "v", timeout: timeout)
        return reply[0].variantValue ?? reply[0]
    }

    /// `org.freedesktop.DBus.Properties.GetAll`: name → value, variants unwrapped.
    public func getAllProperties(
        destination: BusName?, path: ObjectPath, interface: InterfaceName,
        timeout: Duration = DBusConnection.defaultTimeout, isolation: isolated (any Actor)? = #isolation
    ) async throws -> [String: DBusValue] {
        let reply = try await call(
            destination: destination, path: path, interface: "org.freedesktop.DBus.Properties", member: "GetAll",
            arguments: [.string(interface.rawValue)], expecting: "a{sv}", timeout: timeout)
        return reply[0].stringKeyedDictionary ?? [:]
    }

    /// `org.freedesktop.DBus.Properties.Set` (the value is wrapped in a variant here).
    public func setProperty(
        destination: BusName?, path: ObjectPath, interface: InterfaceName, name: String, value: DBusValue,
        timeout: Duration = DBusConnection.defaultTimeout, isolation: isolated (any Actor)? = #isolation
    ) async throws {
        try checkNoNUL(name, what: "property name")
        _ = try await call(
            destination: destination, path: path, interface: "org.freedesktop.DBus.Properties", member: "Set",
            arguments: [.string(interface.rawValue), .string(name), .variant(value)], expecting: .empty,
            timeout: timeout)
    }

    /// `org.freedesktop.DBus.ObjectManager.GetManagedObjects`: path → interface → property → value.
    public func getManagedObjects(
        destination: BusName?, path: ObjectPath = .root, timeout: Duration = DBusConnection.defaultTimeout,
        isolation: isolated (any Actor)? = #isolation
    ) async throws -> [ObjectPath: [String: [String: DBusValue]]] {
        let reply = try await call(
            destination: destination, path: path, interface: "org.freedesktop.DBus.ObjectManager",
            member: "GetManagedObjects", expecting: "a{oa{sa{sv}}}", timeout: timeout)
        return try ManagedObjects.decode(reply[0])
    }
}

/// Decoding of `a{oa{sa{sv}}}` and `a{sa{sv}}`.
enum ManagedObjects {
    static func decode(_ value: DBusValue) throws(DBusError) -> [ObjectPath: [String: [String: DBusValue]]] {
        guard let entries = value.dictionaryValue else {
            throw .unexpectedSignature(expected: "a{oa{sa{sv}}}", actual: value.signatureString)
        }
        var out: [ObjectPath: [String: [String: DBusValue]]] = [:]
        for (k, v) in entries {
            guard let path = k.objectPathValue else {
                throw .unexpectedSignature(expected: "a{oa{sa{sv}}}", actual: value.signatureString)
            }
            out[path] = try interfaces(v)
        }
        return out
    }

    static func interfaces(_ value: DBusValue) throws(DBusError) -> [String: [String: DBusValue]] {
        guard value.signatureString == "a{sa{sv}}", let entries = value.dictionaryValue else {
            throw .unexpectedSignature(expected: "a{sa{sv}}", actual: value.signatureString)
        }
        var out: [String: [String: DBusValue]] = [:]
        for (k, v) in entries {
            guard let name = k.stringValue, let props = v.stringKeyedDictionary else {
                throw .unexpectedSignature(expected: "a{sa{sv}}", actual: value.signatureString)
            }
            out[name] = props
        }
        return out
    }
}

/// `org.freedesktop.DBus.Properties.PropertiesChanged`, decoded.
public struct PropertiesChanged: Sendable {
    /// The object whose properties changed.
    public let path: ObjectPath
    /// The sender's unique name.
    public let sender: String?
    /// The interface the properties belong to.
    public let interface: String
    /// Changed properties with their new values (variants unwrapped).
    public let changed: [String: DBusValue]
    /// Properties that changed without their new value being sent.
    public let invalidated: [String]

    /// Decodes a `PropertiesChanged` signal.
    /// - Throws: `DBusError.unexpectedSignature` for any other signal or signature.
    public init(_ signal: Signal) throws(DBusError) {
        guard signal.interface.rawValue == StandardInterface.properties, signal.member.rawValue == "PropertiesChanged" else {
            throw .unexpectedSignature(expected: "PropertiesChanged", actual: "\(signal.interface).\(signal.member)")
        }
        let args = try signal.arguments(matching: "sa{sv}as")
        path = signal.path
        sender = signal.sender
        interface = args[0].stringValue ?? ""
        changed = args[1].stringKeyedDictionary ?? [:]
        invalidated = args[2].stringArray ?? []
    }
}

/// `org.freedesktop.DBus.ObjectManager.InterfacesAdded`, decoded.
public struct InterfacesAdded: Sendable {
    /// The object that gained interfaces.
    public let object: ObjectPath
    /// Interface → its properties (variants unwrapped).
    public let interfaces: [String: [String: DBusValue]]

    /// Decodes an `InterfacesAdded` signal.
    /// - Throws: `DBusError.unexpectedSignature` for any other signal or signature.
    public init(_ signal: Signal) throws(DBusError) {
        guard signal.interface.rawValue == StandardInterface.objectManager, signal.member.rawValue == "InterfacesAdded" else {
            throw .unexpectedSignature(expected: "InterfacesAdded", actual: "\(signal.interface).\(signal.member)")
        }
        let args = try signal.arguments(matching: "oa{sa{sv}}")
        object = args[0].objectPathValue ?? .root
        interfaces = try ManagedObjects.interfaces(args[1])
    }
}

/// `org.freedesktop.DBus.ObjectManager.InterfacesRemoved`, decoded.
public struct InterfacesRemoved: Sendable {
    /// The object that lost interfaces.
    public let object: ObjectPath
    /// The interfaces removed.
    public let interfaces: [String]

    /// Decodes an `InterfacesRemoved` signal.
    /// - Throws: `DBusError.unexpectedSignature` for any other signal or signature.
    public init(_ signal: Signal) throws(DBusError) {
        guard signal.interface.rawValue == StandardInterface.objectManager, signal.member.rawValue == "InterfacesRemoved" else {
            throw .unexpectedSignature(expected: "InterfacesRemoved", actual: "\(signal.interface).\(signal.member)")
        }
        let args = try signal.arguments(matching: "oas")
        object = args[0].objectPathValue ?? .root
        interfaces = args[1].stringArray ?? []
    }
}

/// The bus's `org.freedesktop.DBus.NameOwnerChanged`, decoded.
public struct NameOwnerChanged: Sendable {
    /// The name whose owner changed.
    public let name: String
    /// The previous owner, nil if there was none.
    public let oldOwner: String?
    /// The new owner, nil if the name is now unowned.
    public let newOwner: String?

    /// Decodes a `NameOwnerChanged` signal.
    /// - Throws: `DBusError.unexpectedSignature` for any other signal or signature.
    public init(_ signal: Signal) throws(DBusError) {
        guard signal.interface.rawValue == "org.freedesktop.DBus", signal.member.rawValue == "NameOwnerChanged" else {
            throw .unexpectedSignature(expected: "NameOwnerChanged", actual: "\(signal.interface).\(signal.member)")
        }
        let args = try signal.arguments(matching: "sss")
        name = args[0].stringValue ?? ""
        let old = args[1].stringValue ?? ""
        let new = args[2].stringValue ?? ""
        oldOwner = old.isEmpty ? nil : old
        newOwner = new.isEmpty ? nil : new
    }
}
