public import EventLoop
import Synchronization

/// What the client tells its owner.
public enum MQTTClientEvent: Sendable {
    /// Connected (again): subscriptions are renewed and queued messages are being delivered.
    case connected
    /// The connection failed or was lost; the client retries after `retry`.
    case disconnected(reason: String, retry: Duration)
    /// A message on a subscribed topic; `retained`: a stored message the broker replayed on
    /// subscribing, not one just sent.
    case message(topic: String, payload: [UInt8], retained: Bool)
    /// Messages were dropped because the queue was full (the count since the last report).
    /// Reported on reconnecting, when the queue runs empty, and while connected at most once
    /// per `MQTTClient.dropReportInterval`.
    case dropped(Int)
    /// Answers to commands were dropped: more waited than `MQTTConfiguration.answerLimit` (the
    /// count since the last report; reported as `dropped` is).
    case answersDropped(Int)
}

/// An MQTT client on libmosquitto, driven by an `EventLoop` (the daemon's): no thread of its
/// own, no polling.
///
/// The socket is a watch of the loop, readable always and writable only while libmosquitto
/// has bytes to send (`mosquitto_want_write`). One loop timer calls `mosquitto_loop_misc` a
/// keep-alive period after the last traffic, so an idle connection wakes the process once per
/// keep-alive (the PINGREQ) and once for its answer.
///
/// Messages wait in the client's own bounded queue, in order, until the broker acknowledges
/// them (QoS 1) or they are written (QoS 0); at most `window` are handed to libmosquitto at a
/// time. A lost connection throws libmosquitto's state away (a new `mosquitto` handle per
/// attempt) and hands the unacknowledged messages again, in order, after reconnecting: QoS 1
/// delivery, at least once. A retained message replaces a not yet sent retained message of the
/// same topic.
///
/// A broker name with both IPv6 and IPv4 addresses (`localhost` on most systems, a dual-stack
/// host) gets one attempt per family before the backoff: libmosquitto's non-blocking connect
/// tries only a name's first address, so a broker that listens on IPv4 only would otherwise
/// never be reached by `mqtt://localhost`. The family that last worked is tried first.
///
/// Every method may be called from any thread; the work happens on `loop`, after what is
/// already enqueued there, and `onEvent` is called there. Connecting resolves the broker's
/// name on the loop (a blocking `getaddrinfo`, as libmosquitto's connect does).
public final class MQTTClient: Sendable {
    public let configuration: MQTTConfiguration
    /// The loop the client's socket, timers and callbacks run on.
    public let loop: EventLoop
    /// The connection's state: touched only on `loop`, which every access checks.
    private let engine: LoopBound<Engine>
    private let board: CounterBoard

    /// Messages handed to libmosquitto and not yet acknowledged, at most.
    public static let window = 20

    /// While connected, drops are reported at most this often (a broker slower than a burst
    /// would otherwise make a report per message).
    public static let dropReportInterval: Duration = .seconds(10)

    /// What the client did so far.
    public struct Counters: Sendable, Equatable {
        /// Connected to the broker now (the MQTT session accepted).
        public var connected = false
        public var delivered = 0
        public var dropped = 0
        /// Answers to commands dropped (`MQTTMessage.isAnswer`), not counted in `dropped`.
        public var droppedAnswers = 0
        public var connections = 0
        public var queued = 0
        public init() {}
    }

    /// Throws when libmosquitto cannot be loaded (the first client loads it).
    public init(configuration: MQTTConfiguration, loop: EventLoop, onEvent: @escaping @Sendable (MQTTClientEvent) -> Void) throws(MQTTLibraryError) {
        let mosquitto = try Libmosquitto.shared.get()
        self.configuration = configuration
        self.loop = loop
        let board = CounterBoard()
        self.board = board
        engine = LoopBound(
            Engine(configuration: configuration, loop: loop, board: board, mosquitto: mosquitto, onEvent: onEvent), loop: loop)
    }

    /// Starts connecting; later failures are retried with backoff.
    public func start() {
        onLoop { $0.connect() }
    }

    /// Queues a message; it is delivered once connected, in order with the others.
    public func publish(_ message: MQTTMessage) {
        onLoop { $0.enqueue(message) }
    }

    /// Subscribes to `filter` (QoS 1) now and after every reconnect.
    public func subscribe(_ filter: String) {
        onLoop { $0.subscribe(filter) }
    }

    /// The counters as the loop last left them: read at once from any thread, never waiting
    /// for the loop (which may be inside a slow name lookup).
    public var snapshot: Counters { board.counters.withLock { $0 } }

    /// Publishes the farewell message, waits until the queue is delivered or `timeout` passes,
    /// then disconnects cleanly (so the broker does not send the will) and stops.
    /// `done(true)` when everything queued was delivered; called on the loop.
    public func finish(timeout: Duration, done: @escaping @Sendable (Bool) -> Void) {
        let engine = self.engine
        loop.execute { engine.value.finish(timeout: timeout, keeping: engine, done: done) }
    }

    /// Stops at once: no farewell, no flush.
    public func stop() {
        onLoop { $0.shutDown() }
    }

    /// Runs `body` with the engine on the loop, after what is already enqueued there (never at
    /// once: a caller inside `onEvent` is inside a libmosquitto callback).
    private func onLoop(_ body: @escaping @Sendable (Engine) -> Void) {
        let engine = self.engine
        loop.execute { body(engine.value) }
    }
}

/// The counters the loop publishes for `MQTTClient.snapshot`.
final class CounterBoard: Sendable {
    let counters = Mutex(MQTTClient.Counters())
}
