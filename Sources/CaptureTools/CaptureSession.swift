#if canImport(Glibc)
import Glibc
#endif
import ANCSDaemon
import ANCSRuntime
import Btsnoop
import JSON

/// The loop of `ancsd capture`: polls the monitor channel and the signal pipe, reads the frames
/// waiting (a batch at a time), writes what `MonitorRecorder` makes of them, and flushes before
/// it waits again. Synchronous: it runs on the thread of the command, like `decode`.
public struct CaptureSession {
    /// Why the capture stopped.
    enum Stop {
        case signal(Int32)
        case duration
        case count
    }

    /// The most datagrams read before the loop looks at the signals and the clock again.
    static let batch = 256
    /// Output gathered beyond this is written at once.
    static let flushThreshold = 1 << 16
    /// Warnings beyond this many are only counted.
    static let maxWarnings = 20

    let options: CaptureOptions
    let socket: HCIMonitorSocket
    let output: CaptureOutput
    let signals: StopSignals
    private var recorder: MonitorRecorder
    private var received = 0
    private var warnings = 0

    /// A capture of `socket`'s frames into `output` until `signals`, `--duration` or `--count`.
    public init(options: CaptureOptions, socket: HCIMonitorSocket, output: CaptureOutput, signals: StopSignals) {
        self.options = options
        self.socket = socket
        self.output = output
        self.signals = signals
        var metadata: JSONObject = ["source": "ancsd capture", "ancsd_version": .string(ancsdVersion)]
        if let index = options.index { metadata.append("index", .string("hci\(index)")) }
        recorder = MonitorRecorder(format: options.format == .capture ? .capture(handles: options.handles, metadata: metadata) : .btsnoop,
                                   index: options.index)
    }

    /// Captures until a stop; the exit status.
    public mutating func run() -> Int32 {
        let stop: Stop
        do {
            stop = try loop()
        } catch {
            logError("\(error)")
            output.append(recorder.finish())
            do { try output.finish() } catch { logError("\(error)") }
            logError(summary(stop: nil))
            return 1
        }
        output.append(recorder.finish())
        do {
            try output.finish()
        } catch {
            logError("\(error)")
            return 1
        }
        logError(summary(stop: stop))
        return 0
    }

    private mutating func loop() throws -> Stop {
        output.append(recorder.start())
        try output.flush()
        let deadline = options.duration.map { monotonicSeconds() + $0 }
        var more = false  // the last batch was full: do not wait
        while true {
            var timeout: Int32 = more ? 0 : -1
            if let deadline {
                let left = deadline - monotonicSeconds()
                if left <= 0 { return try drainRemaining() ?? .duration }
                if !more { timeout = Int32(clamping: Int64((left * 1000).rounded(.up))) }
            }
            var entries = [pollfd(fd: socket.fd, events: Int16(POLLIN), revents: 0), pollfd(fd: signals.fd, events: Int16(POLLIN), revents: 0)]
            if poll(&entries, 2, timeout) < 0 {
                if errno == EINTR { continue }
                throw CaptureError(description: "poll: \(systemError())")
            }
            if let number = signals.take() { return try drainRemaining() ?? .signal(number) }
            let events = entries[0].revents
            if events & Int16(POLLNVAL) != 0 { throw CaptureError(description: "the monitor channel's descriptor is no longer valid") }
            more = false
            if events & Int16(POLLIN | POLLERR) != 0 {
                let (full, stop) = try drain()
                if let stop { return stop }
                more = full
            } else if events & Int16(POLLHUP) != 0 {
                throw CaptureError(description: "the kernel closed the HCI monitor channel")
            }
            try output.flush()
        }
    }

    /// Reads up to `batch` datagrams; whether the batch was full, and a stop for `--count`.
    private mutating func drain() throws -> (full: Bool, stop: Stop?) {
        for _ in 0..<Self.batch {
            guard let datagram = try socket.receive() else { return (false, nil) }
            take(datagram)
            if let count = options.count, recorder.recordCount >= count { return (false, .count) }
            if output.pendingCount >= Self.flushThreshold { try output.flush() }
        }
        return (true, nil)
    }

    /// At a signal or the end of `--duration`: what the kernel had queued by then still goes
    /// to the file (up to `--count`, and at most 16 batches, as traffic may not pause).
    private mutating func drainRemaining() throws -> Stop? {
        for _ in 0..<16 {
            let (full, stop) = try drain()
            if stop != nil || !full { return stop }
        }
        return nil
    }

    private mutating func take(_ datagram: MonitorDatagram) {
        received += 1
        let frame: MonitorFrame
        do {
            frame = try MonitorFrame(datagram: datagram.bytes, length: datagram.length)
        } catch {
            recorder.reject()
            warn("datagram \(received): \(error); left out")
            return
        }
        do {
            output.append(try recorder.record(frame, unixMicroseconds: datagram.unixMicroseconds))
        } catch {
            warn("\(error) (\(frame.opcode) on hci\(frame.index)); left out of the ANCS capture, which goes on")
        }
        for warning in recorder.takeWarnings() { warn("\(warning); the ANCS capture goes on") }
    }

    private mutating func warn(_ message: String) {
        warnings += 1
        if warnings <= Self.maxWarnings { logError("warning: \(message)") }
        if warnings == Self.maxWarnings { logError("warning: further warnings are not shown") }
    }

    private func summary(stop: Stop?) -> String {
        var text = "\(recorder.recordCount) frame\(recorder.recordCount == 1 ? "" : "s") captured to \(output.name)"
        let others = received - recorder.recordCount - Int(recorder.rejectedCount)
        if options.index != nil && others > 0 { text += ", \(others) of other controllers left out" }
        if recorder.rejectedCount > 0 {
            text += recorder.rejectedCount == 1 ? ", 1 datagram that was not a frame left out" : ", \(recorder.rejectedCount) datagrams that were not frames left out"
        }
        switch stop {
        case .signal(let number)?: text += "; stopped by \(number == SIGINT ? "SIGINT" : number == SIGTERM ? "SIGTERM" : "signal \(number)")"
        case .duration?: text += "; stopped after \(options.duration.map { formatSeconds($0) } ?? "the duration")"
        case .count?: text += "; stopped at --count \(options.count ?? recorder.recordCount)"
        case nil: text += "; stopped by the error above"
        }
        return text
    }
}

/// CLOCK_MONOTONIC in seconds.
func monotonicSeconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// `5 s`, `0.25 s`.
private func formatSeconds(_ seconds: Double) -> String {
    seconds == seconds.rounded() && seconds < 1e15 ? "\(Int64(seconds)) s" : "\(seconds) s"
}
