public import ANCS
import ANCSSession
import BlueZ
public import ControlProtocol
import DBus
import LinkMachine
public import JSON

/// The daemon's answers on the control socket (docs/control.md).
extension Daemon: ControlHandler, PhoneActions {
    public func reply(to request: ControlRequest, client: ControlServer.ClientID) async -> Result<ControlAnswer, ControlError> {
        switch request.command {
        case .status:
            return .success(.status(await status()))
        case .list(let device):
            guard let device else { return .success(list(device: nil)) }
            guard connectedLink(device) != nil else { return .failure(Self.noSuchDevice(device.description)) }
            return .success(list(device: device.description))
        case .get(let device, let uid, let full):
            guard let link = connectedLink(device) else { return .failure(Self.noSuchDevice(device.description)) }
            return await get(uid, on: link, full: full)
        case .action(let device, let uid, let action):
            guard let link = connectedLink(device) else { return .failure(Self.noSuchDevice(device.description)) }
            return await perform(action == .positive ? .positive : .negative, on: uid, link: link)
        case .subscribe:
            subscribe(client)
            return .success(.subscribed)
        case .media(let device):
            if let device, connectedLink(device) == nil { return .failure(Self.noSuchDevice(device.description)) }
            return .success(.media(mediaPlayers(device: device?.description)))
        case .mediaCommand(let device, let command):
            guard let link = connectedLink(device) else { return .failure(Self.noSuchDevice(device.description)) }
            return await mediaCommand(command, on: link)
        }
    }

    /// The running link of the phone with this address.
    private func connectedLink(_ device: BluetoothAddressText) -> PhoneLink? {
        runningLink(device.description)
    }

    private func runningLink(_ address: String) -> PhoneLink? {
        links.values.first { $0.device.address == address && $0.state == .running }
    }

    public func clientClosed(_ client: ControlServer.ClientID) async {
        output.detach(key: ControlSubscriber.key(client))
    }

    /// The `action` command's path, for outputs that take actions (`PhoneActions`): its reply.
    public func performAction(_ action: ActionID, uid: UInt32, device: String) async -> JSONObject {
        guard let address = normalizedAddress(device) else {
            return ControlReply(id: nil, .failure(ControlError(.badRequest, "\"device\" must be a Bluetooth address such as AA:BB:CC:DD:EE:FF"))).json
        }
        guard let link = runningLink(address) else { return ControlReply(id: nil, .failure(Self.noSuchDevice(address))).json }
        return ControlReply(id: nil, await perform(action, on: uid, link: link)).json
    }

    // MARK: Commands

    private func status() async -> ControlStatus {
        ControlStatus(
            version: Daemon.version,
            uptimeSeconds: Int(uptime.components.seconds),
            bluetoothdRunning: bluetoothdPresent,
            adapters: tree.adapters.map { $0.rawValue.split(separator: "/").last.map(String.init) ?? $0.rawValue },
            accessory: await accessoryStatus(),
            devices: links.values.sorted { $0.device.address < $1.device.address }.map { link in
                let transport = machine.status(of: link.id, at: link.device.path.rawValue)
                return ControlPhoneStatus(
                    device: link.device.address, name: link.device.name,
                    connected: tree.device(at: link.device.path)?.connected ?? false, subscribed: link.state == .running,
                    delivery: transport?.delivery, sessionAgeSeconds: Int(link.now.components.seconds),
                    notifications: link.session.notificationCount, events: link.notificationCount,
                    sharingAllowed: link.session.notificationSharingAllowed, resubscriptions: link.session.resubscriptions,
                    sharedNotifySession: transport?.sharedNotifySession, filtered: link.session.filteredCount, heldBack: link.heldBack,
                    filterMatches: link.session.filter.rules.map {
                        ControlFilterMatch(filter: $0.description, count: link.session.ruleMatches[$0] ?? 0)
                    },
                    lastError: link.lastError)
            },
            events: eventsEmitted, sessions: Int(machine.linksStarted),
            outputs: await output.report().map(Self.outputStatus))
    }

    /// The shape asked for, and where Presence has it registered (nowhere without Presence:
    /// `--no-advertise`).
    private func accessoryStatus() async -> ControlAccessoryStatus {
        guard let presence else { return ControlAccessoryStatus(shape: options.accessory.rawValue, registeredOn: nil) }
        let (kind, adapter) = await presence.accessoryRegistration
        return ControlAccessoryStatus(shape: kind.rawValue, registeredOn: adapter)
    }

    private func list(device: String?) -> ControlAnswer {
        let chosen = links.values.filter { device == nil || $0.device.address == device }
        return .list(chosen.sorted { $0.device.address < $1.device.address }.map { link in
            ControlPhone(device: link.device.address, name: link.device.name, notifications: link.session.notifications.map {
                Self.notification($0, device: link.device.address, seenBefore: link.gate.seenBefore[$0.uid] ?? false)
            })
        })
    }

    private func get(_ uid: UInt32, on link: PhoneLink, full: Bool) async -> Result<ControlAnswer, ControlError> {
        guard let notification = link.session.notification(uid: uid) else { return .failure(Self.noSuchNotification(uid, on: link)) }
        let seenBefore = link.gate.seenBefore[uid] ?? false
        guard full, notification.truncated == true else {
            return .success(.notification(Self.notification(notification, device: link.device.address, seenBefore: seenBefore)))
        }
        let refreshed = await fetchFullMessage(uid, on: link) ?? notification
        return .success(.notification(Self.notification(refreshed, device: link.device.address, seenBefore: seenBefore)))
    }

    private func perform(_ action: ActionID, on uid: UInt32, link: PhoneLink) async -> Result<ControlAnswer, ControlError> {
        guard let notification = link.session.notification(uid: uid) else { return .failure(Self.noSuchNotification(uid, on: link)) }
        let flag: EventFlags = action == .positive ? .positiveAction : .negativeAction
        guard notification.flags.contains(flag) else {
            return .failure(ControlError(.notAvailable, "notification \(uid) offers no \(action) action"))
        }
        switch await performAction(action, on: uid, link: link) {
        case .performed: return .success(.performed)
        case .notificationGone: return .failure(ControlError(.notificationGone, "the phone no longer has notification \(uid) (ATT 0xA2)"))
        case .actionFailed: return .failure(ControlError(.actionFailed, "the phone could not perform the action (ATT 0xA3)"))
        case .failed(let why): return .failure(ControlError(.failed, why))
        }
    }

    // MARK: Helpers

    static func noSuchDevice(_ address: String) -> ControlError {
        ControlError(.noSuchDevice, "no connected phone \(address)")
    }

    static func noSuchNotification(_ uid: UInt32, on link: PhoneLink) -> ControlError {
        ControlError(.noSuchNotification, "\(link.device.address) has no notification \(uid) in this session")
    }

    /// A notification as the control socket shows it: an `added` event's fields (`EventFormatter.json`)
    /// without `v` and `type`.
    static func notification(_ n: PhoneNotification, device: String, seenBefore: Bool) -> ControlNotification {
        ControlNotification(
            device: device, uid: n.uid, category: n.category.name ?? "reserved", categoryID: Int(n.category.rawValue),
            categoryCount: Int(n.categoryCount), flags: n.flags.names, preExisting: n.isPreExisting, seenBefore: seenBefore,
            appID: n.appIdentifier, appName: n.appName, title: n.title, subtitle: n.subtitle, message: n.message,
            messageSize: n.messageSize, truncated: n.truncated, date: n.date?.date?.iso8601,
            positiveAction: n.positiveAction, negativeAction: n.negativeAction, complete: n.attributesComplete)
    }

    /// An output's `report()` (`OutputRouter.report`: its name, then its counts and states).
    static func outputStatus(_ report: JSONValue) -> ControlOutputStatus {
        var counters: [ControlOutputStatus.Counter] = []
        for (name, value) in report.objectValue ?? [:] {
            switch value {
            case .int(let count): counters.append(.init(name, .count(count)))
            case .bool(let state): counters.append(.init(name, .state(state)))
            default: break  // the name; a sink reports counts and states only
            }
        }
        return ControlOutputStatus(name: report["name"]?.stringValue ?? "?", counters: counters)
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
