public import ANCS

/// A notification the phone holds.
public struct PhoneNotification: Hashable, Sendable {
    /// The scenario's key for it (stable across reconnects).
    public var key: UInt32
    /// The UID sent on the wire in the current session.
    public var uid: UInt32
    public var category: CategoryID
    public var flags: EventFlags
    public var attributes: [NotificationAttributeID: String]

    /// The attribute values as the Data Source sends them, MessageSize computed from Message.
    public var wireAttributes: [NotificationAttributeID: [UInt8]] {
        var out: [NotificationAttributeID: [UInt8]] = [:]
        for (id, text) in attributes { out[id] = Array(text.utf8) }
        out[.messageSize] = Array(String(attributes[.message]?.utf8.count ?? 0).utf8)
        return out
    }

    /// The Data Source response to a GetNotificationAttributes for `requested`, without the
    /// tuples in `omitted`: what `DataSourceEncoder.notificationResponse` builds from
    /// `wireAttributes` (it is the reference, and the tests compare the two), written straight
    /// into one buffer from the attribute strings, with no copy of a value on the way.
    public func dataSourceResponse(
        to requested: [NotificationAttributeRequest], omitting omitted: Set<NotificationAttributeID> = []
    ) -> [UInt8] {
        var out = [UInt8]()
        // Room for a typical response; a longer one grows (each attribute is looked up once).
        out.reserveCapacity(256)
        out.append(CommandID.getNotificationAttributes.rawValue)
        for shift in stride(from: 0, to: 32, by: 8) { out.append(UInt8(truncatingIfNeeded: uid >> UInt32(shift))) }
        for request in requested where !omitted.contains(request.id) {
            let maxLength = request.maxLength.map(Int.init)
            if request.id == .messageSize {
                var size = String(attributes[.message]?.utf8.count ?? 0)
                size.withUTF8 { Self.appendTuple(request.id.rawValue, $0, maxLength: maxLength, to: &out) }
            } else if var text = attributes[request.id] {
                text.withUTF8 { Self.appendTuple(request.id.rawValue, $0, maxLength: maxLength, to: &out) }
            } else {
                out.append(request.id.rawValue)
                out.append(0)
                out.append(0)
            }
        }
        return out
    }

    /// One `{AttrID, Len u16, bytes}` tuple, `value` cut as `DataSourceEncoder.truncated` cuts
    /// it (on a character boundary, "…" counted in the budget) and capped at a u16 length.
    private static func appendTuple(_ id: UInt8, _ value: UnsafeBufferPointer<UInt8>, maxLength: Int?, to out: inout [UInt8]) {
        var end = value.count
        var mark = false
        if let maxLength, value.count > maxLength {
            mark = maxLength >= DataSourceEncoder.ellipsis.count
            end = max(0, maxLength - (mark ? DataSourceEncoder.ellipsis.count : 0))
            while end > 0, end < value.count, value[end] & 0xC0 == 0x80 { end -= 1 }
        } else {
            // Never cut: only the tuple's u16 length limits it.
            end = min(end, DataSourceEncoder.maxValueLength)
        }
        let length = end + (mark ? DataSourceEncoder.ellipsis.count : 0)
        out.append(id)
        out.append(UInt8(truncatingIfNeeded: length))
        out.append(UInt8(truncatingIfNeeded: length >> 8))
        out.append(contentsOf: UnsafeBufferPointer(rebasing: value[..<end]))
        if mark { out.append(contentsOf: DataSourceEncoder.ellipsis) }
    }
}

/// How the phone answers one Control Point write.
public enum ControlPointOutcome: Hashable, Sendable {
    /// The write is acknowledged; `response` (if any) follows on the Data Source.
    case accepted(response: [UInt8]?)
    /// The write is refused with this ATT error code.
    case rejected(ATTErrorCode)
}

/// The ANCS Notification Provider of one phone, without any I/O: its notifications, the
/// per-session UIDs, and the misbehaviour a scenario switched on.
public struct PhoneModel: Sendable {
    /// App identifier → display name.
    public var apps: [String: String]
    /// Notifications by scenario key.
    private var byKey: [UInt32: PhoneNotification] = [:]
    /// Scenario keys in the order the notifications were added.
    private var order: [UInt32] = []
    /// Wire UID → scenario key, for the current session.
    private var keyByUID: [UInt32: UInt32] = [:]
    /// Active notifications per category (the NS CategoryCount).
    private var categoryCounts: [UInt8: Int] = [:]
    /// The next UID handed out when renumbering.
    private var nextUID: UInt32 = 1

    /// Pending injected CP errors: the code and how many writes remain.
    public var injectedError: (code: ATTErrorCode, remaining: Int)?
    /// While true, every CP write fails with ATT 0x03 (Write Not Permitted).
    public var sharingDenied = false
    /// Tuples left out of notification responses.
    public var omitted: Set<NotificationAttributeID> = []

    public init(apps: [String: String]) {
        self.apps = apps
    }

    /// Notifications in the order they were added.
    public var notifications: [PhoneNotification] { order.compactMap { byKey[$0] } }

    /// How many notifications the phone holds.
    public var count: Int { order.count }

    /// The notification with wire UID `uid`.
    public func notification(uid: UInt32) -> PhoneNotification? { keyByUID[uid].flatMap { byKey[$0] } }

    /// The notification the scenario calls `key`.
    public func notification(key: UInt32) -> PhoneNotification? { byKey[key] }

    private func event(_ id: EventID, _ n: PhoneNotification, extra: EventFlags = []) -> NotificationSourceEvent {
        NotificationSourceEvent(
            eventID: id, flags: n.flags.union(extra), categoryID: n.category,
            categoryCount: UInt8(clamping: categoryCounts[n.category.rawValue] ?? 0), notificationUID: n.uid)
    }

    private mutating func freshUID() -> UInt32 {
        while keyByUID[nextUID] != nil { nextUID &+= 1 }
        defer { nextUID &+= 1 }
        return nextUID
    }

    private mutating func recount(_ category: CategoryID, by delta: Int) {
        categoryCounts[category.rawValue, default: 0] += delta
    }

    /// Adds (or, for a key already present, replaces and reports as modified) a notification.
    public mutating func add(_ spec: NotificationSpec) -> NotificationSourceEvent {
        if var n = byKey[spec.uid] {
            recount(n.category, by: -1)
            recount(spec.category, by: 1)
            n.category = spec.category
            n.flags = spec.flags
            n.attributes = spec.attributes
            byKey[spec.uid] = n
            return event(.notificationModified, n)
        }
        let uid = keyByUID[spec.uid] == nil ? spec.uid : freshUID()
        nextUID = max(nextUID, uid &+ 1)
        let n = PhoneNotification(key: spec.uid, uid: uid, category: spec.category, flags: spec.flags, attributes: spec.attributes)
        byKey[spec.uid] = n
        order.append(spec.uid)
        keyByUID[uid] = spec.uid
        recount(n.category, by: 1)
        return event(.notificationAdded, n)
    }

    /// Applies a change; nil if no notification has that key.
    public mutating func modify(key: UInt32, _ change: NotificationChange) -> NotificationSourceEvent? {
        guard var n = byKey[key] else { return nil }
        if let c = change.category, c != n.category {
            recount(n.category, by: -1)
            recount(c, by: 1)
            n.category = c
        }
        if let f = change.flags { n.flags = f }
        for (id, value) in change.attributes { n.attributes[id] = value }
        byKey[key] = n
        return event(.notificationModified, n)
    }

    /// Removes a notification; nil if no notification has that key.
    public mutating func remove(key: UInt32) -> NotificationSourceEvent? {
        guard let n = byKey.removeValue(forKey: key) else { return nil }
        if let i = order.lastIndex(of: key) { order.remove(at: i) }
        keyByUID[n.uid] = nil
        recount(n.category, by: -1)
        return event(.notificationRemoved, n)
    }

    /// Starts a new session (a new connection): UIDs are handed out afresh when `renumber`.
    public mutating func newSession(renumber: Bool) {
        guard renumber, !order.isEmpty else { return }
        nextUID = (keyByUID.keys.max() ?? 0) &+ 1
        keyByUID = [:]
        for key in order {
            byKey[key]?.uid = nextUID
            keyByUID[nextUID] = key
            nextUID &+= 1
        }
    }

    /// Every existing notification as Added with the pre-existing flag, oldest first, as iOS
    /// sends them when a consumer subscribes to the Notification Source.
    public func replay() -> [NotificationSourceEvent] {
        order.compactMap { byKey[$0] }.map { event(.notificationAdded, $0, extra: .preExisting) }
    }

    /// Answers a Control Point write as an iPhone does.
    public mutating func handleControlPoint(_ value: [UInt8]) -> ControlPointOutcome {
        if sharingDenied { return .rejected(.writeNotPermitted) }
        if let injected = injectedError {
            injectedError = injected.remaining > 1 ? (injected.code, injected.remaining - 1) : nil
            return .rejected(injected.code)
        }
        let request: ControlPointRequest
        do {
            request = try ControlPointRequest(decoding: value)
        } catch {
            if case .unknownCommand = error { return .rejected(.unknownCommand) }
            return .rejected(.invalidCommand)
        }
        switch request {
        case .getNotificationAttributes(let uid, let requested):
            guard let n = notification(uid: uid) else { return .rejected(.invalidParameter) }
            return .accepted(response: n.dataSourceResponse(to: requested, omitting: omitted))
        case .getAppAttributes(let identifier, _):
            let name = apps[identifier] ?? ""
            return .accepted(response: DataSourceEncoder.response(to: request, appAttributes: [.displayName: Array(name.utf8)]))
        case .performNotificationAction(let uid, let action):
            guard let n = notification(uid: uid) else { return .rejected(.invalidParameter) }
            let allowed = action == .positive ? n.flags.contains(.positiveAction) : n.flags.contains(.negativeAction)
            return allowed ? .accepted(response: nil) : .rejected(.actionFailed)
        }
    }
}
