import ANCS
import DBus
import JSON

/// The phone's GATT characteristics on the bus: their objects, the subscriptions (StartNotify,
/// StopNotify, AcquireNotify) of ANCS's and AMS's, and the Control Point's writes and answers.
extension PhoneSimulator {
    func characteristicObject(
        _ device: Int, _ characteristic: PhoneCharacteristic, _ paths: DevicePaths, _ conn: DBusConnection
    ) -> ExportedObject {
        var properties = [
            ExportedProperty("UUID", value: .string(characteristic.uuid)),
            ExportedProperty("Service", value: .objectPath(paths.service(of: characteristic))),
            ExportedProperty("Value", value: .byteArray([])),
            ExportedProperty("Flags", value: .stringArray(characteristic.flags)),
        ]
        if characteristic.notifies {
            let subscription = state.withLock { $0.devices[device].subscription(characteristic) }
            properties.append(ExportedProperty("Notifying", value: .bool(!subscription.clients.isEmpty)))
            properties.append(ExportedProperty("NotifyAcquired", value: .bool(subscription.acquired != nil)))
        }
        return ExportedObject(ExportedInterface(
            BlueZ.gattCharacteristic1,
            methods: [
                method("ReadValue", input: "a{sv}", output: "ay", conn) { call, _ in
                    try self.requireConnected(device)
                    guard characteristic == .entityAttribute else { throw BlueZError.notPermitted("Read not permitted") }
                    return try self.readEntityAttribute(call, device)
                },
                // One call per notification of a burst: it enters the connection's isolation
                // only when it changes what shows on D-Bus.
                .immediate("WriteValue", input: "aya{sv}") { [weak self, weak conn] call in
                    guard let self, let conn else { throw BlueZError.failed("Not available") }
                    return try self.writeValue(call, device, characteristic, conn)
                },
                method("AcquireWrite", input: "a{sv}", output: "hq", conn) { _, _ in
                    try self.requireConnected(device)
                    throw BlueZError.notSupported
                },
                method("AcquireNotify", input: "a{sv}", output: "hq", conn) { call, c in
                    try self.acquireNotify(call, device, characteristic, c)
                },
                method("StartNotify", conn) { call, c in
                    try self.startNotify(call, device, characteristic, c)
                },
                method("StopNotify", conn) { call, c in
                    try self.stopNotify(call, device, characteristic, c)
                },
            ],
            properties: properties))
    }

    private func requireConnected(_ device: Int) throws {
        guard state.withLock({ $0.devices[device].connected }) else { throw BlueZError.notConnected }
    }

    private func startNotify(
        _ call: MethodCall, _ device: Int, _ characteristic: PhoneCharacteristic, _ c: isolated DBusConnection
    ) throws -> [DBusValue] {
        let changes = try state.withLock { s throws -> [PropertyChange] in
            var d = s.devices[device]
            defer { s.devices[device] = d }
            guard characteristic.notifies else { throw BlueZError.notSupported }
            // bluetoothd 5.66 answers success on a link that is down ("we will automatically try
            // and register all clients when a GATT client becomes ready"): a client that
            // subscribes then is told nothing. (That the session then survives into the next
            // link is not modelled: the simulator forgets it.)
            guard d.connected else { return [] }
            let sub = d.subscription(characteristic)
            if sub.acquired != nil { throw BlueZError.notPermitted("Notify acquired") }
            if d.refusedSubscriptions > 0 {
                d.refusedSubscriptions -= 1
                log("\(d.settings.name): StartNotify refused (refuse_subscribe, \(d.refusedSubscriptions) more)")
                throw BlueZError.notPermitted("Notify acquired")
            }
            if sub.clients.contains(call.sender) { return [] }
            let wasActive = sub.isActive
            d.modifySubscription(characteristic) { _ = $0.clients.insert(call.sender) }
            if !wasActive { activated(&d, characteristic, device) }
            return sub.clients.isEmpty
                ? [PropertyChange(d.paths.characteristic(characteristic), BlueZ.gattCharacteristic1, "Notifying", .bool(true))]
                : []
        }
        apply(changes, c)
        return []
    }

    private func stopNotify(
        _ call: MethodCall, _ device: Int, _ characteristic: PhoneCharacteristic, _ c: isolated DBusConnection
    ) throws -> [DBusValue] {
        let changes = try state.withLock { s throws -> [PropertyChange] in
            var d = s.devices[device]
            defer { s.devices[device] = d }
            guard characteristic.notifies else { throw BlueZError.notSupported }
            // bluetoothd ends an acquired session for whoever asks.
            if d.subscription(characteristic).acquired != nil { return d.releaseAcquired(characteristic) }
            guard d.subscription(characteristic).clients.contains(call.sender) else {
                throw BlueZError.failed("No notify session started")
            }
            return d.endSession(of: call.sender, characteristic)
        }
        apply(changes, c)
        return []
    }

    private func acquireNotify(
        _ call: MethodCall, _ device: Int, _ characteristic: PhoneCharacteristic, _ c: isolated DBusConnection
    ) throws -> [DBusValue] {
        let (changes, clientEnd, mtu) = try state.withLock { s throws -> ([PropertyChange], Int32, Int) in
            var d = s.devices[device]
            defer { s.devices[device] = d }
            // A call that reaches a bluetoothd on its way out (its subscriptions already dropped)
            // acquires nothing: the socket would outlive that bluetoothd.
            guard s.connection === c else { throw BlueZError.failed("bluetoothd is stopping") }
            guard d.connected else { throw BlueZError.notConnected }
            guard settings.acquireNotify else { throw BlueZError.notSupported }
            let sub = d.subscription(characteristic)
            if sub.acquired != nil { throw BlueZError.notPermitted("Notify acquired") }
            if d.refusedSubscriptions > 0, characteristic.notifies {
                d.refusedSubscriptions -= 1
                log("\(d.settings.name): AcquireNotify refused (refuse_subscribe, \(d.refusedSubscriptions) more)")
                throw BlueZError.notPermitted("Notify acquired")
            }
            if !sub.clients.isEmpty { throw BlueZError.inProgress }
            guard characteristic.notifies else { throw BlueZError.notSupported }
            guard let (socket, clientEnd) = NotifySocket.makePair(
                sender: call.sender, queue: socketQueue, onPeerClosed: { [weak self] in self?.socketClosed($0) })
            else { throw BlueZError.failed("Failed to create socket") }
            d.modifySubscription(characteristic) { $0.acquired = socket }
            activated(&d, characteristic, device)
            let change = PropertyChange(d.paths.characteristic(characteristic), BlueZ.gattCharacteristic1, "NotifyAcquired", .bool(true))
            return ([change], clientEnd, d.settings.mtu)
        }
        apply(changes, c)
        // The reply dups the descriptor; ours closes when the reply has been sent.
        return [.unixFD(UnixFD(adopting: clientEnd)), .uint16(UInt16(mtu))]
    }

    /// The phone sees notifications enabled: on the Notification Source it replays every
    /// notification it holds, as iOS does at the start of a session; on AMS's Remote Command it
    /// sends the supported commands; on its Entity Update it starts with nothing registered.
    /// Call under the lock.
    func activated(_ d: inout DeviceState, _ characteristic: PhoneCharacteristic, _ device: Int) {
        // Called only when the first subscription comes after the last went: bluetoothd writes the CCCD.
        if d.silence.cccdRewritten(characteristic, sharingDenied: d.model.sharingDenied) {
            log("\(d.settings.name): the \(characteristic == .dataSource ? "Data Source" : "Notification Source") CCCD was rewritten; it sends again")
        }
        switch characteristic {
        case .remoteCommand:
            // The supported commands, at once.
            queueCommandList(&d, device)
            return
        case .entityUpdate:
            // A new subscription starts with no registrations (the strictest, docs/field-evidence.md).
            d.media?.forgetRegistrations()
            return
        case .notificationSource: break
        default: return
        }
        let outbox = outbox(device, .notificationSource)
        let replay = d.model.replay()
        note(device, "subscribed", ["session": .int(Int(d.session)), "replay": .int(replay.count)])
        for event in replay { outbox.send(.value(event.encoded, session: d.session)) }
    }

    /// Logs a Control Point write and how the phone answered it to the `--events` log, with the
    /// attributes a response carried (keyed by attribute ID) as the Data Source sends them.
    private func noteWrite(_ value: [UInt8], _ outcome: String, response: [UInt8]?, _ d: DeviceState, _ device: Int) {
        guard events != nil else { return }
        var fields: JSONObject = ["session": .int(Int(d.session)), "outcome": .string(outcome)]
        if d.slowDelay > 0, response != nil { fields.append("delay", .double(d.slowDelay)) }
        guard let request = try? ControlPointRequest(decoding: value) else {
            fields.append("request", .string("malformed"))
            return note(device, "cp", fields)
        }
        switch request {
        case .getNotificationAttributes(let uid, _):
            fields.append("request", .string("notification"))
            fields.append("uid", .int(Int(uid)))
        case .getAppAttributes(let identifier, _):
            fields.append("request", .string("app"))
            fields.append("app", .string(identifier))
        case .performNotificationAction(let uid, let action):
            fields.append("request", .string("action"))
            fields.append("uid", .int(Int(uid)))
            fields.append("action", .string(action == .positive ? "positive" : "negative"))
        }
        if let response {
            var reassembler = DataSourceReassembler()
            // A response missing an omitted tuple never completes: take what it carried.
            if (try? reassembler.expect(request)) != nil,
               let decoded = reassembler.feed(response).response ?? reassembler.finishEarly() {
                var attributes = JSONObject()
                for a in decoded.attributes { attributes.append(String(a.rawID), .string(String(decoding: a.value, as: UTF8.self))) }
                fields.append("attributes", .object(attributes))
                if !decoded.isComplete { fields.append("incomplete", .bool(true)) }
            }
        }
        note(device, "cp", fields)
    }

    /// Runs on the connection's loop (an `immediate` handler). The `type` option is the last
    /// entry of that name whose value (through nested variants) is a string; any other
    /// value counts as no `type`.
    private func writeValue(
        _ call: MethodCall, _ device: Int, _ characteristic: PhoneCharacteristic, _ conn: DBusConnection
    ) throws -> [DBusValue] {
        let value = call.arguments.first?.bytes ?? []
        let type = call.arguments.last.flatMap { Self.stringOption("type", in: $0) }
        let (changes, dropLink) = try state.withLock { s throws -> ([PropertyChange], Bool) in
            // The phone's state is changed in place: a copy would retain every field of it.
            try answerWrite(value, type: type, characteristic, device, &s.devices[device])
        }
        guard !changes.isEmpty || dropLink else { return [] }
        try conn.assumeIsolated { c in
            apply(changes, c)
            if dropLink {
                // The link is lost with the write in flight: bluetoothd fails the call.
                log("\(settings.devices[device].name): link lost during a Control Point write")
                disconnect(device, c)
                throw BlueZError.failed("Operation failed")
            }
        }
        return []
    }

    /// In an `a{sv}`: the value of the last entry named `key`, through any nested variants, if
    /// it is a string.
    private static func stringOption(_ key: String, in options: DBusValue) -> String? {
        guard case .dictionary(_, _, let entries) = options,
              var value = entries.last(where: { $0.key.stringValue == key })?.value
        else { return nil }
        while case .variant(let inner) = value { value = inner }
        return value.stringValue
    }

    /// How phone `device` (`d`, under the lock) answers a write: the property changes to show
    /// and whether the link drops with it.
    private func answerWrite(
        _ value: [UInt8], type: String?, _ characteristic: PhoneCharacteristic, _ device: Int, _ d: inout DeviceState
    ) throws -> ([PropertyChange], Bool) {
        guard d.connected else { throw BlueZError.notConnected }
        if let type, type != "request" {
            guard type == "command" || type == "reliable" else { throw BlueZError.invalidArguments() }
            throw BlueZError.notSupported
        }
        if characteristic.isAMS {
            try answerMediaWrite(value, characteristic, device, &d)
            return ([], false)
        }
        guard characteristic == .controlPoint else { throw BlueZError.forATT(.writeNotPermitted) }
        if d.disconnectOnWrite {
            d.disconnectOnWrite = false
            noteWrite(value, "disconnect", response: nil, d, device)
            return ([], true)
        }
        if d.silence.controlPointUnanswered {
            noteWrite(value, "unanswered", response: nil, d, device)
            log("\(d.settings.name): CP write \(hexString(value)) never answered (silent_drop_all)")
            throw WithheldReply()
        }
        switch d.model.handleControlPoint(value) {
        case .rejected(let code):
            noteWrite(value, BlueZError.hex(code.rawValue), response: nil, d, device)
            log("\(d.settings.name): CP write \(hexString(value)) refused with ATT \(BlueZError.hex(code.rawValue))")
            throw BlueZError.forATT(code)
        case .accepted(let response?):
            if d.silentRequests > 0 {
                d.silentRequests -= 1
                noteWrite(value, "silent", response: nil, d, device)
                log("\(d.settings.name): CP write \(hexString(value)) acknowledged, never answered")
                return ([], false)
            }
            noteWrite(value, "accepted", response: response, d, device)
            queueResponse(response, &d, device)
            return ([], false)
        case .accepted(nil):
            noteWrite(value, "accepted", response: nil, d, device)
            // An action on a call or a dismissal takes the notification away, as on the phone.
            guard case .performNotificationAction(let uid, let action)? = try? ControlPointRequest(decoding: value)
            else { return ([], false) }
            log("\(d.settings.name): Perform Notification Action \(action == .positive ? "positive" : "negative") on UID \(uid)")
            guard let n = d.model.notification(uid: uid),
                  action == .negative || n.category == .incomingCall,
                  let event = d.model.remove(key: n.key)
            else { return ([], false) }
            Self.queueEvent(event, &d, outbox(device, .notificationSource))
            return ([], false)
        }
    }

    /// Queues a Data Source response in fragments of at most mtu - 3 bytes, honouring `slow`
    /// and `mid_response_disconnect`.
    private func queueResponse(_ response: [UInt8], _ d: inout DeviceState, _ device: Int) {
        let outbox = outbox(device, .dataSource)
        if d.slowDelay > 0 { outbox.send(.pause(d.slowDelay, session: d.session)) }
        if d.midResponseDisconnect {
            d.midResponseDisconnect = false
            let half = Array(response.prefix(max(1, response.count / 2)))
            for fragment in DataSourceEncoder.fragments(of: half, mtu: d.settings.mtu) {
                outbox.send(.value(fragment, session: d.session))
            }
            outbox.send(.disconnect(session: d.session))
            return
        }
        // A response that fits one value (most do) is sent as it is, not copied into a fragment.
        if !response.isEmpty, response.count <= max(d.settings.mtu, 23) - 3 {
            return outbox.send(.value(response, session: d.session))
        }
        for fragment in DataSourceEncoder.fragments(of: response, mtu: d.settings.mtu) {
            outbox.send(.value(fragment, session: d.session))
        }
    }
}
