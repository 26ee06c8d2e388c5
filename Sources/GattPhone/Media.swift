import ANCS
import BlueZ
import DBus
import JSON
import PhoneSimulator

/// The phone's Apple Media Service on real BlueZ: its player (`MediaPlayer`, the simulator's
/// model) and what the Media Remote set up on the current link.
struct GattPhoneMedia: Sendable {
    var player: MediaPlayer
    /// The characteristics bluetoothd last called StartNotify (without StopNotify since) on. A
    /// bonded client's CCC values outlive its connections in bluetoothd, which calls neither on
    /// a reconnect, so this is kept across links as bluetoothd keeps it.
    var notifying: Set<AMSCharacteristicRole> = []
    /// The attributes registered per entity on this link, in the order written (a later
    /// registration of an entity replaces the earlier).
    var registrations: [MediaEntity: [UInt8]] = [:]
    /// The pair the last Entity Attribute write selected on this link.
    var selected: MediaAttribute?
    /// The supported commands were notified on this link.
    var commandListSent = false
    /// Every Remote Command written, in order.
    var received: [UInt8] = []

    init(_ settings: MediaSettings, now: ContinuousClock.Instant) {
        player = MediaPlayer(settings, now: now)
    }

    /// A new link: the Media Remote registers and selects again.
    mutating func newLink() {
        registrations = [:]
        selected = nil
        commandListSent = false
    }

    /// The Entity Update notifications for each registered attribute among `changed`: one per
    /// attribute, entity by entity in the order `changed` names them, each entity's in the
    /// order registered.
    func updates(_ changed: [MediaAttribute], valueSize: Int, now: ContinuousClock.Instant) -> [[UInt8]] {
        var entities: [MediaEntity] = []
        for a in changed where !entities.contains(a.entity) { entities.append(a.entity) }
        var out: [[UInt8]] = []
        for entity in entities {
            for id in registrations[entity] ?? [] {
                guard let a = MediaAttribute(entity: entity.rawValue, attribute: id), changed.contains(a) else { continue }
                out.append(Self.entityUpdate(a, text: player.value(of: a, at: now), valueSize: valueSize))
            }
        }
        return out
    }

    /// An Entity Update notification, `[EntityID][AttributeID][EntityUpdateFlags][Value]`, whole
    /// within `valueSize` bytes: the UTF-8 value cut on a character boundary, with the Truncated
    /// flag (bit 0) when it was cut. iOS fills a Handle Value Notification (MTU - 3, so MTU - 6
    /// bytes of text); between two BlueZ stacks notifications travel as Multiple Handle Value
    /// Notifications, which hold MTU - 5 (`GattPhone.valueSize`), so MTU - 8 bytes of text here.
    static func entityUpdate(_ a: MediaAttribute, text: String, valueSize: Int) -> [UInt8] {
        let (bytes, truncated) = prefix(Array(text.utf8), upTo: max(0, valueSize - 3))
        return [a.entity.rawValue, a.attribute, truncated ? 1 : 0] + bytes
    }

    /// The first `limit` bytes at most of UTF-8 `bytes`, never splitting a character; whether it was cut.
    static func prefix(_ bytes: [UInt8], upTo limit: Int) -> ([UInt8], Bool) {
        guard bytes.count > limit else { return (bytes, false) }
        var end = max(0, limit)
        // A continuation byte (10xxxxxx) at the cut belongs to the character before it.
        while end > 0, bytes[end] & 0xC0 == 0x80 { end -= 1 }
        return (Array(bytes[..<end]), true)
    }

    /// The longest value the Entity Attribute answers: ATT's longest attribute value.
    static let maxAttributeLength = 512
}

/// AMS's ATT errors (Apple's AMS specification, "Error Codes"), named as AMS names them (ANCS
/// gives the same codes other names).
enum AMSErrorCode: UInt8 {
    /// Entity Update or Entity Attribute written (or read) before the Entity Update's
    /// notifications were enabled.
    case invalidState = 0xA0
    /// A malformed write.
    case invalidCommand = 0xA1
    /// The selected attribute is empty.
    case absentAttribute = 0xA2

    var name: String {
        switch self {
        case .invalidState: "0xA0 invalid_state"
        case .invalidCommand: "0xA1 invalid_command"
        case .absentAttribute: "0xA2 absent_attribute"
        }
    }
}

/// The Media Source side: AMS writes, reads, subscriptions and the `media_*` steps.
extension GattPhone {
    /// The AMS characteristics the scenario offers (all three unless `ams_characteristics` says).
    var amsRoles: [AMSCharacteristicRole] {
        AMSCharacteristicRole.allCases.filter { configuration.settings.amsCharacteristics.contains($0.scenarioCharacteristic) }
    }

    /// The refusal of an AMS write or read: reported, and thrown as the D-Bus error bluetoothd
    /// turns into an ATT error (5.66 sends 0x80 for any `Failed`, as for ANCS's codes).
    private func refuse(_ kind: String, _ code: AMSErrorCode, _ why: String, _ fields: JSONObject) -> any Error {
        let (name, sent) = Self.dbusError(for: ATTErrorCode(rawValue: code.rawValue))
        var fields = fields
        fields.append("rejected", .string(code.name))
        fields.append("why", .string(why))
        fields.append("att_error_sent", .string(sent))
        event(kind, fields)
        return DBusError.remote(name: name, message: "ATT \(code.name)")
    }

    /// A write to an AMS characteristic, on the connection's loop; throws the refusal.
    func amsWrite(_ role: AMSCharacteristicRole, _ value: [UInt8], options: [String: DBusValue]) throws {
        let now = ContinuousClock.now
        let mtu = state.withLock { s -> Int in
            if let mtu = options["mtu"]?.unwrapped.uint16Value { s.mtu = Int(mtu) }
            return s.mtu
        }
        var fields: JSONObject = ["value": .string(hex(value)), "mtu": .int(mtu)]
        switch role {
        case .remoteCommand:
            let kind = "media_command"
            guard value.count == 1 else { throw refuse(kind, .invalidCommand, "not one byte", fields) }
            let command = MediaCommand(rawValue: value[0])
            // A command the player does not take now (or a reserved ID) is accepted and ignored.
            let (changed, updates) = state.withLock { s -> ([MediaAttribute]?, [[UInt8]]) in
                s.media?.received.append(value[0])
                guard let command, let changed = s.media?.player.perform(command, at: now) else { return (nil, []) }
                return (changed, mediaUpdates(changed, &s, now: now))
            }
            fields.append("id", .int(Int(value[0])))
            if let command { fields.append("command", .string(command.name)) }
            fields.append("outcome", .string(changed == nil ? "ignored" : "performed"))
            event(kind, fields)
            send(updates)
        case .entityUpdate:
            let kind = "media_register"
            guard entityUpdateOn() else {
                throw refuse(kind, .invalidState, "the Entity Update's notifications are off", fields)
            }
            guard let (entity, attributes) = MediaPlayer.registration(value) else {
                throw refuse(kind, .invalidCommand, "malformed", fields)
            }
            // The current values of what was registered, at once; the supported commands with
            // the first registration of a link whose Remote Command subscription bluetoothd
            // restored from the bond without a StartNotify.
            let (list, updates) = state.withLock { s -> ([UInt8]?, [[UInt8]]) in
                s.media?.registrations[entity] = attributes
                let list = commandListIfDue(&s)
                let pairs = attributes.compactMap { MediaAttribute(entity: entity.rawValue, attribute: $0) }
                return (list, s.media?.updates(pairs, valueSize: Self.valueSize(mtu: s.mtu), now: now) ?? [])
            }
            fields.append("entity", .int(Int(entity.rawValue)))
            fields.append("attributes", .array(attributes.map { .int(Int($0)) }))
            fields.append("outcome", .string("accepted"))
            event(kind, fields)
            if let list { sendCommandList(list) }
            send(updates)
        case .entityAttribute:
            let kind = "media_attribute"
            fields.append("op", .string("write"))
            guard entityUpdateOn() else {
                throw refuse(kind, .invalidState, "the Entity Update's notifications are off", fields)
            }
            guard let selected = MediaPlayer.selection(value) else {
                throw refuse(kind, .invalidCommand, "malformed", fields)
            }
            state.withLock { $0.media?.selected = selected }
            fields.append("entity", .int(Int(selected.entity.rawValue)))
            fields.append("attribute", .int(Int(selected.attribute)))
            fields.append("outcome", .string("accepted"))
            event(kind, fields)
        }
    }

    /// ReadValue of the Entity Attribute: the whole value of the pair selected last (at most 512
    /// bytes), from `offset`, as bluetoothd's long read (Read, then Read Blob) asks for it.
    func entityAttributeRead(offset: Int, options: [String: DBusValue]) throws -> [UInt8] {
        let kind = "media_attribute"
        var fields: JSONObject = ["op": .string("read"), "offset": .int(offset)]
        if let mtu = options["mtu"]?.unwrapped.uint16Value { fields.append("mtu", .int(Int(mtu))) }
        guard entityUpdateOn() else {
            throw refuse(kind, .invalidState, "the Entity Update's notifications are off", fields)
        }
        let now = ContinuousClock.now
        guard let (selected, text) = state.withLock({ s -> (MediaAttribute, String)? in
            guard let media = s.media, let selected = media.selected else { return nil }
            return (selected, media.player.value(of: selected, at: now))
        }) else {
            // Nothing selected yet: the strictest answer (docs/field-evidence.md).
            throw refuse(kind, .invalidState, "no attribute written first", fields)
        }
        fields.append("entity", .int(Int(selected.entity.rawValue)))
        fields.append("attribute", .int(Int(selected.attribute)))
        let value = GattPhoneMedia.prefix(Array(text.utf8), upTo: GattPhoneMedia.maxAttributeLength).0
        guard !value.isEmpty else { throw refuse(kind, .absentAttribute, "the attribute is empty", fields) }
        guard offset <= value.count else {
            fields.append("rejected", .string("0x07"))
            event(kind, fields)
            throw DBusError.remote(name: "org.bluez.Error.InvalidOffset", message: "Invalid Offset")
        }
        fields.append("length", .int(value.count - offset))
        fields.append("total", .int(value.count))
        fields.append("outcome", .string("accepted"))
        event(kind, fields)
        return Array(value[offset...])
    }

    /// StartNotify/StopNotify from bluetoothd on Remote Command or Entity Update. A Remote
    /// Command subscription is answered with the supported commands; the Entity Update's going
    /// off ends the registrations.
    func amsNotifyChanged(_ role: AMSCharacteristicRole, _ enabled: Bool) {
        event(enabled ? "subscribed" : "unsubscribed", ["characteristic": .string(role.rawValue)])
        let list = state.withLock { s -> [UInt8]? in
            guard s.media != nil else { return nil }
            if enabled {
                s.media?.notifying.insert(role)
            } else {
                s.media?.notifying.remove(role)
                if role == .remoteCommand { s.media?.commandListSent = false }
                if role == .entityUpdate { s.media?.registrations = [:]; s.media?.selected = nil }
            }
            guard enabled, role == .remoteCommand, s.connected else { return nil }
            s.media?.commandListSent = true
            return s.media?.player.commandList
        }
        if let list { sendCommandList(list) }
    }

    /// The Media Remote's side shows the Remote Command subscribed on this link (its
    /// bluetoothd's Notifying or NotifyAcquired): bluetoothd restored the CCC from the bond
    /// without a StartNotify, so the supported commands go now, once per link.
    func amsConsumerSeen(_ tree: BlueZObjectTree) {
        guard state.withLock({ $0.media.map { !$0.commandListSent } ?? false }),
              consumerNotifying(tree, service: AMSApplication.uuid, characteristic: AMSCharacteristicRole.remoteCommand.uuid)
        else { return }
        let list = state.withLock { s -> [UInt8]? in
            guard s.connected, s.media?.notifying.contains(.remoteCommand) == true else { return nil }
            return commandListIfDue(&s)
        }
        if let list { sendCommandList(list) }
    }

    /// A `media_*` step; false when the GATT phone cannot perform it.
    func performMedia(_ step: MediaStep, line: Int) -> Bool {
        let now = ContinuousClock.now
        guard state.withLock({ $0.media != nil }) else {
            event("error", ["message": .string("line \(line): a media step needs \"ams\": true in the settings")])
            return false
        }
        var fields: JSONObject = [:]
        let (list, updates) = state.withLock { s -> ([UInt8]?, [[UInt8]]) in
            let changed: [MediaAttribute]
            switch step {
            case .track(let track): changed = s.media?.player.setTrack(track, at: now) ?? []
            case .play: changed = s.media?.player.setPlaying(true, at: now) ?? []
            case .pause: changed = s.media?.player.setPlaying(false, at: now) ?? []
            case .volume(let value): changed = s.media?.player.setVolume(value) ?? []
            case .commands(let commands):
                guard s.media?.player.setCommands(commands) == true, s.connected,
                      s.media?.notifying.contains(.remoteCommand) == true
                else { return (nil, []) }
                s.media?.commandListSent = true
                return (s.media?.player.commandList, [])
            case .service: return (nil, [])
            }
            return (nil, mediaUpdates(changed, &s, now: now))
        }
        if case .service = step {
            event("error", ["message": .string("line \(line): media_service needs the simulated bluetoothd (ancs-phone-sim)")])
            return false
        }
        if let player = state.withLock({ $0.media?.player }) {
            fields.append("state", .string(player.playing ? "playing" : "paused"))
            fields.append("title", .string(player.track.title))
            fields.append("commands", .array(player.commands.map { .string($0.name) }))
        }
        fields.append("updates", .int(updates.count))
        event("media", fields)
        if let list { sendCommandList(list) }
        send(updates)
        return true
    }

    // MARK: Notifications

    /// Whether bluetoothd has the Entity Update's notifications on (when the phone offers the
    /// Entity Update at all): the condition for writing Entity Update and Entity Attribute.
    private func entityUpdateOn() -> Bool {
        guard amsRoles.contains(.entityUpdate) else { return true }
        return state.withLock { $0.media?.notifying.contains(.entityUpdate) ?? false }
    }

    /// The Entity Update notifications of `changed`, if they are on and the link is up. Call under the lock.
    private func mediaUpdates(_ changed: [MediaAttribute], _ s: inout State, now: ContinuousClock.Instant) -> [[UInt8]] {
        guard !changed.isEmpty, s.connected, let media = s.media, media.notifying.contains(.entityUpdate) else { return [] }
        return media.updates(changed, valueSize: Self.valueSize(mtu: s.mtu), now: now)
    }

    /// The supported commands, if not yet notified on this link and Remote Command notifies. Call under the lock.
    private func commandListIfDue(_ s: inout State) -> [UInt8]? {
        guard s.connected, let media = s.media, !media.commandListSent, media.notifying.contains(.remoteCommand) else { return nil }
        s.media?.commandListSent = true
        return media.player.commandList
    }

    private func sendCommandList(_ list: [UInt8]) {
        outboxInput.yield((.ams(.remoteCommand), list))
        event("media_commands_sent", [
            "commands": .array(list.map { id in MediaCommand(rawValue: id).map { .string($0.name) } ?? .int(Int(id)) }),
        ])
    }

    private func send(_ updates: [[UInt8]]) {
        for update in updates {
            outboxInput.yield((.ams(.entityUpdate), update))
            event("media_update", [
                "entity": .int(Int(update[0])), "attribute": .int(Int(update[1])), "truncated": .bool(update[2] & 1 != 0),
                "value": .string(String(decoding: update[3...], as: UTF8.self)), "bytes": .int(update.count),
            ])
        }
    }
}
