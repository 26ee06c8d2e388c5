/// The output sink of one control-socket client that sent `subscribe`: each event as a JSON line.
///
/// Queue and bound: the client's own write buffer in `ControlServer` (1 MiB, shared with its
/// replies). When full: the client has stopped reading and is disconnected (logged); the sink
/// is detached when the server reports the client gone.
final class ControlSubscriber: OutputSink {
    let name: String
    private let server: ControlServer
    private let client: ControlServer.ClientID

    init(server: ControlServer, client: ControlServer.ClientID) {
        self.server = server
        self.client = client
        name = Self.key(client)
    }

    /// The key the router attaches a client's sink under.
    static func key(_ client: ControlServer.ClientID) -> String { "control client \(client)" }

    func send(_ event: OutputRecord) {
        server.send(event.jsonLine, to: client)
    }
}
