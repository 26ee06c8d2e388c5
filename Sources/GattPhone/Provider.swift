import ANCS
import BlueZ
import DBus
import JSON
import PhoneSimulator

/// The Notification Provider side: Control Point writes, subscriptions and scenario steps.
extension GattPhone {
    /// A Control Point write, on the connection's loop: the answer goes back as the write's
    /// reply, and a Data Source response follows it through the outbox.
    ///
    /// While a `silent_drop_all` is in force the write gets no answer: the reply is held for
    /// `unansweredHold` (past ancsd's 5 s request timeout), then the write fails. A held write
    /// blocks the ATT bearer, so the accessory's CCCD rewrites queue behind it; holding it
    /// longer would only wait for bluetoothd's own 25 s D-Bus timeout, which answers the write
    /// with an error in the phone's place.
    func controlPointWrite(_ value: [UInt8], options: [String: DBusValue]) async throws {
        if state.withLock({ $0.silentDrop.controlPointSilent }) {
            event("control_point_unanswered", ["request": .string(hex(value))])
            try await Task.sleep(for: Self.unansweredHold)
            throw DBusError.remote(name: "org.bluez.Error.Failed", message: "no answer")
        }
        let fragments = try controlPointWritten(value, options: options)
        guard !fragments.isEmpty else { return }
        // The handler runs in a task of its own and its reply leaves after it returns: the
        // response follows the write's reply, as the synchronous handler's did.
        Task {
            try? await Task.sleep(for: .milliseconds(15))
            for fragment in fragments { outboxInput.yield((.ancs(.dataSource), fragment)) }
        }
    }

    static let unansweredHold: Duration = .seconds(8)

    /// The answer to a Control Point write; returns the Data Source values to send after it.
    func controlPointWritten(_ value: [UInt8], options: [String: DBusValue]) throws -> [[UInt8]] {
        let (outcome, mtu) = state.withLock { s in
            if let mtu = options["mtu"]?.unwrapped.uint16Value { s.mtu = Int(mtu) }
            return (s.model.handleControlPoint(value), s.mtu)
        }
        var fields: JSONObject = ["request": .string(hex(value)), "mtu": .int(mtu)]
        switch outcome {
        case .accepted(let response):
            guard let response else {
                event("control_point", fields)
                return []
            }
            let fragments = DataSourceEncoder.fragments(of: response, valueSize: Self.valueSize(mtu: mtu))
            fields.append("response_bytes", .int(response.count))
            fields.append("fragments", .int(fragments.count))
            event("control_point", fields)
            return fragments
        case .rejected(let code):
            let (name, sent) = Self.dbusError(for: code)
            fields.append("rejected", .string(code.description))
            fields.append("att_error_sent", .string(sent))
            event("control_point", fields)
            throw DBusError.remote(name: name, message: "ATT \(code.description)")
        }
    }

    /// The most a notification can carry: between two BlueZ stacks notifications travel as
    /// Multiple Handle Value Notifications, which hold MTU - 5 bytes of a value, and no
    /// attribute value exceeds 512 bytes.
    static func valueSize(mtu: Int) -> Int { max(1, min(mtu - 5, 512)) }

    /// The D-Bus error a GATT application answers with for an ATT error, and the code bluetoothd
    /// 5.66 puts on the air for it: its `dbus_error_to_att_ecode` knows only a few names and
    /// sends 0x80 for `Failed`, so ANCS's own codes (0xA0-0xA2) cannot leave a BlueZ application.
    static func dbusError(for code: ATTErrorCode) -> (name: String, sentCode: String) {
        switch code {
        case .writeNotPermitted: ("org.bluez.Error.NotPermitted", "0x03")
        default: ("org.bluez.Error.Failed", "0x80")
        }
    }

    /// StartNotify/StopNotify from bluetoothd. Each subscription to the Notification Source makes
    /// the phone send every notification it holds, flagged pre-existing, as iOS does; that
    /// includes a consumer that unsubscribes and subscribes again on a link that stays up (a
    /// consumer restarted by its watchdog: bluetoothd writes the CCC off, then on again).
    func notifyChanged(_ role: ANCSCharacteristicRole, _ enabled: Bool) {
        event(enabled ? "subscribed" : "unsubscribed", ["characteristic": .string(role.rawValue)])
        if state.withLock({ $0.silentDrop.notify(role, enabled: enabled) }) {
            event("silent_drop_ended", ["characteristic": .string(role.rawValue)])
        }
        guard role == .notificationSource else { return }
        if enabled {
            state.withLock { $0.unsubscribedByCCC = false }
            subscriptionSeen()
        } else {
            state.withLock { $0.subscribed = false; $0.unsubscribedByCCC = true }
        }
    }

    /// The consumer subscribed to the Notification Source (StartNotify, or seen from its side):
    /// the first time in a connection, or since it unsubscribed, every notification is replayed.
    ///
    /// Seen from its side only while no StopNotify is outstanding: when a consumer dies, its
    /// bluetoothd writes the CCC off and shows NotifyAcquired a moment longer, and a replay then
    /// would go to nobody (the system test's watchdog step lost both notifications so).
    func subscriptionSeen(fromConsumerSide: Bool = false) {
        let replay = state.withLock { s -> [NotificationSourceEvent]? in
            guard s.connected, !s.subscribed, !(fromConsumerSide && s.unsubscribedByCCC) else { return nil }
            s.subscribed = true
            return s.model.replay()
        }
        guard let replay else { return }
        for ns in replay { outboxInput.yield((.ancs(.notificationSource), ns.encoded)) }
        event("consumer_subscribed", ["replayed": .int(replay.count)])
    }

    /// Sends a Notification Source event if a client is subscribed; otherwise the phone keeps
    /// the notification and replays it at the next subscription.
    private func send(_ ns: NotificationSourceEvent?) {
        guard let ns else { return }
        let (live, dropped) = state.withLock {
            ($0.connected && $0.subscribed, $0.silentDrop.dropped.contains(.notificationSource))
        }
        if live && !dropped { outboxInput.yield((.ancs(.notificationSource), ns.encoded)) }
        event("notification", [
            "kind": .string(ns.eventID.description), "uid": .int(Int(ns.notificationUID)), "sent": .bool(live && !dropped),
            "dropped_silently": .bool(live && dropped),
        ])
    }

    /// Runs one scenario step.
    func perform(_ step: ScenarioStep, _ connection: DBusConnection) async {
        if step.after > 0 { try? await Task.sleep(for: .seconds(step.after)) }
        switch step.action {
        case .add(let spec):
            send(state.withLock { $0.model.add(spec) })
        case .modify(let uid, let change):
            send(state.withLock { $0.model.modify(key: uid, change) })
        case .remove(let uid):
            send(state.withLock { $0.model.remove(key: uid) })
        case .burst(let count, let startUID, let rate, let category, let app):
            for i in 0..<count {
                let spec = NotificationSpec.burst(index: i, count: count, startUID: startUID, category: category, app: app)
                send(state.withLock { $0.model.add(spec) })
                if rate > 0 { try? await Task.sleep(for: .seconds(1 / rate)) }
            }
        case .cpError(let code, let count):
            state.withLock { $0.model.injectedError = (ATTErrorCode(rawValue: code), count) }
        case .denySharing:
            state.withLock { $0.model.sharingDenied = true }
        case .allowSharing:
            state.withLock { $0.model.sharingDenied = false }
        case .omit(let attribute):
            state.withLock { $0.model.omitted = attribute.map { [$0] } ?? [] }
        case .disconnect:
            // The phone walks away: it drops the link and stays away until a `connect` step.
            state.withLock { $0.reconnect = false }
            await disconnect(connection)
        case .connect:
            // Strict: the user taps the accessory once (a Disconnect() on the phone's side
            // turned its bluetoothd's auto-connect off); lenient: the phone reconnects itself.
            state.withLock { $0.reconnect = true; $0.userConnect = configuration.policy == .strict }
        case .silentDrop, .silentDropAll:
            let all = step.action == .silentDropAll
            state.withLock { $0.silentDrop.drop(all: all) }
            event("silent_drop", ["control_point": .string(all ? "unanswered" : "answered")])
        case .waitSubscribed(let timeout):
            let deadline = ContinuousClock.now + .seconds(timeout)
            while !state.withLock({ $0.connected && $0.subscribed }) {
                guard ContinuousClock.now < deadline else { return event("error", ["message": .string("line \(step.line): not subscribed after \(timeout) s")]) }
                try? await Task.sleep(for: .milliseconds(100))
            }
        case .sleep(let seconds):
            try? await Task.sleep(for: .seconds(seconds))
        case .end:
            return
        case .media(let media):
            guard performMedia(media, line: step.line) else { return }
        case .restartBlueZ, .slow, .midResponseDisconnect, .cpTimeout, .disconnectOnWrite, .heal, .refuseSubscribe, .staleSockets, .appear, .pair, .waitState,
             .releaseAdvertisements, .rogue, .sharingOff, .sharingOn, .strangerConnect, .strangerPair, .garbage:
            event("error", ["message": .string("line \(step.line): this step needs the simulated bluetoothd (ancs-phone-sim)")])
            return
        }
        event("step", ["line": .int(step.line)])
    }

    private func disconnect(_ connection: DBusConnection) async {
        do {
            let tree = BlueZObjectTree(try await connection.getManagedObjects(destination: BlueZ.service, timeout: .seconds(5)))
            guard let peer = accessory(in: tree) else { return }
            try await call(connection, peer.path, BlueZ.deviceInterface, "Disconnect")
        } catch {
            event("error", ["message": .string("disconnect: \(error)")])
        }
    }
}

func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count * 2)
    for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
    return String(decoding: out, as: UTF8.self)
}
