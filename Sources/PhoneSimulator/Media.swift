import ANCS
import DBus
import JSON

/// The ATT errors of the Apple Media Service (Apple's AMS specification, "Error Codes").
enum AMSError {
    /// The Media Remote has not set the AMS up: a write to the Entity Update or Entity Attribute
    /// characteristic without a subscription to the Entity Update's notifications.
    static let invalidState = ATTErrorCode(rawValue: 0xA0)
    /// The command was improperly formatted.
    static let invalidCommand = ATTErrorCode(rawValue: 0xA1)
    /// The attribute the Entity Attribute was asked for is empty.
    static let absentAttribute = ATTErrorCode(rawValue: 0xA2)
}

/// The Apple Media Service on D-Bus: the writes and reads of its characteristics, the values it
/// notifies, and the `media_*` steps (docs/simulator.md, "The Apple Media Service"). Its
/// subscriptions (StartNotify, AcquireNotify, StopNotify) are ANCS's code in CharacteristicExports.swift.
extension PhoneSimulator {
    /// The simulator's time, which the player's elapsed time follows.
    func mediaNow() -> ContinuousClock.Instant { loop?.now ?? .now }

    /// The Remote Command writes phone `device` received, in order.
    public func receivedMediaCommands(_ device: Int = 0) -> [ReceivedMediaCommand] {
        state.withLock { $0.devices[device].media?.received ?? [] }
    }

    /// Phone `device`'s media player as it is now (nil unless the scenario's `ams` is true).
    public func mediaPlayer(_ device: Int = 0) -> MediaPlayer? {
        state.withLock { $0.devices[device].media?.player }
    }

    // MARK: Writes and reads

    /// How phone `device` (`d`, under the lock) answers a write to an AMS characteristic; throws
    /// the ATT error as bluetoothd reports it.
    func answerMediaWrite(_ value: [UInt8], _ characteristic: PhoneCharacteristic, _ device: Int, _ d: inout DeviceState) throws {
        guard d.media != nil else { throw BlueZError.failed("Not available") }
        let name = d.settings.name
        var fields: JSONObject = ["session": .int(Int(d.session))]
        /// Notes and logs a refusal, and returns the error to throw.
        func refuse(_ kind: String, _ what: String, _ code: ATTErrorCode, _ why: String) -> any Error {
            fields.append("value", .string(hexString(value)))
            fields.append("outcome", .string(BlueZError.hex(code.rawValue)))
            note(device, kind, fields)
            log("\(name): AMS \(what) write \(hexString(value)) refused with ATT \(BlueZError.hex(code.rawValue)) (\(why))")
            return BlueZError.forATT(code)
        }
        switch characteristic {
        case .remoteCommand:
            guard value.count == 1 else { throw refuse("media_command", "Remote Command", AMSError.invalidCommand, "not one byte") }
            let command = MediaCommand(rawValue: value[0])
            let changed = command.flatMap { d.media?.player.perform($0, at: mediaNow()) }
            d.media?.received.append(ReceivedMediaCommand(id: value[0], performed: changed != nil))
            fields.append("id", .int(Int(value[0])))
            if let command { fields.append("command", .string(command.name)) }
            fields.append("outcome", .string(changed == nil ? "ignored" : "performed"))
            note(device, "media_command", fields)
            let shown = command.map { "\($0.name) (\($0.rawValue))" } ?? "reserved ID \(value[0])"
            log("\(name): AMS Remote Command \(shown) \(changed == nil ? "ignored: not supported now" : "performed")")
            if let changed { queueUpdates(changed, &d, device) }
        case .entityUpdate:
            guard entityUpdateReady(d) else {
                throw refuse("media_register", "Entity Update", AMSError.invalidState, "not subscribed to the Entity Update")
            }
            guard let (entity, attributes) = MediaPlayer.registration(value) else {
                throw refuse("media_register", "Entity Update", AMSError.invalidCommand, "malformed")
            }
            d.media?.registrations[entity] = attributes
            fields.append("entity", .int(Int(entity.rawValue)))
            fields.append("attributes", .array(attributes.map { .int(Int($0)) }))
            fields.append("outcome", .string("accepted"))
            note(device, "media_register", fields)
            log("\(name): AMS Entity Update registration: entity \(entity.rawValue), attributes \(attributes)")
            // The current values of what was registered, at once.
            for a in attributes {
                if let pair = MediaAttribute(entity: entity.rawValue, attribute: a) { queueUpdate(pair, &d, device) }
            }
        case .entityAttribute:
            guard entityUpdateReady(d) else {
                throw refuse("media_attribute", "Entity Attribute", AMSError.invalidState, "not subscribed to the Entity Update")
            }
            guard let selected = MediaPlayer.selection(value) else {
                throw refuse("media_attribute", "Entity Attribute", AMSError.invalidCommand, "malformed")
            }
            d.media?.selected = selected
            fields.append("op", .string("write"))
            fields.append("entity", .int(Int(selected.entity.rawValue)))
            fields.append("attribute", .int(Int(selected.attribute)))
            fields.append("outcome", .string("accepted"))
            note(device, "media_attribute", fields)
        default:
            throw BlueZError.forATT(.writeNotPermitted)
        }
    }

    /// A Media Remote may write to the Entity Update and Entity Attribute, and read the latter,
    /// only while it has the Entity Update's notifications enabled (when the phone offers the
    /// Entity Update at all).
    private func entityUpdateReady(_ d: DeviceState) -> Bool {
        d.entityUpdate.isActive || !settings.amsCharacteristics.contains(.entityUpdate)
    }

    /// ReadValue of the Entity Attribute: the whole value of the attribute selected last (at
    /// most ATT's 512 bytes), from the `offset` option, as bluetoothd's long read returns it.
    func readEntityAttribute(_ call: MethodCall, _ device: Int) throws -> [DBusValue] {
        var offset = 0
        if case .dictionary(_, _, let entries)? = call.arguments.first,
           var option = entries.last(where: { $0.key.stringValue == "offset" })?.value {
            if case .variant(let inner) = option { option = inner }
            // bluetoothd takes only a uint16 offset.
            guard let o = option.uint16Value else { throw BlueZError.invalidArguments() }
            offset = Int(o)
        }
        return try state.withLock { s throws -> [DBusValue] in
            let d = s.devices[device]
            guard d.connected else { throw BlueZError.notConnected }
            guard let media = d.media else { throw BlueZError.failed("Not available") }
            var fields: JSONObject = ["session": .int(Int(d.session)), "op": .string("read"), "offset": .int(offset)]
            func refuse(_ code: ATTErrorCode, _ why: String) -> any Error {
                fields.append("outcome", .string(BlueZError.hex(code.rawValue)))
                note(device, "media_attribute", fields)
                log("\(d.settings.name): AMS Entity Attribute read refused with ATT \(BlueZError.hex(code.rawValue)) (\(why))")
                return BlueZError.forATT(code)
            }
            guard entityUpdateReady(d) else { throw refuse(AMSError.invalidState, "not subscribed to the Entity Update") }
            // Nothing selected yet: the strictest answer (docs/field-evidence.md).
            guard let selected = media.selected else { throw refuse(AMSError.invalidState, "no attribute written first") }
            fields.append("entity", .int(Int(selected.entity.rawValue)))
            fields.append("attribute", .int(Int(selected.attribute)))
            let text = Array(media.player.value(of: selected, at: mediaNow()).utf8)
            let value = MediaPlayer.cut(text, to: MediaPlayer.maxAttributeLength).0
            guard !value.isEmpty else { throw refuse(AMSError.absentAttribute, "the attribute is empty") }
            guard offset <= value.count else { throw refuse(ATTErrorCode(rawValue: 0x07), "offset past the value") }
            fields.append("length", .int(value.count - offset))
            fields.append("outcome", .string("accepted"))
            note(device, "media_attribute", fields)
            return [.byteArray(Array(value[offset...]))]
        }
    }

    // MARK: Notifications

    /// Queues the Remote Command notification, the supported commands, if it is enabled.
    /// Call under the lock.
    func queueCommandList(_ d: inout DeviceState, _ device: Int) {
        guard d.connected, d.amsExported, d.remoteCommand.isActive, let list = d.media?.player.commandList else { return }
        outbox(device, .remoteCommand).send(.value(list, session: d.session))
    }

    /// Queues an Entity Update notification of `a`'s current value. Call under the lock.
    private func queueUpdate(_ a: MediaAttribute, _ d: inout DeviceState, _ device: Int) {
        guard let player = d.media?.player else { return }
        let bytes = MediaPlayer.entityUpdate(a, value: player.value(of: a, at: mediaNow()), mtu: d.settings.mtu)
        outbox(device, .entityUpdate).send(.value(bytes, session: d.session))
    }

    /// Queues an Entity Update notification for each registered attribute among `changed`: one
    /// notification per attribute, entity by entity in the order `changed` names them, each
    /// entity's in the order they were registered. Call under the lock.
    func queueUpdates(_ changed: [MediaAttribute], _ d: inout DeviceState, _ device: Int) {
        guard !changed.isEmpty, d.connected, d.amsExported, d.entityUpdate.isActive,
              let registrations = d.media?.registrations
        else { return }
        var entities: [MediaEntity] = []
        for a in changed where !entities.contains(a.entity) { entities.append(a.entity) }
        for entity in entities {
            for id in registrations[entity] ?? [] {
                guard let a = MediaAttribute(entity: entity.rawValue, attribute: id), changed.contains(a) else { continue }
                queueUpdate(a, &d, device)
            }
        }
    }

    /// The `--events` record of an AMS notification sent: `media_commands` (Remote Command) or
    /// `media_update` (Entity Update).
    func noteMediaValue(_ bytes: [UInt8], device: Int, session: UInt64, _ c: PhoneCharacteristic, at t: UInt64) {
        var fields: JSONObject = ["session": .int(Int(session))]
        if c == .remoteCommand {
            fields.append("commands", .array(bytes.map { id in MediaCommand(rawValue: id).map { .string($0.name) } ?? .int(Int(id)) }))
            return note(device, "media_commands", fields, at: t)
        }
        guard bytes.count >= 3 else { return }
        fields.append("entity", .int(Int(bytes[0])))
        fields.append("attribute", .int(Int(bytes[1])))
        fields.append("truncated", .bool(bytes[2] & 1 != 0))
        fields.append("value", .string(String(decoding: bytes[3...], as: UTF8.self)))
        note(device, "media_update", fields, at: t)
    }

    // MARK: Steps

    /// A `media_*` step on phone `device`.
    func media(_ step: MediaStep, device: Int) async throws {
        let name = settings.devices[device].name
        guard settings.ams else { throw SimulatorError.bus("\(name): a media step needs \"ams\": true in the settings") }
        if case .service(let present) = step {
            return await onBus { c in self.setMediaService(present, device, c) }
        }
        await onBus { _ in
            self.state.withLock { s in
                guard s.devices[device].media != nil else { return }
                let now = self.mediaNow()
                let changed: [MediaAttribute]
                switch step {
                case .track(let track): changed = s.devices[device].media?.player.setTrack(track, at: now) ?? []
                case .play: changed = s.devices[device].media?.player.setPlaying(true, at: now) ?? []
                case .pause: changed = s.devices[device].media?.player.setPlaying(false, at: now) ?? []
                case .volume(let value): changed = s.devices[device].media?.player.setVolume(value) ?? []
                case .commands(let commands):
                    changed = []
                    if s.devices[device].media?.player.setCommands(commands) ?? false { self.queueCommandList(&s.devices[device], device) }
                case .service: changed = []
                }
                self.queueUpdates(changed, &s.devices[device], device)
            }
        }
        log("\(name): \(step.logDescription)")
    }

    /// `media_service`: the phone withdraws AMS or offers it again, as iOS does with Service
    /// Changed: bluetoothd ends the service's subscriptions (acquired sockets hang up) and removes
    /// its objects (InterfacesRemoved), or adds them (InterfacesAdded); Device1 UUIDs follow.
    /// The Media Remote's registrations go with the service.
    func setMediaService(_ present: Bool, _ device: Int, _ c: isolated DBusConnection?) {
        let name = settings.devices[device].name
        let change = state.withLock { s -> (toggled: Bool, path: ObjectPath, uuids: [String], shown: Bool)? in
            guard let media = s.devices[device].media, media.offered != present else { return nil }
            let wasExported = s.devices[device].amsExported
            if !present { _ = s.devices[device].endSubscriptions([.remoteCommand, .entityUpdate]) }
            s.devices[device].media?.offered = present
            s.devices[device].media?.forgetRegistrations()
            let d = s.devices[device]
            return (wasExported != d.amsExported, d.paths.device, deviceUUIDs(d), d.present)
        }
        guard let change else { return log("\(name): AMS is already \(present ? "offered" : "withdrawn")") }
        if let c {
            c.assumeIsolated { c in
                if change.toggled {
                    if present { try? self.exportAMS(device, c) } else { self.unexportAMS(device, c) }
                }
                if change.shown {
                    try? c.setExportedProperty(path: change.path, interface: BlueZ.device1, name: "UUIDs", value: .stringArray(change.uuids))
                }
            }
        }
        note(device, "media_service", ["present": .bool(present)])
        log("\(name): AMS \(present ? "offered again" : "withdrawn") (Service Changed)")
    }
}

extension MediaStep {
    var logDescription: String {
        switch self {
        case .track(let t): "now playing \"\(t.title)\" by \(t.artist) (\(t.album), \(t.duration) s)"
        case .play: "playing"
        case .pause: "paused"
        case .volume(let v): "volume \(v)"
        case .commands(let list): "supported commands: [\(list.map(\.name).joined(separator: ", "))]"
        case .service(let present): present ? "AMS offered" : "AMS withdrawn"
        }
    }
}
