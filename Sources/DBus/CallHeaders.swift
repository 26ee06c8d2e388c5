import CDBus
import Synchronization

/// The method calls a connection made recently, without arguments, each copied
/// (`dbus_message_copy`) to start the next call of the same method: every call is built this way,
/// and only where its header comes from differs from building it anew.
///
/// libdbus sets a header field by walking the fields already there with its type reader and
/// writing the new one behind them, so `dbus_message_new_method_call`'s destination, path,
/// interface and member cost about 10,000 instructions; a copy takes the header's bytes as they
/// are, with libdbus's index of where each field sits (made once, here, by reading a field),
/// which appending the arguments then uses instead of walking the fields again (callgrind, the
/// message of a Control Point write in `ancsd run`: 54,300 instructions built anew, 43,000 from
/// a copy).
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

    private struct Entry {
        let address: Address
        let header: OwnedMessage
    }

    private struct Recent {
        var entries: [Entry] = []
        /// The slot the next new address takes once `entries` is full.
        var nextSlot = 0
        /// The entry found last: looked at first, since a burst calls one method over and over.
        var lastFound = 0

        mutating func find(_ address: Address) -> Entry? {
            if lastFound < entries.count, entries[lastFound].address == address { return entries[lastFound] }
            guard let index = entries.firstIndex(where: { $0.address == address }) else { return nil }
            lastFound = index
            return entries[index]
        }
    }

    private let recent = Mutex(Recent())

    init() {}

    /// A new method call to `address`, unlocked and without arguments.
    func methodCall(to address: Address) throws(DBusError) -> OwnedMessage {
        let copy = recent.withLock { recent -> OpaquePointer? in
            recent.find(address).flatMap { dbus_message_copy($0.header.raw) }
        }
        if let copy { return OwnedMessage(adopting: copy) }
        let header = try Self.makeHeader(address)
        guard let copy = dbus_message_copy(header.raw) else { throw Marshal.outOfMemory }
        recent.withLock { recent in
            // Another thread may have added the same address meanwhile: two entries for it are
            // harmless (the first is found), and the slot is reused in turn.
            if recent.entries.count < Self.capacity {
                recent.entries.append(Entry(address: address, header: header))
            } else {
                recent.entries[recent.nextSlot] = Entry(address: address, header: header)
                recent.nextSlot = (recent.nextSlot + 1) % Self.capacity
            }
        }
        return OwnedMessage(adopting: copy)
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
