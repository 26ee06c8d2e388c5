import ANCS
import ANCSSession

/// Drives a session like a transport would, recording what it asks for.
struct Harness {
    var session: ANCSSession
    var now: Duration = .zero
    var writes: [[UInt8]] = []
    var events: [NotificationEvent] = []
    var logs: [(SessionLogLevel, String)] = []
    var actionOutcomes: [(UInt32, ActionID, ActionOutcome)] = []
    /// The reasons of the `.resubscribe` actions, in order.
    var resubscriptions: [String] = []
    /// The `.sharingChanged` actions, in order.
    var sharingChanges: [Bool] = []

    init(_ configure: (inout SessionConfiguration) -> Void = { _ in }) {
        var configuration = SessionConfiguration()
        configure(&configuration)
        session = ANCSSession(configuration: configuration)
    }

    mutating func record(_ actions: [SessionAction]) {
        for action in actions {
            switch action {
            case .writeControlPoint(let bytes): writes.append(bytes)
            case .emit(let event): events.append(event)
            case .log(let level, let message): logs.append((level, message))
            case .actionCompleted(let uid, let action, let outcome): actionOutcomes.append((uid, action, outcome))
            case .resubscribe(let reason): resubscriptions.append(reason)
            case .sharingChanged(let allowed): sharingChanges.append(allowed)
            }
        }
    }

    mutating func ns(_ event: EventID, uid: UInt32, flags: EventFlags = [], category: CategoryID = .social, count: UInt8 = 1) {
        let value = NotificationSourceEvent(eventID: event, flags: flags, categoryID: category, categoryCount: count, notificationUID: uid)
        record(session.handleNotificationSource(value.encoded, now: now))
    }

    mutating func ds(_ bytes: [UInt8]) { record(session.handleDataSource(bytes, now: now)) }
    /// The result of write number `write` (default: the latest).
    mutating func written(_ result: WriteResult, write: UInt64? = nil) {
        record(session.handleWriteResult(result, write: write, now: now))
    }

    mutating func advance(_ duration: Duration) {
        now += duration
        record(session.handleTimer(now: now))
    }

    /// Runs the timer to its next deadline.
    mutating func fireTimer() {
        guard let deadline = session.nextDeadline else { return }
        now = max(now, deadline)
        record(session.handleTimer(now: now))
    }

    /// The last Control Point write, decoded.
    var lastRequest: ControlPointRequest? { writes.last.flatMap { try? ControlPointRequest(decoding: $0) } }

    /// Answers the pending request as a phone would: acknowledges and sends the response in fragments of `mtu`.
    mutating func answer(_ response: [UInt8], fragment mtu: Int = 20) {
        written(.accepted)
        var rest = response[...]
        while !rest.isEmpty {
            ds(Array(rest.prefix(mtu)))
            rest = rest.dropFirst(mtu)
        }
    }
}

/// Builds a Data Source response for a notification.
func notificationResponse(uid: UInt32, _ attributes: [(NotificationAttributeID, String)]) -> [UInt8] {
    var bytes: [UInt8] = [0, UInt8(uid & 0xFF), UInt8((uid >> 8) & 0xFF), UInt8((uid >> 16) & 0xFF), UInt8(uid >> 24)]
    for (id, value) in attributes {
        let utf8 = Array(value.utf8)
        bytes += [id.rawValue, UInt8(utf8.count & 0xFF), UInt8(utf8.count >> 8)] + utf8
    }
    return bytes
}

/// Builds a Data Source response for an app's display name.
func appResponse(_ identifier: String, name: String) -> [UInt8] {
    let utf8 = Array(name.utf8)
    return [1] + Array(identifier.utf8) + [0, 0, UInt8(utf8.count & 0xFF), UInt8(utf8.count >> 8)] + utf8
}

/// The attributes a default session asks for, in its order, without action labels.
let basicAttributes: [(NotificationAttributeID, String)] = [
    (.appIdentifier, "com.apple.MobileSMS"), (.title, "Ada"), (.subtitle, ""), (.message, "Tea at five?"),
    (.messageSize, "12"), (.date, "20261130T101500"),
]
