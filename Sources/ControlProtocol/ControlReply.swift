public import JSON

/// What a command answers when it succeeds (docs/control.md, "Requests and replies").
public enum ControlAnswer: Sendable, Equatable {
    /// `status`: `{"ok": true, "version": …, …}`.
    case status(ControlStatus)
    /// `list`: `{"ok": true, "devices": [{"device", "name", "notifications"}]}`.
    case list([ControlPhone])
    /// `get`: `{"ok": true, "notification": {…}}`.
    case notification(ControlNotification)
    /// `action`: `{"ok": true, "result": "performed"}`.
    case performed
    /// `subscribe`: `{"ok": true, "subscribed": true}`; the events follow.
    case subscribed
    /// `media`: `{"ok": true, "players": [{"device", "player", "state", …}]}`.
    case media([ControlMedia])
    /// `media_command`: `{"ok": true, "result": "sent"}`: the phone acknowledged the command
    /// (it may still ignore one its player does not support at that moment).
    case sent

    /// The reply's members after `"ok": true`.
    func appendMembers(to object: inout JSONObject) {
        switch self {
        case .status(let status): status.appendMembers(to: &object)
        case .list(let phones): object.append("devices", .array(phones.map { .object($0.json) }))
        case .notification(let notification): object.append("notification", .object(notification.json))
        case .performed: object.append("result", "performed")
        case .subscribed: object.append("subscribed", true)
        case .media(let players): object.append("players", .array(players.map { .object($0.json) }))
        case .sent: object.append("result", "sent")
        }
    }

    /// The answer to `command` in a reply's object.
    init(_ fields: ControlFields, answering command: ControlCommand) throws(ControlDecodingError) {
        switch command {
        case .status:
            self = .status(try ControlStatus(fields))
        case .list:
            self = .list(try fields.objects("devices", "a phone of the list reply", ControlPhone.init))
        case .get:
            self = .notification(try ControlNotification(try fields.fields("notification", "the notification of the get reply")))
        case .action:
            let result = try fields.string("result")
            guard result == "performed" else { throw ControlDecodingError("the action reply's result is \"\(result)\", not performed") }
            self = .performed
        case .subscribe:
            guard try fields.bool("subscribed") else { throw ControlDecodingError("the subscribe reply says \"subscribed\": false") }
            self = .subscribed
        case .media:
            self = .media(try fields.objects("players", "a player of the media reply", ControlMedia.init))
        case .mediaCommand:
            let result = try fields.string("result")
            guard result == "sent" else { throw ControlDecodingError("the media_command reply's result is \"\(result)\", not sent") }
            self = .sent
        }
    }
}

/// One phone in the `list` reply: what it holds.
public struct ControlPhone: Sendable, Equatable {
    public var device: String
    public var name: String?
    /// In the order the phone sent them; replays held back by `--replays` included.
    public var notifications: [ControlNotification]

    public init(device: String, name: String?, notifications: [ControlNotification]) {
        self.device = device
        self.name = name
        self.notifications = notifications
    }

    public var json: JSONObject {
        ["device": .string(device), "name": JSONValue(name), "notifications": .array(notifications.map { .object($0.json) })]
    }

    init(_ fields: ControlFields) throws(ControlDecodingError) {
        device = try fields.string("device")
        name = try fields.optionalString("name")
        notifications = try fields.objects("notifications", "a notification of \(device)", ControlNotification.init)
    }
}

/// One reply line: the answer or the error, with the request's `id`.
public struct ControlReply: Sendable, Equatable {
    /// The request's `id`, echoed.
    public var id: JSONValue?
    public var result: Result<ControlAnswer, ControlError>

    public init(id: JSONValue?, _ result: Result<ControlAnswer, ControlError>) {
        self.id = id
        self.result = result
    }

    /// `{"ok": true, …fields, "id": …}` or `{"ok": false, "error": {"code", "message"}, "id": …}`:
    /// the `id` last, as the server adds it to the command's reply. (A request refused before it
    /// reached a command has its `id` first: `ControlError.reply`.)
    public var json: JSONObject {
        var object: JSONObject
        switch result {
        case .success(let answer):
            object = ["ok": true]
            answer.appendMembers(to: &object)
        case .failure(let error):
            object = error.reply(id: nil)
        }
        if let id { object.append("id", id) }
        return object
    }

    /// Reads a reply object. `command` is the request it answers, which gives an answer its
    /// shape; nil when the reply answers no request the client knows (then only an error is
    /// read). Members the client does not know (a later daemon's) are ignored.
    public init(decoding object: JSONObject, answering command: ControlCommand?) throws(ControlDecodingError) {
        id = object["id"]
        let fields = ControlFields(object, command.map { "the \($0.name) reply" } ?? "a reply")
        do throws(ControlDecodingError) {
            if try fields.bool("ok") {
                guard let command else { throw ControlDecodingError("a reply with \"ok\": true to no request this client sent") }
                result = .success(try ControlAnswer(fields, answering: command))
            } else {
                let error = try fields.fields("error", "the error of \(fields.place)")
                let text = try error.string("code")
                guard let code = ControlErrorCode(rawValue: text) else {
                    throw ControlDecodingError("an error of an unknown code \"\(text)\": \(try error.string("message"))")
                }
                result = .failure(ControlError(code, try error.string("message"), requestID: id))
            }
        } catch {
            var located = error
            located.requestID = id
            throw located
        }
    }
}

/// What a client reads from the socket: each line a reply or, after `subscribe`, an event.
public enum ControlIncoming: Sendable, Equatable {
    case reply(ControlReply)
    case event(ControlEvent)
    /// A line the client cannot read; it carries the reply's `id` when it had one.
    case unreadable(ControlDecodingError)

    /// Reads one line (without its newline): a reply when it has `"ok"`, else an event.
    /// `command` gives the request that the reply with this `id` (nil: without one) answers, if any.
    public init(line: [UInt8], command: (JSONValue?) -> ControlCommand?) {
        let object: JSONObject
        do {
            guard let read = try JSONValue(parsing: line).objectValue else {
                self = .unreadable(ControlDecodingError("a line that is not a JSON object"))
                return
            }
            object = read
        } catch {
            self = .unreadable(ControlDecodingError("a line that is not JSON: \(error)"))
            return
        }
        do throws(ControlDecodingError) {
            if object["ok"] != nil {
                self = .reply(try ControlReply(decoding: object, answering: command(object["id"])))
            } else {
                self = .event(try ControlEvent(decoding: object))
            }
        } catch {
            var unread = error
            unread.requestID = object["id"]
            self = .unreadable(unread)
        }
    }
}
