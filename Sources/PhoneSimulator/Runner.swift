import ANCS
import DBus

/// How a scenario run ended.
public enum RunOutcome: Hashable, Sendable {
    /// An `end` step was reached (or the steps ran out).
    case ended
    /// A step could not be carried out: the bus failed, or (`timedOut`) a `wait_subscribed`
    /// saw no subscription in time.
    case failed(line: Int, message: String, timedOut: Bool)
}

extension PhoneSimulator {
    /// Runs the steps in order, honouring each step's `after` delay.
    public func run(_ steps: [ScenarioStep]) async -> RunOutcome {
        for step in steps {
            if step.after > 0 {
                do {
                    try await Task.sleep(for: .seconds(step.after))
                } catch {
                    return .failed(line: step.line, message: "cancelled", timedOut: false)
                }
            }
            if case .end = step.action {
                log("line \(step.line): end")
                flushLogs()
                return .ended
            }
            do {
                try await execute(step.action, device: step.device)
                // Tests wait for this before acting on a state they expect the phone to have seen.
                if case .waitState = step.action { log("line \(step.line): state reached") }
            } catch let error as SimulatorError {
                if case .timeout = error { return .failed(line: step.line, message: "\(error)", timedOut: true) }
                return .failed(line: step.line, message: "\(error)", timedOut: false)
            } catch {
                return .failed(line: step.line, message: "\(error)", timedOut: false)
            }
        }
        flushLogs()
        return .ended
    }

    /// Applies the leading steps that only give the phones notifications (`add`, `modify`,
    /// `remove` with no delay) before the simulated bluetoothd is on the bus, and returns the
    /// rest. A scenario's opening notifications are then what the phone holds from the start:
    /// a client can never subscribe before them, so they always come as pre-existing replays.
    /// Call before `start()`.
    public func preload(_ steps: [ScenarioStep]) -> [ScenarioStep] {
        var rest = steps[...]
        while let step = rest.first, step.after == 0, settings.devices.indices.contains(step.device) {
            let applied = state.withLock { s -> Bool in
                switch step.action {
                case .add(let spec): _ = s.devices[step.device].model.add(spec)
                case .modify(let key, let change): _ = s.devices[step.device].model.modify(key: key, change)
                case .remove(let key): _ = s.devices[step.device].model.remove(key: key)
                default: return false
                }
                return true
            }
            guard applied else { break }
            rest = rest.dropFirst()
        }
        return Array(rest)
    }

    /// Performs one action on phone `device` (an index into `settings.devices`).
    public func execute(_ action: ScenarioAction, device: Int = 0) async throws {
        guard settings.devices.indices.contains(device) else { throw SimulatorError.bus("there is no device \(device)") }
        switch action {
        case .add, .modify, .remove:
            await changeNotifications(action, device: device)
        case .burst(let count, let start, let rate, let category, let app):
            try await burst(device, count: count, start: start, rate: rate, category: category, app: app)
        case .disconnect:
            await onBus { c in self.disconnect(device, c) }
        case .connect(let timeout, let expectAway):
            if strict(device) {
                try await strictConnect(device, timeout: timeout, expectAway: expectAway)
            } else {
                await onBus { c in self.connect(device, c) }
            }
        case .restartBlueZ(let downtime):
            try await restartBlueZ(downtime: downtime)
        case .cpError, .denySharing, .allowSharing, .slow, .omit, .midResponseDisconnect, .cpTimeout, .disconnectOnWrite,
             .refuseSubscribe, .staleSockets, .heal:
            applyFault(action, device: device)
        case .silentDrop, .silentDropAll, .sharingOff, .sharingOn:
            applySilence(action, device: device)
        case .garbage(let seconds, let rate, let seed):
            await garbage(device, seconds: seconds, rate: rate, seed: seed)
        case .waitSubscribed(let timeout):
            try await waitSubscribed(device, timeout: timeout)
        case .appear:
            try await appear(device)
        case .pair(let passkey, let expect, let timeout):
            try await pair(device, passkey: passkey, expect: expect, timeout: timeout)
        case .waitState(let expectation, let timeout):
            try await waitState(expectation, device: device, timeout: timeout)
        case .releaseAdvertisements:
            await releaseAdvertisements()
        case .rogue(let error):
            try await rogue(error: error)
        case .strangerConnect(let timeout):
            try await strangerConnect(device, timeout: timeout)
        case .strangerPair(let passkey, let expect, let timeout):
            try await strangerPair(device, passkey: passkey, expect: expect, timeout: timeout)
        case .sleep(let seconds):
            try await Task.sleep(for: .seconds(seconds))
        case .media(let step):
            try await media(step, device: device)
        case .end:
            break
        }
    }

    /// An `add`, `modify` or `remove` step: phone `device`'s notifications change (a modify or
    /// remove of a notification it does not have is ignored, and logged).
    private func changeNotifications(_ action: ScenarioAction, device: Int) async {
        let name = settings.devices[device].name
        switch action {
        case .add(let spec):
            await mutateModel(device) { model in [model.add(spec)] }
        case .modify(let key, let change):
            await mutateModel(device) { model in
                guard let event = model.modify(key: key, change) else {
                    self.log("\(name): modify of unknown notification \(key) ignored")
                    return []
                }
                return [event]
            }
        case .remove(let key):
            await mutateModel(device) { model in
                guard let event = model.remove(key: key) else {
                    self.log("\(name): remove of unknown notification \(key) ignored")
                    return []
                }
                return [event]
            }
        default:
            break
        }
    }

    /// A step that makes phone `device` misbehave from now on (`cp_error`, `deny_sharing`, `slow`,
    /// `omit`, …), or behave again (`allow_sharing`, `heal`).
    private func applyFault(_ action: ScenarioAction, device: Int) {
        state.withLock { s in
            switch action {
            case .cpError(let code, let count):
                s.devices[device].model.injectedError = (ATTErrorCode(rawValue: code), count)
            case .denySharing:
                s.devices[device].model.sharingDenied = true
            case .allowSharing:
                s.devices[device].model.sharingDenied = false
            case .slow(let delay):
                s.devices[device].slowDelay = delay
            case .omit(let id):
                if let id { s.devices[device].model.omitted.insert(id) } else { s.devices[device].model.omitted = [] }
            case .midResponseDisconnect:
                s.devices[device].midResponseDisconnect = true
            case .cpTimeout(let count):
                s.devices[device].silentRequests = count
            case .disconnectOnWrite:
                s.devices[device].disconnectOnWrite = true
            case .refuseSubscribe(let count):
                s.devices[device].refusedSubscriptions = count
            case .staleSockets:
                s.devices[device].staleSocketsOnDrop = true
            case .heal:
                s.devices[device].model.injectedError = nil
                s.devices[device].model.sharingDenied = false
                s.devices[device].model.omitted = []
                s.devices[device].silentRequests = 0
                s.devices[device].disconnectOnWrite = false
                s.devices[device].midResponseDisconnect = false
                s.devices[device].slowDelay = 0
                s.devices[device].refusedSubscriptions = 0
                s.devices[device].staleSocketsOnDrop = false
                s.devices[device].silence = Silence()
            default:
                break
            }
        }
    }

    /// True when phone `device` is connected and a client (not one of the simulated other
    /// programs) has notifications of its Notification Source enabled.
    public func isSubscribed(_ device: Int = 0) -> Bool {
        state.withLock { s in
            s.connection != nil && s.devices[device].connected && s.devices[device].notificationSource.hasOwnClient
        }
    }

    /// The wire UID the phone currently uses for the notification the scenario calls `key`.
    public func currentUID(ofKey key: UInt32, device: Int = 0) -> UInt32? {
        state.withLock { s in s.devices[device].model.notification(key: key)?.uid }
    }

    /// Runs `body` on the live connection's loop (or directly when bluetoothd is down).
    func onBus<T: Sendable>(_ body: @escaping @Sendable (isolated DBusConnection?) -> T) async -> T {
        if let conn = connection() {
            return await conn.simPerform { c in body(c) }
        }
        return body(nil)
    }

    /// Changes the phone's notifications and sends the resulting events to a subscribed client.
    private func mutateModel(
        _ device: Int, _ body: @escaping @Sendable (inout PhoneModel) -> [NotificationSourceEvent]
    ) async {
        let outbox = outbox(device, .notificationSource)
        await onBus { _ in
            self.state.withLock { s in
                for event in body(&s.devices[device].model) { Self.queueEvent(event, &s.devices[device], outbox) }
            }
        }
    }

    private func burst(_ device: Int, count: Int, start: UInt32, rate: Double, category: CategoryID, app: String) async throws {
        log("\(settings.devices[device].name): burst of \(count) from UID \(start)\(rate > 0 ? " at \(rate)/s" : "")")
        let clock = ContinuousClock()
        let began = clock.now
        let batch = rate > 0 ? 1 : 256
        var index = 0
        while index < count {
            let first = index
            let last = min(count, index + batch)
            await mutateModel(device) { model in
                (first..<last).map { i in
                    model.add(.burst(index: i, count: count, startUID: start, category: category, app: app))
                }
            }
            index = last
            if rate > 0 {
                try await clock.sleep(until: began + .seconds(Double(index) / rate))
            } else {
                await Task.yield()
            }
        }
    }

    private func waitSubscribed(_ device: Int, timeout: Double) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(timeout)
        while !isSubscribed(device) {
            guard clock.now < deadline else {
                throw SimulatorError.timeout("no client subscribed to the Notification Source of \(settings.devices[device].name) within \(timeout) s")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}
