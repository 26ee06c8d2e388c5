/// Which of the notifications a phone replays on each connection (`pre_existing`) are printed:
/// `--replays all|unseen|none`.
public enum ReplayPolicy: String, Hashable, Sendable, CaseIterable {
    /// Every replayed notification, marked `seen_before` when it was shown before.
    case all
    /// The replayed notifications not shown before (they arrived while ancsd was away); the
    /// default: a phone that reconnects all day does not repeat itself, and nothing new is lost.
    case unseen
    /// No replayed notification, only those that arrive while connected.
    case none
}

/// One session's decisions on what reaches the outputs under a `ReplayPolicy`, and the
/// `seen_before` mark of each notification; no I/O (the caller looks fingerprints up).
///
/// - `added`: `seen_before` is true for a replayed (`pre_existing`) notification whose content
///   was shown before; the policy decides whether it is printed.
/// - `modified`: printed if its `added` was; for one held back, printed (as `added`, since the
///   outputs never saw it) only when the new content was never shown.
/// - `removed`: printed only if the notification was.
public struct ReplayGate: Sendable {
    public var policy: ReplayPolicy
    /// UID → `seen_before`, for every notification of the session that was not removed.
    public private(set) var seenBefore: [UInt32: Bool] = [:]
    /// The UIDs whose events reached the outputs.
    public private(set) var printed: Set<UInt32> = []

    public init(policy: ReplayPolicy) { self.policy = policy }

    /// The event to print (possibly of another kind) and its `seen_before`, or nil to hold it
    /// back. `known` says whether the notification's fingerprint was shown before.
    public mutating func admit(_ event: NotificationEvent, known: Bool) -> (event: NotificationEvent, seenBefore: Bool)? {
        let uid = event.notification.uid
        switch event.kind {
        case .added:
            let seen = event.notification.isPreExisting && known
            seenBefore[uid] = seen
            let show = switch policy {
            case .all: true
            case .unseen: !seen
            case .none: !event.notification.isPreExisting
            }
            guard show else { return nil }
            printed.insert(uid)
            return (event, seen)
        case .modified:
            if printed.contains(uid) {
                seenBefore[uid] = false
                return (event, false)
            }
            seenBefore[uid] = known
            guard !known else { return nil }
            printed.insert(uid)
            return (NotificationEvent(kind: .added, notification: event.notification), false)
        case .removed:
            let seen = seenBefore.removeValue(forKey: uid) ?? false
            guard printed.remove(uid) != nil else { return nil }
            return (event, seen)
        }
    }

    /// Forgets what the session no longer knows (bounds the gate like the session).
    public mutating func retain(only uids: Set<UInt32>) {
        seenBefore = seenBefore.filter { uids.contains($0.key) }
        printed = printed.intersection(uids)
    }
}
