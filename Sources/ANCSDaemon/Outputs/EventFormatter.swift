import ANCS
import ANCSRuntime
public import ANCSSession
public import JSON

/// What the daemon prints: notification events and connection changes of one phone.
public enum OutputEvent: Hashable, Sendable {
    /// `seenBefore`: a replayed notification whose content this phone showed before.
    case notification(NotificationEvent, device: String, seenBefore: Bool = false)
    case connected(device: String, name: String?)
    case disconnected(device: String, reason: String?)
    /// The phone stopped sharing its notifications (`allowed` false: it refuses the Control
    /// Point with ATT 0x03, "Share System Notifications" is off) or shares them again.
    case sharing(device: String, allowed: Bool)
    /// An event of another GATT service (AMS), with its own renderings.
    case service(ServiceOutput)
}

/// The two output formats of `ancsd run`.
public enum OutputFormat: String, Hashable, Sendable, CaseIterable {
    /// One readable line per event.
    case text
    /// JSON Lines, version 1 (docs/output.md).
    case json
}

/// Renders output events as lines (without the newline).
public enum EventFormatter {
    /// The version of the JSON output (`"v"`).
    public static let jsonVersion = 1

    /// The event as one line in `format` (no newline).
    public static func line(_ event: OutputEvent, format: OutputFormat) -> String {
        switch format {
        case .json: json(event).serialized
        case .text: text(event)
        }
    }

    /// The JSON object of an event (docs/output.md, schema in docs/output.schema.json).
    public static func json(_ event: OutputEvent) -> JSONValue {
        // Room for a notification's 21 members at once.
        var object = JSONObject(capacity: 21)
        object.append("v", .int(jsonVersion))
        switch event {
        case .connected(let device, let name):
            object.append("type", "connected")
            object.append("device", .string(device))
            object.append("name", JSONValue(name))
        case .disconnected(let device, let reason):
            object.append("type", "disconnected")
            object.append("device", .string(device))
            object.append("reason", JSONValue(reason))
        case .sharing(let device, let allowed):
            object.append("type", "sharing")
            object.append("device", .string(device))
            object.append("state", allowed ? "on" : "off")
        case .service(let output):
            object.append("type", .string(output.type))
            object.append("device", .string(output.device))
            for (key, value) in output.fields { object.append(key, value) }
        case .notification(let event, let device, let seenBefore):
            let n = event.notification
            object.append("type", .string(event.kind.rawValue))
            object.append("device", .string(device))
            object.append("uid", .int(Int(n.uid)))
            object.append("category", .string(n.category.name ?? "reserved"))
            object.append("category_id", .int(Int(n.category.rawValue)))
            object.append("category_count", .int(Int(n.categoryCount)))
            object.append("flags", .array(n.flags.names.map { .string($0) }))
            object.append("pre_existing", .bool(n.isPreExisting))
            object.append("seen_before", .bool(seenBefore))
            object.append("app_id", JSONValue(n.appIdentifier))
            object.append("app_name", JSONValue(n.appName))
            object.append("title", JSONValue(n.title))
            object.append("subtitle", JSONValue(n.subtitle))
            object.append("message", JSONValue(n.message))
            object.append("message_size", JSONValue(n.messageSize))
            object.append("truncated", JSONValue(n.truncated))
            object.append("date", JSONValue(n.date?.date?.iso8601))
            object.append("positive_action", JSONValue(n.positiveAction))
            object.append("negative_action", JSONValue(n.negativeAction))
            object.append("complete", .bool(n.attributesComplete))
        }
        return .object(object)
    }

    /// One readable line: `14:02:11 added  Messages · Ada: Tea at five?  [social, #7, AA:BB:…]`.
    public static func text(_ event: OutputEvent) -> String {
        switch event {
        case .connected(let device, let name):
            return "connected     \(device)" + (name.map { " (\(sanitize($0)))" } ?? "")
        case .disconnected(let device, let reason):
            return "disconnected  \(device)" + (reason.map { " (\(sanitize($0)))" } ?? "")
        case .sharing(let device, let allowed):
            return allowed
                ? "sharing on    \(device) (the phone shares its notifications again)"
                : "sharing off   \(device) (turn on Settings > Bluetooth > (i) > Share System Notifications on the phone)"
        case .service(let output):
            return output.type.padding(to: 14) + sanitize(output.text) + "  [" + output.device + "]"
        case .notification(let event, let device, let seenBefore):
            let n = event.notification
            let line = event.kind.rawValue.padding(to: 14) + summary(
                app: n.appName ?? n.appIdentifier ?? n.category.name ?? "notification", title: n.title,
                subtitle: n.subtitle, message: n.message, truncated: n.truncated)
            var tags = [n.category.name ?? "reserved", "#\(n.uid)"]
            if seenBefore { tags.append("seen before") } else if n.isPreExisting { tags.append("earlier") }
            let actions = actionLabels(n.positiveAction, n.negativeAction)
            if !actions.isEmpty { tags.append("actions: " + actions.joined(separator: "/")) }
            tags.append(device)
            return line + "  [" + tags.joined(separator: ", ") + "]"
        }
    }

    /// `App · Title — Subtitle: Message`, sanitized, with "…" after a message the phone cut short.
    public static func summary(app: String, title: String?, subtitle: String?, message: String?, truncated: Bool?) -> String {
        var line = sanitize(app)
        let heading = [title, subtitle].compactMap { $0.map(sanitize) }.filter { !$0.isEmpty }.joined(separator: " — ")
        if !heading.isEmpty { line += " · " + heading }
        if let message = message.map(sanitize), !message.isEmpty {
            line += ": " + message
            if truncated == true, !message.hasSuffix("…") { line += "…" }
        }
        return line
    }

    /// The labels of the actions a notification offers, sanitized, empty ones left out.
    public static func actionLabels(_ positive: String?, _ negative: String?) -> [String] {
        [positive, negative].compactMap { $0.map(sanitize) }.filter { !$0.isEmpty }
    }

    /// Text made safe for one terminal line (`TerminalText.sanitize`).
    public static func sanitize(_ text: String) -> String { TerminalText.sanitize(text) }
}

extension String {
    func padding(to width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
