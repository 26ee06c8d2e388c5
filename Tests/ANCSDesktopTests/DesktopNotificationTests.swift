import ANCSControl
import ANCSDesktop
import DBus
import JSON
import Testing

/// How `ancsd desktop` turns an event into `Notify` arguments.
struct DesktopNotificationTests {
    /// The notification of an event's members: those `text` gives, the others as a phone
    /// that sends nothing more leaves them.
    private func event(_ text: String) throws -> ControlNotification {
        var object = try #require(try JSONValue(parsing: text).objectValue)
        let defaults: JSONObject = [
            "category": "other", "category_id": 0, "category_count": 1, "flags": [], "pre_existing": false, "seen_before": false,
            "app_id": nil, "app_name": nil, "title": nil, "subtitle": nil, "message": nil, "message_size": nil, "truncated": nil,
            "date": nil, "positive_action": nil, "negative_action": nil, "complete": true,
        ]
        for (key, value) in defaults where object[key] == nil { object[key] = value }
        return try ControlNotification(decoding: object)
    }

    @Test func aMessageWithActions() throws {
        let n = DesktopNotification(try event("""
            {"v":1,"type":"added","device":"AA:BB:CC:DD:EE:01","uid":7,"category":"social","flags":["positive_action","negative_action"],
             "pre_existing":false,"app_id":"com.apple.MobileSMS","app_name":"Messages","title":"Ada","subtitle":"Tea",
             "message":"<b>&</b>","positive_action":"Reply","negative_action":"Clear"}
            """))
        let arguments = n.notifyArguments(replacesID: 5, markup: true)
        #expect(arguments.count == 8)
        #expect(arguments[0] == .string("Messages") && arguments[1] == .uint32(5))
        #expect(arguments[2] == .string("chat-message-new-symbolic"), "an icon for the category")
        #expect(arguments[3] == .string("Ada — Tea"))
        #expect(arguments[4] == .string("&lt;b>&amp;&lt;/b>"))
        #expect(arguments[5].stringArray == ["default", "Close", "positive", "Reply", "negative", "Clear"])
        let hints = try #require(arguments[6].stringKeyedDictionary)
        #expect(hints["urgency"] == .byte(1) && hints["category"] == .string("im") && hints["desktop-entry"] == .string("ancsd"))
        #expect(hints["x-ancsd-device"] == .string("AA:BB:CC:DD:EE:01") && hints["x-ancsd-uid"] == .uint32(7))
        #expect(hints["suppress-sound"] == nil)
        #expect(arguments[7] == .int32(-1))
        #expect(n.notifyArguments(replacesID: 0, markup: false)[4] == .string("<b>&</b>"), "no markup: as is")
    }

    @Test func fallbacksAndCategories() throws {
        let call = DesktopNotification(try event("""
            {"device":"AA:BB:CC:DD:EE:01","uid":1,"category":"incoming_call","flags":["silent","positive_action"],
             "app_id":"com.apple.mobilephone","app_name":"","title":null,"subtitle":null,"message":null,"positive_action":null}
            """))
        #expect(call.content.appName == "com.apple.mobilephone" && call.content.summary == "com.apple.mobilephone")
        #expect(call.content.urgency == 2 && call.content.category == "call.incoming" && call.content.quiet)
        #expect(call.content.actions.map(\.key) == ["positive"], "offered without a label: a default one")
        let bare = DesktopNotification(try event(#"{"device":"x","uid":2,"category":"news","app_id":null}"#))
        #expect(bare.content.appName == "iPhone" && bare.content.category == nil && bare.content.urgency == 1)
        #expect(bare.content.actions.isEmpty)
        #expect(throws: ControlDecodingError.self) { try event(#"{"device":"x","uid":-1}"#) }
        #expect(throws: ControlDecodingError.self) { try event(#"{"uid":1}"#) }
        let nul = DesktopNotification(try event(#"{"device":"x","uid":3,"title":"a\u0000b"}"#))
        #expect(nul.content.summary == "ab", "D-Bus strings cannot hold NUL")
    }

    @Test func contentEqualityIgnoresOnlyTheSound() throws {
        let live = DesktopNotification(try event(#"{"device":"x","uid":1,"title":"T","pre_existing":false}"#))
        let replayed = DesktopNotification(try event(#"{"device":"x","uid":9,"title":"T","pre_existing":true}"#))
        let other = DesktopNotification(try event(#"{"device":"x","uid":1,"title":"U"}"#))
        #expect(live.content == replayed.content && replayed.content.quiet)
        #expect(live.content != other.content)
    }

    @Test func aLoneActionIsNeverTheClick() throws {
        let mail = DesktopNotification(try event("""
            {"device":"x","uid":1,"category":"email","flags":["negative_action"],"app_name":"Mail","title":"Charles","negative_action":"Trash"}
            """))
        #expect(mail.serverActions == ["default", "Close", "negative", "Trash"], "dunst would make a lone action the click")
        #expect(mail.notifyArguments(replacesID: 0, markup: true)[2] == .string("mail-unread-symbolic"))
        let plain = DesktopNotification(try event(#"{"device":"x","uid":2,"category":"news","title":"T"}"#))
        #expect(plain.serverActions.isEmpty, "nothing to act on: no click action either")
        #expect(plain.content.icon == "application-rss+xml-symbolic")
    }

    @Test(arguments: [
        ("a < b > c & d", "a &lt; b > c &amp; d"),
        ("<b>&amp;</b>", "&lt;b>&amp;amp;&lt;/b>"),
        ("see https://example.com/?a=1&b=2 now", "see https://example.com/?a=1&b=2 now"),
        ("<https://x.org/a?b=1&c=2>", "&lt;https://x.org/a?b=1&c=2>"),
        ("www.example.com/?x&y and x&y", "www.example.com/?x&y and x&amp;y"),
        ("https://e.com/?q=&lt;x", "https://e.com/?q=&amp;lt;x"),
        ("mailto:a@b.org?subject=x&body=y", "mailto:a@b.org?subject=x&body=y"),
        ("xhttps://e.com/?a&b", "xhttps://e.com/?a&amp;b"),
        ("🍵 HTTPS://E.COM/?A&B 🍵 &", "🍵 HTTPS://E.COM/?A&B 🍵 &amp;"),
        ("", ""),
    ])
    func markupShowsTheTextAndKeepsLinksWhole(text: String, markup: String) {
        #expect(DesktopNotification.escapeMarkup(text) == markup)
    }
}
