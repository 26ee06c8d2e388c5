public import GattSession

/// What a `MediaSession` hands its owner.
public enum MediaEvent: Hashable, Sendable {
    /// The media state changed (several notifications of one change come as one event).
    case state(MediaState)
    /// A command sent with `send(_:now:)` did not go through.
    case commandFailed(RemoteCommand, MediaCommandFailure)
}

/// Why a sent command did not go through.
public enum MediaCommandFailure: Hashable, Sendable, CustomStringConvertible {
    /// The phone answered the write with this ATT error.
    case attError(AMSErrorCode)
    /// The write failed for another reason (link lost, BlueZ error, the phone stopped offering
    /// Remote Command); the text says why.
    case failed(String)

    public var description: String {
        switch self {
        case .attError(let code): "ATT error \(code)"
        case .failed(let why): why
        }
    }
}

/// Why `send(_:now:)` refused a command before writing it.
public enum MediaCommandError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The phone offers no Remote Command characteristic (or the session is not subscribed yet).
    case noRemoteCommand
    /// The player does not take this command now; `supported` are the ones it takes.
    case unsupported(RemoteCommand, supported: [RemoteCommand])
    /// Too many commands wait to be written already.
    case tooManyPending(Int)
    /// More commands came than `Configuration.commandRate` allows (a flood from a script or a
    /// broker, never a person); `perSecond` is the rate.
    case tooFast(perSecond: Int)

    /// A stable snake_case code for machine-readable output.
    public var code: String {
        switch self {
        case .noRemoteCommand: "no_remote_command"
        case .unsupported: "unsupported_command"
        case .tooManyPending: "too_many_pending"
        case .tooFast: "too_fast"
        }
    }

    public var description: String {
        switch self {
        case .noRemoteCommand:
            "the phone offers no media remote control"
        case .unsupported(let command, let supported):
            "the player does not take \(command) now; it takes: "
                + (supported.isEmpty ? "nothing" : supported.map(\.description).joined(separator: ", "))
        case .tooManyPending(let count):
            "\(count) media commands wait to be sent already"
        case .tooFast(let rate):
            "the phone's player takes at most \(rate) commands a second; try again in a moment"
        }
    }
}

/// One phone's Apple Media Service conversation, as a pure state machine (no I/O, no clock).
///
/// On `subscribed(to:now:)` it registers for every attribute of the Player, the Queue and the
/// Track, one Entity Update write at a time, and learns what the phone then notifies: the
/// media state (`MediaState`) and the commands the player takes. Several notifications of one
/// change (a new track sends artist, album, title, duration, playback info…) become one
/// `.state` event, `Configuration.coalescingDelay` after the first; a state equivalent to the
/// last one emitted gives none. A value the phone truncated to fit the MTU is read whole
/// through Entity Attribute (a write naming it, then a read), and the event waits for that read,
/// up to `Configuration.fetchWaitLimit`; an answer made stale by a newer update of the same
/// attribute is dropped. `send(_:now:)` writes a command. One request is in flight at a time:
/// registrations, truncated-value reads and commands share one queue, commands first.
///
/// A phone may offer any of the three characteristics: without Entity Update there is no state
/// but commands work; without Remote Command, no commands; without Entity Attribute, truncated
/// values stay truncated (`MediaState.truncated` says which). None is required on its own: the
/// link starts AMS when the service and at least one of them are there.
///
/// Every byte from the phone may be hostile: what does not decode is logged, never trapped on.
/// Artist, album and title are the user's content and are only logged at `.debug`.
public struct MediaSession: GattServiceSession {
    public typealias Event = MediaEvent

    /// The timings and bounds of a session.
    public struct Configuration: Hashable, Sendable {
        /// How long after the first notification of a change the `.state` event goes out.
        public var coalescingDelay: Duration = .milliseconds(150)
        /// How long the event waits, at most, for the reads of truncated values (counted from
        /// the first notification of the change); then it goes out with them marked truncated.
        public var fetchWaitLimit: Duration = .seconds(2)
        /// The least time between two `.resubscribe` actions asked for by ATT error 0xA0.
        public var resubscribeInterval: Duration = .seconds(30)
        /// How many sent commands may wait for the request in flight.
        public var maxPendingCommands = 16
        /// How many commands a second reach the phone at most, over any second (a burst of as
        /// many, then one every 1/rate s). A person pressing a key as fast as they can manages
        /// about 7 a second, and a held volume key on the desktop is coalesced into steps
        /// before it gets here; only a script or a flood from a broker meets the limit.
        public var commandRate = 10

        public init() {}
    }

    /// AMS: Remote Command and Entity Update notify, Entity Attribute does not; none is
    /// required on its own (the link starts AMS when the service and at least one of the three
    /// are there). Subscriptions in this order: Remote Command, then Entity Update.
    public static let service = GattServiceDescription(
        name: "AMS", uuid: AMSUUID.service.rawValue,
        characteristics: [
            .init(AMSUUID.remoteCommand.rawValue, name: "Remote Command", notifies: true, required: false),
            .init(AMSUUID.entityUpdate.rawValue, name: "Entity Update", notifies: true, required: false),
            .init(AMSUUID.entityAttribute.rawValue, name: "Entity Attribute", notifies: false, required: false),
        ])

    /// The longest value the session takes, in bytes: the ATT protocol's largest attribute value
    /// (512 bytes, Core Specification Vol 3 Part F 3.2.9), which BlueZ enforces on a real link
    /// for notifications and long reads alike. A longer value can only come from a peer that
    /// ignores the specification; it is cut there, on a UTF-8 character boundary, and marked
    /// truncated, so no output ever carries more of one value.
    public static let maximumValueLength = 512

    public let configuration: Configuration

    /// The state as the session knows it now (it may be ahead of the last `.state` event).
    public private(set) var state = MediaState()
    /// The state the last `.state` event carried (an empty state before the first).
    public private(set) var lastEmitted = MediaState()
    /// The characteristics the phone offers, as `subscribed(to:now:)` last told (empty before).
    public private(set) var characteristics: Set<CharacteristicUUID> = []
    /// How many times the session asked its link to subscribe again.
    public private(set) var resubscriptions = 0
    /// When `handleTimer(now:)` must be called next; nil when nothing waits (an idle session
    /// needs no wakeups). Stored, kept up to date by every input.
    public private(set) var nextDeadline: Duration?

    /// A read of one truncated value: the attribute, the update it reads for (a newer update
    /// of the attribute makes its answer stale), and when that update arrived.
    private struct Fetch: Hashable, Sendable {
        var attribute: EntityAttribute
        var generation: UInt64
        var arrivedAt: Duration
    }

    private enum Work: Hashable, Sendable {
        case register(EntityRegistration)
        case command(RemoteCommand)
        /// The write that chooses a fetch's attribute; its read follows at once.
        case select(Fetch)
        case read(Fetch)
    }

    private var inFlight: Work?
    private var pendingCommands: [RemoteCommand] = []
    /// The commands' token bucket: how many may go at once (at most `commandRate`), as of
    /// `commandTokensAt`; nil before the first command (a full bucket).
    private var commandTokens: Double?
    private var commandTokensAt: Duration = .zero
    private var pendingRegistrations: [EntityRegistration] = []
    private var pendingFetches: [Fetch] = []
    /// How many updates of each attribute arrived: a fetch's answer is current only if none
    /// came after the one it reads for.
    private var generations: [EntityAttribute: UInt64] = [:]
    /// When the first change not yet emitted arrived, and when its event is due.
    private var changedSince: Duration?
    private var emitAt: Duration?
    private var lastResubscribeAt: Duration?

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    // MARK: Introspection

    /// True while a request waits for its `handleResult`.
    public var isRequestInFlight: Bool { inFlight != nil }

    /// How many requests wait behind the one in flight (a fetch counts once, for its write).
    public var pendingRequestCount: Int { pendingCommands.count + pendingRegistrations.count + pendingFetches.count }

    /// The sizes of the session's tables, for tests that prove nothing grows with time.
    public var tableSizes: [(name: String, count: Int)] {
        [("pending commands", pendingCommands.count), ("pending registrations", pendingRegistrations.count),
         ("pending reads", pendingFetches.count), ("generations", generations.count)]
    }

    /// The phone offers Remote Command: `send(_:now:)` can work.
    public var hasRemoteCommand: Bool { characteristics.contains(AMSUUID.remoteCommand) }
    /// The phone offers Entity Update: the session learns the media state.
    public var hasEntityUpdate: Bool { characteristics.contains(AMSUUID.entityUpdate) }
    /// The phone offers Entity Attribute: truncated values are read whole.
    public var hasEntityAttribute: Bool { characteristics.contains(AMSUUID.entityAttribute) }

    // MARK: Inputs

    /// The link subscribed (again) to the notifying characteristics among `characteristics`,
    /// which lists every AMS characteristic the phone offers: the registrations start (again),
    /// one at a time; what the phone no longer offers is forgotten (its state, its commands,
    /// the reads of truncated values). A request in flight stays in flight: its result is still
    /// expected (after a renewal, `renewing(now:)` has forgotten it).
    public mutating func subscribed(to characteristics: Set<CharacteristicUUID>, now: Duration) -> [GattSessionAction<MediaEvent>] {
        var actions: [GattSessionAction<MediaEvent>] = []
        self.characteristics = characteristics
        func yesNo(_ value: Bool) -> String { value ? "yes" : "no" }
        actions.append(.log(.info, """
            AMS subscribed: Remote Command \(yesNo(hasRemoteCommand)), Entity Update \(yesNo(hasEntityUpdate)), \
            Entity Attribute \(yesNo(hasEntityAttribute))
            """))
        pendingRegistrations = hasEntityUpdate ? EntityRegistration.standard : []
        // The phone sends every value again after the registrations: a read in flight is stale.
        pendingFetches = []
        for attribute in EntityAttribute.allDefined { generations[attribute] = (generations[attribute] ?? 0) &+ 1 }
        if !hasEntityUpdate { state.clearEntities() }
        if !hasRemoteCommand {
            state.supportedCommands = []
            for command in pendingCommands {
                actions.append(.emit(.commandFailed(command, .failed("the phone no longer offers Remote Command"))))
            }
            pendingCommands = []
        }
        noteChange(now: now)
        pump(into: &actions)
        updateDeadline()
        return actions
    }

    /// The link is dropping the subscriptions to renew them: the request in flight is
    /// forgotten (its result will not come), and so are the commands waiting (each reported as
    /// failed); the registrations start again at `subscribed(to:now:)`.
    public mutating func renewing(now: Duration) -> [GattSessionAction<MediaEvent>] {
        var actions: [GattSessionAction<MediaEvent>] = []
        if case .command(let command)? = inFlight {
            actions.append(.emit(.commandFailed(command, .failed("the subscriptions were renewed before the phone answered"))))
        }
        inFlight = nil
        for command in pendingCommands {
            actions.append(.emit(.commandFailed(command, .failed("the subscriptions were renewed before it was sent"))))
        }
        pendingCommands = []
        pendingRegistrations = []
        pendingFetches = []
        updateDeadline()
        return actions
    }

    /// A value the phone notified.
    public mutating func handleNotification(_ value: [UInt8], from characteristic: CharacteristicUUID, now: Duration)
        -> [GattSessionAction<MediaEvent>]
    {
        var actions: [GattSessionAction<MediaEvent>] = []
        switch characteristic {
        case AMSUUID.remoteCommand:
            let commands = decodeSupportedCommands(value)
            if value.count != commands.count { actions.append(.log(.debug, "the phone listed a media command twice")) }
            actions.append(.log(.debug, "the player takes: \(commands.map(\.description).joined(separator: ", "))"))
            state.supportedCommands = commands
            noteChange(now: now)
        case AMSUUID.entityUpdate:
            handleEntityUpdate(value, now: now, into: &actions)
        default:
            actions.append(.log(.debug, "ignored \(value.count) bytes notified on \(characteristic), not an AMS characteristic that notifies"))
        }
        pump(into: &actions)
        updateDeadline()
        return actions
    }

    /// How the request in flight ended.
    public mutating func handleResult(_ result: GattResult, now: Duration) -> [GattSessionAction<MediaEvent>] {
        guard let work = inFlight else {
            return [.log(.debug, "ignored an AMS request's result (\(brief(result))) with no request in flight")]
        }
        var actions: [GattSessionAction<MediaEvent>] = []
        inFlight = nil
        switch work {
        case .register(let registration):
            switch result {
            case .written, .read:
                actions.append(.log(.debug, "registered for the \(registration.entity)'s media attributes"))
            case .attError(let code):
                failed(work, code: AMSErrorCode(rawValue: code), now: now, into: &actions)
            case .failed(let why):
                actions.append(.log(.warning, "the registration for the \(registration.entity)'s media attributes failed: \(why)"))
            }
        case .command(let command):
            switch result {
            case .written, .read:
                actions.append(.log(.debug, "sent the media command \(command)"))
            case .attError(let code):
                failed(work, code: AMSErrorCode(rawValue: code), now: now, into: &actions)
                actions.append(.emit(.commandFailed(command, .attError(AMSErrorCode(rawValue: code)))))
            case .failed(let why):
                actions.append(.log(.warning, "the media command \(command) failed: \(why)"))
                actions.append(.emit(.commandFailed(command, .failed(why))))
            }
        case .select(let fetch):
            switch result {
            case .written, .read:
                if generations[fetch.attribute] == fetch.generation, hasEntityAttribute {
                    // The read follows at once: nothing may change the attribute chosen meanwhile.
                    inFlight = .read(fetch)
                    actions.append(.request(.read(AMSUUID.entityAttribute)))
                } else {
                    actions.append(.log(.debug, "did not read the whole \(fetch.attribute): a newer update came meanwhile"))
                }
            case .attError(let code):
                fetchFailed(fetch, code: AMSErrorCode(rawValue: code), now: now, into: &actions)
            case .failed(let why):
                actions.append(.log(.warning, "could not ask for the whole \(fetch.attribute): \(why)"))
            }
        case .read(let fetch):
            switch result {
            case .read(let bytes):
                take(bytes, for: fetch, now: now, into: &actions)
            case .written:
                actions.append(.log(.warning, "the read of the whole \(fetch.attribute) ended as a write: ignored"))
            case .attError(let code):
                fetchFailed(fetch, code: AMSErrorCode(rawValue: code), now: now, into: &actions)
            case .failed(let why):
                actions.append(.log(.warning, "could not read the whole \(fetch.attribute): \(why)"))
            }
        }
        emitIfDue(now: now, into: &actions)
        pump(into: &actions)
        updateDeadline()
        return actions
    }

    /// `nextDeadline` has passed (calling early or late is harmless).
    public mutating func handleTimer(now: Duration) -> [GattSessionAction<MediaEvent>] {
        var actions: [GattSessionAction<MediaEvent>] = []
        emitIfDue(now: now, into: &actions)
        updateDeadline()
        return actions
    }

    /// Sends a command to the phone's player: queued behind the request in flight (ahead of
    /// registrations and reads), written to Remote Command; a failure comes back as
    /// `.commandFailed`. Refused when the phone offers no Remote Command, when the player does
    /// not take the command now (the error lists what it takes), when too many wait, or when
    /// commands come faster than `Configuration.commandRate`.
    public mutating func send(_ command: RemoteCommand, now: Duration) throws(MediaCommandError) -> [GattSessionAction<MediaEvent>] {
        guard hasRemoteCommand else { throw .noRemoteCommand }
        guard state.supportedCommands.contains(command) else {
            throw .unsupported(command, supported: state.supportedCommands)
        }
        guard pendingCommands.count < configuration.maxPendingCommands else { throw .tooManyPending(pendingCommands.count) }
        try takeCommandToken(now: now)
        pendingCommands.append(command)
        var actions: [GattSessionAction<MediaEvent>] = []
        pump(into: &actions)
        updateDeadline()
        return actions
    }

    /// Takes one command's token, or says the command comes too fast.
    private mutating func takeCommandToken(now: Duration) throws(MediaCommandError) {
        let rate = Double(max(configuration.commandRate, 1))
        let elapsed = now - commandTokensAt
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let available = commandTokens.map { min(rate, $0 + max(seconds, 0) * rate) } ?? rate
        commandTokensAt = now
        guard available >= 1 else {
            commandTokens = available
            throw .tooFast(perSecond: Int(rate))
        }
        commandTokens = available - 1
    }

    // MARK: Entity Update

    private mutating func handleEntityUpdate(_ value: [UInt8], now: Duration, into actions: inout [GattSessionAction<MediaEvent>]) {
        let update: EntityUpdate
        do {
            update = try EntityUpdate(decoding: value)
        } catch {
            actions.append(.log(.warning, "ignored an Entity Update value: \(error)"))
            return
        }
        let attribute = update.attribute
        guard attribute.isKnown else {
            actions.append(.log(.debug, "ignored an Entity Update of the unknown attribute \(attribute)"))
            return
        }
        let generation = (generations[attribute] ?? 0) &+ 1
        generations[attribute] = generation
        pendingFetches.removeAll { $0.attribute == attribute }  // a newer value came
        let (text, repaired, overLimit) = Self.cappedText(update.value)
        if overLimit { actions.append(.log(.debug, "the value of \(attribute) is over \(Self.maximumValueLength) bytes (\(update.value.count)): cut")) }
        if repaired { actions.append(.log(.debug, "the value of \(attribute) is not valid UTF-8: repaired")) }
        actions.append(.log(.debug, "\(attribute) = \"\(text)\"\(update.isTruncated || overLimit ? " (truncated)" : "")"))
        state.apply(text, to: attribute, now: now)
        if overLimit {
            // Its whole value would be longer still: not read.
            state.truncated.insert(attribute)
        } else if update.isTruncated {
            state.truncated.insert(attribute)
            if hasEntityAttribute {
                pendingFetches.append(Fetch(attribute: attribute, generation: generation, arrivedAt: now))
            } else {
                actions.append(.log(.debug, "\(attribute) stays truncated: the phone offers no Entity Attribute"))
            }
        } else {
            state.truncated.remove(attribute)
        }
        noteChange(now: now)
    }

    /// The whole value of a truncated attribute, read through Entity Attribute.
    private mutating func take(_ bytes: [UInt8], for fetch: Fetch, now: Duration, into actions: inout [GattSessionAction<MediaEvent>]) {
        guard generations[fetch.attribute] == fetch.generation else {
            actions.append(.log(.debug, "dropped the whole \(fetch.attribute): a newer update came meanwhile"))
            return
        }
        let (text, repaired, overLimit) = Self.cappedText(bytes)
        if repaired { actions.append(.log(.debug, "the whole value of \(fetch.attribute) is not valid UTF-8: repaired")) }
        actions.append(.log(.debug, "\(fetch.attribute) = \"\(text)\" (whole, \(bytes.count) bytes\(overLimit ? ", cut" : ""))"))
        state.apply(text, to: fetch.attribute, now: fetch.arrivedAt)
        if overLimit { state.truncated.insert(fetch.attribute) } else { state.truncated.remove(fetch.attribute) }
        noteChange(now: now)
    }

    /// A value as text of `maximumValueLength` bytes at most: the bytes are cut before a UTF-8
    /// character that would not fit whole, then decoded (invalid sequences repaired, which may
    /// lengthen the text: cut again, between characters); whether it was repaired, and cut.
    static func cappedText(_ bytes: [UInt8]) -> (text: String, repaired: Bool, cut: Bool) {
        var end = bytes.count
        if end > maximumValueLength {
            end = maximumValueLength
            // Back to the start of the character the cut falls in (at most 3 continuation bytes).
            var back = 0
            while back < 3, end > 0, bytes[end] & 0xC0 == 0x80 {
                end -= 1
                back += 1
            }
        }
        let text = AMSText(end == bytes.count ? bytes : Array(bytes[..<end]))
        guard text.string.utf8.count > maximumValueLength else { return (text.string, text.wasRepaired, end < bytes.count) }
        var length = 0
        var scalars = String.UnicodeScalarView()
        for scalar in text.string.unicodeScalars {
            length += UTF8.width(scalar)
            guard length <= maximumValueLength else { break }
            scalars.append(scalar)
        }
        return (String(scalars), true, true)
    }

    /// A fetch's write or read was refused: 0xA2 (Absent Attribute) means the value is empty;
    /// anything else leaves it truncated.
    private mutating func fetchFailed(_ fetch: Fetch, code: AMSErrorCode, now: Duration, into actions: inout [GattSessionAction<MediaEvent>]) {
        guard code == .absentAttribute else {
            failed(.read(fetch), code: code, now: now, into: &actions)
            return
        }
        guard generations[fetch.attribute] == fetch.generation else { return }
        actions.append(.log(.debug, "\(fetch.attribute) is empty (ATT 0xa2)"))
        state.apply("", to: fetch.attribute, now: fetch.arrivedAt)
        state.truncated.remove(fetch.attribute)
        noteChange(now: now)
    }

    /// The phone refused a request with an ATT error.
    private mutating func failed(_ work: Work, code: AMSErrorCode, now: Duration, into actions: inout [GattSessionAction<MediaEvent>]) {
        let what = describe(work)
        switch code {
        case .invalidState:
            // The phone holds no subscription of ours to Entity Update: every registration and
            // read after this one would be refused too. Subscribing again makes them anew.
            pendingRegistrations = []
            pendingFetches = []
            if let last = lastResubscribeAt, now < last + configuration.resubscribeInterval {
                actions.append(.log(.warning, """
                    the phone refused \(what) with ATT 0xa0 (not subscribed to Entity Update) again; \
                    not subscribing again before \(configuration.resubscribeInterval) have passed since the last time
                    """))
            } else {
                actions.append(.log(.warning, "the phone refused \(what) with ATT 0xa0 (not subscribed to Entity Update)"))
                lastResubscribeAt = now
                resubscriptions += 1
                actions.append(.resubscribe("the phone answered an AMS request with ATT 0xa0 (Invalid State)"))
            }
        case .invalidCommand:
            actions.append(.log(.warning, "the phone refused \(what) as malformed (ATT 0xa1): dropped"))
        default:
            actions.append(.log(.warning, "the phone refused \(what) with ATT error \(code)"))
        }
    }

    // MARK: Requests

    /// Starts the next request if none is in flight: commands, then registrations, then reads.
    private mutating func pump(into actions: inout [GattSessionAction<MediaEvent>]) {
        guard inFlight == nil else { return }
        let work: Work
        let request: GattRequest
        if !pendingCommands.isEmpty {
            let command = pendingCommands.removeFirst()
            work = .command(command)
            request = .write(AMSUUID.remoteCommand, command.encoded)
        } else if !pendingRegistrations.isEmpty {
            let registration = pendingRegistrations.removeFirst()
            work = .register(registration)
            request = .write(AMSUUID.entityUpdate, registration.encoded)
        } else if !pendingFetches.isEmpty {
            let fetch = pendingFetches.removeFirst()
            work = .select(fetch)
            request = .write(AMSUUID.entityAttribute, EntityAttributeRequest(fetch.attribute).encoded)
        } else {
            return
        }
        inFlight = work
        actions.append(.request(request))
    }

    private func describe(_ work: Work) -> String {
        switch work {
        case .register(let registration): "the registration for the \(registration.entity)'s media attributes"
        case .command(let command): "the media command \(command)"
        case .select(let fetch), .read(let fetch): "the read of the whole \(fetch.attribute)"
        }
    }

    private func brief(_ result: GattResult) -> String {
        switch result {
        case .written: "written"
        case .read(let bytes): "\(bytes.count) bytes read"
        case .attError(let code): "ATT error \(AMSErrorCode(rawValue: code))"
        case .failed(let why): why
        }
    }

    // MARK: Coalescing

    /// A fetch waits whose answer is not stale: the event waits for it (up to the limit).
    private var fetchPending: Bool {
        if !pendingFetches.isEmpty { return true }
        switch inFlight {
        case .select(let fetch)?, .read(let fetch)?: return generations[fetch.attribute] == fetch.generation
        default: return false
        }
    }

    /// Starts the wait for the event if the state now differs from the last one emitted (or a
    /// read of a truncated value waits).
    private mutating func noteChange(now: Duration) {
        guard changedSince == nil else { return }
        guard fetchPending || !state.isEquivalent(to: lastEmitted, at: now) else { return }
        changedSince = now
        emitAt = now + configuration.coalescingDelay
    }

    /// Emits the state once its wait is over and no read holds it (or the read took too long).
    private mutating func emitIfDue(now: Duration, into actions: inout [GattSessionAction<MediaEvent>]) {
        guard let emitAt, let changedSince, now >= emitAt else { return }
        if fetchPending, now < changedSince + configuration.fetchWaitLimit { return }
        self.emitAt = nil
        self.changedSince = nil
        guard !state.isEquivalent(to: lastEmitted, at: now) else { return }
        lastEmitted = state
        actions.append(.emit(.state(state)))
    }

    private mutating func updateDeadline() {
        guard let emitAt, let changedSince else {
            nextDeadline = nil
            return
        }
        nextDeadline = fetchPending ? max(emitAt, changedSince + configuration.fetchWaitLimit) : emitAt
    }
}
