// libFuzzer target for the Apple Media Service module (make fuzz FUZZ_TARGETS=ams): the bytes
// are a conversation between a phone and a `MediaSession`, one operation after another, each
// chosen by a byte (op % 8), until the input ends:
//   0: `subscribed(to:)`, the next byte's low three bits choosing which of Remote Command,
//      Entity Update and Entity Attribute the phone offers;
//   1: an Entity Update notification: a length byte (% 48), then that many bytes;
//   2: a Remote Command notification: a length byte (% 24), then that many bytes;
//   3: the result of the request in flight (or of none): the next byte chooses written, read
//      (a length byte % 48 and the bytes), an ATT error (the next byte) or a failure;
//   4: the clock moves on by the next byte × 10 ms; the timer runs at each deadline passed;
//   5: `send` of the command the next byte names (% 16);
//   6: the timer at `nextDeadline`;
//   7: a notification on Entity Attribute or on no AMS characteristic (a length byte % 8).
// Traps when:
// - the session asks for a request while one is in flight, or `isRequestInFlight` disagrees
//   with the requests and results; a read of Entity Attribute does not follow its write;
// - more requests wait than registrations, one read per known attribute and the commands bound;
// - after `handleTimer(now:)` the next deadline is not in the future (a busy loop);
// - a `.state` event that is not `lastEmitted`, or that says what the previous one said;
//   a `.commandFailed` for more commands than were accepted;
// - the state is inconsistent: a command listed twice, an unknown attribute marked truncated, a
//   number not finite, a volume outside 0…1, a negative duration or elapsed time, an elapsed
//   time without its arrival time, a position outside [0, duration];
// - `AMSRecordDescription` of any value traps or says nothing.
import AMS
import GattSession

func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

struct Conversation {
    var session = MediaSession()
    var now: Duration = .zero
    var outstanding: GattRequest?
    var lastRequest: GattRequest?
    var accepted = 0
    var failed = 0
    var previousEmitted: MediaState?

    mutating func record(_ actions: [GattSessionAction<MediaEvent>]) {
        for action in actions {
            switch action {
            case .request(let request):
                check(outstanding == nil, "a request while one is in flight: \(request)")
                if case .read(let characteristic) = request {
                    check(characteristic == AMSUUID.entityAttribute, "a read of \(characteristic)")
                    guard case .write(AMSUUID.entityAttribute, let bytes)? = lastRequest, bytes.count == 2 else {
                        fatalError("a read that does not follow its write: after \(String(describing: lastRequest))")
                    }
                }
                if case .write(let characteristic, let bytes) = request {
                    describe(characteristic, .write, bytes)
                }
                outstanding = request
                lastRequest = request
            case .emit(.state(let state)):
                check(state == session.lastEmitted, "a state event that is not lastEmitted")
                if let previous = previousEmitted {
                    check(!state.isEquivalent(to: previous, at: now), "a state event that says what the last one said")
                }
                previousEmitted = state
            case .emit(.commandFailed):
                failed += 1
                check(failed <= accepted, "\(failed) command failures for \(accepted) commands sent")
            case .log(_, let message):
                check(!message.isEmpty, "an empty log message")
            case .resubscribe:
                break
            }
        }
        check(session.isRequestInFlight == (outstanding != nil), "isRequestInFlight \(session.isRequestInFlight), outstanding \(String(describing: outstanding))")
        check(session.pendingRequestCount <= 3 + EntityAttribute.allDefined.count + session.configuration.maxPendingCommands,
              "\(session.pendingRequestCount) requests wait")
        checkState(session.state)
        checkState(session.lastEmitted)
    }

    func checkState(_ state: MediaState) {
        check(Set(state.supportedCommands).count == state.supportedCommands.count, "a command listed twice")
        check(state.truncated.allSatisfy { $0.isKnown }, "an unknown attribute marked truncated")
        for number in [state.playbackRate, state.elapsedTime, state.volume, state.duration] {
            check(number?.isFinite ?? true, "a number that is not finite")
        }
        check(state.volume.map { (0...1).contains($0) } ?? true, "volume \(String(describing: state.volume))")
        check(state.duration.map { $0 >= 0 } ?? true, "duration \(String(describing: state.duration))")
        check(state.elapsedTime.map { $0 >= 0 } ?? true, "elapsed \(String(describing: state.elapsedTime))")
        check((state.elapsedTime == nil) == (state.elapsedAt == nil), "an elapsed time without its arrival, or the reverse")
        for later in [now, now + .seconds(1), now + .seconds(100_000)] {
            guard let position = state.position(at: later) else { continue }
            check(position.isFinite && position >= 0, "position \(position)")
            if let duration = state.duration { check(position <= duration, "position \(position) past \(duration)") }
        }
    }

    func describe(_ characteristic: CharacteristicUUID, _ direction: AMSDirection, _ bytes: [UInt8]) {
        guard let record = AMSRecordDescription(characteristic: characteristic, direction: direction, value: bytes) else { return }
        check(!record.summary.isEmpty, "an empty description")
    }

    mutating func timer() {
        record(session.handleTimer(now: now))
        if let deadline = session.nextDeadline { check(deadline > now, "the next deadline \(deadline) is not after \(now)") }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = UnsafeBufferPointer(start: data, count: size).makeIterator()
    func next() -> UInt8? { input.next() }
    func bytes(_ count: Int) -> [UInt8] {
        var taken: [UInt8] = []
        while taken.count < count, let byte = next() { taken.append(byte) }
        return taken
    }
    let all = [AMSUUID.remoteCommand, AMSUUID.entityUpdate, AMSUUID.entityAttribute]
    var c = Conversation()
    while let op = next() {
        switch op % 8 {
        case 0:
            let mask = next() ?? 0x07
            let offered = Set(all.enumerated().filter { mask & (1 << $0.offset) != 0 }.map(\.element))
            c.record(c.session.subscribed(to: offered, now: c.now))
        case 1:
            let value = bytes(Int(next() ?? 0) % 48)
            c.describe(AMSUUID.entityUpdate, .notification, value)
            c.record(c.session.handleNotification(value, from: AMSUUID.entityUpdate, now: c.now))
        case 2:
            let value = bytes(Int(next() ?? 0) % 24)
            c.describe(AMSUUID.remoteCommand, .notification, value)
            c.record(c.session.handleNotification(value, from: AMSUUID.remoteCommand, now: c.now))
        case 3:
            let kind = next() ?? 0
            let result: GattResult
            switch kind % 4 {
            case 0: result = .written
            case 1:
                let value = bytes(Int(next() ?? 0) % 48)
                c.describe(AMSUUID.entityAttribute, .read, value)
                result = .read(value)
            case 2: result = .attError(next() ?? 0xA0)
            default: result = .failed("fuzz")
            }
            let wasOutstanding = c.outstanding != nil
            c.outstanding = nil
            c.record(c.session.handleResult(result, now: c.now))
            if !wasOutstanding { check(c.outstanding == nil, "a result with nothing in flight started a request") }
        case 4:
            let end = c.now + .milliseconds(10 * Int64(next() ?? 0))
            while let deadline = c.session.nextDeadline, deadline <= end {
                c.now = max(c.now, deadline)
                c.timer()
            }
            c.now = end
        case 5:
            let command = RemoteCommand(rawValue: (next() ?? 0) % 16)
            do {
                let actions = try c.session.send(command, now: c.now)
                c.accepted += 1
                c.record(actions)
            } catch {
                switch error {
                case .unsupported(let refused, let supported):
                    check(refused == command && supported == c.session.state.supportedCommands && !supported.contains(command),
                          "a refusal that does not hold: \(error)")
                case .noRemoteCommand:
                    check(!c.session.hasRemoteCommand, "refused for want of Remote Command, which the phone offers")
                case .tooManyPending:
                    break
                }
            }
        case 6:
            if let deadline = c.session.nextDeadline { c.now = max(c.now, deadline) }
            c.timer()
        default:
            let value = bytes(Int(next() ?? 0) % 8)
            let on = op & 0x80 == 0 ? AMSUUID.entityAttribute : CharacteristicUUID("00002a00-0000-1000-8000-00805f9b34fb")
            c.describe(on, .notification, value)
            c.record(c.session.handleNotification(value, from: on, now: c.now))
        }
    }
    return 0
}
