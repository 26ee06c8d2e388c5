import CDBus
import Synchronization

/// The method calls a connection made recently, each copied (`dbus_message_copy`) to start the
/// next call to the same method: every call is built this way, and only where it comes from
/// differs from building it anew.
///
/// libdbus sets a header field by walking the fields already there with its type reader and
/// writing the new one behind them, so `dbus_message_new_method_call`'s destination, path,
/// interface and member cost about 10,000 instructions; a copy takes the header's bytes as they
/// are, with libdbus's index of where each field sits (made once, here, by reading a field),
/// which appending the arguments then uses instead of walking the fields again (callgrind, the
/// message of a Control Point write in `ancsd run`: 54,300 instructions built anew, 43,000 from
/// a copy).
///
/// Appending the arguments is most of the rest: libdbus rewrites the header's signature field
/// after each top-level argument, walking every field again (a Control Point write's `ay` and
/// empty `a{sv}`: about 35,000 instructions). So the last call to each address is kept whole
/// too, and a call whose arguments differ from its arguments only in the bytes of top-level
/// byte arrays of the same lengths (the next Control Point request) is a copy of it with
/// those bytes written over (`Marshal.overwriteByteArrays`: about 2,000).
final class CallHeaders: Sendable {
    /// Where a call goes: what its header holds besides the flags, which are set on each copy.
    struct Address: Equatable {
        var destination: String?
        var path: String
        var interface: String?
        var member: String
    }

    /// How many addresses are kept, the oldest replaced first: a daemon calls a handful of
    /// methods (each phone's characteristics, the bus's own) over and over.
    static let capacity = 16
    /// The largest body kept whole (bytes, the bound `DBusValue.validate` gives): a call's
    /// arguments are small unless they carry data, which is not sent over and over.
    static let largestKeptBody = 1024

    private struct Entry {
        let address: Address
        let header: OwnedMessage
        /// The last call to the address whose arguments could be kept (no descriptor, a small
        /// body), whole and unsent, with those arguments.
        var lastCall: (arguments: [DBusValue], message: OwnedMessage)?
    }

    private struct Recent {
        var entries: [Entry] = []
        /// The slot the next new address takes once `entries` is full.
        var nextSlot = 0
        /// The entry found last: looked at first, since a burst calls one method over and over.
        var lastFound = 0

        mutating func find(_ address: Address) -> Int? {
            if lastFound < entries.count, entries[lastFound].address == address { return lastFound }
            guard let index = entries.firstIndex(where: { $0.address == address }) else { return nil }
            lastFound = index
            return index
        }
    }

    private let recent = Mutex(Recent())

    init() {}

    /// A new method call to `address` with `arguments` (validated already; `bodySize` the bound
    /// `DBusValue.validate(arguments:)` gave), unlocked, its flags the defaults.
    func methodCall(to address: Address, arguments: [DBusValue], bodySize: Int) throws(DBusError) -> OwnedMessage {
        enum Start {
            case lastCall(OpaquePointer)
            case header(OpaquePointer)
            case nothing
        }
        let start = recent.withLock { recent -> Start in
            guard let index = recent.find(address) else { return .nothing }
            let entry = recent.entries[index]
            if let lastCall = entry.lastCall, Self.differOnlyInByteArrays(lastCall.arguments, arguments),
               let copy = dbus_message_copy(lastCall.message.raw) {
                return .lastCall(copy)
            }
            return dbus_message_copy(entry.header.raw).map { .header($0) } ?? .nothing
        }
        if case .lastCall(let copy) = start {
            let message = OwnedMessage(adopting: copy)
            if Marshal.overwriteByteArrays(arguments, in: copy) { return message }
        }
        let message: OwnedMessage
        if case .header(let copy) = start {
            message = OwnedMessage(adopting: copy)
        } else {
            message = try header(for: address)
        }
        try Marshal.append(arguments, to: message.raw)
        if bodySize <= Self.largestKeptBody, !arguments.contains(where: \.holdsUnixFD) {
            try keep(message, of: arguments, to: address)
        }
        return message
    }

    /// True if `new` is `old` but for the bytes of top-level byte arrays, of the same lengths.
    private static func differOnlyInByteArrays(_ old: [DBusValue], _ new: [DBusValue]) -> Bool {
        guard old.count == new.count else { return false }
        for (was, now) in zip(old, new) {
            if case .byteArray(let oldBytes) = was, case .byteArray(let newBytes) = now {
                guard oldBytes.count == newBytes.count else { return false }
            } else if was != now {
                return false
            }
        }
        return true
    }

    /// A copy of the header kept for `address`, made and kept first if there is none.
    private func header(for address: Address) throws(DBusError) -> OwnedMessage {
        let kept = recent.withLock { recent -> OpaquePointer? in
            recent.find(address).flatMap { dbus_message_copy(recent.entries[$0].header.raw) }
        }
        if let kept { return OwnedMessage(adopting: kept) }
        let header = try Self.makeHeader(address)
        guard let copy = dbus_message_copy(header.raw) else { throw Marshal.outOfMemory }
        recent.withLock { recent in
            // Another thread may have added the same address meanwhile: two entries for it are
            // harmless (the first is found), and the slot is reused in turn.
            let entry = Entry(address: address, header: header)
            if recent.entries.count < Self.capacity {
                recent.entries.append(entry)
            } else {
                recent.entries[recent.nextSlot] = entry
                recent.nextSlot = (recent.nextSlot + 1) % Self.capacity
            }
        }
        return OwnedMessage(adopting: copy)
    }

    /// Keeps a copy of `message`, just built from `arguments`, as the last call to `address`.
    private func keep(_ message: OwnedMessage, of arguments: [DBusValue], to address: Address) throws(DBusError) {
        guard let copy = dbus_message_copy(message.raw) else { throw Marshal.outOfMemory }
        // Setting the signature forgot libdbus's index of the fields; reading one makes it
        // again, and the copies inherit it.
        _ = dbus_message_get_signature(copy)
        let kept = OwnedMessage(adopting: copy)
        recent.withLock { recent in
            guard let index = recent.find(address) else { return }
            recent.entries[index].lastCall = (arguments, kept)
        }
    }

    /// The header of a call to `address`, made by libdbus, with its fields indexed.
    private static func makeHeader(_ address: Address) throws(DBusError) -> OwnedMessage {
        let created = withOptionalCString(address.destination) { destination in
            withOptionalCString(address.interface) { interface in
                dbus_message_new_method_call(destination, address.path, interface, address.member)
            }
        }
        guard let created else { throw Marshal.outOfMemory }
        // Reading a field makes libdbus index the fields (setting one forgets the index); the
        // copies inherit the index.
        _ = dbus_message_get_signature(created)
        return OwnedMessage(adopting: created)
    }
}
