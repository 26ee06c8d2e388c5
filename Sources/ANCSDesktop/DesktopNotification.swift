public import ANCSControl
public import DBus

/// One phone notification as `ancsd desktop` shows it through `org.freedesktop.Notifications`
/// (the Desktop Notifications Specification): built from an `added`/`modified` event or a
/// `list` entry (`ControlNotification`), turned into the arguments of `Notify`.
public struct DesktopNotification: Sendable, Equatable {
    /// The phone's Bluetooth address and the notification's UID on it.
    public var device: String
    public var uid: UInt32
    /// What the user sees; two notifications with equal content look the same.
    public var content: Content
    /// The phone replayed it and ancsd showed it before (`seen_before`): never popped up again.
    public var seenBefore: Bool
    /// The phone replayed it on connecting (`pre_existing`) rather than just receiving it.
    public var preExisting: Bool
    /// The phone's date of the notification (`date`), "" if it sent none.
    public var date: String

    public struct Content: Sendable, Equatable {
        /// The phone app's name, else its identifier, else "iPhone".
        public var appName: String
        /// The title, and " — subtitle" when there is one; the app name if both are empty.
        public var summary: String
        /// The message as the phone sent it (escaped only when sent, if the server takes markup).
        public var body: String
        /// The phone's actions: ("positive", label) and ("negative", label) where offered.
        public var actions: [(key: String, label: String)]
        /// A name of the Icon Naming Specification for the ANCS category ("mail-unread", ...).
        public var icon: String
        /// 2 (critical) for calls and voicemail, 1 (normal) otherwise.
        public var urgency: UInt8
        /// The specification's category, where one fits.
        public var category: String?
        /// The phone marked it silent, or replayed it on connecting (`pre_existing`).
        public var quiet: Bool

        /// The summary after the phone app's name (`Messages · Ada`), for servers that show
        /// another name in place of the app's; the app name alone when that is the summary.
        public var summaryWithApp: String {
            summary == appName ? summary : appName + " · " + summary
        }

        /// Equal when they look the same: `quiet` only says whether showing it makes a sound.
        public static func == (a: Content, b: Content) -> Bool {
            a.appName == b.appName && a.summary == b.summary && a.body == b.body && a.urgency == b.urgency
                && a.category == b.category && a.icon == b.icon
                && a.actions.map(\.key) == b.actions.map(\.key) && a.actions.map(\.label) == b.actions.map(\.label)
        }
    }

    /// The notification an event or a `list` entry describes.
    public init(_ notification: ControlNotification) {
        device = notification.device
        uid = notification.uid
        seenBefore = notification.seenBefore
        preExisting = notification.preExisting
        date = notification.date ?? ""
        func text(_ value: String?) -> String {
            Self.clean(value ?? "")
        }
        let appName = [text(notification.appName), text(notification.appID)].first { !$0.isEmpty } ?? "iPhone"
        let title = text(notification.title), subtitle = text(notification.subtitle)
        let summary = [title, subtitle].filter { !$0.isEmpty }.joined(separator: " — ")
        let flags = Set(notification.flags)
        var actions: [(key: String, label: String)] = []
        if flags.contains("positive_action") {
            actions.append(("positive", [text(notification.positiveAction)].first { !$0.isEmpty } ?? "Accept"))
        }
        if flags.contains("negative_action") {
            actions.append(("negative", [text(notification.negativeAction)].first { !$0.isEmpty } ?? "Dismiss"))
        }
        let category = notification.category
        content = Content(
            appName: appName, summary: summary.isEmpty ? appName : summary, body: text(notification.message), actions: actions,
            icon: Self.icon(category), urgency: Self.urgency(category), category: Self.specificationCategory(category),
            quiet: flags.contains("silent") || preExisting)
    }

    /// The icon for an ANCS category, so the popup says at a glance what kind of news it is:
    /// symbolic names (Adwaita's, found in every size; servers that lack one fall back, or
    /// show none).
    static func icon(_ category: String) -> String {
        switch category {
        case "incoming_call": "call-incoming-symbolic"
        case "missed_call": "call-missed-symbolic"
        case "voicemail": "call-start-symbolic"
        case "social": "chat-message-new-symbolic"
        case "email": "mail-unread-symbolic"
        case "schedule": "appointment-soon-symbolic"
        case "news": "application-rss+xml-symbolic"
        case "location": "find-location-symbolic"
        default: "phone-apple-iphone-symbolic"
        }
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

    /// The key of the action a click on the popup itself invokes (the specification's).
    public static let defaultAction = "default"

    /// The actions offered to the server: the phone's, after a `default` one whenever there are
    /// any. A server such as dunst otherwise makes a lone action the click on the popup (its
    /// "do_action"), and the phone's lone actions are destructive (Mail's Trash, Calendar's
    /// Dismiss); `default` does nothing on the phone.
    public var serverActions: [String] {
        guard !content.actions.isEmpty else { return [] }
        return [Self.defaultAction, "Close"] + content.actions.flatMap { [$0.key, $0.label] }
    }

    /// The name of the desktop entry ancsd installs (`ancsd.desktop`), given as every
    /// notification's `desktop-entry` hint and the MPRIS players' `DesktopEntry`: GNOME Shell
    /// and KDE Plasma file the notifications under it, so a user can silence them in one place.
    public static let desktopEntry = "ancsd"

    /// Where the phone app's name goes, for a server that shows the desktop entry's name
    /// (`desktop-entry`) where the app name would be.
    public enum AppNamePlacement: Sendable, Equatable {
        /// The `app_name` argument only (dunst, and servers that show it).
        case argument
        /// Also leading the summary, `Messages · Ada` (GNOME Shell 43 shows no app name at all,
        /// 48 the entry's name).
        case summary
        /// Also in the hint `x-kde-display-appname`, which KDE Plasma shows in place of the
        /// entry's name (its capability of the same name).
        case kdeHint
    }

    /// The arguments of `Notify(susssasa{sv}i)`: `replacesID` 0 for a new notification;
    /// `markup`: the server interprets the body as markup (its capabilities say
    /// `body-markup`), so the body is escaped (`escapeMarkup`); `appName`: where the phone
    /// app's name goes besides `app_name`; `origin`: the phone's name, for a server that shows
    /// where a notification came from (`x-kde-origin-name`), else nil.
    public func notifyArguments(
        replacesID: UInt32, markup: Bool, appName: AppNamePlacement = .argument, origin: String? = nil
    ) -> [DBusValue] {
        var hints: [String: DBusValue] = [
            "urgency": .byte(content.urgency),
            "desktop-entry": .string(Self.desktopEntry),
            "x-ancsd-device": .string(device),
            "x-ancsd-uid": .uint32(uid),
        ]
        if let category = content.category { hints["category"] = .string(category) }
        if appName == .kdeHint { hints["x-kde-display-appname"] = .string(content.appName) }
        if let origin, !origin.isEmpty { hints["x-kde-origin-name"] = .string(origin) }
        if content.quiet { hints["suppress-sound"] = .bool(true) }
        return [
            .string(content.appName),
            .uint32(replacesID),
            .string(content.icon),
            .string(appName == .summary ? content.summaryWithApp : content.summary),
            .string(markup ? Self.escapeMarkup(content.body) : content.body),
            .stringArray(serverActions),
            .variantDictionary(hints),
            .int32(-1),
        ]
    }

    /// The text as body markup that shows it as it is: `<` as `&lt;` and `&` as `&amp;`,
    /// except an `&` inside a web address that starts no entity, which stays as it is (`>`
    /// needs no escaping in markup, and stays too).
    ///
    /// Servers find the addresses in the body they were sent, escapes included, and offer
    /// them as links (dunst's link menu, `dunstctl context`): `?a=1&amp;b=2` would be a broken
    /// link, and an escaped `>` would stick to the address before it. A lone `&` is not
    /// strict markup, but the servers that find links read it as text (dunst, GNOME Shell and
    /// KDE Plasma all escape an `&` that starts no entity before parsing).
    public static func escapeMarkup(_ text: String) -> String {
        let scalars = Array(text.unicodeScalars)
        var out = String.UnicodeScalarView()
        out.reserveCapacity(scalars.count)
        var index = 0
        var linkEnd = 0  // the end of the web address being copied, if any
        while index < scalars.count {
            if index >= linkEnd, let length = linkLength(scalars, at: index) { linkEnd = index + length }
            let scalar = scalars[index]
            switch scalar {
            case "<": out.append(contentsOf: "&lt;".unicodeScalars)
            case "&" where index >= linkEnd || startsEntity(scalars, at: index):
                out.append(contentsOf: "&amp;".unicodeScalars)
            default: out.append(scalar)
            }
            index += 1
        }
        return String(out)
    }

    /// The length of the web address that starts at `index` (at the start of a word, with
    /// `http://`, `https://`, `ftp://`, `mailto:` or `www.`), or nil.
    static func linkLength(_ scalars: [Unicode.Scalar], at index: Int) -> Int? {
        if index > 0, isWordCharacter(scalars[index - 1]) { return nil }
        guard let first = scalars[index].properties.lowercaseMapping.unicodeScalars.first,
              first == "h" || first == "f" || first == "m" || first == "w"
        else { return nil }
        let prefixes = ["https://", "http://", "ftp://", "ftps://", "mailto:", "www."]
        let head = String(String.UnicodeScalarView(scalars[index..<min(scalars.count, index + 8)])).lowercased()
        guard prefixes.contains(where: { head.hasPrefix($0) }) else { return nil }
        var end = index
        while end < scalars.count, isLinkCharacter(scalars[end]) { end += 1 }
        return end - index
    }

    /// What a web address is made of (as servers' link finders see it).
    static func isLinkCharacter(_ scalar: Unicode.Scalar) -> Bool {
        guard scalar.isASCII else { return false }
        if isWordCharacter(scalar) { return true }
        return "-@;/?:&=%$.+!*',~#()".unicodeScalars.contains(scalar)
    }

    static func isWordCharacter(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.isAlphabetic || scalar.properties.numericType != nil || scalar == "_"
    }

    /// Whether the `&` at `index` starts what markup reads as an entity (`&name;`, `&#123;`).
    static func startsEntity(_ scalars: [Unicode.Scalar], at index: Int) -> Bool {
        var end = index + 1
        while end < scalars.count, end - index <= 32, scalars[end].isASCII,
              scalars[end].properties.isAlphabetic || scalars[end].properties.numericType != nil || scalars[end] == "#" {
            end += 1
        }
        return end > index + 1 && end < scalars.count && scalars[end] == ";"
    }

    /// Text without NULs, which D-Bus strings cannot carry.
    static func clean(_ text: String) -> String {
        guard text.unicodeScalars.contains("\0") else { return text }
        var scalars = String.UnicodeScalarView()
        scalars.append(contentsOf: text.unicodeScalars.lazy.filter { $0 != "\0" })
        return String(scalars)
    }
}
