public import ANCS
public import ANCSRuntime
public import ControlProtocol
public import JSON

/// One output of the daemon: standard output, the FIFO, a control-socket subscriber, a command
/// per event, MQTT… The `OutputRouter` hands every event to every sink; sinks never know of
/// each other (the shape of swift-log's `LogHandler`).
///
/// Each sink owns its queue, its bound and what it does when the bound is reached, and says so
/// in its documentation. `send` is called on the daemon's executor for every event and must
/// return at once: no blocking I/O, no waiting for a reader, a broker or a child process. The
/// daemon makes every call on its loop, so a sink's state is the loop's (a `LoopBound`; a call
/// from another thread, a test's, reaches it with `EventLoop.perform`), never behind a `Mutex`.
/// Adding an output means writing one conforming type and creating it in `RunCommand.makeOutput`.
public protocol OutputSink: AnyObject, Sendable {
    /// A name for log lines ("standard output", the FIFO's path, "exec", "control client 3").
    var name: String { get }

    /// Called before the first event with the way back into the daemon (sinks that take
    /// commands, such as MQTT actions, keep `context.actions`): once per router that feeds the
    /// sink, so again for a sink a reload keeps; make it idempotent. The default does nothing.
    func start(_ context: OutputContext)

    /// Takes one event. Must not block: queue it, or drop by the sink's own policy.
    func send(_ event: OutputRecord)

    /// Returns once what is queued has been delivered or `timeout` passed (waiting without
    /// blocking the loop, whose work delivers it); true if everything was delivered. Used at
    /// shutdown. The default returns true at once.
    func flush(timeout: Duration) async -> Bool

    /// The router no longer feeds this sink (a reload replaced the outputs, or the daemon is
    /// ending): release what it holds. Called once, after the last `send`. The default does nothing.
    func stop()

    /// What `ancsd status` shows of this output besides its name: its counters, and whether a
    /// network output is connected (never content). Must answer soon: it waits at most for
    /// the sink's own queue. The default is empty.
    func report() async -> JSONObject
}

extension OutputSink {
    public func start(_ context: OutputContext) {}
    public func flush(timeout: Duration) async -> Bool { true }
    public func stop() {}
    public func report() async -> JSONObject { [:] }
}

/// What a sink may use from the daemon.
public struct OutputContext: Sendable {
    /// Performs phone actions, as the control socket's `action` command does.
    public var actions: any PhoneActions
    /// The daemon's executor: a sink that wants to watch descriptors or run timers without a
    /// thread of its own does so on this loop (`watch`, `makeTimer`). Its handlers must stay short.
    public var executor: DaemonExecutor

    public init(actions: any PhoneActions, executor: DaemonExecutor) {
        self.actions = actions
        self.executor = executor
    }
}

/// The way back from an output to a phone.
public protocol PhoneActions: Sendable {
    /// Asks phone `device` (an address such as `AA:BB:CC:DD:EE:FF`, any case) to perform
    /// `action` on its notification `uid`. The answer is the control socket's `action` reply
    /// (docs/control.md): `{"ok": true, "result": "performed"}`, or `{"ok": false, "error":
    /// {"code": …, "message": …}}` with the codes `no_such_device`, `no_such_notification`,
    /// `not_available`, `notification_gone`, `action_failed`, `failed`.
    func performAction(_ action: ActionID, uid: UInt32, device: String) async -> JSONObject

    /// Sends `command` to the player of phone `device` (an address, any case), as the control
    /// socket's `media_command` does, and answers with its reply: `{"ok": true, "result":
    /// "sent"}` once the phone acknowledged the command, or `{"ok": false, "error": {"code": …,
    /// "message": …}}` with the codes `no_such_device`, `not_available`, `unsupported_command`,
    /// `busy`, `failed`, `bad_request`.
    func performMediaCommand(_ command: ControlMediaCommand, device: String) async -> JSONObject
}

/// One event on its way to the sinks, with its JSON line: the line every JSON output sends
/// (standard output, the FIFO, exec, MQTT, control subscribers), rendered once when the router
/// makes the record. Other renderings are made by the sink that wants them.
public final class OutputRecord: Sendable {
    public let event: OutputEvent
    /// The event's JSON object on one line, exactly as `--format json` prints it, as UTF-8 bytes
    /// followed by a newline: what a line sink and exec write as they are, and MQTT sends without
    /// the newline. Held as bytes, not as a `String`: most outputs want bytes, and making a
    /// `String` of them costs a copy and a check of the UTF-8 (`jsonLine` makes one for those
    /// that want text).
    public let jsonLineBytes: [UInt8]

    public init(_ event: OutputEvent) {
        self.event = event
        jsonLineBytes = EventFormatter.json(event).serializedBytes(newline: true)
    }

    /// The event's JSON line as text (no newline).
    public var jsonLine: String {
        jsonLineBytes.withUnsafeBufferPointer { String(decoding: $0.dropLast(), as: UTF8.self) }
    }

    /// The phone's address, as in the event.
    public var device: String {
        switch event {
        case .notification(_, let device, _), .connected(let device, _), .disconnected(let device, _), .sharing(let device, _): device
        case .service(let output): output.device
        }
    }

    /// The event's JSON object (docs/output.md).
    public var json: JSONValue { EventFormatter.json(event) }

    /// The line in `format` (no newline).
    public func line(_ format: OutputFormat) -> String {
        switch format {
        case .json: jsonLine
        case .text: EventFormatter.text(event)
        }
    }

    /// The line in `format` as UTF-8 bytes followed by a newline: what a line sink writes.
    public func lineBytes(_ format: OutputFormat) -> [UInt8] {
        switch format {
        case .json: jsonLineBytes
        case .text: newlineTerminated(EventFormatter.text(event))
        }
    }
}

/// `line`'s UTF-8 bytes followed by a newline, as a line sink writes them.
func newlineTerminated(_ line: String) -> [UInt8] {
    var bytes = [UInt8]()
    bytes.reserveCapacity(line.utf8.count + 1)
    bytes += line.utf8
    bytes.append(0x0A)
    return bytes
}
