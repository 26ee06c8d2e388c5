/// Everything the DBus layer throws (besides `CancellationError` when an awaiting task is
/// cancelled). Each case has a D-Bus error `name` and a human `message`.
///
/// A method handler of an exported object may throw any error: `.remote(name:message:)`
/// is sent as exactly that D-Bus error, `.invalidArgument` as
/// `org.freedesktop.DBus.Error.InvalidArgs`, anything else as
/// `org.freedesktop.DBus.Error.Failed` with the error's description.
public enum DBusError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The peer answered with a D-Bus error reply (or, thrown from a handler: the error to reply with).
    case remote(name: String, message: String)
    /// No reply arrived within the call's timeout.
    case timeout
    /// The connection is closed or the bus went away.
    case disconnected
    /// A name, path, signature, string or value was refused before it reached libdbus.
    case invalidArgument(String)
    /// A reply or signal did not have the signature the caller expected.
    case unexpectedSignature(expected: String, actual: String)
    /// Connecting or authenticating to the bus failed.
    case connectionFailed(String)
    /// A local failure: out of memory, a message libdbus would not accept, fd passing unsupported.
    case failed(String)

    /// The D-Bus error name for this error.
    public var name: String {
        switch self {
        case .remote(let name, _): name
        case .timeout: "org.freedesktop.DBus.Error.Timeout"
        case .disconnected: "org.freedesktop.DBus.Error.Disconnected"
        case .invalidArgument: "org.freedesktop.DBus.Error.InvalidArgs"
        case .unexpectedSignature: "org.freedesktop.DBus.Error.InvalidSignature"
        case .connectionFailed: "org.freedesktop.DBus.Error.NoServer"
        case .failed: "org.freedesktop.DBus.Error.Failed"
        }
    }

    /// The human-readable message of this error.
    public var message: String {
        switch self {
        case .remote(_, let message): message
        case .timeout: "no reply within the timeout"
        case .disconnected: "the connection to the bus is closed"
        case .invalidArgument(let m): m
        case .unexpectedSignature(let expected, let actual):
            "expected signature \"\(expected)\", got \"\(actual)\""
        case .connectionFailed(let m): m
        case .failed(let m): m
        }
    }

    /// Convenience: the error a handler throws to reply with `name` and `message`.
    public static func error(_ name: ErrorName, _ message: String) -> DBusError {
        .remote(name: name.rawValue, message: message)
    }

    public var description: String { "\(name): \(message)" }

    /// The standard `org.freedesktop.DBus.Error.*` names this layer uses.
    public enum Names {
        /// A generic failure.
        public static let failed = "org.freedesktop.DBus.Error.Failed"
        /// No reply (libdbus uses it for timeouts and disconnection).
        public static let noReply = "org.freedesktop.DBus.Error.NoReply"
        /// No such method.
        public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
        /// No object at that path.
        public static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
        /// The object has no such interface.
        public static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
        /// The interface has no such property.
        public static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
        /// The property cannot be set.
        public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
        /// Wrong arguments.
        public static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        /// Not allowed (also: a property that cannot be read).
        public static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
        /// Nobody owns the bus name.
        public static let nameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
        /// The destination does not exist on the bus.
        public static let serviceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
        /// The connection is closed.
        public static let disconnected = "org.freedesktop.DBus.Error.Disconnected"
    }

    /// The error reply (name, message) an exported object sends for `error`.
    static func replyFields(for error: any Error) -> (name: String, message: String) {
        let fields: (String, String)
        switch error {
        case let e as DBusError:
            fields = (e.name, e.message)
        default:
            fields = (Names.failed, String(describing: error))
        }
        let name = NameRules.isValidInterfaceName(fields.0) ? fields.0 : Names.failed
        // The message travels as a D-Bus string: no NULs.
        let message = fields.1.utf8.contains(0) ? String(fields.1.unicodeScalars.filter { $0 != "\0" }) : fields.1
        return (name, message)
    }
}
