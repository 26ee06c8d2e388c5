import DBus

/// Strangers: devices in range that are not the user's phone. Anything may connect to an
/// accessory's connectable advertisement and hold the link, or ask to pair; the accessory must
/// keep them out without blocking the phone's way back (docs/simulator.md, "Strangers").
extension PhoneSimulator {
    /// `stranger_connect`: the step's device (any central: a scanner, a neighbour's tool)
    /// connects to a registered connectable advertisement, within `timeout`, and holds the link,
    /// unbonded, never asking to pair, until the accessory drops it (`Disconnect`) or a
    /// `disconnect` step.
    func strangerConnect(_ device: Int, timeout: Double) async throws {
        let name = settings.devices[device].name
        guard !state.withLock({ $0.devices[device].bonded }) else {
            throw SimulatorError.bus("\(name) is bonded: a stranger is a device the accessory does not know")
        }
        guard let advert = try await waitForAdvertisement(timeout: timeout, for: device, Self.isConnectable) else {
            throw SimulatorError.timeout("\(name): no connectable advertisement to connect to within \(timeout) s")
        }
        try await strangerLinkUp(device)
        log("\(name): a stranger connects to \(advert.path) of \(advert.sender) and holds the link, unbonded")
    }

    /// `stranger_pair`: the step's device connects and asks to pair claiming a keyboard and no
    /// display (KeyboardOnly) with MITM protection: passkey entry, the accessory to show the key.
    /// bluetoothd calls `DisplayPasskey(device, passkey, 0)` on the default agent and goes on
    /// without waiting for its answer (a Rejected changes nothing); the stranger keeps typing
    /// guesses. The pairing ends only when the link drops: `CancelPairing` answers
    /// `DoesNotExist` for a pairing the peer began. How it ended within `timeout`, checked
    /// against `expect`: `cut` (the link was dropped), `open` (still pairing), `refused` (the
    /// adapter is not pairable: no agent call). The stranger never bonds here: it would need to
    /// guess one passkey in 10⁶.
    func strangerPair(_ device: Int, passkey: UInt32, expect: StrangerOutcome?, timeout: Double) async throws {
        let name = settings.devices[device].name
        let outcome = try await strangerPairOutcome(device, passkey: passkey, timeout: timeout)
        if let expect, expect != outcome {
            throw SimulatorError.timeout("\(name): expected the stranger's pairing to end \(expect.rawValue), it was \(outcome.rawValue)")
        }
    }

    private func strangerPairOutcome(_ device: Int, passkey: UInt32, timeout: Double) async throws -> StrangerOutcome {
        let name = settings.devices[device].name
        guard let conn = connection() else { throw SimulatorError.bus("bluetoothd is not running") }
        if !state.withLock({ $0.devices[device].connected }) { try await strangerLinkUp(device) }
        let pairable = await conn.simPerform { c in
            c.exportedProperty(path: BlueZ.adapterPath, interface: BlueZ.adapter1, name: "Pairable")?.unwrapped.boolValue ?? false
        }
        guard pairable else {
            log("\(name): asks for passkey-entry pairing: refused, the adapter is not pairable")
            return .refused
        }
        let (agent, path) = state.withLock { s -> (AgentRegistration?, ObjectPath) in
            s.devices[device].strangerPairing = true
            return (s.pairingAgent, s.devices[device].paths.device)
        }
        defer { state.withLock { $0.devices[device].strangerPairing = false } }
        log("\(name): asks for passkey-entry pairing (KeyboardOnly, MITM)")
        if let agent, let destination = BusName(validating: agent.sender) {
            // bluetoothd does not wait for this answer: the pairing goes on whatever it is.
            Task(executorPreference: loop) {
                do {
                    _ = try await conn.call(
                        destination: destination, path: agent.path, interface: Self.agentInterface, member: "DisplayPasskey",
                        arguments: [.objectPath(path), .uint32(passkey), .uint16(0)], expecting: .empty, timeout: .seconds(25))
                    self.log("\(name): DisplayPasskey answered (the pairing goes on regardless)")
                } catch {
                    self.log("\(name): DisplayPasskey: \(error) (the pairing goes on regardless)")
                }
            }
        }
        let started = ContinuousClock.now
        let deadline = started + .milliseconds(Int(timeout * 1000))
        while ContinuousClock.now < deadline {
            if !state.withLock({ $0.devices[device].connected }) {
                let elapsed = ContinuousClock.now - started
                log("\(name): the stranger's pairing ended with the link, \(elapsed.wholeMilliseconds) ms after it began; not bonded")
                return .cut
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        log("\(name): still connected and pairing after \(timeout) s: it may go on guessing the passkey")
        return .open
    }

    /// The stranger appears (under its own address) and connects.
    private func strangerLinkUp(_ device: Int) async throws {
        try await appear(device)
        await onBus { c in self.connect(device, c) }
    }
}
