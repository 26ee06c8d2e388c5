#if canImport(Glibc)
import Glibc
import SystemCalls
#endif
import ANCS
import ANCSCapture
import ANCSRuntime
import ANCSSession
import BlueZ
import EventLoop
import JSON

/// Where and how `ancsd run --record` writes sessions.
public struct RecordingOptions: Hashable, Sendable {
    /// The directory for the capture files; nil: no recording.
    public var directory: String?
    /// Replace the text inside Data Source tuples with placeholders (`--record-redact`).
    public var redact = false
    /// ancsd's version, for the header.
    public var softwareVersion = ""

    public init() {}
}

/// Writes one phone's session as an `ancs-capture/1` file: the Notification Source and Data
/// Source values as received, the Control Point writes as sent with the phone's answer, and
/// connect/disconnect.
///
/// Crash-safe by construction: the file is opened with O_APPEND and never rewritten; each line
/// goes out with one write(2) of the whole line, so a crash or power loss leaves every complete
/// line readable; it is fsync'ed at most every `syncInterval` while lines come (on `syncLoop`,
/// off the caller's loop) and at the end of the session (on the caller's loop: once a session,
/// and done before the daemon exits). A Control Point line carries the write's answer, so the
/// values that arrive while a write waits for its answer (milliseconds) are held back and written
/// right after it. Owned and called only by the `Daemon` actor.
final class SessionRecorder {
    static let syncInterval: Duration = .seconds(5)

    /// Where the periodic fsyncs run: a loop of the recorders' own, made by the first recording
    /// (a daemon that records nothing has no such thread), idle in `epoll_wait` between syncs.
    /// The lines themselves are written on the daemon's loop: a few hundred bytes appended to
    /// the page cache, about a microsecond each. An fsync waits for the disk (seconds on a busy
    /// SD card), which the phones' traffic must not wait for. Nil if it cannot be made: the
    /// fsyncs then run on the daemon's loop.
    private static let syncLoop: EventLoop? = try? EventLoop(name: "ancsd-fsync")

    let path: String
    /// The session's file; nil once closed (setting it to nil closes it).
    private var file: FileDescriptor?
    private let logger: Logger
    private let device: String
    private var redactor: DataSourceRedactor?
    /// Control Point writes not yet written to the file, oldest first: each with its answer once
    /// it came, and the lines that arrived after it was sent. The phone's Data Source response
    /// often arrives before bluetoothd's reply to the write, so the session may send the next
    /// write first; answers come in the order of the writes (ATT has one request at a time).
    private var pendingWrites: [(time: Duration, bytes: [UInt8], result: (WriteResult, Duration)?, after: [String])] = []
    private var lastSync = ContinuousClock.now

    private init(path: String, fd: Int32, device: String, redact: Bool, logger: Logger) {
        self.path = path
        file = FileDescriptor(adopting: fd)
        self.device = device
        self.logger = logger
        redactor = redact ? DataSourceRedactor() : nil
    }

    /// Creates the session's file in the options' directory and writes its header; nil (after a
    /// warning) when recording is off or the file cannot be created.
    static func start(device: BlueZDevice, options: RecordingOptions, logger: Logger) -> SessionRecorder? {
        guard let directory = options.directory else { return nil }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let micros = Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec / 1000)
        let start = iso8601UTC(unixMicroseconds: micros)
        // 2026-11-30T10:12:00.123456Z → 20261130T101200Z
        let stamp = String(start.prefix(19).filter { $0 != "-" && $0 != ":" }) + "Z"
        let base = directory + "/" + device.address.replacingColons + "_" + stamp
        var path = base + ".jsonl"
        var fd: Int32 = -1
        for attempt in 1...100 {
            fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0o600)
            if fd >= 0 || errno != EEXIST { break }
            path = base + "-\(attempt + 1).jsonl"
        }
        guard fd >= 0 else {
            logger.warning("\(device.address): cannot record the session into \(directory): \(Errno.current)")
            return nil
        }
        // Make the new directory entry durable too.
        if let entry = try? FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) {
            fsync(entry.rawValue)
            try? entry.close()
        }
        let recorder = SessionRecorder(path: path, fd: fd, device: device.address, redact: options.redact, logger: logger)
        var header: JSONObject = ["format": .string(CaptureParser.formatName), "source": "ancsd"]
        header.append("ancsd_version", .string(options.softwareVersion))
        header.append("device", .string(device.address))
        if !options.redact, let name = device.name { header.append("name", .string(name)) }
        if let adapter = device.adapterName { header.append("adapter", .string(adapter)) }
        header.append("start", .string(start))
        header.append("redacted", .bool(options.redact))
        recorder.writeLine(JSONValue.object(header).serialized)
        logger.info("\(device.address): recording the session to \(path)")
        return recorder
    }

    /// The link is up (ancsd printed "connected").
    func connected(at time: Duration) {
        add(CaptureWriter.line(for: .event(time: seconds(time), .connected)))
    }

    /// A Notification Source or Data Source value from the phone.
    func received(_ characteristic: CaptureCharacteristic, _ value: [UInt8], at time: Duration) {
        var bytes = value
        if characteristic == .ds, redactor != nil { bytes = redactor?.redact(value) ?? value }
        add(CaptureWriter.line(for: .value(time: seconds(time), characteristic: characteristic, bytes: bytes, attError: nil)))
    }

    /// ancsd writes this value to the Control Point.
    func wroteControlPoint(_ bytes: [UInt8], at time: Duration) {
        redactor?.expect(controlPointWrite: bytes)
        pendingWrites.append((time, bytes, nil, []))
    }

    /// How the oldest Control Point write still waiting ended.
    func writeFinished(_ result: WriteResult, at time: Duration) {
        if case .accepted = result {} else { redactor?.writeRefused() }
        guard let index = pendingWrites.firstIndex(where: { $0.result == nil }) else { return }
        pendingWrites[index].result = (result, time)
        flushAnsweredWrites()
    }

    /// The session ended: the `disconnected` event (with ancsd's reason when it had printed
    /// "connected"), fsync, close.
    func finish(at time: Duration, reason: String?) {
        flushAnsweredWrites(all: true)
        let extra: JSONObject = reason.map { ["reason": .string($0)] } ?? [:]
        add(CaptureWriter.line(for: .event(time: seconds(time), .disconnected), extra: extra))
        guard let fd = file?.rawValue else { return }
        fsync(fd)
        file = nil
    }

    // MARK: Writing

    /// Writes the answered writes at the front, each followed by what came after it; with
    /// `all`, the unanswered ones too (the session ended first: `t_answer` null).
    private func flushAnsweredWrites(all: Bool = false) {
        while let first = pendingWrites.first, all || first.result != nil {
            pendingWrites.removeFirst()
            var attError: UInt8? = nil
            var extra = JSONObject()
            switch first.result {
            case (.accepted, let time)?:
                extra.append("t_answer", .double(CaptureWriter.roundedTime(seconds(time))))
            case (.attError(let code), let time)?:
                attError = code.rawValue
                extra.append("t_answer", .double(CaptureWriter.roundedTime(seconds(time))))
            case (.failed(let message), let time)?:
                extra.append("t_answer", .double(CaptureWriter.roundedTime(seconds(time))))
                extra.append("write_error", .string(message))
            case nil:
                extra.append("t_answer", .null)  // never answered: the session ended first
            }
            writeLine(CaptureWriter.line(
                for: .value(time: seconds(first.time), characteristic: .cp, bytes: first.bytes, attError: attError), extra: extra))
            for line in first.after { writeLine(line) }
        }
    }

    private func add(_ line: String) {
        if pendingWrites.isEmpty {
            writeLine(line)
        } else {
            pendingWrites[pendingWrites.count - 1].after.append(line)
        }
    }

    /// One write(2) of the whole line; fsync in the background at most every `syncInterval`.
    private func writeLine(_ text: String) {
        guard let fd = file?.rawValue else { return }
        var bytes = Array(text.utf8)
        bytes.append(0x0A)
        guard writeAll(fd, bytes) else {
            logger.warning("\(device): stopped recording to \(path): \(Errno.current)")
            file = nil
            return
        }
        if ContinuousClock.now - lastSync >= Self.syncInterval {
            lastSync = .now
            let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
            guard copy >= 0 else { return }
            let sync: @Sendable () -> Void = {
                let duplicate = FileDescriptor(adopting: copy)
                fsync(duplicate.rawValue)
                try? duplicate.close()
            }
            if let loop = Self.syncLoop { loop.execute(sync) } else { sync() }
        }
    }

    private func seconds(_ duration: Duration) -> Double {
        let (whole, fraction) = duration.components
        return Double(whole) + Double(fraction) / 1e18
    }
}

extension String {
    var replacingColons: String { String(map { $0 == ":" ? "-" : $0 }) }
}
