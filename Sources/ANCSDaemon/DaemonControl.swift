public import ANCS
import ANCSSession
import BlueZ
import DBus
public import JSON

/// The daemon's answers on the control socket (docs/control.md).
extension Daemon: ControlHandler, PhoneActions {
    public func reply(to request: JSONObject, client: ControlServer.ClientID) async -> JSONObject {
        guard let command = request["cmd"]?.stringValue else {
            return Self.failure("bad_request", "a request needs \"cmd\" as a string")
        }
        switch command {
        case "status":
            var object = status()
            object.append("outputs", .array(await output.report()))
            return object
        case "list":
            guard let device = request["device"] else { return list(device: nil) }
            guard let text = device.stringValue, let address = normalizedAddress(text) else {
                return Self.failure("bad_request", "\"device\" must be a Bluetooth address such as AA:BB:CC:DD:EE:FF")
            }
            guard links.values.contains(where: { $0.device.address == address }) else {
                return Self.failure("no_such_device", "no connected phone \(address)")
            }
            return list(device: address)
        case "get":
            guard let (link, uid) = resolve(request) else { return lastResolveFailure(request) }
            return await get(uid, on: link, full: request["full"]?.boolValue ?? false)
        case "action":
            guard let (link, uid) = resolve(request) else { return lastResolveFailure(request) }
            guard let name = request["action"]?.stringValue, let action = ActionID.named(name) else {
                return Self.failure("bad_request", "\"action\" must be \"positive\" or \"negative\"")
            }
            return await perform(action, on: uid, link: link)
        case "subscribe":
            subscribe(client)
            return ["ok": true, "subscribed": true]
        default:
            return Self.failure("unknown_command", "unknown command \"\(command)\"")
        }
    }

    public func clientClosed(_ client: ControlServer.ClientID) async {
        output.detach(key: ControlSubscriber.key(client))
    }

    /// The `action` command's path, for outputs that take actions (`PhoneActions`).
    public func performAction(_ action: ActionID, uid: UInt32, device: String) async -> JSONObject {
        guard let address = normalizedAddress(device) else {
            return Self.failure("bad_request", "\"device\" must be a Bluetooth address such as AA:BB:CC:DD:EE:FF")
        }
        guard let link = links.values.first(where: { $0.device.address == address && $0.state == .running }) else {
            return Self.failure("no_such_device", "no connected phone \(address)")
        }
        return await perform(action, on: uid, link: link)
    }

    // MARK: Commands

    private func status() -> JSONObject {
        var object: JSONObject = ["ok": true]
        object.append("version", .string(Daemon.version))
        object.append("uptime_s", .int(Int((ContinuousClock.now - started).components.seconds)))
        object.append("bluetoothd", bluetoothdPresent ? "running" : "absent")
        object.append("adapters", .array(tree.adapters.map { .string($0.rawValue.split(separator: "/").last.map(String.init) ?? $0.rawValue) }))
        object.append("devices", .array(links.values.sorted { $0.device.address < $1.device.address }.map { link in
            var device: JSONObject = ["device": .string(link.device.address), "name": JSONValue(link.device.name)]
            device.append("connected", .bool(tree.device(at: link.device.path)?.connected ?? false))
            device.append("subscribed", .bool(link.state == .running))
            device.append("delivery", JSONValue(link.deliveryName))
            device.append("session_age_s", .int(Int(link.now.components.seconds)))
            device.append("notifications", .int(link.session.notificationCount))
            device.append("events", .int(link.notificationCount))
            device.append("sharing_allowed", JSONValue(link.session.notificationSharingAllowed))
            device.append("resubscriptions", .int(link.session.resubscriptions))
            device.append("shared_notify_session", JSONValue(link.sharedNotifySession))
            device.append("filtered", .int(link.session.filteredCount))
            device.append("held_back", .int(link.heldBack))
            var matches = JSONObject()
            for rule in link.session.filter.rules { matches.append(rule.description, .int(link.session.ruleMatches[rule] ?? 0)) }
            device.append("filter_matches", .object(matches))
            device.append("last_error", JSONValue(link.lastError))
            return .object(device)
        }))
        object.append("counters", ["events": .int(eventsEmitted), "sessions": .int(Int(nextLinkID))])
        return object
    }

    private func list(device: String?) -> JSONObject {
        let chosen = links.values.filter { device == nil || $0.device.address == device.flatMap(normalizedAddress) }
        return [
            "ok": true,
            "devices": .array(chosen.sorted { $0.device.address < $1.device.address }.map { link in
                [
                    "device": .string(link.device.address), "name": JSONValue(link.device.name),
                    "notifications": .array(link.session.notifications.map {
                        Self.json($0, device: link.device.address, seenBefore: link.gate.seenBefore[$0.uid] ?? false)
                    }),
                ]
            }),
        ]
    }

    private func get(_ uid: UInt32, on link: PhoneLink, full: Bool) async -> JSONObject {
        guard let notification = link.session.notification(uid: uid) else {
            return Self.failure("no_such_notification", "\(link.device.address) has no notification \(uid) in this session")
        }
        let seenBefore = link.gate.seenBefore[uid] ?? false
        guard full, notification.truncated == true else {
            return ["ok": true, "notification": Self.json(notification, device: link.device.address, seenBefore: seenBefore)]
        }
        let refreshed = await fetchFullMessage(uid, on: link) ?? notification
        return ["ok": true, "notification": Self.json(refreshed, device: link.device.address, seenBefore: seenBefore)]
    }

    private func perform(_ action: ActionID, on uid: UInt32, link: PhoneLink) async -> JSONObject {
        guard let notification = link.session.notification(uid: uid) else {
            return Self.failure("no_such_notification", "\(link.device.address) has no notification \(uid) in this session")
        }
        let flag: EventFlags = action == .positive ? .positiveAction : .negativeAction
        guard notification.flags.contains(flag) else {
            return Self.failure("not_available", "notification \(uid) offers no \(action) action")
        }
        switch await performAction(action, on: uid, link: link) {
        case .performed: return ["ok": true, "result": "performed"]
        case .notificationGone: return Self.failure("notification_gone", "the phone no longer has notification \(uid) (ATT 0xA2)")
        case .actionFailed: return Self.failure("action_failed", "the phone could not perform the action (ATT 0xA3)")
        case .failed(let why): return Self.failure("failed", why)
        }
    }

    // MARK: Helpers

    /// The link and UID a request names, if both exist.
    private func resolve(_ request: JSONObject) -> (PhoneLink, UInt32)? {
        guard let text = request["device"]?.stringValue, let address = normalizedAddress(text),
              let uid = request["uid"]?.integerValue.flatMap(UInt32.init(exactly:)),
              let link = links.values.first(where: { $0.device.address == address && $0.state == .running })
        else { return nil }
        return (link, uid)
    }

    private func lastResolveFailure(_ request: JSONObject) -> JSONObject {
        guard let text = request["device"]?.stringValue, let address = normalizedAddress(text) else {
            return Self.failure("bad_request", "\"device\" must be a Bluetooth address such as AA:BB:CC:DD:EE:FF")
        }
        guard request["uid"]?.integerValue.flatMap(UInt32.init(exactly:)) != nil else {
            return Self.failure("bad_request", "\"uid\" must be an integer from 0 to 4294967295 (written without a fraction or exponent)")
        }
        return Self.failure("no_such_device", "no connected phone \(address)")
    }

    static func failure(_ code: String, _ message: String) -> JSONObject {
        ["ok": false, "error": ["code": .string(code), "message": .string(message)]]
    }

    /// A notification as the control socket shows it: an event's fields without `v` and `type`.
    static func json(_ notification: PhoneNotification, device: String, seenBefore: Bool) -> JSONValue {
        let event = EventFormatter.json(.notification(NotificationEvent(kind: .added, notification: notification), device: device, seenBefore: seenBefore))
        var object = event.objectValue ?? [:]
        object["v"] = nil
        object["type"] = nil
        return .object(object)
    }
}

extension ActionID {
    /// `positive` or `negative`.
    static func named(_ name: String) -> ActionID? {
        switch name {
        case "positive": .positive
        case "negative": .negative
        default: nil
        }
    }
}
