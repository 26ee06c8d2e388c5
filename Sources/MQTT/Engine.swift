#if canImport(Glibc)
import Glibc
#endif
import CMosquitto
import EventLoop
import SystemCalls

/// A reference to the engine that does not keep it alive: what the loop's watch and timers hold.
final class EngineReference {
    weak var engine: Engine?
}

/// The client's connection and queue, on its loop only (`MQTTClient` reaches it through a
/// `LoopBound`; the loop's handlers through a weak `EngineReference`, itself loop-bound).
final class Engine {
    typealias Counters = MQTTClient.Counters

    private struct Entry {
        var message: MQTTMessage
        /// libmosquitto's message id once handed to it.
        var mid: Int32?
        var done = false
    }

    let configuration: MQTTConfiguration
    private let loop: EventLoop
    private let board: CounterBoard
    private let onEvent: @Sendable (MQTTClientEvent) -> Void
    /// libmosquitto's functions.
    private let mosquitto: Libmosquitto
    private let reference: LoopBound<EngineReference>
    private var handle: OpaquePointer?
    private var pending: [Entry] = []
    private var head = 0
    private var handed = 0
    private var connected = false
    /// The TCP connect is under way: libmosquitto 2.0.11 does not notice a non-blocking
    /// connect that fails (refused by the second address of a name), so the client checks
    /// the socket itself until the connection is made.
    private var connectPending = false
    private var stopped = false
    /// The address families still to try in this round of attempts (see `MQTTClient`'s
    /// comment); empty when the name has one family, or a literal address: libmosquitto chooses.
    private var familiesLeft: [Int32] = []
    /// The family of the attempt under way (nil: libmosquitto's choice), and of the last that worked.
    private var attemptFamily: Int32?
    private var workingFamily: Int32?
    /// Why the earlier families of this round failed.
    private var roundFailures: [String] = []
    private var subscriptions: [String] = []
    private var socket: SocketWatch?
    private var keepAliveTimer: LoopTimer?
    private var retryTimer: LoopTimer?
    private var retryDelay: Duration
    private var lostReason: String?
    private var droppedSinceReport = 0
    private var answersDroppedSinceReport = 0
    private var lastDropReport: ContinuousClock.Instant?
    private var finishing: (timer: LoopTimer, done: @Sendable (Bool) -> Void)?
    private var counters = Counters()

    init(
        configuration: MQTTConfiguration, loop: EventLoop, board: CounterBoard, mosquitto: Libmosquitto,
        onEvent: @escaping @Sendable (MQTTClientEvent) -> Void
    ) {
        self.mosquitto = mosquitto
        self.configuration = configuration
        self.loop = loop
        self.board = board
        self.onEvent = onEvent
        retryDelay = configuration.minimumRetry
        let reference = EngineReference()
        self.reference = LoopBound(reference, loop: loop)
        reference.engine = self  // before anything else can reach the reference
    }

    deinit {
        // The last `MQTTClient` went away without `stop`: nothing reaches this engine any more.
        socket = nil
        keepAliveTimer?.cancel()
        retryTimer?.cancel()
        if let handle { mosquitto.destroy(handle) }
    }

    /// A handler for the loop that calls `body` with the engine, if it still lives.
    private func handler(_ body: @escaping @Sendable (Engine) -> Void) -> @Sendable () -> Void {
        let reference = self.reference
        return { if let engine = reference.value.engine { body(engine) } }
    }

    /// Runs `body` on the loop after what is enqueued there (not from inside a libmosquitto callback).
    private func later(_ body: @escaping @Sendable (Engine) -> Void) {
        loop.execute(handler(body))
    }

    func subscribe(_ filter: String) {
        guard !subscriptions.contains(filter) else { return }
        subscriptions.append(filter)
        if connected, let handle {
            _ = mosquitto.subscribe(handle, nil, filter, 1)
            afterIO()
        }
    }

    /// Publishes the counters for `snapshot`; called on the loop after each change.
    private func share() {
        var current = counters
        current.queued = pending.count - head
        current.connected = connected
        board.counters.withLock { $0 = current }
    }

    /// `MQTTClient.finish`; `keeping` holds the engine until it is done.
    func finish(timeout: Duration, keeping engine: LoopBound<Engine>, done: @escaping @Sendable (Bool) -> Void) {
        guard !stopped, finishing == nil else { return done(isEmpty) }
        if let farewell = configuration.farewell { enqueue(farewell) }
        let timer = loop.makeTimer { engine.value.finished() }
        timer.schedule(after: timeout)
        finishing = (timer, done)
        if isEmpty || !connected { finished() }
    }

    /// Ends a `finish`: disconnects and reports whether everything was delivered. Never called
    /// from inside a libmosquitto callback (it destroys the handle).
    private func finished() {
        guard let (timer, done) = finishing else { return }
        finishing = nil
        timer.cancel()
        let empty = isEmpty
        shutDown()
        done(empty)
    }

    // MARK: Queue

    private var isEmpty: Bool { head == pending.count }

    func enqueue(_ message: MQTTMessage) {
        guard !stopped else { return }
        if message.retain, let index = pending[head...].firstIndex(where: { $0.mid == nil && $0.message.retain && $0.message.topic == message.topic }) {
            pending.remove(at: index)
        }
        pending.append(Entry(message: message))
        if message.isAnswer {
            // Answers keep to their share: the oldest waiting one goes.
            let answers = pending[head...].indices.filter { pending[$0].mid == nil && pending[$0].message.isAnswer }
            if answers.count > configuration.answerLimit, let oldest = answers.first { drop(at: oldest) }
        }
        while pending.count - head > configuration.queueLimit {
            // Drop the oldest message not in flight: an answer to a command first, then an
            // event rather than retained state if there is one.
            let waiting = pending[head...].indices.filter { pending[$0].mid == nil }
            guard let victim = waiting.first(where: { pending[$0].message.isAnswer })
                ?? waiting.first(where: { !pending[$0].message.retain }) ?? waiting.first
            else { break }
            drop(at: victim)
        }
        if droppedSinceReport + answersDroppedSinceReport > 0, connected,
           lastDropReport.map({ ContinuousClock.now - $0 >= MQTTClient.dropReportInterval }) ?? true {
            reportDrops()
        }
        share()
        handOver()
    }

    /// Drops the waiting message at `index`, counted as an answer or an event.
    private func drop(at index: Int) {
        if pending.remove(at: index).message.isAnswer {
            counters.droppedAnswers += 1
            answersDroppedSinceReport += 1
        } else {
            counters.dropped += 1
            droppedSinceReport += 1
        }
    }

    /// Tells the owner how many messages were dropped since the last report, if any.
    private func reportDrops() {
        guard droppedSinceReport + answersDroppedSinceReport > 0 else { return }
        if droppedSinceReport > 0 { onEvent(.dropped(droppedSinceReport)) }
        if answersDroppedSinceReport > 0 { onEvent(.answersDropped(answersDroppedSinceReport)) }
        droppedSinceReport = 0
        answersDroppedSinceReport = 0
        lastDropReport = .now
    }

    /// Hands waiting messages to libmosquitto, in order, up to the window.
    private func handOver() {
        guard connected, let handle else { return }
        var index = head
        while handed < MQTTClient.window, index < pending.count {
            if pending[index].mid == nil, !pending[index].done {
                var mid: Int32 = 0
                let message = pending[index].message
                let rc = message.payload.withUnsafeBytes { bytes in
                    mosquitto.publish(handle, &mid, message.topic, Int32(bytes.count), bytes.baseAddress, message.qos, message.retain)
                }
                guard rc == MOSQ_ERR_SUCCESS.rawValue else {
                    if rc == MOSQ_ERR_INVAL.rawValue || rc == MOSQ_ERR_PAYLOAD_SIZE.rawValue || rc == MOSQ_ERR_MALFORMED_UTF8.rawValue {
                        // Never deliverable: drop it rather than block the queue behind it.
                        pending[index].done = true
                        counters.dropped += 1
                        share()
                        index += 1
                        continue
                    }
                    break  // the connection is going; the disconnect path retries
                }
                pending[index].mid = mid
                handed += 1
            }
            index += 1
        }
        afterIO()
    }

    private func acknowledged(_ mid: Int32) {
        guard let index = pending[head...].firstIndex(where: { $0.mid == mid && !$0.done }) else { return }
        pending[index].done = true
        handed -= 1
        counters.delivered += 1
        while head < pending.count, pending[head].done { head += 1 }
        if head > 256, head * 2 > pending.count {
            pending.removeFirst(head)
            head = 0
        }
        if isEmpty { reportDrops() }
        share()
        if isEmpty, finishing != nil {
            later { $0.finished() }  // not from inside libmosquitto's callback
        } else if handed < MQTTClient.window / 2 {
            later { $0.handOver() }
        }
    }

    // MARK: Connection

    func connect() {
        guard !stopped, handle == nil else { return }
        lostReason = nil
        let configuration = self.configuration
        guard let handle = mosquitto.new(configuration.clientID, true, Unmanaged.passUnretained(self).toOpaque()) else {
            return lost("out of memory")
        }
        self.handle = handle
        _ = mosquitto.intOption(handle, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311)
        if let user = configuration.endpoint.username {
            _ = mosquitto.usernamePasswordSet(handle, user, configuration.password)
        }
        if configuration.endpoint.tls {
            if let ca = configuration.caFile {
                let rc = mosquitto.tlsSet(handle, ca, nil, nil, nil, nil)
                guard rc == MOSQ_ERR_SUCCESS.rawValue else { return lost("cannot use the CA file \(ca): \(describe(rc))") }
            } else {
                _ = mosquitto.intOption(handle, MOSQ_OPT_TLS_USE_OS_CERTS, 1)
            }
        }
        if let will = configuration.will {
            will.payload.withUnsafeBytes { bytes in
                _ = mosquitto.willSet(handle, will.topic, Int32(bytes.count), bytes.baseAddress, will.qos, will.retain)
            }
        }
        mosquitto.connectCallbackSet(handle) { _, context, rc in
            Engine.from(context)?.connectAnswered(rc)
        }
        mosquitto.disconnectCallbackSet(handle) { _, context, rc in
            guard let client = Engine.from(context), client.lostReason == nil else { return }
            client.lostReason = client.describe(rc)
        }
        mosquitto.publishCallbackSet(handle) { _, context, mid in
            Engine.from(context)?.acknowledged(mid)
        }
        mosquitto.messageCallbackSet(handle) { _, context, message in
            guard let client = Engine.from(context), let message = message?.pointee, let topic = message.topic else { return }
            let payload = message.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: Int(message.payloadlen))) } ?? []
            client.onEvent(.message(topic: String(cString: topic), payload: payload, retained: message.retain))
        }
        if familiesLeft.isEmpty {
            familiesLeft = Self.families(of: configuration.endpoint.host, preferring: workingFamily)
            roundFailures = []
        }
        attemptFamily = familiesLeft.isEmpty ? nil : familiesLeft.removeFirst()
        // libmosquitto skips every address it cannot bind to the wildcard of `bindAddress`'s family.
        let bindAddress = attemptFamily.map { $0 == AF_INET6 ? "::" : "0.0.0.0" }
        let rc = mosquitto.connectBindAsync(
            handle, configuration.endpoint.host, configuration.endpoint.port, configuration.keepAlive, bindAddress)
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { return lost(describe(rc)) }
        let fd = mosquitto.socket(handle)
        let reference = self.reference
        guard fd >= 0, let socket = SocketWatch(duplicating: fd, loop: loop, handler: { reference.value.engine?.ready($0) }) else {
            return lost("no socket")
        }
        self.socket = socket
        connectPending = true
        afterIO()
    }

    /// While the TCP connect is under way: the socket's error, if it failed; clears
    /// `connectPending` once connected.
    private func connectFailure(_ handle: OpaquePointer) -> String? {
        guard connectPending else { return nil }
        let fd = mosquitto.socket(handle)
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0, error != 0 { return Errno(rawValue: error).description }
        // With TLS, libmosquitto's handshake may already have taken the socket's error.
        var poll = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        if Glibc.poll(&poll, 1, 0) == 1, poll.revents & Int16(POLLERR | POLLHUP) != 0 { return Errno(rawValue: ECONNREFUSED).description }
        var address = sockaddr_storage()
        var addressLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let peer = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &addressLength) }
        }
        if peer == 0 { connectPending = false }
        return nil
    }

    private func connectAnswered(_ rc: Int32) {
        guard rc == 0 else {
            lostReason = mosquitto.connackString(rc).map { String(cString: $0) } ?? "refused (\(rc))"
            return
        }
        connected = true
        counters.connections += 1
        retryDelay = configuration.minimumRetry
        workingFamily = attemptFamily ?? workingFamily
        familiesLeft = []
        share()
        lostReason = nil
        if let handle {
            for filter in subscriptions { _ = mosquitto.subscribe(handle, nil, filter, 1) }
        }
        onEvent(.connected)
        reportDrops()
        // Not from inside the callback: libmosquitto marks the connection active only after it,
        // and holds back (for good) a QoS 1 message published before.
        later { $0.handOver() }
    }

    /// The socket is ready: read, then write (unless reading lost the connection).
    private func ready(_ events: Watch.Events) {
        if events.contains(.readable) { readable() }
        if events.contains(.writable), socket != nil { writable() }
    }

    private func readable() {
        guard let handle else { return }
        if let failure = connectFailure(handle) { return lost(failure) }
        let rc = mosquitto.loopRead(handle, 1)
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { return lost(lostReason ?? describe(rc)) }
        afterIO()
    }

    private func writable() {
        guard let handle else { return }
        if let failure = connectFailure(handle) { return lost(failure) }
        let rc = mosquitto.loopWrite(handle, 1)
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { return lost(lostReason ?? describe(rc)) }
        afterIO()
    }

    private func keepAliveDue() {
        guard let handle else { return }
        guard connected else { return lost("no answer from the broker within \(configuration.keepAlive) s") }
        let rc = mosquitto.loopMisc(handle)
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { return lost(lostReason ?? describe(rc)) }
        afterIO()
    }

    /// After any traffic: watch for writability only while there is something to write, and
    /// move the keep-alive check a full period ahead.
    private func afterIO() {
        guard let handle else { return }
        if mosquitto.socket(handle) < 0 { return lost(lostReason ?? "connection closed") }
        socket?.wantWrite(connectPending || mosquitto.wantWrite(handle))
        let timer = keepAliveTimer ?? loop.makeTimer(handler: handler { $0.keepAliveDue() })
        keepAliveTimer = timer
        timer.schedule(after: .seconds(Int(configuration.keepAlive)))
    }

    /// Drops the connection's state and schedules the next attempt: at once with the next
    /// address family if this attempt never got the broker's answer, else after the backoff.
    private func lost(_ failure: String) {
        let neverConnected = !connected
        tearDown()
        guard !stopped else { return }
        var reason = failure
        if let family = attemptFamily {
            let failed = "\(failure) (\(family == AF_INET6 ? "IPv6" : "IPv4"))"
            if neverConnected && !familiesLeft.isEmpty {
                roundFailures.append(failed)
                later { $0.connect() }
                return
            }
            reason = (roundFailures + [failed]).joined(separator: "; ")
            familiesLeft = []
            roundFailures = []
        }
        let delay = retryDelay
        retryDelay = min(retryDelay * 2, configuration.maximumRetry)
        onEvent(.disconnected(reason: reason, retry: delay))
        let timer = retryTimer ?? loop.makeTimer(handler: handler { $0.connect() })
        retryTimer = timer
        timer.schedule(after: delay)
    }

    private func tearDown() {
        socket = nil  // cancels the watch, then closes its descriptor
        keepAliveTimer?.cancel()
        keepAliveTimer = nil
        if let handle {
            mosquitto.destroy(handle)
            self.handle = nil
        }
        connected = false
        connectPending = false
        handed = 0
        for index in pending.indices where !pending[index].done { pending[index].mid = nil }
        share()
    }

    func shutDown() {
        guard !stopped else { return }
        stopped = true
        retryTimer?.cancel()
        retryTimer = nil
        if let handle, connected {
            _ = mosquitto.disconnect(handle)
            _ = mosquitto.loopWrite(handle, 1)
        }
        tearDown()
    }

    // MARK: Helpers

    /// IPv6 and IPv4, in the order `host` resolves to them, `preferring` first; empty when the
    /// name has addresses of one family only (or does not resolve: libmosquitto says why).
    static func families(of host: String, preferring: Int32?) -> [Int32] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0 else { return [] }
        defer { freeaddrinfo(list) }
        var families: [Int32] = []
        var entry = list
        while let current = entry {
            let family = current.pointee.ai_family
            if (family == AF_INET || family == AF_INET6) && !families.contains(family) { families.append(family) }
            entry = current.pointee.ai_next
        }
        guard families.count > 1 else { return [] }
        if let preferring, let index = families.firstIndex(of: preferring) { families.insert(families.remove(at: index), at: 0) }
        return families
    }

    private static func from(_ context: UnsafeMutableRawPointer?) -> Engine? {
        context.map { Unmanaged<Engine>.fromOpaque($0).takeUnretainedValue() }
    }

    func describe(_ rc: Int32) -> String {
        if rc == MOSQ_ERR_ERRNO.rawValue { return Errno.current.description }
        return mosquitto.errorString(rc).map { String(cString: $0) } ?? "error \(rc)"
    }
}

/// A loop watch on a private duplicate of libmosquitto's socket: readable always, writable
/// on demand.
///
/// libmosquitto closes its socket itself when a connection fails; watching a duplicate that
/// only this value closes (after cancelling the watch) keeps the descriptor number from being
/// reused under a live watch.
final class SocketWatch {
    private let descriptor: FileDescriptor
    private let watch: Watch

    init?(duplicating original: Int32, loop: EventLoop, handler: @escaping @Sendable (Watch.Events) -> Void) {
        guard let fd = try? Errno.retrying({ fcntl(original, F_DUPFD_CLOEXEC, 0) }) else { return nil }
        let descriptor = FileDescriptor(adopting: fd)
        guard let watch = try? loop.watch(fd: descriptor.rawValue, interest: .readable, handler: handler) else { return nil }
        self.descriptor = descriptor
        self.watch = watch
    }

    func wantWrite(_ want: Bool) {
        watch.update(want ? [.readable, .writable] : .readable)
    }

    deinit { watch.cancel() }  // before `descriptor` closes
}
