// Every identifier of the ANCS specification as a small typed value.
//
// Each type wraps the raw byte from the wire, so a reserved value the phone sends is
// representable (and reported through `isReserved`) instead of crashing a decoder.
// `name` is the stable snake_case spelling used in JSON output; it is nil for reserved values.

/// A one-byte ANCS identifier with named constants and a stable snake_case name.
public protocol ANCSIdentifier: RawRepresentable, Hashable, Sendable, CustomStringConvertible
where RawValue == UInt8 {
    /// The snake_case name of a value the specification defines, or nil if it is reserved.
    var name: String? { get }
}

extension ANCSIdentifier {
    /// True if the specification reserves this value (it has no defined meaning).
    public var isReserved: Bool { name == nil }

    /// The name, or `reserved(0xNN)` for a reserved value.
    public var description: String { name ?? "reserved(\(hexByte(rawValue)))" }
}

/// What a Notification Source event reports (ANCS `EventID`).
public struct EventID: ANCSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `EventIDNotificationAdded` (0).
    public static let notificationAdded = EventID(rawValue: 0)
    /// `EventIDNotificationModified` (1).
    public static let notificationModified = EventID(rawValue: 1)
    /// `EventIDNotificationRemoved` (2).
    public static let notificationRemoved = EventID(rawValue: 2)

    public var name: String? {
        switch rawValue {
        case 0: "added"
        case 1: "modified"
        case 2: "removed"
        default: nil
        }
    }
}

/// The flags of a Notification Source event (ANCS `EventFlags`).
public struct EventFlags: OptionSet, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `EventFlagSilent` (bit 0).
    public static let silent = EventFlags(rawValue: 1 << 0)
    /// `EventFlagImportant` (bit 1).
    public static let important = EventFlags(rawValue: 1 << 1)
    /// `EventFlagPreExisting` (bit 2): the notification existed before this session.
    public static let preExisting = EventFlags(rawValue: 1 << 2)
    /// `EventFlagPositiveAction` (bit 3): a positive action can be performed.
    public static let positiveAction = EventFlags(rawValue: 1 << 3)
    /// `EventFlagNegativeAction` (bit 4): a negative action can be performed.
    public static let negativeAction = EventFlags(rawValue: 1 << 4)

    /// The defined flags, in bit order, with their snake_case names.
    public static let named: [(flag: EventFlags, name: String)] = [
        (.silent, "silent"), (.important, "important"), (.preExisting, "pre_existing"),
        (.positiveAction, "positive_action"), (.negativeAction, "negative_action"),
    ]

    /// The bits the specification reserves (5–7) that are set.
    public var reservedBits: UInt8 { rawValue & 0b1110_0000 }

    /// The names of the defined flags that are set, in bit order.
    public var names: [String] {
        var names: [String] = []  // one array, none when no flag is set
        for (flag, name) in Self.named where contains(flag) { names.append(name) }
        return names
    }

    public var description: String {
        var parts = names
        if reservedBits != 0 { parts.append("reserved(\(hexByte(reservedBits)))") }
        return "[" + parts.joined(separator: ", ") + "]"
    }
}

/// The category of a notification (ANCS `CategoryID`).
public struct CategoryID: ANCSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `CategoryIDOther` (0).
    public static let other = CategoryID(rawValue: 0)
    /// `CategoryIDIncomingCall` (1).
    public static let incomingCall = CategoryID(rawValue: 1)
    /// `CategoryIDMissedCall` (2).
    public static let missedCall = CategoryID(rawValue: 2)
    /// `CategoryIDVoicemail` (3).
    public static let voicemail = CategoryID(rawValue: 3)
    /// `CategoryIDSocial` (4).
    public static let social = CategoryID(rawValue: 4)
    /// `CategoryIDSchedule` (5).
    public static let schedule = CategoryID(rawValue: 5)
    /// `CategoryIDEmail` (6).
    public static let email = CategoryID(rawValue: 6)
    /// `CategoryIDNews` (7).
    public static let news = CategoryID(rawValue: 7)
    /// `CategoryIDHealthAndFitness` (8).
    public static let healthAndFitness = CategoryID(rawValue: 8)
    /// `CategoryIDBusinessAndFinance` (9).
    public static let businessAndFinance = CategoryID(rawValue: 9)
    /// `CategoryIDLocation` (10).
    public static let location = CategoryID(rawValue: 10)
    /// `CategoryIDEntertainment` (11).
    public static let entertainment = CategoryID(rawValue: 11)

    private static let names = [
        "other", "incoming_call", "missed_call", "voicemail", "social", "schedule", "email",
        "news", "health_and_fitness", "business_and_finance", "location", "entertainment",
    ]

    public var name: String? { Int(rawValue) < Self.names.count ? Self.names[Int(rawValue)] : nil }
}

/// A Control Point command (ANCS `CommandID`); a Data Source response echoes it.
public struct CommandID: ANCSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `CommandIDGetNotificationAttributes` (0).
    public static let getNotificationAttributes = CommandID(rawValue: 0)
    /// `CommandIDGetAppAttributes` (1).
    public static let getAppAttributes = CommandID(rawValue: 1)
    /// `CommandIDPerformNotificationAction` (2).
    public static let performNotificationAction = CommandID(rawValue: 2)

    public var name: String? {
        switch rawValue {
        case 0: "get_notification_attributes"
        case 1: "get_app_attributes"
        case 2: "perform_notification_action"
        default: nil
        }
    }
}

/// An attribute of a notification (ANCS `NotificationAttributeID`).
public struct NotificationAttributeID: ANCSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `NotificationAttributeIDAppIdentifier` (0).
    public static let appIdentifier = NotificationAttributeID(rawValue: 0)
    /// `NotificationAttributeIDTitle` (1); requests must give a max length.
    public static let title = NotificationAttributeID(rawValue: 1)
    /// `NotificationAttributeIDSubtitle` (2); requests must give a max length.
    public static let subtitle = NotificationAttributeID(rawValue: 2)
    /// `NotificationAttributeIDMessage` (3); requests must give a max length.
    public static let message = NotificationAttributeID(rawValue: 3)
    /// `NotificationAttributeIDMessageSize` (4): the full message size as a decimal string.
    public static let messageSize = NotificationAttributeID(rawValue: 4)
    /// `NotificationAttributeIDDate` (5): `yyyyMMdd'T'HHmmss`, the phone's local time.
    public static let date = NotificationAttributeID(rawValue: 5)
    /// `NotificationAttributeIDPositiveActionLabel` (6).
    public static let positiveActionLabel = NotificationAttributeID(rawValue: 6)
    /// `NotificationAttributeIDNegativeActionLabel` (7).
    public static let negativeActionLabel = NotificationAttributeID(rawValue: 7)

    /// Every attribute the specification defines, in ID order.
    public static let allDefined: [NotificationAttributeID] = (0...7).map { NotificationAttributeID(rawValue: $0) }

    private static let names = [
        "app_identifier", "title", "subtitle", "message", "message_size", "date",
        "positive_action_label", "negative_action_label",
    ]

    public var name: String? { Int(rawValue) < Self.names.count ? Self.names[Int(rawValue)] : nil }

    /// True for Title, Subtitle and Message: the attributes whose request carries a 2-byte max length.
    public var takesMaxLength: Bool { (1...3).contains(rawValue) }
}

/// An attribute of an app (ANCS `AppAttributeID`).
public struct AppAttributeID: ANCSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `AppAttributeIDDisplayName` (0).
    public static let displayName = AppAttributeID(rawValue: 0)

    public var name: String? { rawValue == 0 ? "display_name" : nil }
}

/// The action to perform on a notification (ANCS `ActionID`).
public struct ActionID: ANCSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `ActionIDPositive` (0).
    public static let positive = ActionID(rawValue: 0)
    /// `ActionIDNegative` (1).
    public static let negative = ActionID(rawValue: 1)

    public var name: String? {
        switch rawValue {
        case 0: "positive"
        case 1: "negative"
        default: nil
        }
    }
}

/// An ATT error code that the phone returns for a Control Point write.
///
/// ANCS defines 0xA0–0xA3; the generic ATT codes that matter to a consumer are named too.
public struct ATTErrorCode: ANCSIdentifier {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// ATT 0x03: the phone does not (yet) allow this accessory to use ANCS.
    public static let writeNotPermitted = ATTErrorCode(rawValue: 0x03)
    /// ATT 0x05: the link is not authenticated (not paired).
    public static let insufficientAuthentication = ATTErrorCode(rawValue: 0x05)
    /// ATT 0x0F: the link is not encrypted.
    public static let insufficientEncryption = ATTErrorCode(rawValue: 0x0F)
    /// ANCS 0xA0: the command ID was not recognized.
    public static let unknownCommand = ATTErrorCode(rawValue: 0xA0)
    /// ANCS 0xA1: the command was improperly formatted.
    public static let invalidCommand = ATTErrorCode(rawValue: 0xA1)
    /// ANCS 0xA2: a parameter does not refer to an existing object (often: the notification is gone).
    public static let invalidParameter = ATTErrorCode(rawValue: 0xA2)
    /// ANCS 0xA3: the action could not be performed.
    public static let actionFailed = ATTErrorCode(rawValue: 0xA3)

    public var name: String? {
        switch rawValue {
        case 0x03: "write_not_permitted"
        case 0x05: "insufficient_authentication"
        case 0x0F: "insufficient_encryption"
        case 0xA0: "unknown_command"
        case 0xA1: "invalid_command"
        case 0xA2: "invalid_parameter"
        case 0xA3: "action_failed"
        default: nil
        }
    }

    public var description: String { name ?? "att_error(\(hexByte(rawValue)))" }

    /// True for the four codes that ANCS itself defines (0xA0–0xA3).
    public var isANCSSpecific: Bool { (0xA0...0xA3).contains(rawValue) }
}

/// Renders a byte as `0xNN`.
func hexByte(_ byte: UInt8) -> String {
    let digits = Array("0123456789abcdef")
    return "0x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0x0F)])
}
