public import EventLoop
public import JSON

/// Hands each event to every output sink (`OutputSink`), never waiting for any of them.
///
/// Two kinds of sinks: the configured ones, fixed for the router's life (standard output, the
/// FIFO, exec, MQTT), and attached ones that come and go under a key (control-socket
/// subscribers). A reload builds a new router and moves the attached sinks over.
///
/// The attached sinks are the loop's (the daemon's, which makes every call): a call from another
/// thread goes there (`EventLoop.perform`).
public final class OutputRouter: Sendable {
    /// The configured sinks, in the order they get each event.
    public let sinks: [any OutputSink]
    /// The loop that keeps the attached sinks.
    public let loop: EventLoop
    private struct State {
        var attached: [String: any OutputSink] = [:]
        var context: OutputContext?
    }
    private let state: LoopBound<State>
    /// `State.attached`'s sinks as a list, kept up to date: what an event reads (one reference),
    /// rather than the dictionary's values or a copy of the whole state.
    private let attachedSinks: LoopBound<[any OutputSink]>

    public init(sinks: [any OutputSink], loop: EventLoop) {
        self.sinks = sinks
        self.loop = loop
        state = LoopBound(State(), loop: loop)
        attachedSinks = LoopBound([], loop: loop)
    }

    /// Gives every sink the way back into the daemon; the first call starts the configured
    /// sinks (later calls do nothing).
    public func start(_ context: OutputContext) {
        loop.perform { [self] in
            guard state.value.context == nil else { return }
            state.value.context = context
            for sink in sinks { sink.start(context) }
        }
    }

    /// Sends one event to every sink, as one record: its JSON line is rendered once, here.
    public func emit(_ event: OutputEvent) {
        if loop.isCurrent {
            route(OutputRecord(event))
        } else {
            loop.perform { self.route(OutputRecord(event)) }
        }
    }

    private func route(_ record: OutputRecord) {
        for sink in sinks { sink.send(record) }
        for sink in attachedSinks.value { sink.send(record) }
    }

    /// Feeds `sink` every later event until `detach(key)`; replaces (and stops) a sink
    /// attached under the same key.
    public func attach(_ sink: any OutputSink, key: String) {
        loop.perform { [self] in
            let replaced = state.value.attached.updateValue(sink, forKey: key)
            attachedSinks.value = Array(state.value.attached.values)
            replaced?.stop()
            if let context = state.value.context { sink.start(context) }
        }
    }

    /// Stops feeding the sink attached under `key`, and stops it.
    public func detach(key: String) {
        loop.perform { [self] in
            let removed = state.value.attached.removeValue(forKey: key)
            attachedSinks.value = Array(state.value.attached.values)
            removed?.stop()
        }
    }

    /// The keys of the attached sinks.
    public var attachedKeys: [String] {
        get async {
            await withCheckedContinuation { continuation in
                loop.perform { [self] in continuation.resume(returning: Array(state.value.attached.keys)) }
            }
        }
    }

    /// Carries the attached sinks over to a new router (after a reload changed the outputs).
    public func moveAttached(to other: OutputRouter) {
        loop.perform { [self] in
            let moved = state.value.attached
            state.value.attached = [:]
            attachedSinks.value = []
            for (key, sink) in moved { other.attach(sink, key: key) }
        }
    }

    /// Stops the configured sinks (the router was replaced or the daemon is ending), except
    /// those `successor` keeps.
    public func stop(keeping successor: OutputRouter? = nil) {
        for sink in sinks where !(successor?.sinks.contains { $0 === sink } ?? false) { sink.stop() }
    }

    /// Each configured sink's name and `report()`, in the order events reach them.
    public func report() async -> [JSONValue] {
        var reports: [JSONValue] = []
        for sink in sinks {
            var object: JSONObject = ["name": .string(sink.name)]
            for (key, value) in await sink.report() { object.append(key, value) }
            reports.append(.object(object))
        }
        return reports
    }

    /// Waits up to `timeout` for every configured sink (all at once) to deliver what it holds;
    /// true if all did.
    public func flush(timeout: Duration) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            for sink in sinks { group.addTask { await sink.flush(timeout: timeout) } }
            return await group.reduce(true) { $0 && $1 }
        }
    }
}
