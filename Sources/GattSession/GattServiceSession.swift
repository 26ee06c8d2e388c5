/// The seam between a phone's link and the GATT services spoken over it.
///
/// A service (ANCS, AMS) is a pure state machine: the link gives it the values the phone
/// notified, the results of the requests it asked for and the time; it answers with actions.
/// The link owns everything else: the subscriptions (in the order the description lists the
/// notifying characteristics), the sockets, the writes and reads, one timer per service (armed
/// for `nextDeadline`), and the rule of one request in flight per service: a session asks for
/// its next request only after `handleResult` told it how the last one ended.

/// A characteristic's UUID, lower case, in the 36-character form (`9fbf120d-6301-…`).
public struct CharacteristicUUID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: String

    /// `uuid` in any case; it is stored lower-cased.
    public init(_ uuid: String) { rawValue = uuid.lowercased() }

    public var description: String { rawValue }
    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// What the link must find on the phone and subscribe to for one service.
public struct GattServiceDescription: Sendable {
    /// One characteristic of the service.
    public struct Characteristic: Sendable {
        public var uuid: CharacteristicUUID
        /// The link subscribes to its notifications (in the order of `characteristics`).
        public var notifies: Bool
        /// The service does not start without it. A phone may offer an optional one later,
        /// or never: the session is told which it got (`subscribed(to:now:)`).
        public var required: Bool
        /// A short name for logs and `status` ("Notification Source").
        public var name: String

        public init(_ uuid: String, name: String, notifies: Bool, required: Bool) {
            self.uuid = CharacteristicUUID(uuid)
            self.name = name
            self.notifies = notifies
            self.required = required
        }
    }

    /// A short name: "ANCS", "AMS".
    public var name: String
    /// The service's UUID, lower case.
    public var uuid: CharacteristicUUID
    public var characteristics: [Characteristic]

    public init(name: String, uuid: String, characteristics: [Characteristic]) {
        self.name = name
        self.uuid = CharacteristicUUID(uuid)
        self.characteristics = characteristics
    }

    /// The characteristic with this UUID, if the service has one.
    public func characteristic(_ uuid: CharacteristicUUID) -> Characteristic? {
        characteristics.first { $0.uuid == uuid }
    }
}

/// A request a session asks its link to make.
public enum GattRequest: Hashable, Sendable {
    /// A write with response (`WriteValue` with `type: request`).
    case write(CharacteristicUUID, [UInt8])
    /// A read of the whole value (BlueZ reads a long value with Read Blob requests).
    case read(CharacteristicUUID)
}

/// How a request ended, as the link learned it.
public enum GattResult: Hashable, Sendable {
    /// The phone acknowledged the write.
    case written
    /// The value the read returned.
    case read([UInt8])
    /// The phone answered with an ATT error (the code).
    case attError(UInt8)
    /// The request failed for another reason (link lost, BlueZ error); the text says why.
    case failed(String)
}

/// How loud a session's log message is. Content (a title, a message) only ever at `.debug`.
public enum ServiceLogLevel: Int, Comparable, Hashable, Sendable {
    case debug, info, warning, error

    public static func < (a: ServiceLogLevel, b: ServiceLogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// What a session's link must do after feeding it an input.
public enum GattSessionAction<Event: Sendable>: Sendable {
    /// Make this request, then report how it ended with `handleResult`.
    case request(GattRequest)
    /// Hand this event to the service's owner (the daemon turns it into output).
    case emit(Event)
    /// Log a message.
    case log(ServiceLogLevel, String)
    /// Unsubscribe from the service's notifying characteristics and subscribe again, so the
    /// phone's CCCDs are written afresh; then call `subscribed(to:now:)` again. The text says why.
    case resubscribe(String)
}

/// One GATT service's conversation with one phone, as a pure state machine: no I/O, no clock
/// of its own (`now` is the link's time since it started, on the daemon's loop).
public protocol GattServiceSession: Sendable {
    /// What the session hands its owner: notifications, media state, outcomes.
    associatedtype Event: Sendable

    /// The service's UUID and characteristics.
    static var service: GattServiceDescription { get }

    /// When `handleTimer(now:)` must be called next; nil when nothing waits.
    var nextDeadline: Duration? { get }

    /// The link subscribed to the notifying characteristics in `characteristics` (which also
    /// lists the others the phone offers): the session may start asking.
    mutating func subscribed(to characteristics: Set<CharacteristicUUID>, now: Duration) -> [GattSessionAction<Event>]

    /// The phone notified `value` on `characteristic`.
    mutating func handleNotification(_ value: [UInt8], from characteristic: CharacteristicUUID, now: Duration)
        -> [GattSessionAction<Event>]

    /// The latest request ended. (A session that lets a request go out before the previous
    /// one's result came is told only the latest's: the earlier results are dropped.)
    mutating func handleResult(_ result: GattResult, now: Duration) -> [GattSessionAction<Event>]

    /// The link is dropping the subscriptions to renew them (after `.resubscribe`): requests in
    /// flight are forgotten, and `subscribed(to:now:)` follows once the subscriptions are back.
    mutating func renewing(now: Duration) -> [GattSessionAction<Event>]

    /// `nextDeadline` has passed.
    mutating func handleTimer(now: Duration) -> [GattSessionAction<Event>]
}

extension GattServiceSession {
    /// Nothing to do before a renewal: the session starts again at `subscribed(to:now:)`.
    public mutating func renewing(now: Duration) -> [GattSessionAction<Event>] { [] }
}
