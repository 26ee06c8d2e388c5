/// Sends each output event, formatted, to every sink.
public final class OutputRouter: Sendable {
    public let format: OutputFormat
    public let sinks: [LineSink]

    public init(format: OutputFormat, sinks: [LineSink]) {
        self.format = format
        self.sinks = sinks
    }

    public func emit(_ event: OutputEvent) {
        let line = EventFormatter.line(event, format: format)
        for sink in sinks { sink.send(line) }
    }
}
