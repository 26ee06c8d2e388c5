import ANCS

/// The names `CaptureDecoder` writes, as JSON text made in advance: a defined identifier's name
/// (already quoted; none needs escaping) and the fixed start of an attribute's object, so the
/// decoder copies one static run instead of building and escaping a `String` per name. Each
/// gives nil for a reserved value, which the decoder writes the general way (its
/// `description`). `JSONNamesTests` checks every raw value against the general way.
enum JSONNames {
    /// `"added"`, `"modified"`, `"removed"`: `EventID.name`, quoted.
    static func event(_ id: EventID) -> StaticString? {
        switch id.rawValue {
        case 0: "\"added\""
        case 1: "\"modified\""
        case 2: "\"removed\""
        default: nil
        }
    }

    /// The name of bit `bit` (0–4) of `EventFlags`, quoted, in `EventFlags.named` order.
    static func flag(bit: Int) -> StaticString? {
        switch bit {
        case 0: "\"silent\""
        case 1: "\"important\""
        case 2: "\"pre_existing\""
        case 3: "\"positive_action\""
        case 4: "\"negative_action\""
        default: nil
        }
    }

    /// `CategoryID.name`, quoted.
    static func category(_ id: CategoryID) -> StaticString? {
        switch id.rawValue {
        case 0: "\"other\""
        case 1: "\"incoming_call\""
        case 2: "\"missed_call\""
        case 3: "\"voicemail\""
        case 4: "\"social\""
        case 5: "\"schedule\""
        case 6: "\"email\""
        case 7: "\"news\""
        case 8: "\"health_and_fitness\""
        case 9: "\"business_and_finance\""
        case 10: "\"location\""
        case 11: "\"entertainment\""
        default: nil
        }
    }

    /// `CommandID.name`, quoted.
    static func command(_ id: CommandID) -> StaticString? {
        switch id.rawValue {
        case 0: "\"get_notification_attributes\""
        case 1: "\"get_app_attributes\""
        case 2: "\"perform_notification_action\""
        default: nil
        }
    }

    /// `ActionID.name`, quoted.
    static func action(_ id: ActionID) -> StaticString? {
        switch id.rawValue {
        case 0: "\"positive\""
        case 1: "\"negative\""
        default: nil
        }
    }

    /// `ATTErrorCode.name`, quoted.
    static func attError(_ code: ATTErrorCode) -> StaticString? {
        switch code.rawValue {
        case 0x03: "\"write_not_permitted\""
        case 0x05: "\"insufficient_authentication\""
        case 0x0F: "\"insufficient_encryption\""
        case 0xA0: "\"unknown_command\""
        case 0xA1: "\"invalid_command\""
        case 0xA2: "\"invalid_parameter\""
        case 0xA3: "\"action_failed\""
        default: nil
        }
    }

    /// `{"id":N,"name":"NAME"` for a defined notification attribute (a request's entry).
    static func requestedNotificationAttribute(_ id: NotificationAttributeID) -> StaticString? {
        switch id.rawValue {
        case 0: "{\"id\":0,\"name\":\"app_identifier\""
        case 1: "{\"id\":1,\"name\":\"title\""
        case 2: "{\"id\":2,\"name\":\"subtitle\""
        case 3: "{\"id\":3,\"name\":\"message\""
        case 4: "{\"id\":4,\"name\":\"message_size\""
        case 5: "{\"id\":5,\"name\":\"date\""
        case 6: "{\"id\":6,\"name\":\"positive_action_label\""
        case 7: "{\"id\":7,\"name\":\"negative_action_label\""
        default: nil
        }
    }

    /// `{"id":N,"name":"NAME"` for a defined app attribute (a request's entry).
    static func requestedAppAttribute(_ id: AppAttributeID) -> StaticString? {
        id.rawValue == 0 ? "{\"id\":0,\"name\":\"display_name\"" : nil
    }

    /// `{"id":N,"name":"NAME","length":` for a defined notification attribute (a response's).
    static func notificationAttribute(_ id: NotificationAttributeID) -> StaticString? {
        switch id.rawValue {
        case 0: "{\"id\":0,\"name\":\"app_identifier\",\"length\":"
        case 1: "{\"id\":1,\"name\":\"title\",\"length\":"
        case 2: "{\"id\":2,\"name\":\"subtitle\",\"length\":"
        case 3: "{\"id\":3,\"name\":\"message\",\"length\":"
        case 4: "{\"id\":4,\"name\":\"message_size\",\"length\":"
        case 5: "{\"id\":5,\"name\":\"date\",\"length\":"
        case 6: "{\"id\":6,\"name\":\"positive_action_label\",\"length\":"
        case 7: "{\"id\":7,\"name\":\"negative_action_label\",\"length\":"
        default: nil
        }
    }

    /// `{"id":N,"name":"NAME","length":` for a defined app attribute (a response's).
    static func appAttribute(_ id: AppAttributeID) -> StaticString? {
        id.rawValue == 0 ? "{\"id\":0,\"name\":\"display_name\",\"length\":" : nil
    }
}
