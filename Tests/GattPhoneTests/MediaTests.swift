import ANCS
import DBus
@testable import GattPhone
import JSON
import PhoneSimulator
import Synchronization
import Testing

/// The GATT phone's Apple Media Service without a bus: what it answers to bluetoothd's writes,
/// reads and subscriptions, and which values it queues to notify (seen through its reports).
@Suite struct GattPhoneMediaTests {
    final class Reports: Sendable {
        let events = Mutex<[JSONObject]>([])
        func named(_ name: String) -> [JSONObject] { events.withLock { $0.filter { $0["event"]?.stringValue == name } } }
        func clear() { events.withLock { $0 = [] } }
    }

    /// A connected phone serving AMS with `media` (a paused track by default).
    private static func phone(_ media: MediaSettings = MediaSettings()) throws -> (GattPhone, Reports) {
        let reports = Reports()
        var settings = ScenarioSettings()
        settings.ams = true
        settings.media = media
        let phone = try GattPhone(
            .init(adapter: "hci1", peer: "AA:BB:CC:DD:EE:FF", bus: .system, settings: settings),
            report: { object in reports.events.withLock { $0.append(object) } })
        phone.state.withLock { $0.connected = true }
        return (phone, reports)
    }

    private static func refusal(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch DBusError.remote(let name, let message) {
            return "\(name): \(message)"
        } catch {
            return "\(error)"
        }
    }

    @Test func anEntityUpdateIsCutOnACharacterBoundaryToFitTheValue() {
        let title = MediaAttribute.title
        #expect(GattPhoneMedia.entityUpdate(title, text: "Aria", valueSize: 43) == [2, 2, 0] + Array("Aria".utf8))
        // MTU 48: 43 bytes of a Multiple Handle Value Notification, 40 of them text.
        let long = String(repeating: "x", count: 39) + "é" + "tail"
        let cut = GattPhoneMedia.entityUpdate(title, text: long, valueSize: GattPhone.valueSize(mtu: 48))
        #expect(cut.count == 42, "the two-byte é does not fit whole: cut before it")
        #expect(cut[2] == 1)
        #expect(Array(cut[3...]) == Array(String(repeating: "x", count: 39).utf8))
        let exact = String(repeating: "y", count: 40)
        #expect(GattPhoneMedia.entityUpdate(title, text: exact, valueSize: 43) == [2, 2, 0] + Array(exact.utf8))
    }

    @Test func writesBeforeTheEntityUpdateNotifiesAreRefusedWithInvalidState() throws {
        let (phone, reports) = try Self.phone()
        let refused = Self.refusal { try phone.amsWrite(.entityUpdate, [2, 0, 1, 2, 3], options: [:]) }
        #expect(refused == "org.bluez.Error.Failed: ATT 0xA0 invalid_state")
        #expect(Self.refusal { try phone.amsWrite(.entityAttribute, [2, 2], options: [:]) } == "org.bluez.Error.Failed: ATT 0xA0 invalid_state")
        #expect(Self.refusal { _ = try phone.entityAttributeRead(offset: 0, options: [:]) } == "org.bluez.Error.Failed: ATT 0xA0 invalid_state")
        let reported = reports.named("media_register")
        #expect(reported.first?["att_error_sent"]?.stringValue == "0x80", "bluetoothd 5.66 sends 0x80 for any Failed")
        #expect(reports.named("media_update").isEmpty)
    }

    @Test func aSubscriptionGetsTheCommandsAndARegistrationTheValuesAtOnce() throws {
        let (phone, reports) = try Self.phone()
        phone.amsNotifyChanged(.remoteCommand, true)
        let commands = reports.named("media_commands_sent").first?["commands"]?.arrayValue?.compactMap(\.stringValue)
        #expect(commands == ["play", "pause", "toggle", "next", "previous", "volume_up", "volume_down", "repeat", "shuffle"])
        phone.amsNotifyChanged(.entityUpdate, true)
        try phone.amsWrite(.entityUpdate, [2, 0, 1, 2, 3], options: ["mtu": .uint16(185)])
        let values = reports.named("media_update").map { ($0["attribute"]?.intValue ?? -1, $0["value"]?.stringValue ?? "") }
        #expect(values.map(\.0) == [0, 1, 2, 3])
        #expect(values.map(\.1) == ["Claude Debussy", "Suite bergamasque", "Clair de lune", "300.0"])
        #expect(reports.named("media_commands_sent").count == 1, "already sent on this link")
        #expect(Self.refusal { try phone.amsWrite(.entityUpdate, [2], options: [:]) } == "org.bluez.Error.Failed: ATT 0xA1 invalid_command")
        #expect(Self.refusal { try phone.amsWrite(.entityUpdate, [0, 3], options: [:]) } == "org.bluez.Error.Failed: ATT 0xA1 invalid_command")
        #expect(Self.refusal { try phone.amsWrite(.entityUpdate, [3, 0], options: [:]) } == "org.bluez.Error.Failed: ATT 0xA1 invalid_command")
    }

    /// bluetoothd restores a bonded client's CCC values on a reconnect without a StartNotify:
    /// the registrations of the new link are accepted and bring the supported commands.
    @Test func aRestoredSubscriptionOnANewLinkStillWorks() throws {
        let (phone, reports) = try Self.phone()
        phone.amsNotifyChanged(.remoteCommand, true)
        phone.amsNotifyChanged(.entityUpdate, true)
        phone.linkChanged(connected: false)
        phone.linkChanged(connected: true)
        reports.clear()
        try phone.amsWrite(.entityUpdate, [0, 1], options: [:])
        #expect(reports.named("media_commands_sent").count == 1)
        #expect(reports.named("media_update").first?["value"]?.stringValue?.hasPrefix("0,0.0,") == true)
    }

    @Test func remoteCommandsChangeThePlayerAndAnUnsupportedOneIsIgnored() throws {
        var media = MediaSettings()
        media.commands = [.togglePlayPause, .nextTrack]
        let (phone, reports) = try Self.phone(media)
        phone.amsNotifyChanged(.entityUpdate, true)
        try phone.amsWrite(.entityUpdate, [0, 1], options: [:])
        reports.clear()
        try phone.amsWrite(.remoteCommand, [2], options: [:])
        #expect(phone.state.withLock { $0.media?.player.playing } == true)
        let command = reports.named("media_command").last
        #expect(command?["command"]?.stringValue == "toggle" && command?["outcome"]?.stringValue == "performed")
        #expect(reports.named("media_update").last?["value"]?.stringValue?.hasPrefix("1,1.0,") == true)
        try phone.amsWrite(.remoteCommand, [0], options: [:])
        #expect(reports.named("media_command").last?["outcome"]?.stringValue == "ignored")
        try phone.amsWrite(.remoteCommand, [200], options: [:])
        #expect(reports.named("media_command").last?["outcome"]?.stringValue == "ignored")
        #expect(phone.state.withLock { $0.media?.received } == [2, 0, 200])
        #expect(Self.refusal { try phone.amsWrite(.remoteCommand, [2, 2], options: [:]) } == "org.bluez.Error.Failed: ATT 0xA1 invalid_command")
    }

    @Test func theEntityAttributeIsReadWholeByOffsets() throws {
        var media = MediaSettings()
        let title = "Goldberg Variations, BWV 988: Aria da capo e fine (live at the Wigmore Hall)"
        media.tracks = [MediaTrack(title: title, artist: "", album: "", duration: 0)]
        let (phone, reports) = try Self.phone(media)
        phone.amsNotifyChanged(.entityUpdate, true)
        #expect(Self.refusal { _ = try phone.entityAttributeRead(offset: 0, options: [:]) } == "org.bluez.Error.Failed: ATT 0xA0 invalid_state",
                "nothing selected yet")
        try phone.amsWrite(.entityAttribute, [2, 2], options: [:])
        let head = try phone.entityAttributeRead(offset: 0, options: [:])
        let tail = try phone.entityAttributeRead(offset: 47, options: [:])
        #expect(Array(head[..<47]) + tail == Array(title.utf8))
        #expect(Self.refusal { _ = try phone.entityAttributeRead(offset: 500, options: [:]) } == "org.bluez.Error.InvalidOffset: Invalid Offset")
        try phone.amsWrite(.entityAttribute, [2, 0], options: [:])
        #expect(Self.refusal { _ = try phone.entityAttributeRead(offset: 0, options: [:]) } == "org.bluez.Error.Failed: ATT 0xA2 absent_attribute",
                "an empty artist")
        #expect(Self.refusal { try phone.amsWrite(.entityAttribute, [2], options: [:]) } == "org.bluez.Error.Failed: ATT 0xA1 invalid_command")
        #expect(reports.named("media_attribute").contains { $0["op"]?.stringValue == "read" && $0["offset"]?.intValue == 47 })
    }

    @Test func aTrackChangeIsNotifiedAsItHappensOnlyForWhatWasRegistered() throws {
        let (phone, reports) = try Self.phone()
        phone.amsNotifyChanged(.entityUpdate, true)
        try phone.amsWrite(.entityUpdate, [2, 2], options: ["mtu": .uint16(48)])
        reports.clear()
        #expect(phone.performMedia(.track(MediaTrack(title: "Aria", artist: "Bach", album: "Goldberg", duration: 90)), line: 2))
        #expect(reports.named("media_update").map { $0["value"]?.stringValue } == ["Aria"])
        phone.amsNotifyChanged(.entityUpdate, false)
        reports.clear()
        #expect(phone.performMedia(.track(MediaTrack(title: "Var. 1")), line: 3))
        #expect(reports.named("media_update").isEmpty, "notifications off: registrations gone")
        #expect(!phone.performMedia(.service(present: false), line: 4))
    }
}
