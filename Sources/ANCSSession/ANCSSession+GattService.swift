public import ANCS
import BluetoothUUIDs
public import GattSession

/// What an ANCS session hands its owner through the GATT service seam.
public enum ANCSSessionEvent: Hashable, Sendable {
    /// Show a notification event.
    case notification(NotificationEvent)
    /// The outcome of an action requested with `performAction`.
    case actionCompleted(uid: UInt32, action: ActionID, outcome: ActionOutcome)
    /// The phone stopped (`false`) or resumed (`true`) sharing its notifications.
    case sharingChanged(allowed: Bool)
}

/// ANCS on the seam every GATT service speaks to its link: the Control Point write becomes a
/// request, the notification events and outcomes become events. The session's own API
/// (`handleNotificationSource`, `handleDataSource`, `handleWriteResult`) is what this calls.
extension ANCSSession: GattServiceSession {
    public typealias Event = ANCSSessionEvent

    public static let notificationSourceUUID = CharacteristicUUID(ANCSUUID.notificationSource.description)
    public static let controlPointUUID = CharacteristicUUID(ANCSUUID.controlPoint.description)
    public static let dataSourceUUID = CharacteristicUUID(ANCSUUID.dataSource.description)

    /// ANCS: all three characteristics are needed; the Data Source is subscribed first (the phone
    /// answers requests on it, and starts replaying its backlog on the Notification Source at once).
    public static let service = GattServiceDescription(
        name: "ANCS", uuid: ANCSUUID.service.description,
        characteristics: [
            .init(dataSourceUUID.rawValue, name: "Data Source", notifies: true, required: true),
            .init(notificationSourceUUID.rawValue, name: "Notification Source", notifies: true, required: true),
            .init(controlPointUUID.rawValue, name: "Control Point", notifies: false, required: true),
        ])

    /// The first `subscribed` starts the session; after a renewal the session already started
    /// afresh in `renewing` (`resubscribed(now:)`), so there is nothing more to do.
    public mutating func subscribed(to characteristics: Set<CharacteristicUUID>, now: Duration) -> [GattSessionAction<Event>] {
        guard !hasSubscribed else { return [] }
        return Self.gattActions(subscribed(now: now))
    }

    public mutating func handleNotification(_ value: [UInt8], from characteristic: CharacteristicUUID, now: Duration)
        -> [GattSessionAction<Event>]
    {
        switch characteristic {
        case Self.notificationSourceUUID: Self.gattActions(handleNotificationSource(value, now: now))
        case Self.dataSourceUUID: Self.gattActions(handleDataSource(value, now: now))
        default: [.log(.debug, "ignored a value from \(characteristic), which is not an ANCS source")]
        }
    }

    public mutating func handleResult(_ result: GattResult, now: Duration) -> [GattSessionAction<Event>] {
        Self.gattActions(handleWriteResult(Self.writeResult(result), now: now))
    }

    /// A request's result as the result of a Control Point write.
    public static func writeResult(_ result: GattResult) -> WriteResult {
        switch result {
        case .written: .accepted
        case .attError(let code): .attError(ATTErrorCode(rawValue: code))
        case .failed(let message): .failed(message)
        case .read: .failed("a read answered a Control Point write")
        }
    }

    public mutating func handleTimer(now: Duration) -> [GattSessionAction<Event>] {
        Self.gattActions(handleTimer(now: now) as [SessionAction])
    }

    public mutating func renewing(now: Duration) -> [GattSessionAction<Event>] {
        Self.gattActions(resubscribed(now: now))
    }

    /// The session's actions as the GATT-service seam's (`GattSessionAction`), in the same order.
    public static func gattActions(_ actions: [SessionAction]) -> [GattSessionAction<Event>] {
        if actions.isEmpty { return [] }
        return actions.map { action in
            switch action {
            case .writeControlPoint(let bytes): .request(.write(controlPointUUID, bytes))
            case .emit(let event): .emit(.notification(event))
            case .actionCompleted(let uid, let action, let outcome): .emit(.actionCompleted(uid: uid, action: action, outcome: outcome))
            case .log(let level, let message): .log(ServiceLogLevel(level), message)
            case .sharingChanged(let allowed): .emit(.sharingChanged(allowed: allowed))
            case .resubscribe(let reason): .resubscribe(reason)
            }
        }
    }
}

extension ServiceLogLevel {
    /// The seam's level of an ANCS session's.
    public init(_ level: SessionLogLevel) {
        switch level {
        case .debug: self = .debug
        case .info: self = .info
        case .warning: self = .warning
        case .error: self = .error
        }
    }
}
