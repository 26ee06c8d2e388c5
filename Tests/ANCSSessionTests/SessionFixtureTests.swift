import ANCS
import ANCSCapture
import ANCSSession
import Foundation
import JSON
import Testing

/// The real captures replayed through a session: the phone's exact fragments answer the session's
/// own request, and what the session shows matches the values each case file records.
@Suite struct SessionFixtureTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("ANCSCaptureTests/Fixtures/captures")

    struct Capture: Sendable, CustomStringConvertible {
        var name: String
        var request: ControlPointRequest
        var fragments: [[UInt8]]
        var expected: JSONValue
        var description: String { name }
    }

    static let captures: [Capture] = {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { $0.hasSuffix(".jsonl") }.sorted()
        return names.compactMap { name in
            guard let text = try? String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8) else { return nil }
            var parser = CaptureParser()
            var request: ControlPointRequest?
            var fragments: [[UInt8]] = []
            for line in text.split(separator: "\n") {
                guard case .value(_, let char, let bytes, _)? = try? parser.parse(line: String(line)) else { continue }
                if char == .cp { request = try? ControlPointRequest(decoding: bytes) }
                if char == .ds { fragments.append(bytes) }
            }
            let caseURL = directory.appendingPathComponent("cases/" + name.replacingOccurrences(of: ".jsonl", with: ".json"))
            guard let request, let data = try? Data(contentsOf: caseURL), let expected = try? JSONValue(parsing: Array(data)) else { return nil }
            return Capture(name: name, request: request, fragments: fragments, expected: expected)
        }
    }()

    // Properties rather than closures inside `@Test(arguments:)`, which crash Swift 6.0's compiler.
    static let notificationAttributeCaptures = captures.filter { $0.request.commandID == .getNotificationAttributes }
    static let appAttributeCaptures = captures.filter { $0.request.commandID == .getAppAttributes }

    @Test func everyDataSourceCaptureIsUsed() {
        #expect(Self.captures.count == 20)
    }

    @Test(arguments: notificationAttributeCaptures)
    func notificationCaptures(capture: Capture) throws {
        guard case .getNotificationAttributes(let uid, _) = capture.request else { return }
        var h = Harness()
        h.ns(.notificationAdded, uid: uid, flags: [.positiveAction, .negativeAction], category: .social)
        h.written(.accepted)
        for fragment in capture.fragments { h.ds(fragment) }
        if h.lastRequest?.commandID == .getNotificationAttributes {
            h.fireTimer()  // ends the response early: the capture holds fewer attributes than asked for
        }
        if case .getAppAttributes(let app, _)? = h.lastRequest {
            h.answer(appResponse(app, name: "Display Name"))
        }
        let event = try #require(h.events.first, "\(h.logs)")
        #expect(h.events.count == 1 && event.kind == .added)
        let n = event.notification
        #expect(n.uid == uid)
        let want = try #require(capture.expected["expected"]?["responses"]?.arrayValue?.first?["attributes"]?.arrayValue)
        func expected(_ id: NotificationAttributeID) -> String? {
            want.first { $0["id"]?.intValue == Int(id.rawValue) }?["value_utf8"]?.stringValue
        }
        #expect(n.appIdentifier == expected(.appIdentifier))
        #expect(n.appName == (n.appIdentifier == nil ? nil : "Display Name"))
        #expect(n.title == expected(.title))
        #expect(n.subtitle == expected(.subtitle))
        #expect(n.message == expected(.message))
        #expect(n.messageSize == expected(.messageSize).flatMap { Int($0) })
        #expect(n.positiveAction == expected(.positiveActionLabel))
        #expect(n.negativeAction == expected(.negativeActionLabel))
        if let date = expected(.date) {
            #expect(n.date == DateAttribute(Array(date.utf8)))
        } else {
            #expect(n.date == nil)
        }
        // The session asks for all eight attributes; only one capture answered every one.
        #expect(n.attributesComplete == capture.name.contains("all-eight"))
        #expect(h.logs.allSatisfy { $0.0 < .warning }, "\(h.logs)")
    }

    @Test(arguments: appAttributeCaptures)
    func appCaptures(capture: Capture) throws {
        guard case .getAppAttributes(let app, _) = capture.request else { return }
        var h = Harness()
        h.ns(.notificationAdded, uid: 1)
        h.answer(notificationResponse(uid: 1, [(.appIdentifier, app)] + basicAttributes.dropFirst()))
        #expect(h.lastRequest == capture.request)
        h.written(.accepted)
        for fragment in capture.fragments { h.ds(fragment) }
        let want = capture.expected["expected"]?["responses"]?.arrayValue?.first?["attributes"]?.arrayValue?.first?["value_utf8"]?.stringValue
        #expect(h.events.first?.notification.appName == want)
    }
}
