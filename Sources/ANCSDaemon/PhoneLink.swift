import ANCS
import ANCSSession
import BlueZ
import DBus
import Dispatch

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
    let device: BlueZDevice
    let characteristics: ANCSCharacteristics
    let start: ContinuousClock.Instant
    var session: ANCSSession
    var state = State.subscribing
    var delivery: [ObjectPath: Delivery] = [:]
    var readers: [NotificationReader] = []
    var inputs: AsyncStream<Input>.Continuation?
    var tasks: [Task<Void, Never>] = []
    /// The Control Point write in flight (the session keeps at most one).
    var write: Task<Void, Never>?
    var timer: Task<Void, Never>?
    var timerDeadline: Duration?
    var notificationCount = 0
    /// Writes the session to a capture file (`--record`).
    var recorder: SessionRecorder?

    init(id: UInt64, device: BlueZDevice, characteristics: ANCSCharacteristics, configuration: SessionConfiguration) {
        self.id = id
        self.device = device
        self.characteristics = characteristics
        start = .now
        session = ANCSSession(configuration: configuration)
    }

    /// Time on the session's clock.
    var now: Duration { ContinuousClock.now - start }

    /// True for the Notification Source or Data Source of this link delivered by signals.
    func receivesSignals(for path: ObjectPath) -> Bool {
        delivery[path] == .signals
    }

    /// Stops every reader, task and timer.
    func tearDown() {
        state = .stopped
        for reader in readers { reader.cancel() }
        readers = []
        inputs?.finish()
        inputs = nil
        for task in tasks { task.cancel() }
        tasks = []
        write?.cancel()
        write = nil
        timer?.cancel()
        timer = nil
    }
}
