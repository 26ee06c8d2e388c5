import BluetoothUUIDs
import BlueZ
import DBus
import JSON

/// Keeping the phone registered with bluetoothd and connected to the accessory.
extension GattPhone {
    /// Five times a second: registers with a new bluetoothd, finds the accessory, connects, pairs.
    func maintain(_ connection: DBusConnection, owner: BlueZOwner) async {
        var lastReported = ""
        func status(_ text: String, _ fields: JSONObject = [:]) {
            guard text != lastReported else { return }
            lastReported = text
            event(text, fields)
        }
        while !Task.isCancelled {
            do {
                try await tick(connection, owner: owner, status: status)
            } catch is CancellationError {
                return
            } catch {
                status("error", ["message": .string("\(error)")])
            }
            try? await Task.sleep(for: .milliseconds(200))
        }
    }

    private func tick(
        _ connection: DBusConnection, owner: BlueZOwner, status: (String, JSONObject) -> Void
    ) async throws {
        guard let bluez = owner.current else {
            state.withLock { $0.registeredWith = nil; $0.connected = false; $0.subscribed = false }
            status("bluetoothd_gone", [:])
            return
        }
        if state.withLock({ $0.registeredWith }) != bluez {
            try await register(connection)
            state.withLock {
                $0.registeredWith = bluez
                $0.discovering = false
                $0.connectNotBefore = .now + Self.settle
                $0.applicationRegistered = configuration.policy == .lenient
                $0.tapped = false
            }
            event("registered", ["bluetoothd": .string(bluez)])
        }
        let tree = BlueZObjectTree(try await connection.getManagedObjects(destination: BlueZ.service, timeout: .seconds(5)))
        if configuration.policy == .strict { try await registerANCSOnceBonded(connection, tree: tree) }
        guard tree.property(adapterPath, BlueZ.adapterInterface, "Powered")?.boolValue == true else {
            linkChanged(connected: false)
            state.withLock { $0.connectNotBefore = .now + Self.settle }
            status("adapter_off", [:])
            return
        }
        if configuration.policy == .strict {
            return try await strictTick(connection, tree: tree, status: status)
        }
        guard let peer = accessory(in: tree) else {
            // A first meeting: the accessory is found by scanning for its advertisement.
            if !state.withLock({ $0.discovering }) {
                try await call(connection, adapterPath, BlueZ.adapterInterface, "SetDiscoveryFilter",
                               [.variantDictionary(["Transport": .string("le")])])
                try await call(connection, adapterPath, BlueZ.adapterInterface, "StartDiscovery")
                state.withLock { $0.discovering = true }
            }
            status("scanning", [:])
            return
        }
        if state.withLock({ $0.discovering }) {
            state.withLock { $0.discovering = false }
            try? await call(connection, adapterPath, BlueZ.adapterInterface, "StopDiscovery")
        }
        linkChanged(connected: peer.connected)
        if !peer.connected {
            guard state.withLock({ $0.reconnect }) else { return status("staying_away", [:]) }
            guard ContinuousClock.now >= state.withLock({ $0.connectNotBefore }) else { return }
            status("connecting", [:])
            do {
                try await call(connection, peer.path, BlueZ.deviceInterface, "Connect", timeout: .seconds(20))
            } catch {
                state.withLock { $0.connectNotBefore = .now + Self.settle }
                status("connect_failed", ["message": .string("\(error)")])
            }
            return
        }
        guard peer.servicesResolved else { return status("resolving", [:]) }
        // BlueZ 5.66 never answers Pair() while Connect's service discovery runs, so only now.
        if !peer.paired, !state.withLock({ $0.pairAttempted }) {
            state.withLock { $0.pairAttempted = true }
            event("pairing")
            do {
                try await call(connection, peer.path, BlueZ.deviceInterface, "Pair", timeout: .seconds(60))
                event("paired")
            } catch {
                event("pair_failed", ["message": .string("\(error)")])
            }
            return
        }
        status(peer.paired ? "connected_bonded" : "connected", [:])
        if consumerSubscribed(tree) { subscriptionSeen(fromConsumerSide: true) }
        amsConsumerSeen(tree)
    }

    /// The accessory as the phone's adapter knows it, once bluetoothd has seen it.
    func accessory(in tree: BlueZObjectTree) -> BlueZDevice? {
        tree.devices.first { $0.adapter == adapterPath && $0.address == configuration.peer }
    }

    /// Whether the accessory's bluetoothd holds a subscription to our Notification Source.
    ///
    /// BlueZ keeps a bonded client's CCC values across connections and calls StartNotify on the
    /// application only when a value changes, so a consumer that subscribes again after a
    /// reconnect is invisible to a GATT application. iOS sees every CCC write and replays its
    /// notifications then. To act like iOS, the phone looks at the other end of the link on the
    /// same bus: its Notification Source characteristic shows Notifying or NotifyAcquired once
    /// the CCC write has succeeded.
    func consumerSubscribed(_ tree: BlueZObjectTree) -> Bool {
        guard let ownAddress = tree.property(adapterPath, BlueZ.adapterInterface, "Address")?.stringValue,
              let accessoryAdapter = tree.adapters.first(where: {
                  tree.property($0, BlueZ.adapterInterface, "Address")?.stringValue == configuration.peer
              }),
              let phone = tree.devices.first(where: { $0.adapter == accessoryAdapter && $0.address == ownAddress }),
              let ancs = tree.ancsCharacteristics(of: phone.path)
        else { return false }
        func on(_ name: String) -> Bool {
            tree.property(ancs.notificationSource, BlueZ.gattCharacteristicInterface, name)?.boolValue == true
        }
        return on("Notifying") || on("NotifyAcquired")
    }

    /// Whether the accessory's bluetoothd holds a subscription to `characteristic` of our
    /// `service` (both UUIDs), as `consumerSubscribed` looks at the Notification Source.
    func consumerNotifying(_ tree: BlueZObjectTree, service: String, characteristic: String) -> Bool {
        guard let ownAddress = tree.property(adapterPath, BlueZ.adapterInterface, "Address")?.stringValue,
              let accessoryAdapter = tree.adapters.first(where: {
                  tree.property($0, BlueZ.adapterInterface, "Address")?.stringValue == configuration.peer
              }),
              let phone = tree.devices.first(where: { $0.adapter == accessoryAdapter && $0.address == ownAddress }),
              let serviceUUID = BluetoothUUID(service), let characteristicUUID = BluetoothUUID(characteristic),
              let path = tree.gattServices(serviceUUID, of: phone.path).first?.characteristics[characteristicUUID]
        else { return false }
        func on(_ name: String) -> Bool { tree.property(path, BlueZ.gattCharacteristicInterface, name)?.boolValue == true }
        return on("Notifying") || on("NotifyAcquired")
    }

    /// The pause before connecting after bluetoothd or the radio came up, or an attempt failed.
    static let settle: Duration = .seconds(2)

    /// RegisterAgent (the phone's own: the pairings it starts, and incoming ones while it is
    /// the default agent) and, lenient, RegisterApplication.
    private func register(_ connection: DBusConnection) async throws {
        do {
            try await call(connection, "/org/bluez", BlueZ.agentManagerInterface, "RegisterAgent",
                           [.objectPath(Self.agentPath), .string("DisplayYesNo")])
        } catch DBusError.remote(let name, _) where name == "org.bluez.Error.AlreadyExists" {}
        if configuration.policy == .strict {
            // The pairing its HID host starts asks the default agent: the phone's user answers.
            try? await call(connection, "/org/bluez", BlueZ.agentManagerInterface, "RequestDefaultAgent",
                            [.objectPath(Self.agentPath)])
        } else {
            try await registerApplication(connection)
        }
    }

    func registerApplication(_ connection: DBusConnection) async throws {
        try await call(connection, adapterPath, "org.bluez.GattManager1", "RegisterApplication",
                       [.objectPath(ANCSApplication.root), .variantDictionary([:])], timeout: .seconds(10))
    }

    /// Notes the link going up or down: a new connection is a new ANCS session.
    func linkChanged(connected: Bool) {
        let changed = state.withLock { s -> Bool in
            guard s.connected != connected else { return false }
            s.connected = connected
            s.resolvedOnLink = false
            // A new link starts with no CCC write seen: BlueZ restores a bond's CCC values
            // without telling the application.
            s.unsubscribedByCCC = false
            s.media?.newLink()
            if connected {
                s.model.newSession(renumber: configuration.settings.renumberOnConnect)
            } else {
                s.subscribed = false
            }
            return true
        }
        if changed { event(connected ? "link_up" : "link_down") }
    }

    func call(
        _ connection: DBusConnection, _ path: ObjectPath, _ interface: String, _ member: MemberName,
        _ arguments: [DBusValue] = [], timeout: Duration = .seconds(10)
    ) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: path, interface: try InterfaceName(interface), member: member,
            arguments: arguments, timeout: timeout)
    }
}
