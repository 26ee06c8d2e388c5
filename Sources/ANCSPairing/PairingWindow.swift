#if canImport(Glibc)
import Glibc
#endif
public import ANCSRuntime
import BlueZ
import DBus

/// One run of `ancsd pair`: sets up, waits for an outcome, and always undoes what it set up.
public actor PairingWindow {
    static let agentPath: ObjectPath = "/org/ancsd/pair/agent"
    static let advertisementPath: ObjectPath = "/org/ancsd/pair/advertisement0"

    let options: PairingOptions
    let logger: Logger
    let interactive: Bool
    private var outcome: PairingOutcome?
    private var waiter: CheckedContinuation<Void, Never>?
    private var connection: DBusConnection?
    private var owner: BlueZOwner?
    private var tree = BlueZObjectTree()
    private var adapter: ObjectPath?
    private var saved: AdapterVisibility?
    private var agentRegistered = false
    private var advertised = false
    private var accessoryExported = false
    /// True once a device that was not bonded before has connected in this window.
    private var phoneConnected = false
    /// True while the HID accessory is registered with bluetoothd on `adapter`.
    private var applicationRegistered = false
    /// The device objects whose security request is scheduled or was sent, once each.
    private var pairRequested: Set<ObjectPath> = []
    /// Devices the agent saw pairing with (`pairingStarted`): the phone started it itself.
    private var pairingBegun: Set<ObjectPath> = []
    /// Devices whose passkey was confirmed here, and those already bonded when the window opened.
    private var confirmed: Set<ObjectPath> = []
    private var bondedBefore: Set<ObjectPath> = []
    private var announcedBond: Set<ObjectPath> = []
    private var trusting = false
    private var prompt: Prompt?
    private var tasks: [Task<Void, Never>] = []

    /// A window for `options`; `interactive` when a person can answer the passkey question.
    public init(options: PairingOptions, logger: Logger, interactive: Bool) {
        self.options = options
        self.logger = logger
        self.interactive = interactive
    }

    /// Ends the window with `outcome` (the first one wins).
    public func finish(_ outcome: PairingOutcome) {
        guard self.outcome == nil else { return }
        self.outcome = outcome
        prompt?.cancel()
        waiter?.resume()
        waiter = nil
    }

    /// Opens the window, waits for its outcome, closes it and reports; the exit status.
    public func run() async -> Int32 {
        await open()
        if outcome == nil {
            await withCheckedContinuation { waiter = $0 }
        }
        let outcome = self.outcome ?? .failed("no outcome")
        await close(after: outcome)
        report(outcome)
        return outcome.status
    }

    // MARK: Opening

    private func open() async {
        do {
            guard let (connection, owner) = try await connectToBlueZ() else { return }
            guard let adapter = chooseAdapter() else { return }
            self.adapter = adapter
            let adapterName = adapter.rawValue.split(separator: "/").last.map(String.init) ?? adapter.rawValue
            bondedBefore = Set(tree.devices.filter { $0.adapter == adapter && $0.isBonded }.map(\.path))
            let alias = tree.property(adapter, BlueZ.adapterInterface, "Alias")?.stringValue ?? ""
            let name = options.name.map(Advertisement.fitted) ?? Advertisement.recognisableName(alias: alias, hostName: hostName())
            guard outcome == nil else { return }

            if options.yes {
                logger.warning("--yes: every pairing request during the next \(options.timeout) s is accepted without asking; any phone in range could pair")
            } else if !interactive {
                logger.warning("standard input is not a terminal: the passkey cannot be confirmed, so pairing requests will be refused (give --yes to accept them)")
            }

            // Remember the adapter's settings before anything changes them: bluetoothd 5.66
            // turns the adapter's Pairable on by itself as soon as any default agent is
            // registered (and off when the last one goes), unless AlwaysPairable is set.
            let saved = try await AdapterVisibility.read(adapter, on: connection)
            self.saved = saved
            try await registerAgent(advertisingAs: name, connection: connection, owner: owner)
            guard outcome == nil else { return }

            // The timeout makes bluetoothd close the window by itself if ancsd is killed before
            // it can. Only Pairable changes: the advertisement's own flags make us discoverable
            // (see AdapterVisibility). The agent is unregistered before the settings are put
            // back, so what bluetoothd does when it goes is overwritten with what was found.
            let margin = UInt32(options.timeout + 30)
            try await AdapterVisibility(pairable: true, pairableTimeout: margin).apply(adapter, on: connection)
            guard outcome == nil else { return }

            // The accessory goes first, on the same adapter: a phone that connects to the
            // advertisement must find the HID service there.
            if let shape = options.accessory.shape {
                try await Accessory.export(shape, on: connection, owner: owner)
                accessoryExported = true
                try await GattManager(connection: connection, adapter: adapter).register(Accessory.root)
                applicationRegistered = true
                logger.info("registered the HID accessory \(Accessory.root) on \(adapterName): \(shape.kind.rawValue) (\(shape.listing)), never sends a key")
                guard outcome == nil else { return }
            }

            try await AdvertisingManager(connection: connection, adapter: adapter).register(Self.advertisementPath)
            advertised = true
            guard outcome == nil else { return }

            startTimers(name: name)
            say("""
                Pairing window open for \(options.timeout) s on \(adapterName), advertising as "\(name)".
                \(Self.whatToLookFor(options.accessory, name: name))

                """)
            check()
        } catch {
            finish(.failed(describe(error)))
        }
    }

    /// Connects to the bus, follows bluetoothd (its signals and who owns its name) and reads its
    /// objects; nil, with the window finished, when bluetoothd is not running.
    private func connectToBlueZ() async throws -> (DBusConnection, BlueZOwner)? {
        let connection = try await DBusConnection.connect(to: options.bus, activatesServices: false)
        self.connection = connection
        let owner = try await BlueZOwner.track(on: connection)
        self.owner = owner
        guard owner.current != nil else {
            finish(.failed("bluetoothd is not running (nobody owns org.bluez)"))
            return nil
        }
        let signals = try await connection.signals(matching: MatchRule(type: .signal, sender: BlueZ.service))
        let owners = try await connection.signals(matching: .nameOwnerChanged(name: BlueZ.service))
        tree = BlueZObjectTree(try await connection.getManagedObjects(destination: BlueZ.service))
        tasks.append(Task { for await s in signals { self.handle(s) } })
        tasks.append(Task { for await s in owners { self.ownerChanged(s) } })
        return (connection, owner)
    }

    /// Exports the pairing agent and the advertisement (advertising as `name`), and makes the
    /// agent bluetoothd's default.
    private func registerAgent(advertisingAs name: String, connection: DBusConnection, owner: BlueZOwner) async throws {
        let agent = PairingAgent(owner: owner) { [weak self] request in
            guard let self else { throw AgentError.rejected }
            return try await self.answer(request)
        }
        try await connection.export(agent.object, at: Self.agentPath)
        let advert = Advertisement(localName: name, discoverable: true, accessory: options.accessory)
        try await connection.export(advert.object(owner: owner) { [weak self] in await self?.advertisementReleased() }, at: Self.advertisementPath)

        let manager = AgentManager(connection: connection)
        try await manager.register(Self.agentPath, capability: "DisplayYesNo")
        agentRegistered = true
        try await manager.requestDefault(Self.agentPath)
    }

    /// Ends the window at its timeout, and says what else to try if no phone has connected by
    /// `noPhoneHintAfter`.
    private func startTimers(name: String) {
        let seconds = options.timeout
        tasks.append(Task {
            try? await Task.sleep(for: .seconds(seconds))
            self.finish(.timedOut)
        })
        let hintAfter = options.noPhoneHintAfter
        if hintAfter < .seconds(seconds) {
            tasks.append(Task {
                guard (try? await Task.sleep(for: hintAfter)) != nil else { return }
                self.noPhoneYet(after: hintAfter, name: name)
            })
        }
    }

    /// What the user looks for on the phone with `kind`, and what it costs.
    static func whatToLookFor(_ kind: AccessoryKind, name: String) -> String {
        switch kind {
        case .keyboard:
            """
            On the iPhone: Settings > Bluetooth, tap "\(name)" (listed as a keyboard) and confirm the passkey.
            While it is connected iOS hides its on-screen keyboard (this one never types): to bring it
            back, tap the keyboard icon at the bottom right when typing, or disconnect "\(name)" in
            Settings > Bluetooth (i); or pair with --accessory remote instead.
            """
        case .remote:
            """
            On the iPhone: Settings > Bluetooth, tap "\(name)" (listed as a remote; the on-screen
            keyboard stays) and confirm the passkey.
            """
        case .disabled:
            """
            On the iPhone: Settings > Bluetooth, tap "\(name)" if it is listed, and confirm the passkey
            (without a HID accessory iOS may not list it at all).
            """
        }
    }

    /// No phone has connected `after` into the window: says so, and how to retry with the
    /// other shape.
    private func noPhoneYet(after: Duration, name: String) {
        guard outcome == nil, !phoneConnected else { return }
        let other = options.accessory.other ?? .keyboard
        say("""

            No phone has connected in \(Self.seconds(after)) s. If the iPhone does not list "\(name)" in
            Settings > Bluetooth, stop here (Ctrl-C) and try the other shape: ancsd pair --accessory \(other.rawValue)

            """)
    }

    /// "45", or "0.5": a duration in seconds as the user reads it.
    static func seconds(_ duration: Duration) -> String {
        let (whole, attoseconds) = duration.components
        guard attoseconds != 0 else { return "\(whole)" }
        return "\(Double(whole) + Double(attoseconds) / 1e18)"
    }

    private func chooseAdapter() -> ObjectPath? {
        let adapters = tree.adapters
        let chosen: ObjectPath?
        if let wanted = options.adapter {
            chosen = adapters.first { $0.rawValue.split(separator: "/").last.map(String.init) == wanted }
            guard chosen != nil else {
                finish(.failed("there is no adapter \(wanted)" + (adapters.isEmpty ? "" : " (have: \(adapters.map { String($0.rawValue.split(separator: "/").last ?? "") }.joined(separator: ", ")))")))
                return nil
            }
        } else {
            chosen = adapters.first { tree.objects[$0]?[BlueZ.advertisingManagerInterface] != nil } ?? adapters.first
            guard chosen != nil else {
                finish(.failed("bluetoothd has no Bluetooth adapter"))
                return nil
            }
        }
        guard let chosen else { return nil }
        guard tree.property(chosen, BlueZ.adapterInterface, "Powered")?.boolValue != false else {
            finish(.failed("adapter \(chosen) is powered off (try: bluetoothctl power on)"))
            return nil
        }
        guard tree.objects[chosen]?[BlueZ.advertisingManagerInterface] != nil else {
            finish(.failed("adapter \(chosen) cannot advertise (no org.bluez.LEAdvertisingManager1: is it an LE adapter, powered on?)"))
            return nil
        }
        return chosen
    }

    // MARK: While open

    private func handle(_ signal: Signal) {
        switch (signal.interface.rawValue, signal.member.rawValue) {
        case ("org.freedesktop.DBus.Properties", "PropertiesChanged"):
            guard let change = try? PropertiesChanged(signal) else { return }
            tree.change(signal.path, interface: change.interface, changed: change.changed, invalidated: change.invalidated)
        case ("org.freedesktop.DBus.ObjectManager", "InterfacesAdded"):
            guard let added = try? InterfacesAdded(signal) else { return }
            tree.add(added.object, added.interfaces)
        case ("org.freedesktop.DBus.ObjectManager", "InterfacesRemoved"):
            guard let removed = try? InterfacesRemoved(signal) else { return }
            tree.remove(removed.object, removed.interfaces)
        default:
            return
        }
        check()
    }

    private func ownerChanged(_ signal: Signal) {
        guard let change = try? NameOwnerChanged(signal), change.name == BlueZ.service.rawValue, change.oldOwner != nil else { return }
        // Everything registered went with it; the adapter settings cannot be put back.
        agentRegistered = false
        advertised = false
        applicationRegistered = false
        saved = nil
        finish(.failed("bluetoothd stopped during the pairing window; check the adapter's Pairable setting"))
    }

    private func advertisementReleased() {
        guard advertised, outcome == nil else { return }
        advertised = false
        finish(.failed("bluetoothd released the advertisement (was the adapter powered off?)"))
    }

    /// Looks for a phone paired in this window: bonded (Bonded, or Paired where BlueZ has no
    /// Bonded) and exposing ANCS. It is then trusted, which ends the window.
    private func check() {
        guard outcome == nil, advertised, let adapter else { return }
        if tree.devices.contains(where: { $0.adapter == adapter && $0.connected && !bondedBefore.contains($0.path) }) {
            phoneConnected = true
        }
        askToPair(on: adapter)
        for device in tree.devices where device.adapter == adapter && device.isBonded {
            guard confirmed.contains(device.path) || !bondedBefore.contains(device.path) else { continue }
            guard tree.ancsCharacteristics(of: device.path) != nil else {
                if announcedBond.insert(device.path).inserted {
                    say("Bonded with \(label(device)); waiting for it to offer notifications (ANCS)…\n")
                }
                continue
            }
            guard !trusting else { return }
            trusting = true
            Task { await self.trust(device) }
            return
        }
    }

    /// Asks every device connected to the window's adapter and not paired to pair, once per
    /// device object, `options.securityRequestDelay` after it was seen connected, unless the
    /// phone began pairing by itself meanwhile (`pairingStarted`): Apple's Accessory Design
    /// Guidelines ask an accessory not to request pairing before an ATT request of the phone
    /// was refused for insufficient authentication, and an iPhone starts pairing by itself
    /// when it reads the HID service's encrypted attributes (docs/field-evidence.md, §2).
    private func askToPair(on adapter: ObjectPath) {
        for device in tree.devices where device.adapter == adapter && device.connected && !device.paired {
            guard pairRequested.insert(device.path).inserted else { continue }
            let path = device.path, delay = options.securityRequestDelay
            tasks.append(Task {
                try? await Task.sleep(for: delay)
                self.requestSecurity(path)
            })
        }
    }

    /// The agent saw a pairing with `device` begin (a passkey to confirm or show): the phone
    /// started it, so no security request is needed.
    private func pairingStarted(_ device: ObjectPath) {
        pairingBegun.insert(device)
    }

    /// `Device1.Pair()` on a device still connected, unpaired and not pairing by itself: on a
    /// link where we are the peripheral bluetoothd sends an SMP Security Request, as
    /// accessories do (the phone then starts pairing, and the agent's passkey question
    /// follows). Its answer only matters to the log: the phone may be pairing already
    /// (`InProgress`), it may have bonded meanwhile (`AlreadyExists`), the user may have
    /// refused; the window goes on either way, and ends as before on the bond.
    private func requestSecurity(_ path: ObjectPath) {
        guard outcome == nil, let connection, let device = tree.device(at: path), device.connected, !device.paired else { return }
        let label = label(device)
        guard !pairingBegun.contains(path) else {
            return logger.info("\(label) began pairing by itself: no security request needed")
        }
        let timeout = Duration.seconds(options.timeout + 30)
        logger.info("\(label) connected unpaired: asking it to pair (security request; it did not begin pairing by itself)")
        tasks.append(Task {
            do {
                try await DeviceCalls(connection: connection).pair(path, timeout: timeout)
                self.logger.info("\(label): Pair() succeeded")
            } catch let error as DBusError {
                self.pairFailed(label, error)
            } catch {
                self.logger.debug("\(label): Pair(): \(error)")
            }
        })
    }

    private func pairFailed(_ label: String, _ error: DBusError) {
        switch error.name {
        case "org.bluez.Error.AlreadyExists":
            logger.debug("\(label): Pair(): already paired")
        case "org.bluez.Error.InProgress":
            logger.debug("\(label): Pair(): the phone is pairing already")
        case "org.bluez.Error.AuthenticationCanceled", "org.bluez.Error.AuthenticationRejected":
            logger.info("\(label): pairing was refused or cancelled (\(error.name))")
        default:
            logger.info("\(label): Pair() failed: \(error)")
        }
    }

    private func trust(_ device: BlueZDevice) async {
        guard let connection, outcome == nil else { return }
        do {
            try await connection.setProperty(
                destination: BlueZ.service, path: device.path, interface: InterfaceName(BlueZ.deviceInterface),
                name: "Trusted", value: .bool(true), timeout: .seconds(10))
            finish(.paired(label(device)))
        } catch {
            finish(.failed("cannot mark \(label(device)) trusted: \(describe(error))"))
        }
    }

    /// The device as the terminal shows it: its name made safe (it is the phone's to choose).
    private func label(_ device: BlueZDevice) -> String {
        device.name.map { "\(TerminalText.sanitize($0)) (\(device.address))" } ?? device.address
    }

    private func label(_ path: ObjectPath) -> String {
        tree.device(at: path).map(label) ?? deviceLabel(path)
    }

    /// The pairing agent's answers.
    private func answer(_ request: AgentRequest) async throws -> AgentAnswer {
        if request.beginsPairing, let device = request.device { pairingStarted(device) }
        switch request {
        case .release:
            agentRegistered = false
            return .accepted
        case .cancel:
            if let prompt {
                prompt.cancel()
                say("\nThe phone cancelled the pairing request.\n")
            }
            return .accepted
        case .displayPasskey(let device, let passkey, _):
            say("Passkey for \(label(device)): \(formatPasskey(passkey))\n")
            return .accepted
        case .displayPinCode(let device, let code):
            say("PIN code for \(label(device)): \(code)\n")
            return .accepted
        case .requestConfirmation(let device, let passkey):
            let shown = formatPasskey(passkey)
            say("\nPairing request from \(label(device)), passkey \(shown).\n")
            return try await confirm(device, question: "Does the iPhone show \(shown)? Confirm on the phone too. [y/N] ")
        case .requestAuthorization(let device):
            say("\nPairing request from \(label(device)) (no passkey).\n")
            return try await confirm(device, question: "Pair with \(label(device))? [y/N] ")
        case .authorizeService(let device, _):
            guard confirmed.contains(device) else { throw AgentError.rejected }
            return .accepted
        case .requestPinCode(let device), .requestPasskey(let device):
            logger.warning("\(label(device)) asked for a PIN or passkey to be typed; iPhones compare passkeys instead: refused")
            throw AgentError.rejected
        }
    }

    private func confirm(_ device: ObjectPath, question: String) async throws -> AgentAnswer {
        guard outcome == nil else { throw AgentError.rejected }
        if options.yes {
            logger.warning("--yes: accepting the pairing request from \(label(device)) without confirmation")
            confirmed.insert(device)
            return .accepted
        }
        guard interactive else {
            let message = "refused the pairing request from \(label(device)): nobody can confirm the passkey because standard input is not a terminal; run 'ancsd pair' on a terminal, or give --yes"
            finish(.refused(message))
            throw AgentError.rejected
        }
        guard prompt == nil else { throw AgentError.rejected }  // one question at a time
        let prompt = Prompt()
        self.prompt = prompt
        say(question)
        let line = await prompt.readLine()
        self.prompt = nil
        guard let line else {
            if outcome == nil { say("\n") }
            throw AgentError.canceled
        }
        let answer = String(line.filter { $0 != " " && $0 != "\t" && $0 != "\r" }).lowercased()
        guard answer == "y" || answer == "yes" else {
            finish(.refused("the passkey was not confirmed; pairing with \(label(device)) refused"))
            throw AgentError.rejected
        }
        confirmed.insert(device)
        say("Confirmed; waiting for the phone…\n")
        return .accepted
    }

    // MARK: Closing

    private func close(after outcome: PairingOutcome) async {
        for task in tasks { task.cancel() }
        prompt?.cancel()
        guard let connection else { return }
        if advertised, let adapter {
            advertised = false
            do {
                try await AdvertisingManager(connection: connection, adapter: adapter).unregister(Self.advertisementPath)
            } catch {
                logger.warning("UnregisterAdvertisement: \(describe(error))")
            }
        }
        if applicationRegistered, let adapter {
            applicationRegistered = false
            do {
                try await GattManager(connection: connection, adapter: adapter).unregister(Accessory.root)
            } catch {
                logger.warning("UnregisterApplication: \(describe(error))")
            }
        }
        if agentRegistered {
            agentRegistered = false
            do {
                try await AgentManager(connection: connection).unregister(Self.agentPath)
            } catch {
                logger.warning("UnregisterAgent: \(describe(error))")
            }
        }
        if let saved, let adapter {
            self.saved = nil
            do {
                try await saved.apply(adapter, on: connection)
                logger.info("adapter settings restored: Pairable \(saved.pairable), PairableTimeout \(saved.pairableTimeout)")
            } catch {
                logger.error("cannot restore the adapter's Pairable setting: \(describe(error))")
            }
        }
        await connection.unexport(Self.advertisementPath)
        await connection.unexport(Self.agentPath)
        if accessoryExported, let shape = options.accessory.shape {
            accessoryExported = false
            await Accessory.unexport(shape, on: connection)
        }
        await owner?.stop()
        await connection.close()
    }

    private func report(_ outcome: PairingOutcome) {
        switch outcome {
        case .paired(let device):
            say("""

                Paired with \(device) and marked it trusted.
                On the iPhone, tap "Allow" when it asks whether this computer may show its notifications.
                If you missed it: Settings > Bluetooth > (i) next to this computer > turn on
                "Share System Notifications".
                Then run 'ancsd run' (or: systemctl enable --now ancsd) to see the notifications.

                """)
        case .timedOut:
            logError("no iPhone paired within \(options.timeout) s; the pairing window is closed")
        case .refused(let message):
            logError(message)
        case .interrupted(let number):
            logError("interrupted (\(number == SIGINT ? "SIGINT" : "SIGTERM")); the pairing window is closed")
        case .failed(let message):
            logError(message)
        }
    }

    private func describe(_ error: any Error) -> String {
        guard let error = error as? DBusError else { return "\(error)" }
        switch error {
        case .connectionFailed(let message): return "cannot connect to the D-Bus bus (\(message)); is dbus running?"
        case .remote(let name, _) where name == DBusError.Names.serviceUnknown || name == DBusError.Names.nameHasNoOwner:
            return "bluetoothd is not running"
        default: return "\(error)"
        }
    }
}
