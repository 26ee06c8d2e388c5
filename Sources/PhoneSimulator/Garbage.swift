import ANCS

/// A phone that sends noise: the `garbage` step (docs/simulator.md).
///
/// For the step's `seconds` a background task, one per phone, sends malformed values at the
/// step's `rate` per second in all, round robin over the characteristics the phone has
/// notifications enabled on, while it is connected:
///
/// - Notification Source: a value of a length other than 8 (0…20 bytes), or 8 bytes whose
///   EventID is reserved (3…255): never an event a client could act on.
/// - Data Source: 1…mtu-3 bytes whose first byte is no command the Data Source answers
///   (2…255). It is queued under the state lock, as a response's fragments are all queued at
///   once under it (`queueResponse`), so it always lands between whole responses.
/// - AMS's Entity Update (with `"ams": true`): too short for its 3-byte header (0…2 bytes), an
///   EntityID the specification does not define (3…255), or a defined one with an AttributeID
///   it does not (4…255): never a value that changes the player.
///
/// The values come from a generator seeded with the step's line and the phone's index, so a
/// scenario sends the same noise at every run. A link loss pauses the noise (nothing is
/// subscribed); only its `seconds`, another `garbage` step of the phone, or the simulator's
/// stop end it. One log line says when it starts, one when it ends, with what it sent.
extension PhoneSimulator {
    /// The characteristics the noise goes to, in round-robin order.
    static let noisy: [PhoneCharacteristic] = [.notificationSource, .dataSource, .entityUpdate]

    /// The `garbage` step: starts phone `device`'s noise (ending the one still going, whose end
    /// is logged before the new one's start), or with `seconds` 0 only ends it, and then returns
    /// once its end is logged. Returns at once otherwise.
    func garbage(_ device: Int, seconds: Double, rate: Int, seed: UInt64) async {
        let name = settings.devices[device].name
        let rate = max(1, rate)
        let targets = settings.ams ? "Notification Source, Data Source and Entity Update" : "Notification Source and Data Source"
        let previous = state.withLock { s -> Task<Void, Never>? in
            let previous = s.devices[device].noise?.task
            s.devices[device].noise = nil
            guard seconds > 0 else { return previous }
            s.noiseRuns &+= 1
            let id = s.noiseRuns
            // Made under the lock: its first batch, which looks for its id, waits for it to be stored.
            let task = Task(executorPreference: loop) {
                await previous?.value
                self.log("\(name): garbage for \(seconds) s at \(rate)/s, round robin on its subscribed \(targets)")
                await self.makeNoise(device, id: id, seconds: seconds, rate: rate, seed: seed)
            }
            s.devices[device].noise = NoiseRun(id: id, task: task)
            return previous
        }
        // No longer the phone's: it queues nothing more, and stops at its next wakeup.
        previous?.cancel()
        guard seconds == 0 else { return }
        if let previous { await previous.value } else { log("\(name): no garbage to stop") }
    }

    /// Ends every phone's noise and waits for the tasks (each logs its end).
    func stopNoise() async {
        let tasks = state.withLock { s -> [Task<Void, Never>] in
            var tasks: [Task<Void, Never>] = []
            for i in s.devices.indices {
                if let task = s.devices[i].noise?.task { tasks.append(task) }
                s.devices[i].noise = nil
            }
            return tasks
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }

    /// The noise source `id` of phone `device`: paced by the clock, `rate` values per second
    /// from its start, queued in batches (so that 10,000 a second costs 200 wakeups, not 10,000).
    private func makeNoise(_ device: Int, id: UInt64, seconds: Double, rate: Int, seed: UInt64) async {
        var generator = NoiseGenerator(seed: seed ^ (UInt64(truncatingIfNeeded: device) << 32))
        var counts = NoiseCounts()
        var next = 0
        let clock = ContinuousClock()
        let began = clock.now
        let total = max(1, Int((seconds * Double(rate)).rounded()))
        let batch = max(1, rate / 200)
        var slot = 0
        var how = "done"
        while slot < total {
            let due = began + .nanoseconds(Int64(slot) * 1_000_000_000 / Int64(rate))
            do {
                if clock.now < due {
                    try await clock.sleep(until: due)
                } else {
                    // Behind (a busy machine): catch up, letting the outboxes' drains run in between.
                    await Task.yield()
                    try Task.checkCancellation()
                }
            } catch {
                how = "stopped"
                break
            }
            let count = min(batch, total - slot)
            let current = state.withLock { s -> Bool in
                // Replaced or stopped meanwhile: nothing more from this one.
                guard s.devices[device].noise?.id == id else { return false }
                for _ in 0..<count { queueNoise(&s.devices[device], device, &generator, &next, &counts) }
                return true
            }
            guard current else {
                how = "stopped"
                break
            }
            slot += count
        }
        state.withLock { s in
            if s.devices[device].noise?.id == id { s.devices[device].noise = nil }
        }
        log("\(settings.devices[device].name): garbage \(how) after \((clock.now - began).wholeMilliseconds) ms: \(counts.description(ams: settings.ams))")
    }

    /// Queues one malformed value on the next characteristic (round robin from `next`) that
    /// would deliver it, and counts it; counts it as skipped if none would. Call under the lock.
    private func queueNoise(
        _ d: inout DeviceState, _ device: Int, _ generator: inout NoiseGenerator, _ next: inout Int, _ counts: inout NoiseCounts
    ) {
        let targets = Self.noisy
        if d.connected {
            for offset in targets.indices {
                let index = (next + offset) % targets.count
                let characteristic = targets[index]
                guard receivesNoise(characteristic, d) else { continue }
                next = index + 1
                let value = generator.malformedValue(for: characteristic, mtu: d.settings.mtu)
                outbox(device, characteristic).send(.noise(value, session: d.session))
                counts.count(characteristic)
                return
            }
        }
        counts.skipped += 1
    }

    /// Whether a value queued now for `c` would be sent: notifications enabled, the phone not
    /// silent on it, and for the Entity Update the Apple Media Service offered.
    private func receivesNoise(_ c: PhoneCharacteristic, _ d: DeviceState) -> Bool {
        let subscribed = switch c {
        case .notificationSource: d.notificationSource.isActive
        case .dataSource: d.dataSource.isActive
        case .entityUpdate: settings.ams && d.amsExported && d.entityUpdate.isActive
        case .controlPoint, .remoteCommand, .entityAttribute: false
        }
        return subscribed && !d.silence.isSilent(c)
    }
}

/// A phone's noise source (`DeviceState.noise`).
struct NoiseRun: Sendable {
    /// Which one (`SimState.noiseRuns`): a batch is queued only while it is the phone's.
    let id: UInt64
    let task: Task<Void, Never>
}

/// What a noise source sent, for its last log line.
struct NoiseCounts {
    var notificationSource = 0
    var dataSource = 0
    var entityUpdate = 0
    /// Values due while no characteristic would have delivered one (not connected, nothing
    /// subscribed): not sent.
    var skipped = 0

    mutating func count(_ c: PhoneCharacteristic) {
        switch c {
        case .notificationSource: notificationSource += 1
        case .dataSource: dataSource += 1
        case .entityUpdate: entityUpdate += 1
        case .controlPoint, .remoteCommand, .entityAttribute: break
        }
    }

    func description(ams: Bool) -> String {
        var parts = ["\(notificationSource) on the Notification Source", "\(dataSource) on the Data Source"]
        if ams { parts.append("\(entityUpdate) on the Entity Update") }
        return parts.joined(separator: ", ") + ", \(skipped) not sent (nothing subscribed)"
    }
}

/// xorshift64, seeded through splitmix64: small, fast and the same everywhere, so a scenario's
/// noise is reproducible.
struct NoiseGenerator {
    private var state: UInt64

    init(seed: UInt64) {
        var z = seed &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        state = z == 0 ? 0x2545_F491_4F6C_DD1D : z  // xorshift never leaves 0
    }

    mutating func next() -> UInt64 {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return state
    }

    /// A number in `range` (the modulo's bias is of no matter here).
    mutating func int(_ range: ClosedRange<Int>) -> Int {
        let span = UInt64(range.upperBound - range.lowerBound) + 1
        return range.lowerBound + Int(next() % span)
    }

    mutating func byte(_ range: ClosedRange<UInt8> = 0...255) -> UInt8 {
        UInt8(int(Int(range.lowerBound)...Int(range.upperBound)))
    }

    mutating func bytes(_ count: Int) -> [UInt8] {
        (0..<max(0, count)).map { _ in byte() }
    }

    /// One value for `c` that no client can take for a real one (see `PhoneSimulator`'s
    /// `garbage`); at most mtu - 3 bytes.
    mutating func malformedValue(for c: PhoneCharacteristic, mtu: Int) -> [UInt8] {
        let room = max(mtu, 23) - 3
        switch c {
        case .dataSource:
            // 0 and 1 are the commands the Data Source answers (GetNotificationAttributes,
            // GetAppAttributes).
            var value = bytes(int(1...room))
            value[0] = byte(2...255)
            return value
        case .entityUpdate:
            switch int(0...2) {
            case 0:
                return bytes(int(0...2))  // shorter than the header
            case 1:
                // An entity the specification does not define, any attribute.
                return [byte(3...255), byte(), byte()] + bytes(int(0...room - 3))
            default:
                // Player, Queue or Track, with an attribute none of them defines.
                return [byte(0...2), byte(4...255), byte()] + bytes(int(0...room - 3))
            }
        default:
            // The Notification Source: a wrong length, or a reserved EventID.
            if next() & 1 == 0 {
                var length = int(0...19)
                if length >= NotificationSourceEvent.size { length += 1 }
                return bytes(length)
            }
            var value = bytes(NotificationSourceEvent.size)
            value[0] = byte(3...255)
            return value
        }
    }
}
