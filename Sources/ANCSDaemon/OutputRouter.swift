import Synchronization

/// Sends each output event, formatted, to every sink, and as JSON to every control-socket
/// subscriber.
public final class OutputRouter: Sendable {
    public let format: OutputFormat
    public let sinks: [LineSink]
    private let subscribers = Mutex<[UInt64: @Sendable (String) -> Void]>([:])

    public init(format: OutputFormat, sinks: [LineSink]) {
        self.format = format
        self.sinks = sinks
    }

    public func emit(_ event: OutputEvent) {
        let line = EventFormatter.line(event, format: format)
        for sink in sinks { sink.send(line) }
        let listeners = subscribers.withLock { Array($0.values) }
        guard !listeners.isEmpty else { return }
        let json = format == .json ? line : EventFormatter.line(event, format: .json)
        for listener in listeners { listener(json) }
    }

    /// Sends every later event, as a JSON line, to `listener` until `unsubscribe(id)`.
    public func subscribe(_ id: UInt64, _ listener: @escaping @Sendable (String) -> Void) {
        subscribers.withLock { $0[id] = listener }
    }

    public func unsubscribe(_ id: UInt64) {
        subscribers.withLock { $0[id] = nil }
    }

    /// Carries the subscribers over to a new router (after a reload changed the outputs).
    public func moveSubscribers(to other: OutputRouter) {
        let moved = subscribers.withLock { current in
            defer { current = [:] }
            return current
        }
        other.subscribers.withLock { $0.merge(moved) { _, new in new } }
    }
}
