import ANCS
import BluetoothUUIDs
import DBus

/// What bluetoothd does for pairing and advertising: agents and advertisements registered by
/// clients, a phone that appears, connects and pairs through the default agent, and the
/// steps that check it all.
extension PhoneSimulator {
    static let agentInterface: InterfaceName = "org.bluez.Agent1"
    static let advertisementInterface: InterfaceName = "org.bluez.LEAdvertisement1"

    // MARK: LEAdvertisingManager1

    /// RegisterAdvertisement: reads the client's LEAdvertisement1 properties with GetAll
    /// before answering, as bluetoothd does, and checks them.
    func registerAdvertisement(_ call: MethodCall, _ conn: DBusConnection) async throws -> [DBusValue] {
        guard let path = call.arguments.first?.objectPathValue, let client = BusName(validating: call.sender) else {
            throw BlueZError.invalidArguments()
        }
        let exists = state.withLock { s in s.advertisements.contains { $0.sender == call.sender && $0.path == path } }
        guard !exists else { throw DBusError.remote(name: "org.bluez.Error.AlreadyExists", message: "Already Exists") }
        let properties: [String: DBusValue]
        do {
            properties = try await conn.getAllProperties(
                destination: client, path: path, interface: Self.advertisementInterface, timeout: .seconds(5))
        } catch {
            log("RegisterAdvertisement \(path) from \(call.sender): cannot read its properties (\(error))")
            throw BlueZError.failed("Failed to parse advertisement.")
        }
        guard let type = properties["Type"]?.unwrapped.stringValue, type == "peripheral" || type == "broadcast" else {
            throw BlueZError.invalidArguments("Failed to parse advertisement.")
        }
        let count = try state.withLock { s throws -> Int in
            guard s.advertisements.count < 5 else {
                throw DBusError.remote(name: "org.bluez.Error.NotPermitted", message: "Maximum advertisements reached")
            }
            s.advertisements.append(AdvertisementRegistration(sender: call.sender, path: path, properties: properties))
            return s.advertisements.count
        }
        await conn.simPerform { c in
            try? c.setExportedProperty(path: BlueZ.adapterPath, interface: BlueZ.leAdvertisingManager1, name: "ActiveInstances", value: .byte(UInt8(count)))
        }
        let shown = properties.keys.sorted().map { "\($0)=\(properties[$0]?.unwrapped.description ?? "")" }.joined(separator: " ")
        log("RegisterAdvertisement \(path) from \(call.sender): \(shown)")
        return []
    }

    func unregisterAdvertisement(_ call: MethodCall, _ c: isolated DBusConnection) throws -> [DBusValue] {
        let path = call.arguments.first?.objectPathValue
        let count = try state.withLock { s throws -> Int in
            guard let i = s.advertisements.firstIndex(where: { $0.sender == call.sender && $0.path == path }) else {
                throw DBusError.remote(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist")
            }
            s.advertisements.remove(at: i)
            return s.advertisements.count
        }
        try? c.setExportedProperty(path: BlueZ.adapterPath, interface: BlueZ.leAdvertisingManager1, name: "ActiveInstances", value: .byte(UInt8(count)))
        log("UnregisterAdvertisement \(path?.rawValue ?? "") from \(call.sender)")
        return []
    }

    /// A client left the bus: bluetoothd forgets its agent and advertisements.
    func dropRegistrations(of client: String) {
        let (agents, adverts, apps) = state.withLock { s -> ([AgentRegistration], [AdvertisementRegistration], [ApplicationRegistration]) in
            let agents = s.agents.filter { $0.sender == client }
            for agent in agents { s.removeAgent(agent) }
            let adverts = s.advertisements.filter { $0.sender == client }
            s.advertisements.removeAll { $0.sender == client }
            let apps = s.applications.filter { $0.sender == client }
            s.applications.removeAll { $0.sender == client }
            return (agents, adverts, apps)
        }
        for agent in agents { log("client \(client) left: its agent \(agent.path) is gone") }
        for advert in adverts { log("client \(client) left: its advertisement \(advert.path) is gone") }
        for app in apps { log("client \(client) left: its application \(app.root) is gone") }
    }

    /// A new bluetoothd knows no agents and no advertisements.
    func forgetRegistrations() {
        state.withLock { s in
            s.agents = []
            s.defaultAgents = []
            s.advertisements = []
            s.applications = []
        }
    }

    // MARK: Steps

    /// `appear`: bluetoothd sees the phone for the first time.
    func appear(_ device: Int) async throws {
        try await onBusThrowing { c in
            let shown = self.state.withLock { s -> Bool in
                guard !s.devices[device].present else { return false }
                s.devices[device].present = true
                return true
            }
            guard shown, let c else { return }
            try c.assumeIsolated { c in try self.exportDevice(device, c) }
            self.log("\(self.settings.devices[device].name): appeared (not paired)")
        }
    }

    /// `pair`: the phone connects to our advertisement and asks to pair; bluetoothd asks the
    /// default agent to confirm the passkey. Success bonds the phone and shows its ANCS service.
    /// Strict (`strictPair`): only a listed advertisement, and only when the accessory demands it.
    func pair(_ device: Int, passkey: UInt32, expect: PairingOutcome?, timeout: Double) async throws {
        if strict(device) { return try await strictPair(device, passkey: passkey, expect: expect, timeout: timeout) }
        try await appear(device)
        let name = settings.devices[device].name
        await onBus { c in self.connect(device, c) }
        let outcome = try await runPairing(device, passkey: passkey)
        if let expect, expect != outcome {
            throw SimulatorError.timeout("\(name): expected the pairing to be \(expect.rawValue), it was \(outcome.rawValue)")
        }
    }

    /// `wait_state`: polls until everything the step names holds.
    func waitState(_ e: StateExpectation, device: Int, timeout: Double) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(timeout)
        while true {
            let (matches, description) = await currentState(e, device: device)
            if matches { return }
            guard clock.now < deadline else {
                throw SimulatorError.timeout("state not reached within \(timeout) s: \(description)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    private func currentState(_ e: StateExpectation, device: Int) async -> (Bool, String) {
        let adapter = await onBus { c -> [String: DBusValue] in
            guard let c else { return [:] }
            return c.assumeIsolated { c in
                var out: [String: DBusValue] = [:]
                for name in ["Pairable", "Discoverable", "PairableTimeout", "DiscoverableTimeout"] {
                    out[name] = c.exportedProperty(path: BlueZ.adapterPath, interface: BlueZ.adapter1, name: name)
                }
                return out
            }
        }
        let s = state.withLock { ($0.agents, $0.defaultAgents.last, $0.advertisements, $0.devices[device], $0.applications.count) }
        let (agents, defaultAgent, adverts, d, applications) = s
        var ok = !adapter.isEmpty
        func check<T: Equatable>(_ wanted: T?, _ actual: T?) { if let wanted, wanted != actual { ok = false } }
        check(e.pairable, adapter["Pairable"]?.unwrapped.boolValue)
        check(e.discoverable, adapter["Discoverable"]?.unwrapped.boolValue)
        check(e.pairableTimeout, adapter["PairableTimeout"]?.unwrapped.uint32Value)
        check(e.discoverableTimeout, adapter["DiscoverableTimeout"]?.unwrapped.uint32Value)
        check(e.agents, agents.count)
        check(e.defaultAgent, defaultAgent != nil)
        check(e.advertisements, adverts.count)
        check(e.discoverableAdvertisements, adverts.filter(\.discoverable).count)
        check(e.paired, d.paired)
        check(e.trusted, d.trusted)
        check(e.connected, d.connected)
        check(e.bonded, d.bonded)
        check(e.address, d.present ? d.address : nil)
        check(e.applications, applications)
        check(e.inputReports, d.hid.inputReports)
        check(e.keyboard, d.hid.reportMap == nil ? nil : d.hid.keyboard)
        check(e.accessoryFlagged, d.hid.reportMap == nil ? nil : d.hid.flagged)
        check(e.reportSubscribed, d.hid.report != nil)
        check(e.mediaState, d.media.map { $0.player.playing ? "playing" : "paused" })
        // A count that only grows, polled every 10 ms: at least the number asked for (a burst
        // of commands may pass the exact number between two looks).
        if let wanted = e.mediaCommandsReceived, (d.media?.received.count ?? -1) < wanted { ok = false }
        check(e.securityRequests, d.securityRequests)
        let text = adapter.isEmpty ? "bluetoothd is down" : """
            Pairable=\(adapter["Pairable"]?.description ?? "?") Discoverable=\(adapter["Discoverable"]?.description ?? "?") \
            PairableTimeout=\(adapter["PairableTimeout"]?.description ?? "?") DiscoverableTimeout=\(adapter["DiscoverableTimeout"]?.description ?? "?"); \
            agents [\(agents.map { "\($0.path) of \($0.sender)" }.joined(separator: ", "))], \
            default \(defaultAgent.map { "\($0.path)" } ?? "none"); advertisements [\(adverts.map { "\($0.path) of \($0.sender)\($0.discoverable ? " (discoverable)" : "")" }.joined(separator: ", "))]; \
            applications \(applications); \
            \(d.settings.name): \(d.present ? d.address : "not present") connected=\(d.connected) paired=\(d.paired) \
            bonded=\(d.bonded) trusted=\(d.trusted) report_map=\(d.hid.reportMap.map { "\($0.count) bytes" } ?? "unread") \
            keyboard=\(d.hid.keyboard) accessory_flagged=\(d.hid.flagged) report_subscribed=\(d.hid.report != nil) input_reports=\(d.hid.inputReports) \
            security_requests=\(d.securityRequests)\
            \(d.media.map { " media_state=\($0.player.playing ? "playing" : "paused") media_commands_received=\($0.received.count)" } ?? "")
            """
        return (ok, text)
    }

    /// `release_advertisement`: bluetoothd drops every advertisement and tells its owner.
    func releaseAdvertisements() async {
        let adverts = state.withLock { s -> [AdvertisementRegistration] in
            defer { s.advertisements = [] }
            return s.advertisements
        }
        guard let conn = connection() else { return }
        await conn.simPerform { c in
            try? c.setExportedProperty(path: BlueZ.adapterPath, interface: BlueZ.leAdvertisingManager1, name: "ActiveInstances", value: .byte(0))
        }
        for advert in adverts {
            guard let destination = BusName(validating: advert.sender) else { continue }
            log("Release \(advert.path) of \(advert.sender)")
            do {
                _ = try await conn.call(
                    destination: destination, path: advert.path, interface: Self.advertisementInterface, member: "Release",
                    timeout: .seconds(5))
            } catch {
                log("Release \(advert.path): \(error)")
            }
        }
    }

    /// `rogue`: a bus client that is not bluetoothd calls every method of every registered
    /// agent and advertisement. Every call must fail, with `error` if given.
    func rogue(error wanted: String?) async throws {
        let (agents, adverts) = state.withLock { ($0.agents, $0.advertisements) }
        let rogue: DBusConnection
        do {
            rogue = try await DBusConnection.connect(to: busAddress)
        } catch {
            throw SimulatorError.bus("the rogue client cannot connect: \(error)")
        }
        var accepted: [String] = []
        func attempt(_ sender: String, _ path: ObjectPath, _ interface: InterfaceName, _ member: MemberName, _ arguments: [DBusValue]) async {
            guard let destination = BusName(validating: sender) else { return }
            let what = "\(interface).\(member) on \(path) of \(sender)"
            do {
                _ = try await rogue.call(
                    destination: destination, path: path, interface: interface, member: member, arguments: arguments,
                    timeout: .seconds(5))
                accepted.append(what + ": accepted")
            } catch let error as DBusError {
                if let wanted, error.name != wanted {
                    accepted.append(what + ": \(error.name) instead of \(wanted)")
                } else {
                    log("rogue \(rogue.uniqueName): \(what) refused: \(error.name)")
                }
            } catch {
                accepted.append(what + ": \(error)")
            }
        }
        let device = state.withLock { $0.devices[0].paths.device }
        for agent in agents {
            let calls: [(MemberName, [DBusValue])] = [
                ("RequestPinCode", [.objectPath(device)]), ("DisplayPinCode", [.objectPath(device), .string("0000")]),
                ("RequestPasskey", [.objectPath(device)]), ("DisplayPasskey", [.objectPath(device), .uint32(1), .uint16(0)]),
                ("RequestConfirmation", [.objectPath(device), .uint32(123_456)]), ("RequestAuthorization", [.objectPath(device)]),
                ("AuthorizeService", [.objectPath(device), .string(ANCSUUID.service.description)]), ("Cancel", []), ("Release", []),
            ]
            for (member, arguments) in calls {
                await attempt(agent.sender, agent.path, Self.agentInterface, member, arguments)
            }
        }
        for advert in adverts {
            await attempt(advert.sender, advert.path, Self.advertisementInterface, "Release", [])
        }
        await rogue.close()
        guard accepted.isEmpty else {
            throw SimulatorError.timeout("the rogue client was not refused: " + accepted.joined(separator: "; "))
        }
        log("rogue client refused everywhere (\(agents.count) agent(s), \(adverts.count) advertisement(s))")
    }

    /// Like `onBus`, for bodies that throw.
    func onBusThrowing(_ body: @escaping @Sendable (isolated DBusConnection?) throws -> Void) async throws {
        if let conn = connection() {
            try await conn.simPerform { c in try body(c) }
        } else {
            try body(nil)
        }
    }
}
