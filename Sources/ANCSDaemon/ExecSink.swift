#if canImport(Glibc)
import Glibc
#endif
import ANCSSession
public import ANCSRuntime
import CSpawn
public import JSON
public import Dispatch

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
/// Queue and bound: events wait on the sink's own serial queue, at most `maxWaiting` per phone
/// behind the running command. When full: the oldest waiting event of that phone is dropped;
/// the count is logged when that phone's queue next runs empty.
///
/// Reload: `reconfigure` changes the command and the time limit for every event not yet started
/// (those waiting, and later ones); a command already running finishes under the limit it
/// started with. Nothing is dropped, killed or run twice, and each phone keeps its order.
///
/// No thread waits: the child is started with posix_spawn, its pipes and its exit (a pidfd)
/// are dispatch sources on the sink's queue, every descriptor is close-on-exec (and the child
/// closes any other above 2), and every child is reaped.
public final class ExecSink: OutputSink, @unchecked Sendable {  // mutable state only on `queue`
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
    private let logger: Logger
    private let queue = DispatchQueue(label: "ancsd.exec")
    private var phones: [String: Phone] = [:]
    /// The shell command, and how long it may run; `reconfigure` changes them.
    private var command: String
    private var timeout: Duration
    private var stopped = false
    private var counters = Counters()
    private var idleWaiters: [DispatchSemaphore] = []

    public init(command: String, timeout: Duration = .seconds(10), maxWaiting: Int = 64, stderrLimit: Int = 4096, logger: Logger) {
        self.command = command
        self.timeout = timeout
        self.maxWaiting = max(1, maxWaiting)
        self.stderrLimit = stderrLimit
        self.logger = logger
        // A command that exits without reading its input must cost an EPIPE, not the daemon
        // (`ancsd run` ignores SIGPIPE anyway; the command gets it back at its default).
        signal(SIGPIPE, SIG_IGN)
    }

    /// The counters so far.
    public var counts: Counters { queue.sync { counters } }

    public func report() async -> JSONObject {
        await withCheckedContinuation { continuation in
            queue.async { [self] in
                let waiting = phones.values.reduce(0) { $0 + $1.waiting.count }
                continuation.resume(returning: [
                    "started": .int(counters.started), "succeeded": .int(counters.succeeded), "failed": .int(counters.failed),
                    "timed_out": .int(counters.timedOut), "spawn_failures": .int(counters.spawnFailures),
                    "dropped": .int(counters.dropped), "running": .int(runningCount), "waiting": .int(waiting),
                ])
            }
        }
    }

    /// The command and time limit events not yet started will run with.
    public var settings: (command: String, timeout: Duration) { queue.sync { (command, timeout) } }

    /// Makes every event not yet started (those waiting, and later ones) run `command` with
    /// `timeout`: what a reload that changed `exec` or `exec-timeout` does. A command already
    /// running is left to finish under the limit it started with.
    public func reconfigure(command: String, timeout: Duration) {
        queue.sync {
            guard command != self.command || timeout != self.timeout else { return }
            let running = runningCount
            self.command = command
            self.timeout = timeout
            logger.info("exec: the new command runs for every event not yet started" + (running > 0 ? "; \(running) already running will finish" : ""))
        }
    }

    public func send(_ event: OutputRecord) {
        queue.async { self.enqueue(event) }
    }

    /// Waits until no command runs and none waits, or `timeout` passes.
    public func flush(timeout: DispatchTimeInterval) -> Bool {
        let done = DispatchSemaphore(value: 0)
        let idle = queue.sync { () -> Bool in
            if phones.isEmpty { return true }
            idleWaiters.append(done)
            return false
        }
        return idle || done.wait(timeout: .now() + timeout) == .success
    }

    /// Drops the waiting events (counted and logged) and kills the running commands with their
    /// process groups (a reload that removed `exec`, or the daemon ending: none is left
    /// running behind it). Commands killed here are reaped as usual if the daemon lives on.
    public func stop() {
        queue.sync {
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
    }

    // MARK: Queue (on `queue`)

    private final class Phone {
        var waiting = FIFO<OutputRecord>()
        var running: Child?
        var dropped = 0
    }

    /// Commands running now, one per phone at most.
    private var runningCount: Int { phones.values.count(where: { $0.running != nil }) }

    private func enqueue(_ event: OutputRecord) {
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
            for waiter in idleWaiters { waiter.signal() }
            idleWaiters = []
        }
    }

    /// `status` is nil if the child could not be reaped (someone else waited for it).
    private func finished(_ child: Child, status: Int32?) {
        let what = "event \(child.label)"
        let ran = ContinuousClock.now - child.started
        guard let status else {
            counters.failed += 1
            logger.warning("exec: lost track of the command: \(String(cString: strerror(ECHILD))) (\(what))")
            return next(after: child)
        }
        if child.stopped {
            counters.failed += 1
            logger.info("exec: killed the running command as the output stopped (\(what))")
        } else if child.timedOut {
            counters.timedOut += 1
            counters.failed += 1
            logger.warning("exec: the command ran longer than \(Self.seconds(child.timeout)); killed it (\(what))")
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

    private func next(after child: Child) {
        guard let phone = phones[child.device] else { return }
        phone.running = nil
        startNext(child.device, phone)
    }

    // MARK: One command

    /// Starts the command for `event`; nil (logged) if it could not be started.
    private func spawn(_ event: OutputRecord, device: String) -> Child? {
        let label = Self.label(event)
        var input: [Int32] = [-1, -1], errors: [Int32] = [-1, -1]
        guard Self.pipe(&input) else { return spawnFailed(label, errno) }
        guard Self.pipe(&errors) else {
            let error = errno
            close(input[0]); close(input[1])
            return spawnFailed(label, error)
        }
        let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        var pid: pid_t = 0
        let environment = Self.environment(for: event)
        let error = withCStrings(environment) { envp in
            command.withCString { ancsd_spawn_shell($0, envp, input[0], null >= 0 ? null : errors[1], errors[1], &pid) }
        }
        close(input[0])
        if null >= 0 { close(null) }
        guard error == 0 else {
            close(input[1]); close(errors[0]); close(errors[1])
            return spawnFailed(label, error)
        }
        counters.started += 1
        logger.debug("exec: started pid \(pid) (event \(label))")
        let child = Child(
            pid: pid, device: device, label: label, timeout: timeout, input: event.lineBytes(.json), stdin: input[1], stderr: errors[0], stderrWriter: errors[1],
            sink: self)
        child.start()
        return child
    }

    private func spawnFailed(_ label: String, _ error: Int32) -> Child? {
        counters.spawnFailures += 1
        logger.warning("exec: cannot start /bin/sh: \(String(cString: strerror(error))) (event \(label))")
        return nil
    }

    /// A running command: its pipes, its exit and its time limit, all dispatch sources on the
    /// sink's queue. Used only there.
    private final class Child {
        let pid: pid_t
        let device: String
        let label: String
        /// The limit it runs under (a reload changes only the next commands').
        let timeout: Duration
        let started = ContinuousClock.now
        private let input: [UInt8]
        private var written = 0
        private let stdinFD: Int32
        private let stderrFD: Int32
        /// The daemon keeps a writer of the command's standard-error pipe open until the end, so
        /// the pipe never hangs up while its read source is registered: libdispatch on Linux
        /// crashed (SIGSEGV in `_dispatch_event_loop_drain`) under hundreds of such hang-ups a
        /// second (docs/soak.md, section 5). The end is the command's exit, not the pipe's EOF.
        private let stderrWriter: Int32
        private var stdinSource: (any DispatchSourceWrite)?
        private var stdinOpen = true
        private var stderrSource: (any DispatchSourceRead)?
        private var exitSource: (any DispatchSourceRead)?
        private var timer: (any DispatchSourceTimer)?
        private var poller: (any DispatchSourceTimer)?
        private(set) var stderrKept: [UInt8] = []
        private(set) var stderrTotal = 0
        private(set) var timedOut = false
        private(set) var stopped = false
        private var done = false
        private let sink: ExecSink

        init(pid: pid_t, device: String, label: String, timeout: Duration, input: [UInt8], stdin: Int32, stderr: Int32, stderrWriter: Int32,
             sink: ExecSink) {
            self.pid = pid
            self.device = device
            self.label = label
            self.timeout = timeout
            self.input = input
            stdinFD = stdin
            stderrFD = stderr
            self.stderrWriter = stderrWriter
            self.sink = sink
            _ = fcntl(stdin, F_SETFL, fcntl(stdin, F_GETFL) | O_NONBLOCK)
            _ = fcntl(stderr, F_SETFL, fcntl(stderr, F_GETFL) | O_NONBLOCK)
        }

        func start() {
            let queue = sink.queue
            let errors = DispatchSource.makeReadSource(fileDescriptor: stderrFD, queue: queue)
            let fd = stderrFD, writer = stderrWriter
            errors.setEventHandler { self.readErrors() }
            errors.setCancelHandler {
                close(fd)
                close(writer)
            }
            stderrSource = errors
            errors.resume()

            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.setEventHandler { self.timeUp() }
            timer.schedule(deadline: .now() + ExecSink.interval(timeout), repeating: .never, leeway: .milliseconds(10))
            self.timer = timer
            timer.resume()

            let pidfd = ancsd_pidfd_open(pid)
            if pidfd >= 0 {
                // Exited: the source is cancelled first and the command reaped once it is gone
                // (a reaped task's pidfd hangs up, which must not reach a registered source).
                let exit = DispatchSource.makeReadSource(fileDescriptor: pidfd, queue: queue)
                exit.setEventHandler { self.exitSource?.cancel() }
                exit.setCancelHandler {
                    close(pidfd)
                    if !self.reap() { self.startPoller() }  // not reaped after all (EINTR): look again
                }
                exitSource = exit
                exit.resume()
            } else {
                // No pidfd (a kernel before 5.3, or a seccomp filter): look every 50 ms while it runs.
                startPoller()
            }
            writeInput()
        }

        private func startPoller() {
            guard poller == nil, !done else { return }
            let poller = DispatchSource.makeTimerSource(queue: sink.queue)
            poller.setEventHandler { _ = self.reap() }
            poller.schedule(deadline: .now() + .milliseconds(50), repeating: .milliseconds(50), leeway: .milliseconds(10))
            self.poller = poller
            poller.resume()
        }

        /// Writes what the pipe takes; closes it when all is written or the command stopped reading.
        private func writeInput() {
            guard stdinOpen else { return }
            while written < input.count {
                let count = input.withUnsafeBytes { bytes in
                    write(stdinFD, UnsafeRawBufferPointer(rebasing: bytes[written...]).baseAddress, input.count - written)
                }
                if count > 0 {
                    written += count
                } else if count < 0 && errno == EINTR {
                    continue
                } else if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                    if stdinSource == nil {
                        let source = DispatchSource.makeWriteSource(fileDescriptor: stdinFD, queue: sink.queue)
                        source.setEventHandler { self.writeInput() }
                        let fd = stdinFD
                        source.setCancelHandler { close(fd) }
                        stdinSource = source
                        source.resume()
                    }
                    return
                } else {
                    break  // EPIPE: the command does not read its input; that is its choice
                }
            }
            closeInput()
        }

        private func closeInput() {
            guard stdinOpen else { return }
            stdinOpen = false
            if let source = stdinSource {
                source.cancel()  // its cancel handler closes the descriptor
                stdinSource = nil
            } else {
                close(stdinFD)
            }
        }

        private func readErrors() {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while let source = stderrSource {
                let count = buffer.withUnsafeMutableBytes { read(stderrFD, $0.baseAddress, $0.count) }
                if count > 0 {
                    stderrTotal += count
                    let room = sink.stderrLimit - stderrKept.count
                    if room > 0 { stderrKept += buffer.prefix(min(room, count)) }
                    continue
                }
                if count < 0 && errno == EINTR { continue }
                if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
                source.cancel()  // end of file (every writer closed it) or an error
                stderrSource = nil
            }
        }

        /// Kills the command and its process group now.
        func stop() {
            guard !done else { return }
            stopped = true
            kill(-pid, SIGKILL)
        }

        private func timeUp() {
            guard !done else { return }
            timedOut = true
            kill(-pid, SIGKILL)  // the whole process group: the shell and what it started
        }

        /// Reaps the command if it has exited (false: still running) and finishes it.
        @discardableResult
        private func reap() -> Bool {
            guard !done else { return true }
            var status: Int32 = 0
            let result = waitpid(pid, &status, WNOHANG)
            if result == 0 || (result < 0 && errno == EINTR) { return false }  // still running
            done = true
            exitSource?.cancel()
            exitSource = nil
            poller?.cancel()
            poller = nil
            timer?.cancel()
            timer = nil
            closeInput()
            readErrors()  // what it wrote before exiting; a leftover background process keeps the pipe, not us
            stderrSource?.cancel()
            stderrSource = nil
            sink.finished(self, status: result < 0 ? nil : status)
            return true
        }
    }

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
        }
    }

    /// A close-on-exec pipe, made atomically (pipe2 does not import).
    private static func pipe(_ fds: inout [Int32]) -> Bool {
        fds.withUnsafeMutableBufferPointer { ancsd_pipe_cloexec($0.baseAddress) } == 0
    }

    static func interval(_ duration: Duration) -> DispatchTimeInterval {
        let (seconds, attoseconds) = duration.components
        return .nanoseconds(Int(clamping: seconds.multipliedReportingOverflow(by: 1_000_000_000).partialValue + attoseconds / 1_000_000_000))
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
