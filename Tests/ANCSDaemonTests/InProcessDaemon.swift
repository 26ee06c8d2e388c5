import ANCS
@testable import ANCSDaemon
import ANCSRuntime
import ANCSSession
import DBus
import Dispatch
import EventLoop
import Foundation
import JSON
import PhoneSimulator
import Synchronization
import TestSupport

/// `ancsd run` in this process, on a loop with a virtual clock, against the phone simulator
/// (also in this process) serving bluetoothd's API on a private bus; what it prints is kept in
/// memory (`events`).
///
/// Nothing in it waits for real time: the daemon's timers (subscription retries, the pause after
/// a closed socket, request timeouts, the alive check, the forced re-subscription) fire only when
/// the test calls `advance(by:)`, and `until` checks its condition on the daemon's loop after
/// every turn of it (each message the daemon received, each timer) and after every line the
/// simulator logs, instead of polling. Real time is left only where the daemon does not keep
/// it: the simulator's own loop (its 40 ms between a link's sockets closing and `Connected` going
/// false) and the D-Bus layer's call timeouts (25 s, never reached here).
///
/// Set `ANCSD_TEST_LOG=debug` to see the daemon's log.
final class InProcessDaemon: Sendable {
    /// The phone's BlueZ object path.
    static let phonePath: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"
    static let address = "AA:BB:CC:DD:EE:01"
    static let settings = ScenarioSettings(
        name: "in-process", devices: [DeviceSettings(address: address, name: "Ada's iPhone")],
        apps: ["com.apple.MobileSMS": "Messages", "com.apple.mobilemail": "Mail"])

    let bus: PrivateBus
    let simulator: PhoneSimulator
    /// The daemon's loop: `clock: .virtual`.
    let loop: EventLoop
    let daemon: Daemon
    let events = EventMemory()
    /// What the simulator and the daemon tell the harness from their own loops.
    private let heard = Heard()
    private let waiters = Mutex<(next: Int, pending: [Int: Waiter])>((0, [:]))
    private let running = Mutex<Task<Void, any Error>?>(nil)

    private final class Heard: Sendable {
        /// The simulator's log lines, oldest first.
        let phoneLines = Mutex<[String]>([])
        /// Called after each of them.
        let onPhoneLine = Mutex<(@Sendable () -> Void)?>(nil)
        /// The daemon has read bluetoothd's objects.
        let ready = Atomic<Bool>(false)
    }

    private struct Waiter {
        let condition: @Sendable (isolated Daemon) -> Bool
        let continuation: CheckedContinuation<Bool, Never>
    }

    /// Starts the bus, the simulator and the daemon, and waits until the daemon has read
    /// bluetoothd's objects. The phone does `phoneFirst` before the daemon starts (notifications
    /// added then come as the phone's replay at the first subscription).
    static func start(
        settings: ScenarioSettings = settings, options: DaemonOptions = DaemonOptions(), phoneFirst: [ScenarioAction] = []
    ) async throws -> InProcessDaemon {
        let harness = try InProcessDaemon(settings: settings, options: options)
        do {
            try await harness.simulator.start()
            for action in phoneFirst { try await harness.simulator.execute(action) }
            let daemon = harness.daemon
            harness.running.withLock { $0 = Task(executorPreference: harness.loop) { try await daemon.run() } }
            try await harness.until("the daemon has read bluetoothd's objects") { _ in harness.heard.ready.load(ordering: .acquiring) }
        } catch {
            await harness.stop()
            throw error
        }
        return harness
    }

    private init(settings: ScenarioSettings, options: DaemonOptions) throws {
        bus = try PrivateBus()
        loop = try EventLoop(name: "daemon-test", clock: .virtual)
        var options = options
        options.bus = .address(bus.address)
        options.advertise = false
        let level = ProcessInfo.processInfo.environment["ANCSD_TEST_LOG"].flatMap(LogLevel.init(name:)) ?? .error
        let heard = heard, loop = loop
        let logSimulator = level == .debug
        simulator = PhoneSimulator(settings: settings, bus: .address(bus.address), log: { line in
            if logSimulator { writeStandardError("phone-sim: \(line)\n") }
            heard.phoneLines.withLock { $0.append(line) }
            heard.onPhoneLine.withLock { $0 }?()
        })
        daemon = Daemon(
            options: options, output: OutputRouter(sinks: [events], loop: loop), logger: Logger(threshold: level, journald: false),
            executor: loop, onReady: { heard.ready.store(true, ordering: .releasing) })
        heard.onPhoneLine.withLock {
            $0 = { [weak self] in
                guard let self else { return }
                loop.execute { self.checkConditions() }
            }
        }
        loop.observeTurns { [weak self] in self?.checkConditions() }
    }

    /// Stops the daemon, the simulator and the bus.
    func stop() async {
        if let task = running.withLock({ $0.take() }) {
            task.cancel()
            _ = try? await task.value
        }
        await simulator.stop()
        bus.stop()
        // What the daemon scheduled as it ended (closing its connection) runs before the loop stops.
        for _ in 0..<3 { await roundTrip() }
        loop.shutdown()
    }

    /// Runs a test on a started harness, and stops it however the test ends.
    static func with(
        settings: ScenarioSettings = settings, options: DaemonOptions = DaemonOptions(), phoneFirst: [ScenarioAction] = [],
        _ body: (InProcessDaemon) async throws -> Void
    ) async throws {
        let harness = try await start(settings: settings, options: options, phoneFirst: phoneFirst)
        do {
            try await body(harness)
        } catch {
            await harness.stop()
            throw error
        }
        await harness.stop()
    }

    // MARK: Time

    /// Moves the daemon's clock; its timers due meanwhile run before this returns.
    func advance(by duration: Duration) async {
        await loop.advance(by: duration)
    }

    /// A trip through the daemon's loop: what it had to do, it has done.
    func roundTrip() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in loop.execute { done.resume() } }
    }

    /// Reads the daemon's state on its loop.
    func read<T: Sendable>(_ body: @escaping @Sendable (isolated Daemon) -> T) async -> T {
        await withCheckedContinuation { (done: CheckedContinuation<T, Never>) in
            loop.execute { [daemon] in done.resume(returning: daemon.assumeIsolated { body($0) }) }
        }
    }

    // MARK: Waiting

    /// Returns once `condition` holds on the daemon (checked on its loop after each turn and
    /// each line the simulator logs); fails after `seconds` of real time (generous: a loaded
    /// machine can stall a test for seconds, and only a failing test waits that long).
    func until(
        _ what: String, within seconds: Double = 60, _ condition: @escaping @Sendable (isolated Daemon) -> Bool
    ) async throws {
        let met = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let id = waiters.withLock { w in
                defer { w.next += 1 }
                w.pending[w.next] = Waiter(condition: condition, continuation: continuation)
                return w.next
            }
            loop.execute { [self] in checkConditions() }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
                waiters.withLock { $0.pending.removeValue(forKey: id) }?.continuation.resume(returning: false)
            }
        }
        guard met else { throw TestFailure("\(what): not within \(seconds) s\n\(diagnosis())") }
    }

    /// Returns once the simulator has logged a line containing `text` `count` times.
    func untilPhoneSaid(_ text: String, times count: Int = 1, within seconds: Double = 60) async throws {
        try await until("the phone said \"\(text)\" \(count) time(s)", within: seconds) { _ in self.phoneSaid(text) >= count }
    }

    /// How many of the simulator's log lines contain `text`.
    func phoneSaid(_ text: String) -> Int {
        heard.phoneLines.withLock { $0.filter { $0.contains(text) }.count }
    }

    /// On the loop: resumes the waiters whose condition holds.
    private func checkConditions() {
        let pending = waiters.withLock { $0.pending }
        guard !pending.isEmpty else { return }
        for (id, waiter) in pending where daemon.assumeIsolated({ waiter.condition($0) }) {
            waiters.withLock { $0.pending.removeValue(forKey: id) }?.continuation.resume(returning: true)
        }
    }

    /// What a failed wait reports: the events so far and the simulator's last lines.
    private func diagnosis() -> String {
        let lines = heard.phoneLines.withLock { $0.suffix(15) }
        return "events: \(events.all.map { "\($0)" }.joined(separator: "; "))\nphone: \(lines.joined(separator: "\n  "))"
    }

    // MARK: The phone

    /// What the simulated phone does next (a scenario step: add, remove, silent_drop, …).
    func phone(_ action: ScenarioAction) async throws {
        try await simulator.execute(action)
    }

    /// The daemon's link to the phone.
    static func link(_ daemon: isolated Daemon) -> PhoneLink? {
        daemon.links[phonePath]
    }

    /// True while the phone has a subscribed session that nothing is being asked of.
    static func settled(_ daemon: isolated Daemon) -> Bool {
        guard let link = daemon.links[phonePath] else { return false }
        let renewing = daemon.machine.status(of: link.id, at: link.device.path.rawValue)?.renewing ?? false
        return link.state == .running && !renewing && link.write == nil && link.session.queuedFetchCount == 0
    }
}

/// An output that keeps every event in memory.
final class EventMemory: OutputSink {
    let name = "memory"
    private let events = Mutex<[OutputEvent]>([])

    func send(_ event: OutputRecord) { events.withLock { $0.append(event.event) } }

    var all: [OutputEvent] { events.withLock { $0 } }

    /// The notification events, in order.
    var notifications: [NotificationEvent] {
        all.compactMap { if case .notification(let event, _, _) = $0 { event } else { nil } }
    }

    /// How many `connected` events there were.
    var connections: Int {
        all.filter { if case .connected = $0 { true } else { false } }.count
    }

    /// The notification events about the notification titled `title`, as (kind, seen before).
    func shown(titled title: String) -> [NotificationEvent.Kind] {
        notifications.filter { $0.notification.title == title }.map(\.kind)
    }
}
