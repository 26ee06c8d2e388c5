import ANCS
import BluetoothUUIDs
import DBus

/// The iOS policy (`"ios": "strict"`): what bluetoothd and a real iPhone do with an accessory,
/// as docs/field-evidence.md and the D-Bus contract of issue 26 say. The phone lists only a
/// HID advertisement with the ANCS solicitation, pairs only when the accessory demands it (an
/// encrypted attribute to read, or a security request: Device1.Pair()), shows up under a fresh
/// resolvable private address before bonding and under its identity address after, reads the
/// accessory's Report Map (flagging a Keyboard usage when the scenario asked for the remote),
/// subscribes to its input Report and counts input reports, and reconnects by itself only to a
/// connectable HID advertisement.
extension PhoneSimulator {
    static let hidService = "00001812-0000-1000-8000-00805f9b34fb"
    static let reportMapUUID = "00002a4b-0000-1000-8000-00805f9b34fb"
    static let reportUUID = "00002a4d-0000-1000-8000-00805f9b34fb"
    /// Flags of a characteristic bluetoothd serves only over an encrypted link.
    static let encryptedReadFlags: Set<String> = ["encrypt-read", "encrypt-authenticated-read", "secure-read"]

    /// The policy of phone `device`: its own `ios`, else the scenario's.
    func strict(_ device: Int) -> Bool { (settings.devices[device].ios ?? settings.ios) == .strict }

    /// A UUID in the 128-bit lower-case form: 16- and 32-bit short forms ("1812") expand on the
    /// Bluetooth base UUID.
    public static func normalisedUUID(_ text: String) -> String {
        let lower = String(decoding: text.utf8.map { (0x41...0x5A).contains($0) ? $0 + 0x20 : $0 }, as: UTF8.self)
        let hex = lower.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
        if hex, lower.utf8.count == 4 { return "0000" + lower + "-0000-1000-8000-00805f9b34fb" }
        if hex, lower.utf8.count == 8 { return lower + "-0000-1000-8000-00805f9b34fb" }
        return lower
    }

    private static func uuids(_ value: DBusValue?) -> [String] {
        (value?.unwrapped.stringArray ?? []).map(normalisedUUID)
    }

    /// True when an advertisement carries the HID service UUID in ServiceUUIDs.
    static func hasHID(_ advert: AdvertisementRegistration) -> Bool {
        uuids(advert.properties["ServiceUUIDs"]).contains(hidService)
    }

    /// True when iOS lists the advertisement in Settings > Bluetooth: HID in ServiceUUIDs, the
    /// ANCS solicitation, Discoverable, connectable (Type peripheral).
    static func isListed(_ advert: AdvertisementRegistration) -> Bool {
        hasHID(advert) && advert.discoverable && isConnectable(advert)
            && uuids(advert.properties["SolicitUUIDs"]).contains(normalisedUUID(ANCSUUID.service.description))
    }

    static func isConnectable(_ advert: AdvertisementRegistration) -> Bool {
        advert.properties["Type"]?.unwrapped.stringValue == "peripheral"
    }

    /// Waits up to `timeout` for a registered advertisement that `accepts`, and that is on the
    /// air for `device`: with `advertise_while_connected` false, the controller stops
    /// advertising while another device holds a link.
    func waitForAdvertisement(
        timeout: Double, for device: Int? = nil, _ accepts: @escaping @Sendable (AdvertisementRegistration) -> Bool
    ) async throws -> AdvertisementRegistration? {
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        let always = settings.advertiseWhileConnected
        while true {
            let advert = state.withLock { s -> AdvertisementRegistration? in
                if !always, s.devices.indices.contains(where: { $0 != device && s.devices[$0].connected }) { return nil }
                return s.advertisements.first(where: accepts)
            }
            if let advert { return advert }
            guard ContinuousClock.now < deadline else { return nil }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    // MARK: GattManager1

    /// RegisterApplication(root, options): reads the application with GetManagedObjects on
    /// its root before answering, as bluetoothd does, and remembers its services and
    /// characteristics until UnregisterApplication or the client leaves the bus.
    func registerApplication(_ call: MethodCall, _ conn: DBusConnection) async throws -> [DBusValue] {
        guard let root = call.arguments.first?.objectPathValue, let client = BusName(validating: call.sender) else {
            throw BlueZError.invalidArguments()
        }
        let exists = state.withLock { s in s.applications.contains { $0.sender == call.sender && $0.root == root } }
        guard !exists else { throw DBusError.remote(name: "org.bluez.Error.AlreadyExists", message: "Already Exists") }
        let objects: [ObjectPath: [String: [String: DBusValue]]]
        do {
            objects = try await conn.getManagedObjects(destination: client, path: root, timeout: .seconds(5))
        } catch {
            log("RegisterApplication \(root) from \(call.sender): GetManagedObjects failed (\(error))")
            throw BlueZError.failed("Failed to read application")
        }
        let services = objects.filter { $0.value[BlueZ.gattService1.rawValue] != nil }
        guard !services.isEmpty else {
            throw BlueZError.failed("No valid service object found")
        }
        state.withLock { s in
            s.applications.append(ApplicationRegistration(sender: call.sender, root: root, objects: objects))
        }
        let shown = services.keys.sorted { $0.rawValue < $1.rawValue }.map { path in
            let uuid = services[path]?[BlueZ.gattService1.rawValue]?["UUID"]?.unwrapped.stringValue ?? "?"
            let characteristics = objects.filter {
                $0.value[BlueZ.gattCharacteristic1.rawValue]?["Service"]?.unwrapped.objectPathValue == path
            }.count
            return "\(path) \(uuid) (\(characteristics) characteristic(s))"
        }.joined(separator: ", ")
        log("RegisterApplication \(root) from \(call.sender): \(shown)")
        applicationRegistered()
        return []
    }

    func unregisterApplication(_ call: MethodCall) throws -> [DBusValue] {
        let root = call.arguments.first?.objectPathValue
        try state.withLock { s in
            guard let i = s.applications.firstIndex(where: { $0.sender == call.sender && $0.root == root }) else {
                throw DBusError.remote(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist")
            }
            s.applications.remove(at: i)
        }
        log("UnregisterApplication \(root?.rawValue ?? "") from \(call.sender)")
        return []
    }

    /// The characteristics of registered applications that belong to a HID service:
    /// (sender, path, properties), in a stable order.
    private func hidCharacteristics() -> [(sender: String, path: ObjectPath, properties: [String: DBusValue])] {
        let apps = state.withLock { $0.applications }
        var out: [(String, ObjectPath, [String: DBusValue])] = []
        for app in apps {
            let hidServices = Set(app.objects.compactMap { path, interfaces -> ObjectPath? in
                guard let uuid = interfaces[BlueZ.gattService1.rawValue]?["UUID"]?.unwrapped.stringValue,
                      Self.normalisedUUID(uuid) == Self.hidService else { return nil }
                return path
            })
            for (path, interfaces) in app.objects.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                guard let c = interfaces[BlueZ.gattCharacteristic1.rawValue],
                      let service = c["Service"]?.unwrapped.objectPathValue, hidServices.contains(service) else { continue }
                out.append((app.sender, path, c))
            }
        }
        return out
    }

    /// A HID characteristic of a registered application that needs encryption to be read.
    func encryptedHIDAttribute() -> ObjectPath? {
        hidCharacteristics().first { c in
            (c.properties["Flags"]?.unwrapped.stringArray ?? []).contains { Self.encryptedReadFlags.contains($0) }
        }?.path
    }

    // MARK: Addresses

    /// Strict: the phone connects before bonding under a fresh resolvable private address: a
    /// new temporary device object (the one before is gone). Returns the device path.
    func freshTemporaryObject(_ device: Int, _ c: isolated DBusConnection?) throws {
        let (old, wasPresent) = state.withLock { s -> (ObjectPath?, Bool) in
            let d = s.devices[device]
            guard !d.bonded, d.addressUsed || !d.present else { return (nil, d.present) }
            let old = d.present ? d.paths.device : nil
            s.devices[device].address = DeviceState.resolvablePrivateAddress()
            s.devices[device].addressType = "random"
            s.devices[device].paths = DevicePaths(address: s.devices[device].address)
            s.devices[device].present = true
            return (old, d.present)
        }
        guard let c else { return }
        try c.assumeIsolated { c in
            if let old { c.unexport(old) }
            if old != nil || !wasPresent { try self.exportDevice(device, c) }
        }
    }

    /// Strict: a disconnected unbonded phone's temporary object goes away after
    /// `temporary_timeout`, as bluetoothd's TemporaryTimeout does.
    func scheduleTemporaryRemoval(_ device: Int) {
        guard strict(device), let loop else { return }
        let (path, session) = state.withLock { ($0.devices[device].paths.device, $0.devices[device].session) }
        loop.after(.milliseconds(Int(settings.temporaryTimeout * 1000))) { [weak self] in
            guard let self, let conn = self.connection() else { return }
            conn.assumeIsolated { c in
                let gone = self.state.withLock { s -> Bool in
                    let d = s.devices[device]
                    guard !d.bonded, !d.connected, d.present, d.paths.device == path, d.session == session else { return false }
                    s.devices[device].present = false
                    s.devices[device].addressUsed = false
                    return true
                }
                guard gone else { return }
                c.unexport(path)
                self.log("\(self.settings.devices[device].name): temporary device \(path) removed")
            }
        }
    }

    // MARK: Pairing

    /// `pair` under the strict policy.
    func strictPair(_ device: Int, passkey: UInt32, expect: PairingOutcome?, timeout: Double) async throws {
        let name = settings.devices[device].name
        let outcome = try await strictPairOutcome(device, passkey: passkey, timeout: timeout)
        if let expect, expect != outcome {
            throw SimulatorError.timeout("\(name): expected the pairing to be \(expect.rawValue), it was \(outcome.rawValue)")
        }
    }

    private func strictPairOutcome(_ device: Int, passkey: UInt32, timeout: Double) async throws -> PairingOutcome {
        let name = settings.devices[device].name
        guard let advert = try await waitForAdvertisement(timeout: timeout, Self.isListed) else {
            let adverts = state.withLock { $0.advertisements }
            log("""
                \(name): nothing to list within \(timeout) s: iOS lists only a discoverable, connectable advertisement \
                with the HID service 0x1812 in ServiceUUIDs and the ANCS solicitation (registered: \
                \(adverts.isEmpty ? "none" : adverts.map { "\($0.path) of \($0.sender)" }.joined(separator: ", ")))
                """)
            return .notListed
        }
        log("\(name): lists \(advert.path) of \(advert.sender); the user taps it")
        // Set before the link comes up: a Pair() that answers the connection finds the step
        // waiting for it (and does not start a pairing of its own).
        state.withLock { $0.devices[device].awaitingTrigger = true }
        defer { state.withLock { $0.devices[device].awaitingTrigger = false } }
        try await onBusThrowing { c in
            try self.freshTemporaryObject(device, c)
            self.connect(device, c)
        }
        let (path, address) = state.withLock { s -> (ObjectPath, String) in
            s.devices[device].addressUsed = true
            s.devices[device].pairingResult = nil
            return (s.devices[device].paths.device, s.devices[device].address)
        }
        log("\(name): connected as \(address) (resolvable private address), \(path)")
        // What makes iOS pair: an encrypted attribute it reads, or a security request.
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        var trigger: String?
        while trigger == nil {
            let (requested, connected) = state.withLock { ($0.devices[device].securityRequested, $0.devices[device].connected) }
            guard connected else {
                log("\(name): the link dropped before pairing")
                return .notPaired
            }
            if requested {
                trigger = "a security request (Device1.Pair())"
            } else if let attribute = encryptedHIDAttribute() {
                trigger = "reading \(attribute), which needs encryption"
            } else if ContinuousClock.now >= deadline {
                log("\(name): stays connected, unpaired: no encrypted HID attribute and no security request within \(timeout) s")
                return .notPaired
            } else {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        log("\(name): pairing starts: \(trigger ?? "")")
        return try await runPairing(device, passkey: passkey)
    }

    /// The pairing itself: RequestConfirmation to the default agent; success bonds the phone
    /// (strict: its identity address shows, ANCS appears, the phone reads the accessory's HID
    /// service), failure drops the link. A Pair() caller waiting gets the outcome.
    func runPairing(_ device: Int, passkey: UInt32) async throws -> PairingOutcome {
        let name = settings.devices[device].name
        guard let conn = connection() else { throw SimulatorError.bus("bluetoothd is not running") }
        let attempt = state.withLock { s -> UInt64 in
            s.devices[device].pairing = true
            s.devices[device].pairingAttempt &+= 1
            return s.devices[device].pairingAttempt
        }
        let pairable = await conn.simPerform { c in
            c.exportedProperty(path: BlueZ.adapterPath, interface: BlueZ.adapter1, name: "Pairable")?.unwrapped.boolValue ?? false
        }
        let (agent, path) = state.withLock { ($0.pairingAgent, $0.devices[device].paths.device) }
        var outcome = PairingOutcome.rejected
        if !pairable {
            log("\(name): pairing refused: the adapter is not pairable")
        } else if let agent, let destination = BusName(validating: agent.sender) {
            log("\(name): asks to pair; RequestConfirmation(\(path), \(passkey)) to \(agent.path) of \(agent.sender)")
            do {
                _ = try await conn.call(
                    destination: destination, path: agent.path, interface: Self.agentInterface, member: "RequestConfirmation",
                    arguments: [.objectPath(path), .uint32(passkey)], expecting: .empty, timeout: .seconds(60))
                outcome = .paired
            } catch {
                log("\(name): pairing refused by the agent: \(error)")
            }
        } else {
            log("\(name): pairing refused: no agent")
        }
        if outcome == .paired {
            try await bond(device)
        }
        state.withLock { s in
            s.devices[device].pairing = false
            s.devices[device].securityRequested = false
            s.devices[device].pairingResult = (attempt, outcome)
        }
        if outcome == .paired {
            if strict(device) { try await readAccessory(device) }
        } else {
            await onBus { c in self.disconnect(device, c) }
        }
        return outcome
    }

    /// Paired and Bonded; strict: Address and AddressType become the identity's (the object
    /// path stays); then ANCS appears (Service Changed).
    private func bond(_ device: Int) async throws {
        let name = settings.devices[device].name
        try await onBusThrowing { c in
            guard let c else { return }
            let (exportANCS, exportAMS, path, old) = self.state.withLock { s -> (Bool, Bool, ObjectPath, String) in
                let old = s.devices[device].address
                s.devices[device].paired = true
                s.devices[device].bonded = true
                s.devices[device].address = self.settings.devices[device].address
                s.devices[device].addressType = self.settings.devices[device].addressType
                defer { s.devices[device].ancsExported = true }
                let fresh = !s.devices[device].ancsExported
                return (fresh, fresh && s.devices[device].media?.offered ?? false, s.devices[device].paths.device, old)
            }
            try c.assumeIsolated { c in
                if self.strict(device), old != self.settings.devices[device].address {
                    // bluetoothd resolves the RPA with the IRK it just got: the identity shows.
                    try? c.setExportedProperty(path: path, interface: BlueZ.device1, name: "Address", value: .string(self.settings.devices[device].address))
                    try? c.setExportedProperty(path: path, interface: BlueZ.device1, name: "AddressType", value: .string(self.settings.devices[device].addressType))
                    self.log("\(name): identity address \(self.settings.devices[device].address) (was \(old)) on \(path)")
                }
                try? c.setExportedProperty(path: path, interface: BlueZ.device1, name: "Paired", value: .bool(true))
                try? c.setExportedProperty(path: path, interface: BlueZ.device1, name: "Bonded", value: .bool(true))
                // iOS shows ANCS only to a bonded accessory (Service Changed after bonding).
                if exportANCS { try self.exportANCS(device, c) }
                if exportAMS { try self.exportAMS(device, c) }
            }
        }
        log("\(name): paired and bonded; ANCS\(settings.ams ? " and AMS" : "") exposed")
    }

    /// Device1.Pair() on the phone: a security request from the accessory. Answers when the
    /// pairing it starts ends (errors as bluetoothd names them).
    func pairCalled(_ device: Int, _ call: MethodCall) async throws -> [DBusValue] {
        let name = settings.devices[device].name
        let since = state.withLock { s -> Duration? in
            s.devices[device].securityRequests += 1
            return s.devices[device].connectedAt.map { ContinuousClock.now - $0 }
        }
        let milliseconds = since.map(\.wholeMilliseconds)
        log("\(name): Device1.Pair() from \(call.sender): a security request\(milliseconds.map { ", \($0) ms after the link came up" } ?? "")")
        let (attempt, stepRunning) = try state.withLock { s throws -> (UInt64, Bool) in
            let d = s.devices[device]
            if d.paired { throw DBusError.remote(name: "org.bluez.Error.AlreadyExists", message: "Already Exists") }
            guard d.connected else { throw BlueZError.failed("Not connected") }
            if d.pairing || d.securityRequested { throw BlueZError.inProgress }
            s.devices[device].securityRequested = true
            // A pair step running for this phone picks the request up; otherwise the phone
            // answers it by itself.
            return (d.pairingAttempt, d.awaitingTrigger)
        }
        if !stepRunning {
            _ = try await runPairing(device, passkey: 123_456)
        }
        let deadline = ContinuousClock.now + .seconds(70)
        while ContinuousClock.now < deadline {
            let result = state.withLock { s -> PairingOutcome? in
                guard let r = s.devices[device].pairingResult, r.attempt > attempt else { return nil }
                return r.outcome
            }
            switch result {
            case .paired?: return []
            case .some: throw DBusError.remote(name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed")
            case nil: break
            }
            if !state.withLock({ $0.devices[device].connected || $0.devices[device].pairing }) {
                state.withLock { $0.devices[device].securityRequested = false }
                throw DBusError.remote(name: "org.bluez.Error.AuthenticationCanceled", message: "Authentication Canceled")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        state.withLock { $0.devices[device].securityRequested = false }
        throw DBusError.remote(name: "org.bluez.Error.AuthenticationTimeout", message: "Authentication Timeout")
    }

    // MARK: After bonding: the accessory's HID service

    /// The bonded phone reads the Report Map (noting a Keyboard usage, flagged when the scenario
    /// asked for the remote), subscribes to the
    /// input Report (StartNotify on the application) and counts the input reports.
    func readAccessory(_ device: Int) async throws {
        let name = settings.devices[device].name
        guard let conn = connection() else { return }
        let characteristics = hidCharacteristics()
        let (path, mtu) = state.withLock { ($0.devices[device].paths.device, $0.devices[device].settings.mtu) }
        if let map = characteristics.first(where: { Self.normalisedUUID($0.properties["UUID"]?.unwrapped.stringValue ?? "") == Self.reportMapUUID }),
           let destination = BusName(validating: map.sender) {
            var bytes: [UInt8] = []
            do {
                // bluetoothd reads a long value with Read Blob: one ReadValue per offset.
                while bytes.count < 512 {
                    let reply = try await conn.call(
                        destination: destination, path: map.path, interface: BlueZ.gattCharacteristic1, member: "ReadValue",
                        arguments: [.variantDictionary([
                            "offset": .uint16(UInt16(bytes.count)), "device": .objectPath(path), "mtu": .uint16(UInt16(mtu)),
                            "link": .string("LE"),
                        ])],
                        expecting: "ay", timeout: .seconds(5))
                    let chunk = reply[0].bytes ?? []
                    bytes += chunk
                    if chunk.count < mtu - 1 { break }
                }
                let keyboard = Self.reportMapHasKeyboard(bytes)
                let flagged = keyboard && settings.accessory == .remote
                state.withLock { s in
                    s.devices[device].hid.reportMap = bytes
                    s.devices[device].hid.keyboard = keyboard
                    s.devices[device].hid.flagged = flagged
                }
                log("""
                    \(name): read the Report Map \(map.path): \(bytes.count) bytes, keyboard usage: \(keyboard ? "yes" : "no") \
                    (\(settings.accessory.rawValue) asked for)\(flagged ? ": FLAGGED, a keyboard where a remote was asked for" : "")
                    """)
            } catch {
                log("\(name): cannot read the Report Map \(map.path): \(error)")
            }
        } else {
            log("\(name): no Report Map to read (no HID service registered)")
        }
        guard let report = characteristics.first(where: { c in
            Self.normalisedUUID(c.properties["UUID"]?.unwrapped.stringValue ?? "") == Self.reportUUID
                && (c.properties["Flags"]?.unwrapped.stringArray ?? []).contains("notify")
        }), let sender = BusName(validating: report.sender) else {
            log("\(name): no input Report to subscribe to")
            return
        }
        do {
            // Counted from before the subscription, so no report can slip by; one match rule per
            // application characteristic and bluetoothd connection.
            let key = report.sender + " " + report.path.rawValue
            if state.withLock({ $0.devices[device].hid.watched.insert(key).inserted }) {
                _ = try await conn.subscribe(to: .propertiesChanged(sender: sender, path: report.path, interface: BlueZ.gattCharacteristic1)) {
                    [weak self] signal in
                    guard let self, let change = try? PropertiesChanged(signal), change.changed["Value"] != nil else { return }
                    let count = self.state.withLock { s -> Int in
                        guard s.devices[device].hid.watched.contains(key) else { return 0 }
                        s.devices[device].hid.inputReports += 1
                        return s.devices[device].hid.inputReports
                    }
                    if count > 0 { self.log("\(name): input report \(count) from \(report.path)") }
                }
            }
            _ = try await conn.call(
                destination: sender, path: report.path, interface: BlueZ.gattCharacteristic1, member: "StartNotify",
                timeout: .seconds(5))
            state.withLock { $0.devices[device].hid.report = (report.sender, report.path) }
            log("\(name): subscribed to the input Report \(report.path) of \(report.sender)")
        } catch {
            state.withLock { $0.devices[device].hid.report = nil }
            log("\(name): cannot subscribe to the input Report \(report.path): \(error)")
        }
    }

    /// True when a HID Report Map has a Generic Desktop (usage page 0x01) Keyboard (0x06) usage,
    /// the one that makes iOS hide its on-screen keyboard (a Keypad, 0x07, does not): walks the
    /// short items, tracking the usage page (a 4-byte usage carries its own page in its high
    /// half).
    public static func reportMapHasKeyboard(_ map: [UInt8]) -> Bool {
        var page: UInt32 = 0
        var i = 0
        while i < map.count {
            let prefix = map[i]
            if prefix == 0xFE {
                // A long item: size in the next byte.
                guard i + 1 < map.count else { return false }
                i += 3 + Int(map[i + 1])
                continue
            }
            let size = [0, 1, 2, 4][Int(prefix & 0x03)]
            guard i + size < map.count else { return false }
            var data: UInt32 = 0
            for k in 0..<size { data |= UInt32(map[i + 1 + k]) << (8 * UInt32(k)) }
            let type = (prefix >> 2) & 0x03
            let tag = prefix >> 4
            if type == 1, tag == 0 { page = data }  // Global: Usage Page
            if type == 2, tag == 0 || tag == 1 || tag == 2 {  // Local: Usage, Usage Minimum, Usage Maximum
                let (usagePage, usage) = size == 4 ? (data >> 16, data & 0xFFFF) : (page, data)
                if usagePage == 0x01, usage == 0x06 { return true }
            }
            i += 1 + size
        }
        return false
    }

    // MARK: Reconnection

    /// `connect` under the strict policy: only a bonded phone comes back, and only to a
    /// registered connectable advertisement with the HID service UUID.
    func strictConnect(_ device: Int, timeout: Double, expectAway: Bool) async throws {
        let name = settings.devices[device].name
        let (bonded, connected) = state.withLock { ($0.devices[device].bonded, $0.devices[device].connected) }
        if connected, !expectAway { return }
        var advert: AdvertisementRegistration?
        if bonded {
            advert = try await waitForAdvertisement(timeout: timeout, for: device) { Self.hasHID($0) && Self.isConnectable($0) }
        } else if !expectAway {
            throw SimulatorError.timeout("\(name): an iPhone reconnects by itself only to a bonded accessory; it is not bonded")
        } else {
            try await Task.sleep(for: .seconds(timeout))
        }
        guard let advert else {
            let message = "\(name) stays away: no registered connectable advertisement with the HID service UUID 0x1812 within \(timeout) s"
            if expectAway { return log(message + " (as expected)") }
            throw SimulatorError.timeout(message)
        }
        if expectAway {
            throw SimulatorError.timeout("\(name) was expected to stay away, but \(advert.path) of \(advert.sender) brings it back")
        }
        log("\(name): reconnects to \(advert.path) of \(advert.sender)")
        await onBus { c in self.connect(device, c) }
        // A bonded HID host subscribes to the input report again at every connection.
        if encryptedHIDAttribute() != nil || !hidCharacteristics().isEmpty { try await readAccessory(device) }
    }

    /// A HID application appeared: every bonded, connected phone reads it and subscribes (as
    /// a bonded iPhone does when the accessory's service shows up, after Service Changed).
    func applicationRegistered() {
        let devices = state.withLock { s in s.devices.indices.filter { strict($0) && s.devices[$0].bonded && s.devices[$0].connected } }
        guard !devices.isEmpty, !hidCharacteristics().isEmpty else { return }
        Task(executorPreference: loop) {
            for device in devices { try? await self.readAccessory(device) }
        }
    }
}
