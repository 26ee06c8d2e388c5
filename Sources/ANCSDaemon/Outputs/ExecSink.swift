#if canImport(Glibc)
import Glibc
#endif
import ANCSSession
public import ANCSRuntime
import CSpawn
public import EventLoop
public import JSON
import SystemCalls

/// The output sink of `--exec`: runs a command through `/bin/sh -c` for each event, the event's
/// JSON object (one line, exactly as `--format json` prints it) on its standard input, and
/// `ANCSD_TYPE`, `ANCSD_DEVICE`, `ANCSD_UID`, `ANCSD_APP_ID`, `ANCSD_CATEGORY` in its environment
/// (never content: the environment is visible to the user's other processes).
///
/// One command at a time per phone, in event order; phones do not wait for each other. A
/// command that runs longer than `timeout` is killed with its process group (SIGKILL). Its
/// standard output goes to /dev/null; the first `stderrLimit` bytes of its standard error are
/// logged (the rest is read, counted and dropped), with its exit status when it fails.
///
/// Queue and bound: events wait in their phone's queue on the sink's loop, at most
/// `maxWaiting` per phone behind the running command. When full: the oldest waiting event of
/// that phone is dropped; the count is logged when that phone's queue next runs empty.
///
/// Reload: `reconfigure` changes the command and the time limit for every event not yet started
/// (those waiting, and later ones); a command already running finishes under the limit it
/// started with. Nothing is dropped, killed or run twice, and each phone keeps its order.
///
/// No thread waits: the child is started with posix_spawn; its pipes and its exit (a pidfd)
/// are watches of the sink's event loop (the daemon's) and its time limit a loop timer; every
/// descriptor is close-on-exec (and the child closes any other above 2), and every child is
/// reaped.
public final class ExecSink: OutputSink {
    /// What the sink has done, for status and tests.
    public struct Counters: Sendable, Equatable {
        /// Commands started.
        public var started = 0
        /// Commands that exited with status 0.
        public var succeeded = 0
        /// Commands that exited with another status or were killed by a signal (timeouts included).
        public var failed = 0
        /// Commands killed because they ran longer than the timeout.
        public var timedOut = 0
        /// Events dropped because their phone's queue was full (or the sink stopped).
        public var dropped = 0
        /// Commands that could not be started.
        public var spawnFailures = 0
        /// Bytes the commands wrote to standard error (all read, at most `stderrLimit` of each logged).
        public var stderrBytes = 0
    }

    public let name = "exec"
    /// The most events waiting per phone behind its running command.
    public let maxWaiting: Int
    /// The most bytes of a command's standard error that are logged.
    public let stderrLimit: Int
    /// The loop the commands are started, fed, timed and reaped on, which keeps all the sink's
    /// state: the other threads' calls reach it through `EventLoop.perform`.
    public let loop: EventLoop
    private let runner: LoopBound<Runner>

    public init(
        command: String, timeout: Duration = .seconds(10), maxWaiting: Int = 64, stderrLimit: Int = 4096, logger: Logger, loop: EventLoop
    ) {
        self.maxWaiting = max(1, maxWaiting)
        self.stderrLimit = stderrLimit
        self.loop = loop
        runner = LoopBound(
            Runner(command: command, timeout: timeout, maxWaiting: max(1, maxWaiting), stderrLimit: stderrLimit, logger: logger, loop: loop),
            loop: loop)
        // A command that exits without reading its input must cost an EPIPE, not the daemon
        // (`ancsd run` ignores SIGPIPE anyway; the command gets it back at its default).
        signal(SIGPIPE, SIG_IGN)
    }

    /// The counters so far.
    public var counts: Counters {
        get async { await onLoop { $0.counters } }
    }

    public func report() async -> JSONObject {
        await onLoop { $0.report() }
    }

    /// The command and time limit events not yet started will run with.
    public var settings: (command: String, timeout: Duration) {
        get async { await onLoop { ($0.command, $0.timeout) } }
    }

    /// Makes every event not yet started (those waiting, and later ones) run `command` with
    /// `timeout`: what a reload that changed `exec` or `exec-timeout` does. A command already
    /// running is left to finish under the limit it started with. On the loop at once when
    /// called there (a reload is), else holding it (`EventLoop.perform`).
    public func reconfigure(command: String, timeout: Duration) {
        let runner = self.runner
        loop.perform { runner.value.reconfigure(command: command, timeout: timeout) }
    }

    /// What `body` reads of the runner, on the loop.
    private func onLoop<T: Sendable>(_ body: @escaping @Sendable (Runner) -> T) async -> T {
        let runner = self.runner
        return await withCheckedContinuation { continuation in
            loop.perform { continuation.resume(returning: body(runner.value)) }
        }
    }

    /// Queues the event, or starts its command: on the loop at once when called there (the
    /// daemon's events are), else holding it (`EventLoop.perform`), so `flush`, `stop` and
    /// `report` see it.
    public func send(_ event: OutputRecord) {
        let runner = self.runner
        loop.perform { runner.value.enqueue(event) }
    }

    /// Returns once no command runs and none waits, or `timeout` passes; true in the first case.
    public func flush(timeout: Duration) async -> Bool {
        let runner = self.runner
        return await withCheckedContinuation { continuation in
            loop.perform { runner.value.waitUntilIdle(timeout: timeout, continuation) }
        }
    }

    /// Drops the waiting events (counted and logged) and kills the running commands with their
    /// process groups (a reload that removed `exec`, or the daemon ending: none is left
    /// running behind it). Commands killed here are reaped as usual if the daemon lives on.
    public func stop() {
        let runner = self.runner
        loop.perform { runner.value.stop() }
    }
}

// MARK: The queues (on the loop)

/// `ExecSink`'s phone queues and running commands, touched on its loop only (a `LoopBound`).
private final class Runner {
    typealias Counters = ExecSink.Counters

    let maxWaiting: Int
    let stderrLimit: Int
    let logger: Logger
    let loop: EventLoop
    /// The shell command, and how long it may run; `reconfigure` changes them.
    private(set) var command: String
    private(set) var timeout: Duration
    private var phones: [String: Phone] = [:]
    private var stopped = false
    private(set) var counters = Counters()
    private var idleWaiters: [(id: Int, continuation: CheckedContinuation<Bool, Never>, timer: LoopTimer)] = []
    private var nextWaiter = 0

    init(command: String, timeout: Duration, maxWaiting: Int, stderrLimit: Int, logger: Logger, loop: EventLoop) {
        self.command = command
        self.timeout = timeout
        self.maxWaiting = maxWaiting
        self.stderrLimit = stderrLimit
        self.logger = logger
        self.loop = loop
    }

    private final class Phone {
        var waiting = FIFO<OutputRecord>()
        var running: ExecChild?
        var dropped = 0
    }

    /// This runner, for the handlers of its children's watches and timers: they keep it alive
    /// until the child is reaped and they are cancelled.
    private var bound: LoopBound<Runner> { LoopBound(self, loop: loop) }

    /// Commands running now, one per phone at most.
    private var runningCount: Int { phones.values.count(where: { $0.running != nil }) }

    func report() -> JSONObject {
        let waiting = phones.values.reduce(0) { $0 + $1.waiting.count }
        return [
            "started": .int(counters.started), "succeeded": .int(counters.succeeded), "failed": .int(counters.failed),
            "timed_out": .int(counters.timedOut), "spawn_failures": .int(counters.spawnFailures),
            "dropped": .int(counters.dropped), "running": .int(runningCount), "waiting": .int(waiting),
        ]
    }

    func reconfigure(command: String, timeout: Duration) {
        guard command != self.command || timeout != self.timeout else { return }
        self.command = command
        self.timeout = timeout
        let running = runningCount
        logger.info("exec: the new command runs for every event not yet started" + (running > 0 ? "; \(running) already running will finish" : ""))
    }

    func waitUntilIdle(timeout: Duration, _ continuation: CheckedContinuation<Bool, Never>) {
        guard !phones.isEmpty else { return continuation.resume(returning: true) }
        let id = nextWaiter
        nextWaiter += 1
        let runner = bound
        let timer = loop.makeTimer { runner.value.answerWaiter(id, idle: false) }
        idleWaiters.append((id, continuation, timer))
        timer.schedule(after: timeout)
    }

    private func answerWaiter(_ id: Int, idle: Bool) {
        guard let index = idleWaiters.firstIndex(where: { $0.id == id }) else { return }
        let waiter = idleWaiters.remove(at: index)
        waiter.timer.cancel()
        waiter.continuation.resume(returning: idle)
    }

    func stop() {
        stopped = true
        for (device, phone) in phones {
            counters.dropped += phone.waiting.count
            phone.dropped += phone.waiting.count
            phone.waiting.removeAll()
            if let child = phone.running {
                child.stop()
            } else {
                finishQueue(of: device, phone)
            }
        }
    }

    func enqueue(_ event: OutputRecord) {
        guard !stopped else { return }
        let device = event.device
        let phone = phones[device] ?? Phone()
        phones[device] = phone
        phone.waiting.push(event)
        if phone.waiting.count > maxWaiting {
            _ = phone.waiting.pop()
            phone.dropped += 1
            counters.dropped += 1
        }
        if phone.running == nil { startNext(device, phone) }
    }

    private func startNext(_ device: String, _ phone: Phone) {
        while let event = phone.waiting.pop() {
            if let child = spawn(event, device: device) {
                phone.running = child
                return
            }
        }
        finishQueue(of: device, phone)
    }

    private func finishQueue(of device: String, _ phone: Phone) {
        if phone.dropped > 0 {
            logger.warning("exec: dropped \(phone.dropped) events of \(device): the command is slower than the events come (at most \(maxWaiting) wait)")
            phone.dropped = 0
        }
        phones[device] = nil
        if phones.isEmpty {
            for waiter in idleWaiters { answerWaiter(waiter.id, idle: true) }
        }
    }

    /// What a running command's watch or timer reports; `pid` names the command.
    fileprivate func handle(_ event: ExecChild.Event, of pid: pid_t) {
        guard let child = phones.values.lazy.compactMap(\.running).first(where: { $0.pid == pid }) else { return }
        switch event {
        case .inputWritable: child.writeInput()
        case .errorsReadable: child.readErrors()
        case .timeUp: child.timeUp()
        case .exited, .poll:
            switch child.reap() {
            case .running: return
            case .exited(let status): finished(child, status: status)
            case .lost: finished(child, status: nil)
            }
        }
    }

    /// `status` is nil if the child could not be reaped (someone else waited for it).
    private func finished(_ child: ExecChild, status: Int32?) {
        let what = "event \(child.label)"
        let ran = ContinuousClock.now - child.started
        guard let status else {
            counters.failed += 1
            logger.warning("exec: lost track of the command: \(Errno(rawValue: ECHILD)) (\(what))")
            return next(after: child)
        }
        if child.stopped {
            counters.failed += 1
            logger.info("exec: killed the running command as the output stopped (\(what))")
        } else if child.timedOut {
            counters.timedOut += 1
            counters.failed += 1
            logger.warning("exec: the command ran longer than \(ExecSink.seconds(child.timeout)); killed it (\(what))")
        } else if ancsd_exited(status) != 0 && ancsd_exit_status(status) == 0 {
            counters.succeeded += 1
            logger.debug("exec: done in \(ran) (\(what))")
        } else if ancsd_exited(status) != 0 {
            counters.failed += 1
            logger.warning("exec: the command exited with status \(ancsd_exit_status(status)) (\(what))")
        } else {
            counters.failed += 1
            let signal = ancsd_signaled(status) != 0 ? ancsd_term_signal(status) : 0
            logger.warning("exec: the command was killed by signal \(signal) (\(what))")
        }
        counters.stderrBytes += child.stderrTotal
        if !child.stderrKept.isEmpty {
            let text = String(decoding: child.stderrKept, as: UTF8.self)
            let lines = text.split(whereSeparator: \.isNewline).map { EventFormatter.sanitize(String($0)) }.filter { !$0.isEmpty }
            let more = child.stderrTotal - child.stderrKept.count
            logger.warning("exec: the command's standard error (\(what)): " + lines.joined(separator: " | ") + (more > 0 ? " … (\(more) more bytes not logged)" : ""))
        }
        next(after: child)
    }

    private func next(after child: ExecChild) {
        guard let phone = phones[child.device] else { return }
        phone.running = nil
        startNext(child.device, phone)
    }

    // MARK: One command

    /// Starts the command for `event`; nil (logged) if it could not be started.
    private func spawn(_ event: OutputRecord, device: String) -> ExecChild? {
        let label = ExecSink.label(event)
        let inputFDs: (read: Int32, write: Int32), errorFDs: (read: Int32, write: Int32)
        do throws(Errno) { inputFDs = try ExecSink.pipe() } catch { return spawnFailed(label, error) }
        let inputRead = FileDescriptor(adopting: inputFDs.read), inputWrite = FileDescriptor(adopting: inputFDs.write)
        do throws(Errno) { errorFDs = try ExecSink.pipe() } catch { return spawnFailed(label, error) }
        let errorsRead = FileDescriptor(adopting: errorFDs.read), errorsWrite = FileDescriptor(adopting: errorFDs.write)
        // Without /dev/null (-1) the command's standard output goes where its errors go.
        let null = FileDescriptor(adopting: open("/dev/null", O_WRONLY | O_CLOEXEC))
        let output = null.rawValue >= 0 ? null.rawValue : errorFDs.write
        var pid: pid_t = 0
        let environment = ExecSink.environment(for: event)
        let error = withCStrings(environment) { envp in
            command.withCString { ancsd_spawn_shell($0, envp, inputFDs.read, output, errorFDs.write, &pid) }
        }
        // The child has its copies; the parent keeps the ends it writes to and reads from.
        try? inputRead.close()
        try? errorsWrite.close()
        try? null.close()
        guard error == 0 else { return spawnFailed(label, Errno(rawValue: error)) }
        counters.started += 1
        logger.debug("exec: started pid \(pid) (event \(label))")
        let runner = bound
        let child = ExecChild(
            pid: pid, device: device, label: label, timeout: timeout, input: event.lineBytes(.json), stdin: inputWrite, stderr: errorsRead,
            stderrLimit: stderrLimit, loop: loop, handler: { [pid] event in runner.value.handle(event, of: pid) })
        child.start()
        return child
    }

    private func spawnFailed(_ label: String, _ error: Errno) -> ExecChild? {
        counters.spawnFailures += 1
        logger.warning("exec: cannot start /bin/sh: \(error) (event \(label))")
        return nil
    }
}

extension ExecSink {
    // MARK: Helpers

    /// Variables of the daemon's environment a command does not get: systemd's messages to
    /// the daemon itself (a command must not answer the watchdog or claim readiness for it).
    static let withheld = ["NOTIFY_SOCKET=", "WATCHDOG_PID=", "WATCHDOG_USEC=", "LISTEN_PID=", "LISTEN_FDS=", "LISTEN_FDNAMES="]

    /// The daemon's environment without ANCSD_ variables and `withheld`, then the event's.
    static func environment(for event: OutputRecord) -> [String] {
        var result: [String] = []
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if !text.hasPrefix("ANCSD_") && !withheld.contains(where: text.hasPrefix) { result.append(text) }
            pointer += 1
        }
        result.append("ANCSD_DEVICE=\(event.device)")
        switch event.event {
        case .connected: result.append("ANCSD_TYPE=connected")
        case .disconnected: result.append("ANCSD_TYPE=disconnected")
        case .sharing(_, let allowed):
            result.append("ANCSD_TYPE=sharing")
            result.append("ANCSD_SHARING=\(allowed ? "on" : "off")")
        case .notification(let change, _, _):
            let n = change.notification
            result.append("ANCSD_TYPE=\(change.kind.rawValue)")
            result.append("ANCSD_UID=\(n.uid)")
            result.append("ANCSD_CATEGORY=\(n.category.name ?? "reserved")")
            if let app = n.appIdentifier { result.append("ANCSD_APP_ID=\(app.filter { $0 != "\0" })") }
        case .service(let output):
            result.append("ANCSD_TYPE=\(output.type)")
            result += output.environment.map { $0.filter { $0 != "\0" } }
        }
        return result
    }

    /// `added #7 from AA:BB:CC:DD:EE:FF`: what a log line may say about an event.
    static func label(_ event: OutputRecord) -> String {
        switch event.event {
        case .connected(let device, _): "connected \(device)"
        case .disconnected(let device, _): "disconnected \(device)"
        case .sharing(let device, let allowed): "sharing \(allowed ? "on" : "off") \(device)"
        case .notification(let change, let device, _): "\(change.kind.rawValue) #\(change.notification.uid) from \(device)"
        case .service(let output): "\(output.label) from \(output.device)"
        }
    }

    /// A close-on-exec pipe, made atomically (pipe2 does not import): its read and write ends.
    fileprivate static func pipe() throws(Errno) -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        _ = try Errno.retrying { fds.withUnsafeMutableBufferPointer { ancsd_pipe_cloexec($0.baseAddress) } }
        return (fds[0], fds[1])
    }

    static func seconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        return attoseconds == 0 ? "\(seconds) s" : "\(Double(seconds) + Double(attoseconds) / 1e18) s"
    }
}

/// Calls `body` with a NULL-terminated array of C strings.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return pointers.withUnsafeBufferPointer { buffer in
        guard let base = buffer.baseAddress else { preconditionFailure("an array with a nil element is never empty") }
        return body(base)
    }
}
