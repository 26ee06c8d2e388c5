public import JSON
import Synchronization

/// Hands each event to every output sink (`OutputSink`), never waiting for any of them.
///
/// Two kinds of sinks: the configured ones, fixed for the router's life (standard output, the
/// FIFO, exec, MQTT), and attached ones that come and go under a key (control-socket
/// subscribers). A reload builds a new router and moves the attached sinks over.
public final class OutputRouter: Sendable {
    /// The configured sinks, in the order they get each event.
    public let sinks: [any OutputSink]
    private struct State {
        var attached: [String: any OutputSink] = [:] {
            didSet { attachedSinks = Array(attached.values) }
        }
        /// `attached`'s sinks as a list, kept up to date: an event takes it (one reference)
        /// rather than copying the dictionary's values.
        private(set) var attachedSinks: [any OutputSink] = []
        var context: OutputContext?
    }
    private let state = Mutex(State())

    public init(sinks: [any OutputSink]) {
        self.sinks = sinks
    }

    /// Gives every sink the way back into the daemon; the first call starts the configured
    /// sinks (later calls do nothing).
    public func start(_ context: OutputContext) {
        let first = state.withLock { state -> Bool in
            guard state.context == nil else { return false }
            state.context = context
            return true
        }
        guard first else { return }
        for sink in sinks { sink.start(context) }
    }

    /// Sends one event to every sink, as one record: its JSON line is rendered once, here.
    public func emit(_ event: OutputEvent) {
        let record = OutputRecord(event)
        for sink in sinks { sink.send(record) }
        let attached = state.withLock { $0.attachedSinks }
        for sink in attached { sink.send(record) }
    }

    /// Feeds `sink` every later event until `detach(key)`; replaces (and stops) a sink
    /// attached under the same key.
    public func attach(_ sink: any OutputSink, key: String) {
        let (context, old) = state.withLock { state in
            (state.context, state.attached.updateValue(sink, forKey: key))
        }
        old?.stop()
        if let context { sink.start(context) }
    }

    /// Stops feeding the sink attached under `key`, and stops it.
    public func detach(key: String) {
        state.withLock { $0.attached.removeValue(forKey: key) }?.stop()
    }

    /// The keys of the attached sinks.
    public var attachedKeys: [String] { state.withLock { Array($0.attached.keys) } }

    /// Carries the attached sinks over to a new router (after a reload changed the outputs).
    public func moveAttached(to other: OutputRouter) {
        let moved = state.withLock { state in
            defer { state.attached = [:] }
            return state.attached
        }
        for (key, sink) in moved { other.attach(sink, key: key) }
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
