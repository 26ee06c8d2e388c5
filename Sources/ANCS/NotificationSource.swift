/// One Notification Source value: the phone telling that a notification was added,
/// modified or removed. Reserved IDs and flags are kept as they came.
public struct NotificationSourceEvent: Hashable, Sendable {
    /// The size of every Notification Source value.
    public static let size = 8

    public var eventID: EventID
    public var flags: EventFlags
    public var categoryID: CategoryID
    /// How many active notifications the phone has in this category.
    public var categoryCount: UInt8
    /// The notification's identifier, valid only within the current session.
    public var notificationUID: UInt32

    public init(
        eventID: EventID, flags: EventFlags, categoryID: CategoryID, categoryCount: UInt8,
        notificationUID: UInt32
    ) {
        self.eventID = eventID
        self.flags = flags
        self.categoryID = categoryID
        self.categoryCount = categoryCount
        self.notificationUID = notificationUID
    }

    /// Decodes a Notification Source value, which must be exactly 8 bytes. (The array form is
    /// compiled here, in this module, so callers elsewhere get specialized code.)
    public init(decoding value: [UInt8]) throws(NotificationSourceError) {
        try self.init(decodingCollection: value)
    }

    /// Decodes a Notification Source value, which must be exactly 8 bytes, from a buffer
    /// (compiled here as well, for the same reason).
    public init(decoding value: UnsafeBufferPointer<UInt8>) throws(NotificationSourceError) {
        try self.init(decodingCollection: value)
    }

    /// Decodes a Notification Source value, which must be exactly 8 bytes.
    public init(decoding value: some Collection<UInt8>) throws(NotificationSourceError) {
        try self.init(decodingCollection: value)
    }

    private init(decodingCollection value: some Collection<UInt8>) throws(NotificationSourceError) {
        guard value.count == Self.size else { throw .wrongLength(value.count) }
        var reader = value.makeIterator()
        func next() -> UInt8 { reader.next() ?? 0 }  // count checked above
        eventID = EventID(rawValue: next())
        flags = EventFlags(rawValue: next())
        categoryID = CategoryID(rawValue: next())
        categoryCount = next()
        var uid: UInt32 = 0
        for shift in stride(from: 0, to: 32, by: 8) { uid |= UInt32(next()) << UInt32(shift) }
        notificationUID = uid
    }

    /// The 8 bytes of this value as the phone sends them.
    public var encoded: [UInt8] {
        // One array, not three (the simulator encodes one per notification sent).
        [eventID.rawValue, flags.rawValue, categoryID.rawValue, categoryCount,
         UInt8(truncatingIfNeeded: notificationUID), UInt8(truncatingIfNeeded: notificationUID >> 8),
         UInt8(truncatingIfNeeded: notificationUID >> 16), UInt8(truncatingIfNeeded: notificationUID >> 24)]
    }

    /// The fields that hold values the specification reserves, by name; empty for a clean event.
    public var reservedFields: [String] {
        var fields: [String] = []
        if eventID.isReserved { fields.append("event_id") }
        if flags.reservedBits != 0 { fields.append("event_flags") }
        if categoryID.isReserved { fields.append("category_id") }
        return fields
    }
}

/// Why a Notification Source value could not be decoded.
public enum NotificationSourceError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The value was not 8 bytes long; the associated value is its length.
    case wrongLength(Int)

    /// A stable snake_case code for machine-readable output.
    public var code: String { "wrong_length" }

    public var description: String {
        switch self {
        case .wrongLength(let length):
            "a Notification Source value is 8 bytes, this one has \(length)"
        }
    }
}

/// Appends the 4 bytes of a 32-bit value, least significant first.
func appendLittleEndian(_ value: UInt32, to bytes: inout [UInt8]) {
    for shift in stride(from: 0, to: 32, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
}
