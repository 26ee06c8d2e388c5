import CDBus

/// A received D-Bus message, fully copied out of libdbus (no pointers into it remain).
public struct Message: Sendable {
    /// The four D-Bus message types.
    public enum Kind: Sendable, Hashable {
        /// `METHOD_CALL`
        case methodCall
        /// `METHOD_RETURN`
        case methodReturn
        /// `ERROR`
        case error
        /// `SIGNAL`
        case signal
    }

    /// The message type.
    public var kind: Kind
    /// The sender's serial number for this message.
    public var serial: UInt32
    /// For replies: the serial of the call answered, else 0.
    public var replySerial: UInt32
    /// The sender's unique name (set by the bus), if any.
    public var sender: String?
    /// The destination bus name, if any.
    public var destination: String?
    /// The object path (calls and signals).
    public var path: ObjectPath?
    /// The interface (calls, where given, and signals).
    public var interface: InterfaceName?
    /// The member (calls and signals).
    public var member: MemberName?
    /// The error name (errors).
    public var errorName: String?
    /// The body's signature.
    public var signature: Signature
    /// The body.
    public var arguments: [DBusValue]
    /// True when the caller asked for no reply.
    public var noReplyExpected: Bool

    /// The arguments, after checking that the body has exactly the signature `expected`.
    /// - Throws: `DBusError.unexpectedSignature` otherwise.
    public func arguments(matching expected: Signature) throws(DBusError) -> [DBusValue] {
        guard signature == expected else {
            throw .unexpectedSignature(expected: expected.rawValue, actual: signature.rawValue)
        }
        return arguments
    }

    /// The error an `.error` message carries (its name and first string argument).
    public var error: DBusError? {
        guard kind == .error else { return nil }
        return .remote(name: errorName ?? DBusError.Names.failed, message: arguments.first?.stringValue ?? "")
    }

    /// Copies a libdbus message into Swift values.
    static func decode(_ raw: OpaquePointer) throws(DBusError) -> Message {
        func copy(_ p: UnsafePointer<CChar>?) -> String? { p.map { String(cString: $0) } }
        let kind: Kind
        switch dbus_message_get_type(raw) {
        case CDBUS_MESSAGE_TYPE_METHOD_CALL: kind = .methodCall
        case CDBUS_MESSAGE_TYPE_METHOD_RETURN: kind = .methodReturn
        case CDBUS_MESSAGE_TYPE_ERROR: kind = .error
        case CDBUS_MESSAGE_TYPE_SIGNAL: kind = .signal
        default: throw .failed("message of unknown type")
        }
        let signature = copy(dbus_message_get_signature(raw)) ?? ""
        return Message(
            kind: kind,
            serial: dbus_message_get_serial(raw),
            replySerial: dbus_message_get_reply_serial(raw),
            sender: copy(dbus_message_get_sender(raw)),
            destination: copy(dbus_message_get_destination(raw)),
            path: copy(dbus_message_get_path(raw)).map { ObjectPath(unchecked: $0) },
            interface: copy(dbus_message_get_interface(raw)).map { InterfaceName(unchecked: $0) },
            member: copy(dbus_message_get_member(raw)).map { MemberName(unchecked: $0) },
            errorName: copy(dbus_message_get_error_name(raw)),
            signature: Signature(unchecked: signature),
            // An empty body (most replies) needs no iterator.
            arguments: signature.isEmpty ? [] : try Marshal.readArguments(raw),
            noReplyExpected: dbus_message_get_no_reply(raw) != 0)
    }
}

/// A libdbus message reference, released exactly once (in deinit). Sendable because it is
/// built on one thread and then only handed over, never shared: libdbus messages are not
/// touched concurrently.
final class OwnedMessage: @unchecked Sendable {
    let raw: OpaquePointer

    init(adopting raw: OpaquePointer) { self.raw = raw }

    deinit { dbus_message_unref(raw) }

    /// A method call, copied from a recent one (`headers`). Everything is validated by the
    /// parameter types and `arguments` is validated here, before libdbus sees any of it. Without
    /// `autoStart` the message carries NO_AUTO_START: the bus answers NameHasNoOwner at once
    /// rather than activating the service.
    static func methodCall(
        headers: CallHeaders, destination: BusName?, path: ObjectPath, interface: InterfaceName?, member: MemberName,
        arguments: [DBusValue], noReply: Bool = false, autoStart: Bool = true
    ) throws(DBusError) -> OwnedMessage {
        let bodySize = try DBusValue.validate(arguments: arguments)
        let message = try headers.methodCall(
            to: CallHeaders.Address(
                destination: destination?.rawValue, path: path.rawValue, interface: interface?.rawValue,
                member: member.rawValue),
            arguments: arguments, bodySize: bodySize)
        if noReply { dbus_message_set_no_reply(message.raw, 1) }
        if !autoStart { dbus_message_set_auto_start(message.raw, 0) }
        return message
    }

    /// A signal.
    static func signal(
        path: ObjectPath, interface: InterfaceName, member: MemberName, destination: BusName?, arguments: [DBusValue]
    ) throws(DBusError) -> OwnedMessage {
        try DBusValue.validate(arguments: arguments)
        guard let created = dbus_message_new_signal(path.rawValue, interface.rawValue, member.rawValue) else {
            throw Marshal.outOfMemory
        }
        let message = OwnedMessage(adopting: created)
        if let destination {
            guard dbus_message_set_destination(message.raw, destination.rawValue) != 0 else { throw Marshal.outOfMemory }
        }
        try Marshal.append(arguments, to: message.raw)
        return message
    }

    /// A method return for the call with `serial` from `destination`.
    static func methodReturn(
        replySerial: UInt32, destination: String?, arguments: [DBusValue]
    ) throws(DBusError) -> OwnedMessage {
        try DBusValue.validate(arguments: arguments)
        guard let created = dbus_message_new(CDBUS_MESSAGE_TYPE_METHOD_RETURN) else { throw Marshal.outOfMemory }
        let message = OwnedMessage(adopting: created)
        try message.address(replySerial: replySerial, destination: destination)
        try Marshal.append(arguments, to: message.raw)
        return message
    }

    /// An error reply for the call with `serial` from `destination`. An invalid `name`
    /// becomes `org.freedesktop.DBus.Error.Failed`; NULs are dropped from `text`.
    static func error(
        replySerial: UInt32, destination: String?, name: String, text: String
    ) throws(DBusError) -> OwnedMessage {
        let (name, text) = DBusError.replyFields(for: DBusError.remote(name: name, message: text))
        guard let created = dbus_message_new(CDBUS_MESSAGE_TYPE_ERROR) else { throw Marshal.outOfMemory }
        let message = OwnedMessage(adopting: created)
        guard dbus_message_set_error_name(message.raw, name) != 0 else { throw Marshal.outOfMemory }
        try message.address(replySerial: replySerial, destination: destination)
        try Marshal.append([.string(text)], to: message.raw)
        return message
    }

    private func address(replySerial: UInt32, destination: String?) throws(DBusError) {
        dbus_message_set_no_reply(raw, 1)
        guard dbus_message_set_reply_serial(raw, replySerial) != 0 else { throw Marshal.outOfMemory }
        if let destination {
            guard NameRules.isValidBusName(destination) else {
                throw .invalidArgument("invalid reply destination \(quoted(destination))")
            }
            guard dbus_message_set_destination(raw, destination) != 0 else { throw Marshal.outOfMemory }
        }
    }
}

/// Calls `body` with a C string for `s`, or NULL.
func withOptionalCString<R>(_ s: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    if let s { return s.withCString { body($0) } }
    return body(nil)
}
