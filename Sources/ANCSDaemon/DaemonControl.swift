public import ANCS
import ANCSSession
import BlueZ
public import ControlProtocol
import DBus
public import JSON

/// The daemon's answers on the control socket (docs/control.md).
extension Daemon: ControlHandler, PhoneActions {
    public func reply(to request: ControlRequest, client: ControlServer.ClientID) async -> JSONObject {
        switch request.command {
        case .status:
            var object = status()
            object.append("outputs", .array(await output.report()))
            return object
        case .list(let device):
            guard let device else { return list(device: nil) }
            guard connectedLink(device) != nil else { return Self.failure("no_such_device", "no connected phone \(device)") }
            return list(device: device.description)
        case .get(let device, let uid, let full):
            guard let link = connectedLink(device) else { return Self.failure("no_such_device", "no connected phone \(device)") }
            return await get(uid, on: link, full: full)
        case .action(let device, let uid, let action):
            guard let link = connectedLink(device) else { return Self.failure("no_such_device", "no connected phone \(device)") }
            return await perform(action == .positive ? .positive : .negative, on: uid, link: link)
        case .subscribe:
            subscribe(client)
            return ["ok": true, "subscribed": true]
        }
    }

    /// The running link of the phone with this address.
    private func connectedLink(_ device: BluetoothAddressText) -> PhoneLink? {
        links.values.first { $0.device.address == device.description && $0.state == .running }
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
        let chosen = links.values.filter { device == nil || $0.device.address == device }
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
