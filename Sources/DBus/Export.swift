/// An incoming method call, as given to the handler of an exported method.
public struct MethodCall: Sendable {
    /// The caller's unique bus name (`:1.42`), set by the bus: check it before trusting a call.
    public let sender: String
    /// The object path called.
    public let path: ObjectPath
    /// The interface named by the caller (may be absent on the wire).
    public let interface: InterfaceName?
    /// The method name.
    public let member: MemberName
    /// The arguments, already checked against the method's input signature.
    public let arguments: [DBusValue]
    /// True when the caller does not want a reply.
    public let noReplyExpected: Bool
    /// The call's serial number.
    public let serial: UInt32
}

/// Thrown by a method handler that sends no reply at all: the caller waits until its own
/// timeout, as for a peer that never answers (the phone simulator's `silent_drop_all`).
public struct WithheldReply: Error, Sendable {
    public init() {}
}

/// A method of an exported interface.
public struct ExportedMethod: Sendable {
    /// How the handler runs.
    enum Handler: Sendable {
        case immediate(@Sendable (MethodCall) throws -> [DBusValue])
        case async(@Sendable (MethodCall) async throws -> [DBusValue])
    }

    /// The method name.
    public let name: MemberName
    /// The arguments it takes; calls with another signature get `InvalidArgs`.
    public let inputSignature: Signature
    /// The values it returns; a handler returning another signature sends `Failed`.
    public let outputSignature: Signature
    /// Argument names for introspection (optional).
    public let inputNames: [String]
    /// Result names for introspection (optional).
    public let outputNames: [String]
    let handler: Handler

    /// A method whose handler runs in its own task and may reply at any later time
    /// (its return is the reply; a thrown error becomes an error reply).
    public init(
        _ name: MemberName, input: Signature = .empty, output: Signature = .empty,
        inputNames: [String] = [], outputNames: [String] = [],
        handler: @escaping @Sendable (MethodCall) async throws -> [DBusValue]
    ) {
        self.name = name
        self.inputSignature = input
        self.outputSignature = output
        self.inputNames = inputNames
        self.outputNames = outputNames
        self.handler = .async(handler)
    }

    /// A method whose handler runs synchronously on the connection's loop, replying with
    /// no task hop. It must be quick and must not block.
    public static func immediate(
        _ name: MemberName, input: Signature = .empty, output: Signature = .empty,
        inputNames: [String] = [], outputNames: [String] = [],
        handler: @escaping @Sendable (MethodCall) throws -> [DBusValue]
    ) -> ExportedMethod {
        ExportedMethod(
            name: name, inputSignature: input, outputSignature: output, inputNames: inputNames,
            outputNames: outputNames, handler: .immediate(handler))
    }

    private init(
        name: MemberName, inputSignature: Signature, outputSignature: Signature, inputNames: [String],
        outputNames: [String], handler: Handler
    ) {
        self.name = name
        self.inputSignature = inputSignature
        self.outputSignature = outputSignature
        self.inputNames = inputNames
        self.outputNames = outputNames
        self.handler = handler
    }
}

/// A property of an exported interface. The connection stores its current value; change
/// it with `DBusConnection.setExportedProperty`, which emits `PropertiesChanged`.
public struct ExportedProperty: Sendable {
    /// Who may read and write the property.
    public enum Access: String, Sendable {
        /// Get only.
        case read
        /// Set only.
        case write
        /// Get and Set.
        case readWrite = "readwrite"
    }

    /// What a change announces (the `org.freedesktop.DBus.Property.EmitsChangedSignal` annotation).
    public enum ChangeSignal: String, Sendable {
        /// PropertiesChanged carries the new value.
        case emits = "true"
        /// PropertiesChanged lists the property as invalidated, without the value.
        case invalidates = "invalidates"
        /// No signal.
        case none = "false"
    }

    /// The property name (member-name rules).
    public let name: MemberName
    /// Its type: one complete type.
    public let signature: Signature
    /// Read/write access for remote callers.
    public let access: Access
    /// The initial value.
    public let value: DBusValue
    /// What a change emits.
    public let changeSignal: ChangeSignal
    /// Called for a remote `Set` before the value is stored; throw to refuse it (the error
    /// becomes the reply). Runs on the connection's loop: keep it quick.
    public let onSet: (@Sendable (_ newValue: DBusValue, _ call: MethodCall) throws -> Void)?
    /// For a property computed when read (`computed`): gives its value to every `Get`,
    /// `GetAll` and `GetManagedObjects`, on the connection's loop (keep it quick). A value of
    /// another type than `signature` is ignored: the stored value is read instead.
    public let read: (@Sendable () -> DBusValue)?

    /// A property with an initial value.
    public init(
        _ name: MemberName, value: DBusValue, access: Access = .read, changeSignal: ChangeSignal = .emits,
        onSet: (@Sendable (_ newValue: DBusValue, _ call: MethodCall) throws -> Void)? = nil
    ) {
        self.name = name
        self.signature = value.signature
        self.access = access
        self.value = value
        self.changeSignal = changeSignal
        self.onSet = onSet
        self.read = nil
    }

    private init(
        _ name: MemberName, value: DBusValue, changeSignal: ChangeSignal, read: @escaping @Sendable () -> DBusValue
    ) {
        self.name = name
        self.signature = value.signature
        self.access = .read
        self.value = value
        self.changeSignal = changeSignal
        self.onSet = nil
        self.read = read
    }

    /// A read-only property whose value is computed each time a caller reads it, such as a
    /// media player's position, which moves on without anyone setting it. `value` gives its
    /// type (and is what is read should `read` return another type). By default a change
    /// emits nothing (`.none`): nobody sets it; `setExportedProperty` still announces a value
    /// as `changeSignal` says.
    public static func computed(
        _ name: MemberName, value: DBusValue, changeSignal: ChangeSignal = .none,
        read: @escaping @Sendable () -> DBusValue
    ) -> ExportedProperty {
        ExportedProperty(name, value: value, changeSignal: changeSignal, read: read)
    }

    /// The value a caller reads: `read`'s when there is one of the right type, else `stored`.
    func current(stored: DBusValue?) -> DBusValue {
        if let read {
            let computed = read()
            if computed.signatureString == signature.rawValue, (try? computed.validate()) != nil { return computed }
        }
        return stored ?? value
    }
}

/// A signal an exported interface declares (for introspection; emit it with `emitSignal`).
public struct ExportedSignal: Sendable {
    /// The signal name.
    public let name: MemberName
    /// Its arguments' signature.
    public let signature: Signature
    /// Argument names for introspection (optional).
    public let argumentNames: [String]

    /// A declared signal.
    public init(_ name: MemberName, signature: Signature = .empty, argumentNames: [String] = []) {
        self.name = name
        self.signature = signature
        self.argumentNames = argumentNames
    }
}

/// One interface of an exported object.
public struct ExportedInterface: Sendable {
    /// The interface name.
    public let name: InterfaceName
    /// Its methods.
    public let methods: [ExportedMethod]
    /// Its properties.
    public let properties: [ExportedProperty]
    /// Its signals (introspection only).
    public let signals: [ExportedSignal]

    /// An interface.
    public init(
        _ name: InterfaceName, methods: [ExportedMethod] = [], properties: [ExportedProperty] = [],
        signals: [ExportedSignal] = []
    ) {
        self.name = name
        self.methods = methods
        self.properties = properties
        self.signals = signals
    }
}

/// An object to export at a path: a set of interfaces. The connection adds
/// `Introspectable`, `Properties` and `Peer` to every exported object.
public struct ExportedObject: Sendable {
    /// The object's own interfaces.
    public let interfaces: [ExportedInterface]

    /// An object with these interfaces.
    public init(_ interfaces: [ExportedInterface]) {
        self.interfaces = interfaces
    }

    /// An object with these interfaces.
    public init(_ interfaces: ExportedInterface...) {
        self.interfaces = interfaces
    }

    static let reservedInterfaces: Set<String> = [
        StandardInterface.properties, StandardInterface.introspectable, StandardInterface.peer,
        StandardInterface.objectManager,
    ]

    /// Checks the object is well formed: no duplicate or reserved interfaces, unique member
    /// names, property values matching their one-type signature.
    func validate() throws(DBusError) {
        var seen = Set<String>()
        for iface in interfaces {
            guard !ExportedObject.reservedInterfaces.contains(iface.name.rawValue) else {
                throw .invalidArgument("\(iface.name) is provided by the connection itself")
            }
            guard seen.insert(iface.name.rawValue).inserted else {
                throw .invalidArgument("interface \(iface.name) exported twice")
            }
            var methods = Set<String>()
            for m in iface.methods where !methods.insert(m.name.rawValue).inserted {
                throw .invalidArgument("method \(m.name) declared twice in \(iface.name)")
            }
            var properties = Set<String>()
            for p in iface.properties {
                guard properties.insert(p.name.rawValue).inserted else {
                    throw .invalidArgument("property \(p.name) declared twice in \(iface.name)")
                }
                try p.value.validate()
            }
        }
    }
}

/// Names of the standard interfaces.
enum StandardInterface {
    static let properties = "org.freedesktop.DBus.Properties"
    static let introspectable = "org.freedesktop.DBus.Introspectable"
    static let peer = "org.freedesktop.DBus.Peer"
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let local = "org.freedesktop.DBus.Local"
}

/// Builds introspection XML (the D-Bus Object Introspection 1.0 DTD).
enum Introspection {
    static let header = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">

        """

    static let standard = """
          <interface name="org.freedesktop.DBus.Introspectable">
            <method name="Introspect">
              <arg name="xml_data" type="s" direction="out"/>
            </method>
          </interface>
          <interface name="org.freedesktop.DBus.Peer">
            <method name="Ping"/>
            <method name="GetMachineId">
              <arg name="machine_uuid" type="s" direction="out"/>
            </method>
          </interface>

        """

    static let properties = """
          <interface name="org.freedesktop.DBus.Properties">
            <method name="Get">
              <arg name="interface_name" type="s" direction="in"/>
              <arg name="property_name" type="s" direction="in"/>
              <arg name="value" type="v" direction="out"/>
            </method>
            <method name="GetAll">
              <arg name="interface_name" type="s" direction="in"/>
              <arg name="properties" type="a{sv}" direction="out"/>
            </method>
            <method name="Set">
              <arg name="interface_name" type="s" direction="in"/>
              <arg name="property_name" type="s" direction="in"/>
              <arg name="value" type="v" direction="in"/>
            </method>
            <signal name="PropertiesChanged">
              <arg name="interface_name" type="s"/>
              <arg name="changed_properties" type="a{sv}"/>
              <arg name="invalidated_properties" type="as"/>
            </signal>
          </interface>

        """

    static let objectManager = """
          <interface name="org.freedesktop.DBus.ObjectManager">
            <method name="GetManagedObjects">
              <arg name="objects" type="a{oa{sa{sv}}}" direction="out"/>
            </method>
            <signal name="InterfacesAdded">
              <arg name="object" type="o"/>
              <arg name="interfaces" type="a{sa{sv}}"/>
            </signal>
            <signal name="InterfacesRemoved">
              <arg name="object" type="o"/>
              <arg name="interfaces" type="as"/>
            </signal>
          </interface>

        """

    static func escape(_ s: String) -> String {
        var out = ""
        for ch in s.unicodeScalars {
            switch ch {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            case _ where ch.value < 0x20: out += "&#\(ch.value);"
            default: out.unicodeScalars.append(ch)
            }
        }
        return out
    }

    static func args(_ signature: Signature, names: [String], direction: String?) -> String {
        var out = ""
        for (i, type) in signature.completeTypes.enumerated() {
            out += "      <arg"
            if i < names.count, !names[i].isEmpty { out += " name=\"\(escape(names[i]))\"" }
            out += " type=\"\(escape(type.rawValue))\""
            if let direction { out += " direction=\"\(direction)\"" }
            out += "/>\n"
        }
        return out
    }

    /// The XML for a node with `interfaces` (nil: no object here), whether it is an object
    /// manager, and its direct children's names.
    static func xml(interfaces: [ExportedInterface]?, isManager: Bool, children: [String]) -> String {
        var out = header + "<node>\n" + standard
        if let interfaces {
            out += properties
            for iface in interfaces {
                out += "  <interface name=\"\(iface.name.rawValue)\">\n"
                for m in iface.methods {
                    let body = args(m.inputSignature, names: m.inputNames, direction: "in")
                        + args(m.outputSignature, names: m.outputNames, direction: "out")
                    if body.isEmpty {
                        out += "    <method name=\"\(m.name.rawValue)\"/>\n"
                    } else {
                        out += "    <method name=\"\(m.name.rawValue)\">\n" + body + "    </method>\n"
                    }
                }
                for s in iface.signals {
                    let body = args(s.signature, names: s.argumentNames, direction: nil)
                    if body.isEmpty {
                        out += "    <signal name=\"\(s.name.rawValue)\"/>\n"
                    } else {
                        out += "    <signal name=\"\(s.name.rawValue)\">\n" + body + "    </signal>\n"
                    }
                }
                for p in iface.properties {
                    let attrs = "name=\"\(p.name.rawValue)\" type=\"\(escape(p.signature.rawValue))\" access=\"\(p.access.rawValue)\""
                    if p.changeSignal == .emits {
                        out += "    <property \(attrs)/>\n"
                    } else {
                        out += "    <property \(attrs)>\n"
                        out += "      <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"\(p.changeSignal.rawValue)\"/>\n"
                        out += "    </property>\n"
                    }
                }
                out += "  </interface>\n"
            }
        }
        if isManager { out += objectManager }
        for child in children { out += "  <node name=\"\(escape(child))\"/>\n" }
        return out + "</node>\n"
    }
}
