import ANCS
import PhoneSimulator
import TestSupport
import Testing

/// `PhoneNotification.dataSourceResponse` (written in place) against `DataSourceEncoder`,
/// the reference, on generated notifications and requests.
@Suite("Data Source response written in place")
struct DataSourceResponseTests {
    /// Characters of 1 to 4 UTF-8 bytes, so cuts land inside characters.
    static let alphabet: [Character] = ["a", "Z", " ", "é", "ß", "€", "…", "☕", "😀", "語"]

    static func text(_ count: Int, _ random: inout SplitMix64) -> String {
        String((0..<count).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
    }

    /// A notification as the phone holds it.
    static func notification(uid: UInt32, _ attributes: [NotificationAttributeID: String]) -> PhoneNotification? {
        var model = PhoneModel(apps: [:])
        _ = model.add(NotificationSpec(uid: uid, category: .social, attributes: attributes))
        return model.notification(uid: uid)
    }

    static func reference(_ n: PhoneNotification, _ requested: [NotificationAttributeRequest], omitted: Set<NotificationAttributeID>) -> [UInt8] {
        DataSourceEncoder.notificationResponse(
            uid: n.uid, requested: requested, values: n.wireAttributes, options: DataSourceEncodingOptions(omittedAttributes: omitted))
    }

    @Test("matches DataSourceEncoder on 400 generated requests")
    func matchesReference() throws {
        var random = SplitMix64(seed: 0x5EED)
        for round in 0..<400 {
            var attributes: [NotificationAttributeID: String] = [:]
            for id in NotificationAttributeID.allDefined where id != .messageSize && random.next() % 4 != 0 {
                let length = Int(random.next() % (id == .message ? 300 : 40))
                attributes[id] = Self.text(length, &random)
            }
            // Now and then a message longer than a tuple can carry.
            if round % 50 == 7 { attributes[.message] = Self.text(68_000, &random) }
            let n = try #require(Self.notification(uid: UInt32(truncatingIfNeeded: random.next()), attributes))
            var requested: [NotificationAttributeRequest] = []
            for id in NotificationAttributeID.allDefined.shuffled(using: &random) where random.next() % 5 != 0 {
                let maxLength = id.takesMaxLength ? UInt16(random.next() % 80) : nil
                requested.append(NotificationAttributeRequest(id, maxLength: round % 50 == 7 ? nil : maxLength))
            }
            let omitted: Set<NotificationAttributeID> = random.next() % 3 == 0 ? [.positiveActionLabel, .message] : []
            let written = n.dataSourceResponse(to: requested, omitting: omitted)
            #expect(written == Self.reference(n, requested, omitted: omitted), "round \(round)")
        }
    }

    @Test("a 68,000-byte message: cut to its max length, or capped at 65,535 bytes without one")
    func largeMessage() throws {
        var random = SplitMix64(seed: 68)
        let message = String(repeating: "é", count: 34_000)
        let n = try #require(Self.notification(uid: 9, [.message: message, .title: Self.text(30, &random)]))
        for requested in [
            [NotificationAttributeRequest(.message, maxLength: 65_535), NotificationAttributeRequest(.messageSize)],
            [NotificationAttributeRequest(.message, maxLength: 1000), NotificationAttributeRequest(.title, maxLength: 2)],
            [NotificationAttributeRequest(.message), NotificationAttributeRequest(.subtitle, maxLength: 10)],
        ] {
            let written = n.dataSourceResponse(to: requested)
            #expect(written == Self.reference(n, requested, omitted: []))
        }
        let full = n.dataSourceResponse(to: [NotificationAttributeRequest(.message)])
        #expect(full.count == 5 + 3 + 65_535)
    }
}

