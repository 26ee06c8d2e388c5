public import DBus
public import JSON

/// One phone notification as `ancsd desktop` shows it through `org.freedesktop.Notifications`
/// (the Desktop Notifications Specification): built from an `added`/`modified` event or a
/// `list` entry (docs/output.md), turned into the arguments of `Notify`.
public struct DesktopNotification: Sendable, Equatable {
    /// The phone's Bluetooth address and the notification's UID on it.
    public var device: String
    public var uid: UInt32
    /// What the user sees; two notifications with equal content look the same.
    public var content: Content
    /// The phone replayed it and ancsd showed it before (`seen_before`): never popped up again.
    public var seenBefore: Bool

    public struct Content: Sendable, Equatable {
        /// The phone app's name, else its identifier, else "iPhone".
        public var appName: String
        /// The title, and " — subtitle" when there is one; the app name if both are empty.
        public var summary: String
        /// The message as the phone sent it (escaped only when sent, if the server takes markup).
        public var body: String
        /// The action buttons: ("positive", label) and ("negative", label) where offered.
        public var actions: [(key: String, label: String)]
        /// 2 (critical) for calls and voicemail, 1 (normal) otherwise.
        public var urgency: UInt8
        /// The specification's category, where one fits.
        public var category: String?
        /// The phone marked it silent, or replayed it on connecting (`pre_existing`).
        public var quiet: Bool

        /// Equal when they look the same: `quiet` only says whether showing it makes a sound.
        public static func == (a: Content, b: Content) -> Bool {
            a.appName == b.appName && a.summary == b.summary && a.body == b.body && a.urgency == b.urgency
                && a.category == b.category
                && a.actions.map(\.key) == b.actions.map(\.key) && a.actions.map(\.label) == b.actions.map(\.label)
        }
    }

    /// The notification an event or a `list` entry describes; nil without a device and UID.
    public init?(_ object: JSONObject) {
        guard let device = object["device"]?.stringValue,
              let uid = object["uid"]?.intValue.flatMap(UInt32.init(exactly:))
        else { return nil }
        self.device = device
        self.uid = uid
        seenBefore = object["seen_before"]?.boolValue ?? false
        func text(_ key: String) -> String {
            Self.clean(object[key]?.stringValue ?? "")
        }
        let appName = [text("app_name"), text("app_id")].first { !$0.isEmpty } ?? "iPhone"
        let title = text("title"), subtitle = text("subtitle")
        let summary = [title, subtitle].filter { !$0.isEmpty }.joined(separator: " — ")
        let flags = Set(object["flags"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        var actions: [(key: String, label: String)] = []
        if flags.contains("positive_action") {
            actions.append(("positive", [text("positive_action")].first { !$0.isEmpty } ?? "Accept"))
        }
        if flags.contains("negative_action") {
            actions.append(("negative", [text("negative_action")].first { !$0.isEmpty } ?? "Dismiss"))
        }
        let category = object["category"]?.stringValue ?? ""
        content = Content(
            appName: appName, summary: summary.isEmpty ? appName : summary, body: text("message"), actions: actions,
            urgency: Self.urgency(category), category: Self.specificationCategory(category),
            quiet: flags.contains("silent") || object["pre_existing"]?.boolValue == true)
    }

    /// `incoming_call`, `missed_call` and `voicemail` are critical; the rest normal.
    static func urgency(_ category: String) -> UInt8 {
        ["incoming_call", "missed_call", "voicemail"].contains(category) ? 2 : 1
    }

    /// The Desktop Notifications Specification's category for an ANCS category, where one fits.
    static func specificationCategory(_ category: String) -> String? {
        switch category {
        case "social": "im"
        case "email": "email"
        case "incoming_call": "call.incoming"
        case "missed_call": "call.unanswered"
        case "voicemail": "call"
        default: nil
        }
    }

    /// The arguments of `Notify(susssasa{sv}i)`: `replacesID` 0 for a new notification;
    /// `markup`: the server interprets the body as markup (its capabilities say
    /// `body-markup`), so `&`, `<` and `>` are escaped.
    public func notifyArguments(replacesID: UInt32, markup: Bool) -> [DBusValue] {
        var hints: [String: DBusValue] = [
            "urgency": .byte(content.urgency),
            "desktop-entry": .string("ancsd"),
            "x-ancsd-device": .string(device),
            "x-ancsd-uid": .uint32(uid),
        ]
        if let category = content.category { hints["category"] = .string(category) }
        if content.quiet { hints["suppress-sound"] = .bool(true) }
        return [
            .string(content.appName),
            .uint32(replacesID),
            .string(""),
            .string(content.summary),
            .string(markup ? Self.escapeMarkup(content.body) : content.body),
            .stringArray(content.actions.flatMap { [$0.key, $0.label] }),
            .variantDictionary(hints),
            .int32(-1),
        ]
    }

    /// `&`, `<` and `>` as entities, so the text shows as it is under body markup.
    public static func escapeMarkup(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    /// Text without NULs, which D-Bus strings cannot carry.
    static func clean(_ text: String) -> String {
        guard text.unicodeScalars.contains("\0") else { return text }
        var scalars = String.UnicodeScalarView()
        scalars.append(contentsOf: text.unicodeScalars.lazy.filter { $0 != "\0" })
        return String(scalars)
    }
}
