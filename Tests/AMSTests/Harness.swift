import AMS
import GattSession
import Testing

/// Drives a `MediaSession` as a link would, recording what it asks for and checking the rule of
/// one request in flight.
struct Harness {
    var session: MediaSession
    var now: Duration = .zero
    var requests: [GattRequest] = []
    var events: [MediaEvent] = []
    var logs: [(ServiceLogLevel, String)] = []
    var resubscribes: [String] = []
    /// A request waits for its result.
    var outstanding = false

    init(_ configure: (inout MediaSession.Configuration) -> Void = { _ in }) {
        var configuration = MediaSession.Configuration()
        configure(&configuration)
        session = MediaSession(configuration: configuration)
    }

    static let all: Set<CharacteristicUUID> = [AMSUUID.remoteCommand, AMSUUID.entityUpdate, AMSUUID.entityAttribute]

    mutating func record(_ actions: [GattSessionAction<MediaEvent>]) {
        for action in actions {
            switch action {
            case .request(let request):
                #expect(!outstanding, "a second request while one is in flight: \(request)")
                outstanding = true
                requests.append(request)
            case .emit(let event): events.append(event)
            case .log(let level, let message): logs.append((level, message))
            case .resubscribe(let why): resubscribes.append(why)
            }
        }
        #expect(outstanding == session.isRequestInFlight)
    }

    mutating func subscribe(_ characteristics: Set<CharacteristicUUID> = Harness.all) {
        record(session.subscribed(to: characteristics, now: now))
    }

    /// Subscribes and lets the three registrations succeed.
    mutating func start(_ characteristics: Set<CharacteristicUUID> = Harness.all) {
        subscribe(characteristics)
        while outstanding, case .write(AMSUUID.entityUpdate, _)? = requests.last { result(.written) }
    }

    mutating func notify(_ bytes: [UInt8], on characteristic: CharacteristicUUID = AMSUUID.entityUpdate) {
        record(session.handleNotification(bytes, from: characteristic, now: now))
    }

    mutating func update(_ attribute: EntityAttribute, _ text: String, truncated: Bool = false) {
        notify(EntityUpdate(attribute: attribute, flags: truncated ? .truncated : [], text: text).encoded)
    }

    mutating func commands(_ commands: [RemoteCommand]) {
        notify(encodeSupportedCommands(commands), on: AMSUUID.remoteCommand)
    }

    mutating func result(_ result: GattResult) {
        outstanding = false
        record(session.handleResult(result, now: now))
    }

    mutating func send(_ command: RemoteCommand) throws(MediaCommandError) {
        let actions = try session.send(command, now: now)
        record(actions)
    }

    /// Moves the clock by `duration`, calling the timer at each deadline on the way.
    mutating func advance(_ duration: Duration) {
        let end = now + duration
        while let deadline = session.nextDeadline, deadline <= end {
            now = max(now, deadline)
            record(session.handleTimer(now: now))
        }
        now = end
    }

    /// The `.state` events, in order.
    var states: [MediaState] {
        events.compactMap { if case .state(let state) = $0 { state } else { nil } }
    }

    /// The `.commandFailed` events, in order.
    var failures: [(RemoteCommand, MediaCommandFailure)] {
        events.compactMap { if case .commandFailed(let command, let why) = $0 { (command, why) } else { nil } }
    }

    func logged(_ level: ServiceLogLevel, containing text: String) -> Bool {
        logs.contains { $0.0 == level && $0.1.contains(text) }
    }
}

extension Array where Element == UInt8 {
    init(_ prefix: [UInt8], _ text: String) { self = prefix + Array(text.utf8) }
}
