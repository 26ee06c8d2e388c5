import ANCS
import ANCSSession
import BlueZ
import DBus
import EventLoop

/// One phone's connection: its ANCS session and how notifications reach it.
///
/// Owned and used only by the `Daemon` actor.
final class PhoneLink {
    enum Delivery: Equatable {
        case acquired(mtu: UInt16)
        case signals
    }

    enum State: Equatable {
        case subscribing
        case running
        case failed(String)
        case stopped
    }

    enum Input: Sendable {
        case notificationSource([UInt8])
        case dataSource([UInt8])
        case closed(String)
    }

    let id: UInt64
    /// The device as BlueZ last described it: its `Address` (the identity address once bonded:
    /// BlueZ replaces the resolvable private address when the phone's IRK arrives, at the same
    /// object path) is what every output, the seen store, `list` and the recorder use.
    var device: BlueZDevice
    let characteristics: ANCSCharacteristics
    /// The daemon's loop, whose clock the session runs on.
    private let clock: EventLoop
    let start: ContinuousClock.Instant
    var session: ANCSSession
    var state = State.subscribing
    var delivery: [ObjectPath: Delivery] = [:]
    var readers: [NotificationReader] = []
    /// Drops the copies bluetoothd makes of signalled values when other clients subscribed too.
    var copyFilter = SignalCopyFilter()
    var tasks: [Task<Void, Never>] = []
    /// The Control Point write in flight (the session keeps at most one).
    var write: (call: DBusConnection.PendingCall, connection: DBusConnection)?
    /// Calls the session's `handleTimer`; created on first use, disarmed while nothing waits.
    var timer: LoopTimer?
    /// When `timer` fires (session time), nil while disarmed.
    var timerDeadline: Duration?
    var notificationCount = 0
    /// The subscriptions are being renewed (`SessionAction.resubscribe`): unsubscribed, and
    /// subscribing again.
    var renewing = false
    /// A renewal met a notify session of another program on this characteristic (bluetoothd
    /// then writes no CCCD): its name for `status` and the log, nil when none was met.
    var sharedNotifySession: String?
    /// True from the phone's `sharing off` event to its `sharing on` (for `status`).
    var sharingOff = false
    /// Decides which notification events reach the outputs (`--replays`).
    var gate: ReplayGate
    /// Replayed notifications held back by the replay policy in this session.
    var heldBack = 0
    /// The last warning or error the session logged, for `ancsd status`.
    var lastError: String?
    /// Control-socket requests waiting for an action's outcome, oldest first per UID and action.
    var actionWaiters: [ActionKey: [CheckedContinuation<ActionOutcome, Never>]] = [:]
    /// Control-socket requests waiting for a notification's next event.
    var eventWaiters: [UInt32: [CheckedContinuation<PhoneNotification?, Never>]] = [:]

    struct ActionKey: Hashable {
        var uid: UInt32
        var action: UInt8
    }

    /// "AcquireNotify" or "StartNotify", once subscribed.
    var deliveryName: String? {
        if delivery.isEmpty { return nil }
        return delivery.values.contains(.signals) ? "StartNotify" : "AcquireNotify"
    }
    /// Writes the session to a capture file (`--record`).
    var recorder: SessionRecorder?

    init(
        id: UInt64, device: BlueZDevice, characteristics: ANCSCharacteristics, configuration: SessionConfiguration, replays: ReplayPolicy,
        clock: EventLoop
    ) {
        self.id = id
        self.clock = clock
        gate = ReplayGate(policy: replays)
        self.device = device
        self.characteristics = characteristics
        start = clock.now
        session = ANCSSession(configuration: configuration)
    }

    /// Time on the session's clock: the loop's, from the link's start.
    var now: Duration { clock.now - start }

    /// True for the Notification Source or Data Source of this link delivered by signals.
    func receivesSignals(for path: ObjectPath) -> Bool {
        delivery[path] == .signals
    }

    /// Stops every reader, task and timer.
    func tearDown() {
        state = .stopped
        for reader in readers { reader.cancel() }
        readers = []
        for task in tasks { task.cancel() }
        tasks = []
        if let write { write.connection.cancelCall(write.call) }
        write = nil
        timer?.cancel()
        timer = nil
        timerDeadline = nil
        for waiters in actionWaiters.values { for waiter in waiters { waiter.resume(returning: .failed("the phone disconnected")) } }
        actionWaiters = [:]
        for waiters in eventWaiters.values { for waiter in waiters { waiter.resume(returning: nil) } }
        eventWaiters = [:]
    }
}
