import AMS
import ANCSSession
import GattSession
import LinkMachine

/// Drives a `LinkMachine` as the daemon would, with one phone, recording what it asks for.
struct LinkHarness {
    typealias Command = LinkMachine.Command

    static let phonePath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"
    static let ancsObjects = ServiceObjects(path: "\(phonePath)/service0010", characteristics: [
        ANCSSession.notificationSourceUUID: "\(phonePath)/service0010/char0011",
        ANCSSession.controlPointUUID: "\(phonePath)/service0010/char0014",
        ANCSSession.dataSourceUUID: "\(phonePath)/service0010/char0017",
    ])
    static let ns = "\(phonePath)/service0010/char0011"
    static let ds = "\(phonePath)/service0010/char0017"
    static let amsObjects = ServiceObjects(path: "\(phonePath)/service0030", characteristics: [
        AMSUUID.remoteCommand: "\(phonePath)/service0030/char0031",
        AMSUUID.entityUpdate: "\(phonePath)/service0030/char0034",
        AMSUUID.entityAttribute: "\(phonePath)/service0030/char0037",
    ])
    static let remoteCommand = "\(phonePath)/service0030/char0031"
    static let entityUpdate = "\(phonePath)/service0030/char0034"

    var machine: LinkMachine
    var now = Duration.zero
    /// Everything the machine said, in order.
    var said: [Command] = []
    /// The phone as bluetoothd shows it now.
    var phone = PhoneView(
        path: phonePath, address: "AA:BB:CC:DD:EE:01", name: "iPhone", connected: true, bonded: true, ancs: ancsObjects)

    init(acquire: Bool = true, media: Bool = true) {
        machine = LinkMachine(settings: Self.settings(acquire: acquire, media: media))
    }

    static func settings(acquire: Bool = true, media: Bool = true) -> LinkMachine.Settings {
        LinkMachine.Settings(
            primary: ANCSSession.service, services: [MediaSession.service], enabled: media ? [MediaSession.service.uuid] : [],
            preferAcquireNotify: acquire)
    }

    /// Feeds an input; returns the commands it gave.
    @discardableResult
    mutating func feed(_ input: LinkMachine.Input) -> [Command] {
        let commands = machine.handle(input, now: now)
        said += commands
        return commands
    }

    /// bluetoothd's tree changed: the phone as it is now.
    @discardableResult
    mutating func tree() -> [Command] { feed(.devices([phone])) }

    /// Moves the clock to `time` from now, firing the machine's timer at each deadline on the way.
    @discardableResult
    mutating func advance(_ time: Duration) -> [Command] {
        let end = now + time
        var commands: [Command] = []
        while let deadline = machine.nextDeadline, deadline <= end {
            now = max(now, deadline)
            commands += feed(.timer)
        }
        now = end
        return commands
    }

    /// The calls among `commands`.
    static func calls(_ commands: [Command]) -> [(id: LinkMachine.CallID, call: GattCall)] {
        commands.compactMap { if case .call(let id, let call) = $0 { (id, call) } else { nil } }
    }

    /// The last call asked for.
    var lastCall: (id: LinkMachine.CallID, call: GattCall)? { Self.calls(said).last }

    /// Answers the last call.
    @discardableResult
    mutating func answer(_ outcome: CallOutcome) -> [Command] {
        guard let last = lastCall else { return [] }
        return feed(.callEnded(last.id, outcome))
    }

    /// Answers every call asked for in `commands` with `.done`, and each call that follows, until none is left.
    mutating func answerAll(_ commands: [Command]) {
        var pending = Self.calls(commands)
        while !pending.isEmpty {
            let next = pending.removeFirst()
            pending += Self.calls(feed(.callEnded(next.id, next.call.isAcquire ? .acquired(mtu: 185) : .done)))
        }
    }

    /// Connects the phone and subscribes its ANCS (AcquireNotify unless the harness says not).
    mutating func connect() {
        answerAll(tree())
    }

    /// The phone drops and comes back at once: bluetoothd's tree without it connected, then with.
    mutating func dropAndReturn() {
        phone.connected = false
        tree()
        phone.connected = true
        tree()
    }

    /// The link's status.
    var status: LinkMachine.LinkStatus? {
        machine.status(of: machine.linksStarted, at: Self.phonePath)
    }

    static func failed(_ name: String, _ message: String) -> CallOutcome {
        .failed(CallError(name: name, message: message, description: "\(name): \(message)"))
    }

    static let notifyAcquired = failed("org.bluez.Error.NotPermitted", "Notify acquired")
    static let notConnected = failed("org.bluez.Error.Failed", "Not connected")
    static let notSupported = failed("org.bluez.Error.NotSupported", "Operation is not supported")

    /// The log lines among `commands` at `level` or above.
    static func logs(_ commands: [Command], atLeast level: ServiceLogLevel = .info) -> [String] {
        commands.compactMap { if case .log(let l, let text) = $0, l >= level { text } else { nil } }
    }
}

extension GattCall {
    var isAcquire: Bool { if case .acquireNotify = self { true } else { false } }
}
