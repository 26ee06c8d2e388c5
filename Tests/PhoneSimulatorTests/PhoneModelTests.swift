import ANCS
import PhoneSimulator
import Testing

/// The phone's ANCS provider without any bus: events, counts, sessions, CP answers.
@Suite("Phone model")
struct PhoneModelTests {
    static func spec(_ uid: UInt32, _ category: CategoryID = .social, flags: EventFlags = []) -> NotificationSpec {
        NotificationSpec(uid: uid, category: category, flags: flags, attributes: [.title: "T\(uid)", .message: "Message \(uid)"])
    }

    @Test("events carry category counts; replay marks everything pre-existing")
    func events() {
        var model = PhoneModel(apps: [:])
        #expect(model.add(Self.spec(1)).categoryCount == 1)
        #expect(model.add(Self.spec(2)).categoryCount == 2)
        #expect(model.add(Self.spec(3, .email)).categoryCount == 1)
        let modified = model.modify(key: 2, NotificationChange(category: .email))
        #expect(modified?.eventID == .notificationModified && modified?.categoryCount == 2)
        let removed = model.remove(key: 1)
        #expect(removed?.eventID == .notificationRemoved && removed?.categoryCount == 0 && removed?.notificationUID == 1)
        #expect(model.remove(key: 1) == nil && model.modify(key: 9, NotificationChange()) == nil)
        let replay = model.replay()
        #expect(replay.map(\.notificationUID) == [2, 3])
        #expect(replay.allSatisfy { $0.flags.contains(.preExisting) && $0.eventID == .notificationAdded })
        // Adding a key again replaces it and reports a modification.
        #expect(model.add(Self.spec(3, .email)).eventID == .notificationModified)
    }

    @Test("a new session renumbers UIDs; the scenario's keys still find them")
    func renumbering() {
        var model = PhoneModel(apps: [:])
        _ = model.add(Self.spec(1))
        _ = model.add(Self.spec(2))
        model.newSession(renumber: true)
        let uids = model.notifications.map(\.uid)
        #expect(Set(uids).isDisjoint(with: [1, 2]) && Set(uids).count == 2)
        #expect(model.notification(uid: 1) == nil)
        let moved = model.notification(key: 1)?.uid ?? 0
        #expect(model.notification(uid: moved)?.key == 1)
        // A new notification whose key collides with a renumbered UID gets a fresh one.
        let next = model.add(Self.spec(moved))
        #expect(next.notificationUID != moved)
        model.newSession(renumber: false)
        #expect(model.notification(key: 1)?.uid == moved)
    }

    @Test("Control Point answers: responses, errors, injected errors, denied sharing")
    func controlPoint() throws {
        var model = PhoneModel(apps: ["com.apple.MobileSMS": "Messages"])
        _ = model.add(Self.spec(7, flags: [.negativeAction]))
        let get = try ControlPointRequest.getNotificationAttributes(uid: 7, attributes: [NotificationAttributeRequest(.title, maxLength: 8)]).encoded()
        #expect(model.handleControlPoint(get) == .accepted(response: [0, 7, 0, 0, 0, 1, 2, 0] + Array("T7".utf8)))
        #expect(model.handleControlPoint([]) == .rejected(.invalidCommand))
        #expect(model.handleControlPoint([9]) == .rejected(.unknownCommand))
        #expect(model.handleControlPoint([0, 7, 0, 0, 0, 1]) == .rejected(.invalidCommand), "Title without its max length")
        let gone = try ControlPointRequest.getNotificationAttributes(uid: 8, attributes: [NotificationAttributeRequest(.date)]).encoded()
        #expect(model.handleControlPoint(gone) == .rejected(.invalidParameter))
        let app = try ControlPointRequest.getAppAttributes(appIdentifier: "com.apple.MobileSMS", attributes: [.displayName]).encoded()
        guard case .accepted(let response?) = model.handleControlPoint(app) else { Issue.record("no app response"); return }
        #expect(Array(response.suffix(8)) == Array("Messages".utf8))
        let negative = try ControlPointRequest.performNotificationAction(uid: 7, action: .negative).encoded()
        let positive = try ControlPointRequest.performNotificationAction(uid: 7, action: .positive).encoded()
        #expect(model.handleControlPoint(negative) == .accepted(response: nil))
        #expect(model.handleControlPoint(positive) == .rejected(.actionFailed), "no positive action offered")
        model.injectedError = (.invalidParameter, 2)
        #expect(model.handleControlPoint(get) == .rejected(.invalidParameter))
        #expect(model.handleControlPoint(get) == .rejected(.invalidParameter))
        #expect(model.handleControlPoint(get) != .rejected(.invalidParameter))
        model.sharingDenied = true
        #expect(model.handleControlPoint(get) == .rejected(.writeNotPermitted))
    }
}
