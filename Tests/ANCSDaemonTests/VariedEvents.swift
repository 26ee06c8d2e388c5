import ANCS
import ANCSDaemon
import ANCSSession

/// Many different output events for comparing a fast path with the general one it stands
/// beside: every category (and reserved ones), flag combinations, each attribute missing or
/// present, empty strings, non-ASCII text, control characters, quotes and backslashes, U+2028,
/// and dates empty, malformed and valid.
enum VariedEvents {
    static let texts: [String?] = [
        nil, "", "Ada", "Tea at five?", "\"quoted\" \\ back\\slash", "line\nbreak\r\ttab\u{7}\u{1B}[2J\u{0}",
        "Grüße aus Köln — ½ “quotes”", "日本語のメッセージ", "👍🏽 family: 👨‍👩‍👧", "\u{202E}bidi\u{202C} \u{2028}sep\u{2029}",
        "DEL\u{7F} C1\u{85}\u{9F}", String(repeating: "long text ", count: 40), "…", "trailing …",
    ]

    static let dates: [DateAttribute?] = [
        nil, .empty, .malformed("20141028"), .malformed("garbage\u{FFFD}\n"), .malformed(""),
        .valid(ANCSDate(year: 2026, month: 11, day: 30, hour: 9, minute: 5, second: 0)),
        .valid(ANCSDate(year: 1, month: 1, day: 1, hour: 0, minute: 0, second: 60)),
        .valid(ANCSDate(year: 9999, month: 12, day: 31, hour: 23, minute: 59, second: 59)),
        .valid(ANCSDate(year: 12345, month: 123, day: -4, hour: 7, minute: 8, second: 9)),
    ]

    /// The notifications: a deterministic walk through the combinations.
    static var notifications: [PhoneNotification] {
        var result: [PhoneNotification] = []
        var seed: UInt64 = 0x2545_F491_4F6C_DD1D
        func next(_ bound: Int) -> Int {
            seed ^= seed << 13
            seed ^= seed >> 7
            seed ^= seed << 17
            return Int(seed % UInt64(bound))
        }
        for index in 0..<600 {
            let category = CategoryID(rawValue: UInt8(index % 14 == 13 ? 200 : index % 14))
            var n = PhoneNotification(
                uid: index % 7 == 0 ? UInt32.max - UInt32(index) : UInt32(index),
                flags: EventFlags(rawValue: UInt8(truncatingIfNeeded: index &* 37)), category: category,
                categoryCount: UInt8(truncatingIfNeeded: index &* 11))
            n.appIdentifier = texts[next(texts.count)]
            n.appName = texts[next(texts.count)]
            n.title = texts[next(texts.count)]
            n.subtitle = texts[next(texts.count)]
            n.message = texts[next(texts.count)]
            n.messageSize = [nil, 0, 7, 4096, 999_999_999][next(5)]
            n.truncated = [nil, true, false][next(3)]
            n.date = dates[next(dates.count)]
            n.positiveAction = texts[next(texts.count)]
            n.negativeAction = texts[next(texts.count)]
            n.attributesComplete = next(4) != 0
            result.append(n)
        }
        return result
    }

    static var events: [OutputEvent] {
        var result: [OutputEvent] = []
        let kinds: [NotificationEvent.Kind] = [.added, .modified, .removed]
        for (index, n) in notifications.enumerated() {
            let device = index % 5 == 0 ? "AA:BB:CC:DD:EE:FF" : texts[index % texts.count] ?? "11:22:33:44:55:66"
            result.append(.notification(NotificationEvent(kind: kinds[index % 3], notification: n), device: device, seenBefore: index % 4 == 1))
        }
        for text in texts {
            result.append(.connected(device: text ?? "AA", name: text))
            result.append(.disconnected(device: text ?? "AA", reason: text))
            result.append(.sharing(device: text ?? "AA", allowed: text == nil))
        }
        return result
    }
}
