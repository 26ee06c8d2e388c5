import ANCS
import BluetoothUUIDs
import DBus
import JSON

/// The BlueZ object tree and its method handlers. Every handler is `immediate`: it runs on
/// the connection's loop, inside its isolation, and its reply is sent before anything it
/// queued for the outboxes.
extension PhoneSimulator {
    func exportAll(_ c: isolated DBusConnection) throws {
        c.exportObjectManager(at: .root)
        try c.export(rootObject(c), at: BlueZ.root)
        try c.export(adapterObject(c), at: BlueZ.adapterPath)
        for device in settings.devices.indices {
            let d = state.withLock { $0.devices[device] }
            guard d.present else { continue }
            try exportDevice(device, c)
            if d.ancsExported { try exportANCS(device, c) }
            if d.amsExported { try exportAMS(device, c) }
        }
    }

    /// Exports a phone's Device1 as its state says.
    func exportDevice(_ device: Int, _ c: isolated DBusConnection) throws {
        let d = state.withLock { $0.devices[device] }
        try c.export(deviceObject(device, d, c), at: d.paths.device)
    }

    /// Exports a phone's ANCS service and characteristics.
    func exportANCS(_ device: Int, _ c: isolated DBusConnection) throws {
        let paths = state.withLock { $0.devices[device].paths }
        try c.export(serviceObject(ANCSUUID.service.description, paths.device), at: paths.service)
        for characteristic in PhoneCharacteristic.ancs {
            try c.export(characteristicObject(device, characteristic, paths, c), at: paths.characteristic(characteristic))
        }
    }

    /// Exports a phone's Apple Media Service and the characteristics the scenario offers (the
    /// service first, then each characteristic, as bluetoothd registers them).
    func exportAMS(_ device: Int, _ c: isolated DBusConnection) throws {
        let paths = state.withLock { $0.devices[device].paths }
        try c.export(serviceObject(AMSUUID.service, paths.device), at: paths.amsService)
        for characteristic in settings.amsCharacteristics {
            try c.export(characteristicObject(device, characteristic, paths, c), at: paths.characteristic(characteristic))
        }
    }

    /// Removes a phone's Apple Media Service: each characteristic, then the service, as
    /// bluetoothd unregisters them when Service Changed takes the service away.
    func unexportAMS(_ device: Int, _ c: isolated DBusConnection) {
        let paths = state.withLock { $0.devices[device].paths }
        for characteristic in settings.amsCharacteristics { c.unexport(paths.characteristic(characteristic)) }
        c.unexport(paths.amsService)
    }

    /// The Device1 UUIDs: the phone's services, AMS among them while it is offered.
    func deviceUUIDs(_ d: DeviceState) -> [String] {
        var uuids = [
            "00001800-0000-1000-8000-00805f9b34fb", "00001801-0000-1000-8000-00805f9b34fb",
            "00001805-0000-1000-8000-00805f9b34fb", "0000180a-0000-1000-8000-00805f9b34fb",
            "0000180f-0000-1000-8000-00805f9b34fb", ANCSUUID.service.description,
        ]
        if d.media?.offered ?? false { uuids.append(AMSUUID.service) }
        return uuids
    }

    /// Runs `body` in the isolation of the connection a handler belongs to.
    private func onQueue(
        _ conn: DBusConnection?, _ body: @Sendable (isolated DBusConnection) throws -> [DBusValue]
    ) throws -> [DBusValue] {
        guard let conn else { throw BlueZError.failed("Not available") }
        return try conn.assumeIsolated { c in try body(c) }
    }

    func method(
        _ name: MemberName, input: Signature = .empty, output: Signature = .empty, _ conn: DBusConnection,
        _ body: @escaping @Sendable (MethodCall, isolated DBusConnection) throws -> [DBusValue]
    ) -> ExportedMethod {
        .immediate(name, input: input, output: output) { [weak self, weak conn] call in
            guard let self else { throw BlueZError.failed("Not available") }
            return try self.onQueue(conn) { c in try body(call, c) }
        }
    }

    // MARK: /org/bluez

    private func rootObject(_ conn: DBusConnection) -> ExportedObject {
        ExportedObject(
            ExportedInterface(BlueZ.agentManager1, methods: [
                method("RegisterAgent", input: "os", conn) { call, _ in
                    try self.registerAgent(call)
                },
                method("UnregisterAgent", input: "o", conn) { call, _ in
                    try self.unregisterAgent(call)
                },
                method("RequestDefaultAgent", input: "o", conn) { call, _ in
                    try self.requestDefaultAgent(call)
                },
            ]),
            ExportedInterface("org.bluez.ProfileManager1", methods: [
                method("RegisterProfile", input: "osa{sv}", conn) { _, _ in [] },
                method("UnregisterProfile", input: "o", conn) { _, _ in [] },
            ]))
    }

    private static let capabilities: Set<String> = [
        "", "DisplayOnly", "DisplayYesNo", "KeyboardOnly", "NoInputNoOutput", "KeyboardDisplay",
    ]

    private func registerAgent(_ call: MethodCall) throws -> [DBusValue] {
        guard let path = call.arguments.first?.objectPathValue, let capability = call.arguments.last?.stringValue else {
            throw BlueZError.invalidArguments()
        }
        guard Self.capabilities.contains(capability) else { throw BlueZError.invalidArguments() }
        try state.withLock { s in
            // bluetoothd allows one agent per client connection.
            guard !s.agents.contains(where: { $0.sender == call.sender }) else {
                throw DBusError.remote(name: "org.bluez.Error.AlreadyExists", message: "Already Exists")
            }
            let agent = AgentRegistration(sender: call.sender, path: path, capability: capability.isEmpty ? "KeyboardDisplay" : capability)
            s.agents.append(agent)
            // The first agent becomes the default when there is none.
            if s.defaultAgents.isEmpty { s.defaultAgents.append(agent) }
        }
        log("RegisterAgent \(path) (\(capability)) from \(call.sender)")
        return []
    }

    private func unregisterAgent(_ call: MethodCall) throws -> [DBusValue] {
        let path = call.arguments.first?.objectPathValue
        try state.withLock { s in
            guard let agent = s.agents.first(where: { $0.sender == call.sender && $0.path == path }) else {
                throw DBusError.remote(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist")
            }
            s.removeAgent(agent)
        }
        log("UnregisterAgent \(path?.rawValue ?? "") from \(call.sender)")
        return []
    }

    private func requestDefaultAgent(_ call: MethodCall) throws -> [DBusValue] {
        let path = call.arguments.first?.objectPathValue
        try state.withLock { s in
            guard let agent = s.agents.first(where: { $0.sender == call.sender && $0.path == path }) else {
                throw DBusError.remote(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist")
            }
            s.defaultAgents.removeAll { $0 == agent }
            s.defaultAgents.append(agent)
        }
        log("RequestDefaultAgent \(path?.rawValue ?? "") from \(call.sender)")
        return []
    }

    // MARK: /org/bluez/hci0

    private func adapterObject(_ conn: DBusConnection) -> ExportedObject {
        let accept: @Sendable (DBusValue, MethodCall) throws -> Void = { [log] value, call in
            log("adapter: \(call.arguments.count > 1 ? call.arguments[1].stringValue ?? "?" : "?") = \(value.unwrapped) from \(call.sender)")
        }
        return ExportedObject(
            ExportedInterface(
                BlueZ.adapter1,
                methods: [
                    method("StartDiscovery", conn) { _, c in
                        try? c.setExportedProperty(path: BlueZ.adapterPath, interface: BlueZ.adapter1, name: "Discovering", value: .bool(true))
                        return []
                    },
                    method("StopDiscovery", conn) { _, c in
                        try? c.setExportedProperty(path: BlueZ.adapterPath, interface: BlueZ.adapter1, name: "Discovering", value: .bool(false))
                        return []
                    },
                    method("SetDiscoveryFilter", input: "a{sv}", conn) { _, _ in [] },
                    method("GetDiscoveryFilters", output: "as", conn) { _, _ in
                        [.stringArray(["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"])]
                    },
                    method("RemoveDevice", input: "o", conn) { _, _ in throw BlueZError.notSupported },
                ],
                properties: [
                    ExportedProperty("Address", value: .string(settings.adapterAddress)),
                    ExportedProperty("AddressType", value: .string("public")),
                    ExportedProperty("Name", value: .string(settings.adapterName)),
                    ExportedProperty("Alias", value: .string(settings.adapterName), access: .readWrite, onSet: accept),
                    ExportedProperty("Class", value: .uint32(0x7C_010C)),
                    ExportedProperty("Powered", value: .bool(true), access: .readWrite, onSet: accept),
                    ExportedProperty("PowerState", value: .string("on")),
                    ExportedProperty("Discoverable", value: .bool(settings.adapterDiscoverable), access: .readWrite, onSet: accept),
                    ExportedProperty(
                        "DiscoverableTimeout", value: .uint32(settings.adapterDiscoverableTimeout), access: .readWrite, onSet: accept),
                    ExportedProperty("Pairable", value: .bool(settings.adapterPairable), access: .readWrite, onSet: accept),
                    ExportedProperty("PairableTimeout", value: .uint32(settings.adapterPairableTimeout), access: .readWrite, onSet: accept),
                    ExportedProperty("Discovering", value: .bool(false)),
                    ExportedProperty("UUIDs", value: .stringArray([
                        "00001800-0000-1000-8000-00805f9b34fb", "00001801-0000-1000-8000-00805f9b34fb",
                        "0000180a-0000-1000-8000-00805f9b34fb",
                    ])),
                    ExportedProperty("Modalias", value: .string("usb:v1D6Bp0246d0542")),
                    ExportedProperty("Roles", value: .stringArray(["central", "peripheral"])),
                ]),
            ExportedInterface(
                BlueZ.leAdvertisingManager1,
                methods: [
                    ExportedMethod("RegisterAdvertisement", input: "oa{sv}") { [weak self, weak conn] call in
                        guard let self, let conn else { throw BlueZError.failed("Not available") }
                        return try await self.registerAdvertisement(call, conn)
                    },
                    method("UnregisterAdvertisement", input: "o", conn) { call, c in
                        try self.unregisterAdvertisement(call, c)
                    },
                ],
                properties: [
                    ExportedProperty("ActiveInstances", value: .byte(0)),
                    ExportedProperty("SupportedInstances", value: .byte(5)),
                    ExportedProperty("SupportedIncludes", value: .stringArray(["tx-power", "appearance", "local-name"])),
                ]),
            ExportedInterface(BlueZ.gattManager1, methods: [
                ExportedMethod("RegisterApplication", input: "oa{sv}") { [weak self, weak conn] call in
                    guard let self, let conn else { throw BlueZError.failed("Not available") }
                    return try await self.registerApplication(call, conn)
                },
                method("UnregisterApplication", input: "o", conn) { call, _ in
                    try self.unregisterApplication(call)
                },
            ]))
    }

    // MARK: Device

    private func deviceObject(_ device: Int, _ state: DeviceState, _ conn: DBusConnection) -> ExportedObject {
        let d = settings.devices[device]
        let connected = state.connected
        let trust: @Sendable (DBusValue, MethodCall) throws -> Void = { [weak self] value, call in
            guard let self, let trusted = value.unwrapped.boolValue else { throw BlueZError.invalidArguments() }
            self.state.withLock { $0.devices[device].trusted = trusted }
            self.log("\(d.name): Trusted = \(trusted) from \(call.sender)")
        }
        return ExportedObject(ExportedInterface(
            BlueZ.device1,
            methods: [
                method("Connect", conn) { _, _ in
                    let connected = self.state.withLock { $0.devices[device].connected }
                    // The phone comes back only when the scenario says `connect`.
                    guard connected else { throw BlueZError.failed("le-connection-abort-by-local") }
                    return []
                },
                method("Disconnect", conn) { _, c in
                    self.disconnect(device, c)
                    return []
                },
                ExportedMethod("Pair") { [weak self] call in
                    guard let self else { throw BlueZError.failed("Not available") }
                    return try await self.pairCalled(device, call)
                },
                method("CancelPairing", conn) { call, _ in
                    // bluetoothd cancels only a bonding its own side asked for with Pair(); the
                    // pairings modelled here are begun by the peer (src/device.c, cancel_pairing).
                    self.log("\(d.name): CancelPairing from \(call.sender): DoesNotExist (no pairing begun by this side)")
                    throw DBusError.remote(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist")
                },
                method("ConnectProfile", input: "s", conn) { _, _ in throw BlueZError.notSupported },
                method("DisconnectProfile", input: "s", conn) { _, _ in throw BlueZError.notSupported },
            ],
            properties: [
                ExportedProperty("Address", value: .string(state.address)),
                ExportedProperty("AddressType", value: .string(state.addressType)),
                ExportedProperty("Name", value: .string(d.name)),
                ExportedProperty("Alias", value: .string(d.name)),
                ExportedProperty("Appearance", value: .uint16(0x0040)),
                ExportedProperty("Icon", value: .string("phone")),
                ExportedProperty("Paired", value: .bool(state.paired)),
                ExportedProperty("Bonded", value: .bool(state.bonded)),
                ExportedProperty("Trusted", value: .bool(state.trusted), access: .readWrite, onSet: trust),
                ExportedProperty("Blocked", value: .bool(false)),
                ExportedProperty("LegacyPairing", value: .bool(false)),
                ExportedProperty("Connected", value: .bool(connected)),
                ExportedProperty("UUIDs", value: .stringArray(deviceUUIDs(state))),
                ExportedProperty("Adapter", value: .objectPath(BlueZ.adapterPath)),
                ExportedProperty("ServicesResolved", value: .bool(connected)),
                ExportedProperty("WakeAllowed", value: .bool(false)),
            ]))
    }

    private func serviceObject(_ uuid: String, _ device: ObjectPath) -> ExportedObject {
        ExportedObject(ExportedInterface(BlueZ.gattService1, properties: [
            ExportedProperty("UUID", value: .string(uuid)),
            ExportedProperty("Device", value: .objectPath(device)),
            ExportedProperty("Primary", value: .bool(true)),
            ExportedProperty("Includes", value: .objectPathArray([])),
        ]))
    }
}

/// Up to 64 bytes as lowercase hex, for logs.
func hexString(_ bytes: [UInt8]) -> String {
    bytes.prefix(64).map { BlueZError.hex($0).dropFirst(2) }.joined() + (bytes.count > 64 ? "…" : "")
}
