public import ANCS

/// A notification as the session knows it: what the Notification Source told, and the
/// attributes fetched from the phone (nil when unknown).
public struct PhoneNotification: Hashable, Sendable {
    public var uid: UInt32
    public var flags: EventFlags
    public var category: CategoryID
    public var categoryCount: UInt8
    public var appIdentifier: String?
    public var appName: String?
    public var title: String?
    public var subtitle: String?
    public var message: String?
    public var messageSize: Int?
    /// True if the phone cut the message short (MessageSize exceeds what arrived).
    public var truncated: Bool?
    public var date: DateAttribute?
    public var positiveAction: String?
    public var negativeAction: String?
    /// False when the attributes could not (all) be fetched: the fields that are nil are unknown.
    public var attributesComplete: Bool

    public init(uid: UInt32, flags: EventFlags, category: CategoryID, categoryCount: UInt8) {
        self.uid = uid
        self.flags = flags
        self.category = category
        self.categoryCount = categoryCount
        attributesComplete = false
    }

    /// True if the phone had this notification before the session began.
    public var isPreExisting: Bool { flags.contains(.preExisting) }

    /// True if both say the same: every field but the category count and the pre-existing
    /// flag, which tell about the phone's other notifications and the session.
    public func sameContent(as other: PhoneNotification) -> Bool {
        var mine = self, theirs = other
        mine.flags.remove(.preExisting)
        theirs.flags.remove(.preExisting)
        mine.categoryCount = 0
        theirs.categoryCount = 0
        return mine == theirs
    }
}

/// What a session tells its owner about a notification.
public struct NotificationEvent: Hashable, Sendable {
    public enum Kind: String, Hashable, Sendable {
        case added, modified, removed
    }

    public var kind: Kind
    public var notification: PhoneNotification

    public init(kind: Kind, notification: PhoneNotification) {
        self.kind = kind
        self.notification = notification
    }
}

/// How a Control Point write ended, as the transport learned it.
public enum WriteResult: Hashable, Sendable {
    /// The phone acknowledged the write.
    case accepted
    /// The phone answered with an ATT error.
    case attError(ATTErrorCode)
    /// The write failed for another reason (link lost, BlueZ error); the text says why.
    case failed(String)
}

/// The outcome of a PerformNotificationAction the owner asked for.
public enum ActionOutcome: Hashable, Sendable {
    /// The phone accepted the action.
    case performed
    /// The phone no longer has the notification (ATT 0xA2).
    case notificationGone
    /// The phone could not perform the action (ATT 0xA3).
    case actionFailed
    /// The request could not be made or was refused otherwise; the text says why.
    case failed(String)
}

/// The severity of a session's message for the log (`SessionAction.log`); the daemon logs it at
/// the matching level of its logger.
public enum SessionLogLevel: Int, Comparable, Hashable, Sendable {
    case debug, info, warning, error

    public static func < (a: SessionLogLevel, b: SessionLogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// What the owner of a session must do after feeding it an input.
public enum SessionAction: Hashable, Sendable {
    /// Write these bytes to the Control Point (with response), then report the result.
    case writeControlPoint([UInt8])
    /// Show a notification event.
    case emit(NotificationEvent)
    /// Report the outcome of an action requested with `performAction`.
    case actionCompleted(uid: UInt32, action: ActionID, outcome: ActionOutcome)
    /// Log a message. Notification content only ever appears at `.debug`.
    case log(SessionLogLevel, String)
    /// Unsubscribe from the Notification Source and Data Source and subscribe again (Data Source
    /// first), so that the phone's CCCDs are written afresh; then call `resubscribed(now:)`. The
    /// text says why (the alive check went unanswered, no Notification Source traffic for long,
    /// notification sharing came back).
    case resubscribe(String)
    /// The phone stopped sharing notifications (`false`: two Control Point writes in a row were
    /// refused with ATT 0x03, Write Not Permitted) or shares them again (`true`: a write was
    /// accepted after such an episode). Once per change.
    case sharingChanged(allowed: Bool)
}
