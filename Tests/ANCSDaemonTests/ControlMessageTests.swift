@testable import ANCSDaemon
import ANCSSession
import ControlProtocol
import JSON
import Testing

/// The control protocol's replies and events as types: each written by the server reads back
/// as itself, the subscribe stream's lines (the formatter's) read as `ControlEvent`s written
/// back byte for byte, and what another version of ancsd might send reads as an error, never a
/// trap.
@Suite("Control messages")
struct ControlMessageTests {
    static let notification = ControlNotification(
        device: "AA:BB:CC:DD:EE:01", uid: 7, category: "social", categoryID: 4, categoryCount: 2,
        flags: ["positive_action", "negative_action"], preExisting: false, seenBefore: true, appID: "com.apple.MobileSMS",
        appName: "Messages", title: "Ada", subtitle: nil, message: "Tea at five? \"quoted\" \u{2028}", messageSize: 27,
        truncated: false, date: "2026-11-30T09:05:00", positiveAction: "Reply", negativeAction: nil, complete: true)

    static let status = ControlStatus(
        version: "0.1.0", uptimeSeconds: 812, bluetoothdRunning: true, adapters: ["hci0", "hci1"],
        accessory: ControlAccessoryStatus(shape: "keyboard", registeredOn: "hci0"),
        devices: [
            ControlPhoneStatus(
                device: "AA:BB:CC:DD:EE:01", name: "Ada's iPhone", connected: true, subscribed: true, delivery: "AcquireNotify",
                sessionAgeSeconds: 60, notifications: 4, events: 5, sharingAllowed: nil, resubscriptions: 1,
                sharedNotifySession: "Data Source", filtered: 2, heldBack: 3,
                filterMatches: [ControlFilterMatch(filter: "only-app com.apple.*", count: 3), ControlFilterMatch(filter: "ignore-category news", count: 0)],
                lastError: "ATT 0x0e"),
            ControlPhoneStatus(
                device: "AA:BB:CC:DD:EE:02", name: nil, connected: false, subscribed: false, delivery: nil, sessionAgeSeconds: 0,
                notifications: 0, events: 0, sharingAllowed: false, resubscriptions: 0, sharedNotifySession: nil, filtered: 0,
                heldBack: 0, filterMatches: [], lastError: nil),
        ],
        events: 9, sessions: 2,
        outputs: [
            ControlOutputStatus(name: "standard output", counters: [.init("written", .count(5)), .init("dropped", .count(0))]),
            ControlOutputStatus(name: "MQTT mqtt://host:1883", counters: [.init("connected", .state(false)), .init("queued", .count(3))]),
        ])

    /// Every answer, and an error of every code, with and without an `id`.
    static let replies: [(ControlCommand?, ControlReply)] = {
        let device = BluetoothAddressText("AA:BB:CC:DD:EE:01")!  // a constant of the test
        var replies: [(ControlCommand?, ControlReply)] = [
            (.status, ControlReply(id: 1, .success(.status(status)))),
            (.list(device: nil), ControlReply(id: "a", .success(.list([
                ControlPhone(device: "AA:BB:CC:DD:EE:01", name: "Ada's iPhone", notifications: [notification, notification]),
                ControlPhone(device: "AA:BB:CC:DD:EE:02", name: nil, notifications: []),
            ])))),
            (.list(device: device), ControlReply(id: nil, .success(.list([])))),
            (.get(device: device, uid: 7, full: true), ControlReply(id: [1, 2], .success(.notification(notification)))),
            (.action(device: device, uid: 7, action: .negative), ControlReply(id: 3, .success(.performed))),
            (.subscribe, ControlReply(id: 4, .success(.subscribed))),
        ]
        for code in ControlErrorCode.allCases {
            replies.append((.status, ControlReply(id: 5, .failure(ControlError(code, "why: \(code)", requestID: 5)))))
            replies.append((nil, ControlReply(id: nil, .failure(ControlError(code, "no id")))))
        }
        return replies
    }()

    @Test("every reply the server writes reads back as itself")
    func repliesRoundTrip() throws {
        for (command, reply) in Self.replies {
            let line = Array(JSONValue.object(reply.json).serialized.utf8)
            let read = ControlIncoming(line: line) { id in id == reply.id ? command : nil }
            #expect(read == .reply(reply), "\(String(decoding: line, as: UTF8.self))")
        }
    }

    /// `accessory`: the shape asked for, and `registered_on` null while it is registered nowhere;
    /// a reply without it, or with a shape that is not a string, reads as an error.
    @Test("status names the accessory shape and where it is registered")
    func statusAccessory() throws {
        var status = Self.status
        status.accessory = ControlAccessoryStatus(shape: "remote", registeredOn: nil)
        let json = ControlReply(id: nil, .success(.status(status))).json
        #expect(json["accessory"].map { JSONValue.object($0.objectValue ?? [:]).serialized } == #"{"shape":"remote","registered_on":null}"#)
        let line = Array(JSONValue.object(json).serialized.utf8)
        #expect(ControlIncoming(line: line) { _ in .status } == .reply(ControlReply(id: nil, .success(.status(status)))))
        var missing = json
        missing["accessory"] = nil
        var wrong = json
        wrong["accessory"] = ["shape": .int(1), "registered_on": .null]
        for broken in [missing, wrong] {
            let text = JSONValue.object(broken).serialized
            guard case .unreadable = ControlIncoming(line: Array(text.utf8), command: { _ in .status }) else {
                Issue.record("read: \(text)")
                continue
            }
        }
    }

    @Test("the members of each reply, in the order docs/control.md gives")
    func replyMembers() {
        #expect(JSONValue.object(ControlReply(id: 1, .success(.subscribed)).json).serialized == #"{"ok":true,"subscribed":true,"id":1}"#)
        #expect(JSONValue.object(ControlReply(id: nil, .success(.performed)).json).serialized == #"{"ok":true,"result":"performed"}"#)
        #expect(JSONValue.object(ControlReply(id: 2, .failure(ControlError(.noSuchDevice, "no connected phone X"))).json).serialized
            == #"{"ok":false,"error":{"code":"no_such_device","message":"no connected phone X"},"id":2}"#)
        let status = ControlReply(id: nil, .success(.status(Self.status))).json
        #expect(status.keys == ["ok", "version", "uptime_s", "bluetoothd", "adapters", "accessory", "devices", "counters", "outputs"])
        #expect(status["accessory"].map { JSONValue.object($0.objectValue ?? [:]).serialized } == #"{"shape":"keyboard","registered_on":"hci0"}"#)
        #expect(status["devices"]?.arrayValue?.first?.objectValue?.keys == [
            "device", "name", "connected", "subscribed", "delivery", "session_age_s", "notifications", "events", "sharing_allowed",
            "resubscriptions", "shared_notify_session", "filtered", "held_back", "filter_matches", "last_error",
        ])
        #expect(JSONValue.object(Self.status.outputs[1].json).serialized == #"{"name":"MQTT mqtt://host:1883","connected":false,"queued":3}"#)
    }

    @Test("every event line the daemon streams reads as a ControlEvent written back byte for byte")
    func eventsRoundTrip() throws {
        for event in VariedEvents.events {
            let line = EventFormatter.line(event, format: .json)
            let read = ControlIncoming(line: Array(line.utf8)) { _ in nil }
            guard case .event(let typed) = read else {
                Issue.record("not read as an event: \(read) from \(line)")
                continue
            }
            #expect(JSONValue.object(typed.json).serialized == line)
            #expect(try ControlEvent(decoding: typed.json) == typed)
        }
    }

    @Test("list and get show a notification as an added event's members without v and type")
    func notificationsAreTheEventsMembers() throws {
        for event in VariedEvents.events {
            guard case .notification(let change, let device, let seenBefore) = event else { continue }
            var expected = try #require(EventFormatter.json(event).objectValue)
            expected["v"] = nil
            expected["type"] = nil
            let typed = Daemon.notification(change.notification, device: device, seenBefore: seenBefore)
            #expect(typed.json == expected)
            #expect(try ControlNotification(decoding: typed.json) == typed)
        }
    }

    // MARK: Another version of ancsd

    @Test("a member missing or of another type in any reply reads as an error naming it, with the reply's id")
    func everyMemberMissingOrWrongIsAnError() throws {
        for (command, reply) in Self.replies {
            for variant in Self.variants(of: .object(reply.json)) {
                guard let object = variant.objectValue else { continue }
                let read = ControlIncoming(line: Array(variant.serialized.utf8)) { _ in command }
                switch read {
                case .reply(let again):
                    // A member the reader does not need (an error's id, a later daemon's), or
                    // one whose change still reads (an id, a string's text).
                    #expect(again.id == object["id"])
                case .unreadable(let error):
                    #expect(error.requestID == object["id"])
                    #expect(!error.message.isEmpty && "\(error)".contains("another version"))
                case .event:
                    #expect(object["ok"] == nil, "only a line without ok is an event")
                }
            }
        }
    }

    @Test("an event of another version or type, and lines that are no object, are unreadable")
    func otherEvents() {
        let lines = [
            #"{"v":2,"type":"added","device":"AA"}"#, #"{"v":1,"type":"teleported","device":"AA"}"#,
            #"{"v":1,"type":"sharing","device":"AA","state":"maybe"}"#, #"{"v":1,"type":"connected"}"#,
            #"{"ok":true,"id":99}"#, #"{"ok":false,"error":{"code":"on_fire","message":"m"},"id":1}"#, "[1]", "not json",
        ]
        for line in lines {
            guard case .unreadable(let error) = ControlIncoming(line: Array(line.utf8), command: { _ in nil }) else {
                Issue.record("read: \(line)")
                continue
            }
            #expect(!error.message.isEmpty, "\(line)")
        }
        let later = #"{"ok":true,"subscribed":true,"id":1,"since":"a later daemon's member"}"#
        #expect(ControlIncoming(line: Array(later.utf8)) { _ in .subscribe } == .reply(ControlReply(id: 1, .success(.subscribed))))
    }

    /// `value` with each member (at any depth) removed, and each replaced by a value of
    /// another type.
    static func variants(of value: JSONValue) -> [JSONValue] {
        switch value {
        case .object(let object):
            var out: [JSONValue] = []
            for (index, member) in object.members.enumerated() {
                var without = JSONObject()
                for (other, kept) in object.members.enumerated() where other != index { without.append(kept.key, kept.value) }
                out.append(.object(without))
                for replacement in [JSONValue.null, .string("x"), .int(-1), .bool(true), .array([]), .object([:])] + variants(of: member.value)
                where replacement != member.value {
                    var changed = object
                    changed[member.key] = replacement
                    out.append(.object(changed))
                }
            }
            return out
        case .array(let elements):
            return elements.indices.flatMap { index in
                variants(of: elements[index]).map { variant in
                    var changed = elements
                    changed[index] = variant
                    return .array(changed)
                }
            }
        default:
            return []
        }
    }
}
