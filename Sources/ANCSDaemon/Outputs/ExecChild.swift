#if canImport(Glibc)
import Glibc
#endif
import CSpawn
import EventLoop
import SystemCalls

/// A running command: its pipes and its exit (watches), its time limit (a timer), all on the
/// sink's loop (`ExecSink` keeps its commands in a `LoopBound`).
///
/// Its standard error is read until the command exits, not until the pipe's end of file: a
/// background process it left behind may keep the pipe open. (The daemon no longer keeps a
/// writer of that pipe open itself: that worked around libdispatch on Linux crashing under
/// hundreds of pipe hang-ups a second, docs/soak.md section 5; epoll takes a hang-up as the
/// read of an end of file.)
final class ExecChild {
    /// What the loop reports about a command.
    enum Event {
        case inputWritable, errorsReadable, exited, timeUp, poll
    }

    let pid: pid_t
    let device: String
    let label: String
    /// The limit it runs under (a reload changes only the next commands').
    let timeout: Duration
    let started = ContinuousClock.now
    private let input: [UInt8]
    private var written = 0
    private let loop: EventLoop
    private let handler: @Sendable (Event) -> Void
    /// The pipe to its standard input until all is written (or it stops reading), and its number.
    private var stdin: FileDescriptor?
    private var inputOpen = true
    private let stdinFD: Int32
    /// The pipe from its standard error until it exits, and its number.
    private var stderr: FileDescriptor?
    private var errorsOpen = true
    private let stderrFD: Int32
    /// Its pidfd, while watched.
    private var pidfd: FileDescriptor?
    private var stdinWatch: Watch?
    private var stderrWatch: Watch?
    private var exitWatch: Watch?
    private var timer: LoopTimer?
    private var poller: LoopTimer?
    private let stderrLimit: Int
    private(set) var stderrKept: [UInt8] = []
    private(set) var stderrTotal = 0
    private(set) var timedOut = false
    private(set) var stopped = false
    private var done = false

    init(
        pid: pid_t, device: String, label: String, timeout: Duration, input: [UInt8], stdin: consuming FileDescriptor,
        stderr: consuming FileDescriptor, stderrLimit: Int, loop: EventLoop, handler: @escaping @Sendable (Event) -> Void
    ) {
        self.pid = pid
        self.device = device
        self.label = label
        self.timeout = timeout
        self.input = input
        self.stderrLimit = stderrLimit
        self.loop = loop
        self.handler = handler
        let (inputFD, errorsFD) = (stdin.rawValue, stderr.rawValue)
        _ = fcntl(inputFD, F_SETFL, fcntl(inputFD, F_GETFL) | O_NONBLOCK)
        _ = fcntl(errorsFD, F_SETFL, fcntl(errorsFD, F_GETFL) | O_NONBLOCK)
        stdinFD = inputFD
        stderrFD = errorsFD
        self.stdin = consume stdin
        self.stderr = consume stderr
    }

    deinit {
        // Watches go before their descriptors close (the stored properties, after this).
        for watch in [stdinWatch, stderrWatch, exitWatch] { watch?.cancel() }
    }

    func start() {
        let handler = self.handler
        do {
            stderrWatch = try loop.watch(fd: stderrFD, interest: .readable) { _ in handler(.errorsReadable) }
        } catch {
            closeErrors()  // cannot be watched: the command's writes to it fail (EPIPE) rather than block
        }
        let timer = loop.makeTimer { handler(.timeUp) }
        timer.schedule(after: timeout)
        self.timer = timer
        let pidfd = ancsd_pidfd_open(pid)
        if pidfd >= 0 {
            let owned = FileDescriptor(adopting: pidfd)
            if let watch = try? loop.watch(fd: pidfd, interest: .readable, handler: { _ in handler(.exited) }) {
                exitWatch = watch
                self.pidfd = consume owned
            } else {
                startPoller()
            }
        } else {
            // No pidfd (a kernel before 5.3, or a seccomp filter): look every 50 ms while it runs.
            startPoller()
        }
        writeInput()
    }

    private func startPoller() {
        guard poller == nil, !done else { return }
        let handler = self.handler
        let poller = loop.makeTimer { handler(.poll) }
        poller.schedule(after: .milliseconds(50), repeating: .milliseconds(50))
        self.poller = poller
    }

    /// Writes what the pipe takes; closes it when all is written or the command stopped reading.
    func writeInput() {
        guard inputOpen else { return }
        while written < input.count {
            let result = input.withUnsafeBytes { bytes in
                systemCall { () throws(Errno) in
                    try Errno.retrying { write(stdinFD, bytes.baseAddress.map { $0 + written }, bytes.count - written) }
                }
            }
            switch result {
            case .success(let count) where count > 0:
                written += count
                continue
            case .failure(.wouldBlock):
                if stdinWatch == nil {
                    let handler = self.handler
                    stdinWatch = try? loop.watch(fd: stdinFD, interest: .writable) { _ in handler(.inputWritable) }
                }
                if stdinWatch != nil { return }  // else it cannot wait for room: the input is given up
            case .success, .failure:
                break  // EPIPE: the command does not read its input; that is its choice
            }
            break
        }
        closeInput()
    }

    private func closeInput() {
        inputOpen = false
        stdinWatch?.cancel()  // before the descriptor closes
        stdinWatch = nil
        stdin = nil
    }

    /// Reads what the pipe holds; at its end (every writer closed it) or an error, stops watching it.
    func readErrors() {
        guard errorsOpen else { return }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let result = buffer.withUnsafeMutableBytes { bytes in
                systemCall { () throws(Errno) in try Errno.retrying { read(stderrFD, bytes.baseAddress, bytes.count) } }
            }
            switch result {
            case .success(let count) where count > 0:
                stderrTotal += count
                let room = stderrLimit - stderrKept.count
                if room > 0 { stderrKept += buffer.prefix(min(room, count)) }
                continue
            case .failure(.wouldBlock):
                return
            case .success, .failure:
                closeErrors()
                return
            }
        }
    }

    private func closeErrors() {
        errorsOpen = false
        stderrWatch?.cancel()
        stderrWatch = nil
        stderr = nil
    }

    /// Kills the command and its process group now.
    func stop() {
        guard !done else { return }
        stopped = true
        kill(-pid, SIGKILL)
    }

    func timeUp() {
        guard !done else { return }
        timedOut = true
        kill(-pid, SIGKILL)  // the whole process group: the shell and what it started
    }

    /// What `reap` found.
    enum Reaped {
        case running
        /// Its wait status.
        case exited(Int32)
        /// Someone else reaped it (ECHILD).
        case lost
    }

    /// Reaps the command if it has exited, and then ends its watches and timers.
    func reap() -> Reaped {
        guard !done else { return .running }
        var status: Int32 = 0
        let result = Errno.retryingInterrupts { waitpid(pid, &status, WNOHANG) }
        if result == 0 {  // still running
            if exitWatch != nil {
                // The pidfd said it exited: it is no longer watched, and polled instead.
                exitWatch?.cancel()
                exitWatch = nil
                pidfd = nil
                startPoller()
            }
            return .running
        }
        done = true
        exitWatch?.cancel()
        exitWatch = nil
        pidfd = nil
        poller?.cancel()
        poller = nil
        timer?.cancel()
        timer = nil
        closeInput()
        readErrors()  // what it wrote before exiting; a leftover background process keeps the pipe, not us
        closeErrors()
        return result < 0 ? .lost : .exited(status)
    }
}

/// A system call's result, or its errno.
func systemCall<Result>(_ call: () throws(Errno) -> Result) -> Swift.Result<Result, Errno> {
    do throws(Errno) {
        return .success(try call())
    } catch {
        return .failure(error)
    }
}
