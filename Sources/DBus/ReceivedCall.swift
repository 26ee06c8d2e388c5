import CDBus
import Glibc

/// A method call as libdbus received it, for the handler of an `ExportedMethod.direct`
/// method: it reads the arguments it needs straight from the message instead of receiving
/// them all as `DBusValue`s. libdbus has parsed and checked the message, and the call's
/// signature is the method's input signature. Valid only while the handler runs.
public struct ReceivedCall {
    let message: OpaquePointer

    /// The caller's unique bus name (`:1.42`), set by the bus; empty on a peer connection.
    public var sender: String { dbus_message_get_sender(message).map { String(cString: $0) } ?? "" }

    /// The `ay` argument at `index`; nil if that argument is not an `ay`.
    public func byteArray(at index: Int) -> [UInt8]? {
        var iter = DBusMessageIter()
        guard moveTo(index, &iter), dbus_message_iter_get_arg_type(&iter) == CDBUS_TYPE_ARRAY,
              dbus_message_iter_get_element_type(&iter) == CDBUS_TYPE_BYTE
        else { return nil }
        var sub = DBusMessageIter()
        dbus_message_iter_recurse(&iter, &sub)
        var p: UnsafePointer<UInt8>? = nil
        var n: Int32 = 0
        dbus_message_iter_get_fixed_array(&sub, &p, &n)
        guard let p, n > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: p, count: Int(n)))
    }

    /// In the `a{sv}` argument at `index`: the value of the last entry named `key`, through
    /// any nested variants, if it is a string (`s`). Nil when the argument is not an `a{sv}`,
    /// no entry has that key, or the last one's value is of another type.
    public func stringOption(_ key: String, at index: Int) -> String? {
        var iter = DBusMessageIter()
        guard moveTo(index, &iter), dbus_message_iter_get_arg_type(&iter) == CDBUS_TYPE_ARRAY,
              dbus_message_iter_get_element_type(&iter) == CDBUS_TYPE_DICT_ENTRY
        else { return nil }
        var entries = DBusMessageIter()
        dbus_message_iter_recurse(&iter, &entries)
        var found: String?
        while dbus_message_iter_get_arg_type(&entries) == CDBUS_TYPE_DICT_ENTRY {
            var entry = DBusMessageIter()
            dbus_message_iter_recurse(&entries, &entry)
            if dbus_message_iter_get_arg_type(&entry) == CDBUS_TYPE_STRING, let name = Self.string(&entry),
               key.withCString({ strcmp($0, name) == 0 }) {
                dbus_message_iter_next(&entry)
                // Unwrap every variant around the value.
                var value = entry
                while dbus_message_iter_get_arg_type(&value) == CDBUS_TYPE_VARIANT {
                    var inner = DBusMessageIter()
                    dbus_message_iter_recurse(&value, &inner)
                    value = inner
                }
                found = dbus_message_iter_get_arg_type(&value) == CDBUS_TYPE_STRING
                    ? Self.string(&value).map { String(cString: $0) } : nil
            }
            dbus_message_iter_next(&entries)
        }
        return found
    }

    /// Points `iter` at argument `index`; false if there are not that many.
    private func moveTo(_ index: Int, _ iter: inout DBusMessageIter) -> Bool {
        guard index >= 0, dbus_message_iter_init(message, &iter) != 0 else { return false }
        for _ in 0..<index {
            guard dbus_message_iter_next(&iter) != 0 else { return false }
        }
        return true
    }

    /// The string at `iter` (pointing into the message).
    private static func string(_ iter: inout DBusMessageIter) -> UnsafePointer<CChar>? {
        var p: UnsafePointer<CChar>? = nil
        dbus_message_iter_get_basic(&iter, &p)
        return p
    }
}
