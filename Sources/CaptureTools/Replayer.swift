import ANCS
import ANCSCapture
public import ANCSDaemon
import ANCSRuntime
public import ANCSSession
import JSON

/// What `ancsd replay` does: runs the session engine against a recorded capture with a simulated
/// clock and prints what `ancsd run` printed live. Its state: one session at a time, the writes it
/// asked for, the answer due.
public struct Replayer {
    /// Replays the capture at `path` ("-": standard input), printing what `ancsd run` printed
    /// live; warnings name the lines where session and capture disagree. The exit status of
    /// `ancsd replay`.
    public static func run(
        path file: String, format: OutputFormat, device: String?, replays: ReplayPolicy, stateDirectory: String?,
        filter: NotificationFilter
    ) -> Int32 {
        var replayer = Replayer(
            format: format, device: device, replays: replays, seen: SeenStore(directory: stateDirectory), filter: filter)
        var lineNumber = 0
        do {
            try LineReader(path: file).forEachCaptureEntry(lineNumber: &lineNumber) { entry, line in
                replayer.feed(entry, line: line)
            }
        } catch {
            replayer.finish(line: lineNumber)
            logError("\(displayName(file)): \(error)")
            return 2
        }
        replayer.finish(line: lineNumber + 1)
        return replayer.mismatches > 0 ? 1 : 0
    }

    let format: OutputFormat
    var device: String
    var deviceFixed: Bool
    var name: String?
    let configuration: SessionConfiguration
    var session: ANCSSession
    /// What reaches the output, as in `ancsd run` (`--replays`, `seen_before`).
    var gate: ReplayGate
    let seen: SeenStore
    var now: Duration = .zero
    var connected = false
    /// Control Point writes the session asked for that the capture has not shown yet.
    var outstanding: [[UInt8]] = []
    /// The recorded answer to the write in flight and when it came.
    var answer: (at: Duration, result: WriteResult)?
    var mismatches = 0

    init(format: OutputFormat, device: String?, replays: ReplayPolicy, seen: SeenStore, filter: NotificationFilter) {
        var configuration = SessionConfiguration()
        configuration.filter = filter
        self.configuration = configuration
        session = ANCSSession(configuration: configuration)
        self.format = format
        gate = ReplayGate(policy: replays)
        self.seen = seen
        self.device = device ?? "00:00:00:00:00:00"
        deviceFixed = device != nil
    }

    mutating func feed(_ entry: CaptureEntry, line: Int) {
        let time: Duration? = switch entry.record {
        case .header: nil
        case .value(let t, _, _, _), .event(let t, _): t.map(duration)
        }
        if let time { advance(to: time) }
        switch entry.record {
        case .header(let header):
            if !deviceFixed, let address = header["device"]?.stringValue { device = address }
            name = header["name"]?.stringValue
        case .event(_, .connected):
            connected = true
            print(EventFormatter.line(.connected(device: device, name: name), format: format))
            perform(session.subscribed(now: now))  // as ancsd did when it printed "connected"
        case .event(_, .disconnected):
            for bytes in outstanding { disagree(line, "the session wrote \(encodeHex(bytes)) to the Control Point; the capture has no such write before the disconnect") }
            if connected {
                let reason = entry.object["reason"]?.stringValue ?? "disconnected"
                print(EventFormatter.line(.disconnected(device: device, reason: reason), format: format))
            }
            session = ANCSSession(configuration: configuration)
            gate = ReplayGate(policy: gate.policy)
            outstanding = []
            answer = nil
            connected = false
        case .value(_, .ns, let bytes, _):
            perform(session.handleNotificationSource(bytes, now: now))
        case .value(_, .ds, let bytes, _):
            perform(session.handleDataSource(bytes, now: now))
        case .value(_, .cp, let bytes, let attError):
            deliverAnswer()
            guard !outstanding.isEmpty else {
                disagree(line, "the capture has a Control Point write (\(encodeHex(bytes))) the session did not make")
                return
            }
            let expected = outstanding.removeFirst()
            if expected != bytes {
                disagree(line, "the session wrote \(encodeHex(expected)) to the Control Point, the capture has \(encodeHex(bytes))")
            }
            let result: WriteResult
            if let attError { result = .attError(ATTErrorCode(rawValue: attError)) }
            else if let message = entry.object["write_error"]?.stringValue { result = .failed(message) }
            else { result = .accepted }
            switch entry.object["t_answer"] {
            case .null?: break  // the session ended before the phone answered
            case let value?: answer = (value.doubleValue.map(duration) ?? now, result)
            case nil: answer = (now, result)
            }
            if let due = answer?.at, due <= now { deliverAnswer() }
        }
    }

    /// The end of the capture: what was due still happens (timeouts, a late answer).
    mutating func finish(line: Int) {
        // What was due still happens, up to a request's timeout after the last record: a
        // subscribed session's alive check and silence watch would run for ever.
        let end = now + configuration.requestTimeout + .seconds(1)
        var rounds = 0
        while rounds < 10_000, let next = nextEvent(), next <= end {
            rounds += 1
            advance(to: next)
        }
        for bytes in outstanding { disagree(line, "the session wrote \(encodeHex(bytes)) to the Control Point; the capture ends without it") }
    }

    /// Fires the session's timers and the recorded answer that fall before `time`, in order.
    private mutating func advance(to time: Duration) {
        var rounds = 0
        while rounds < 10_000, let next = nextEvent(), next <= time {
            rounds += 1
            now = max(now, next)
            if let due = answer?.at, due <= next {
                deliverAnswer()
            } else {
                perform(session.handleTimer(now: now))
            }
        }
        now = max(now, time)
    }

    private func nextEvent() -> Duration? {
        switch (session.nextDeadline, answer?.at) {
        case (let deadline?, let due?): min(deadline, due)
        case (let deadline?, nil): deadline
        case (nil, let due?): due
        case (nil, nil): nil
        }
    }

    private mutating func deliverAnswer() {
        guard let (_, result) = answer else { return }
        answer = nil
        perform(session.handleWriteResult(result, now: now))
    }

    private mutating func perform(_ actions: [SessionAction]) {
        for action in actions {
            switch action {
            case .writeControlPoint(let bytes):
                outstanding.append(bytes)
            case .emit(let event):
                guard let (shown, seenBefore) = gate.admit(event, device: device, store: seen) else { continue }
                print(EventFormatter.line(.notification(shown, device: device, seenBefore: seenBefore), format: format))
            case .actionCompleted:
                break
            case .sharingChanged(let allowed):
                print(EventFormatter.line(.sharing(device: device, allowed: allowed), format: format))
            case .resubscribe:
                // ancsd started a new session of the phone at once (LinkMachine.renew).
                perform(session.resubscribed(now: now))
            case .log(let level, let message):
                if level >= .warning { writeStandardError("ancsd: replay: \(device): \(message)\n") }
            }
        }
    }

    private mutating func disagree(_ line: Int, _ message: String) {
        mismatches += 1
        writeStandardError("ancsd: replay: line \(line): \(message)\n")
    }

    private func duration(_ seconds: Double) -> Duration {
        .nanoseconds(Int64((seconds * 1e9).rounded()))
    }
}
