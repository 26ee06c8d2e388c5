#if canImport(Glibc)
import Glibc
#endif
import ANCSControl
import ANCSDaemon
import ANCSRuntime
import Btsnoop
import CLinux
import CaptureTools
import ControlProtocol
import DBus
import EventLoop
import JSON
import Tar

/// `ancsd report`: one archive a user can attach to a bug report, with what helps to tell what
/// happened and nothing personal: versions, the controller, doctor and status, bluetoothd's view
/// of the adapter and the known phones, the daemon's log, and (with `--capture`) a scrubbed HCI
/// capture. Names are replaced by their length everywhere (`ReportNames`); keys never leave
/// the kernel and bluetoothd (no D-Bus property holds one, /var/lib/bluetooth is not read, and
/// the capture's keys are zeroed).
enum ReportCommand {
    static let help = """
    Usage: ancsd [--bus ADDRESS] report [--output FILE|-] [--capture SECONDS]
                                        [--control PATH] [--fifo PATH]

    Writes one .tar.gz archive to attach to a bug report, and prints what it holds (each
    member and its size) and what was removed. It holds:

      versions.json    ancsd's, BlueZ's (bluetoothd --version, or the bluez package), the
                       kernel's (uname) and the system's (PRETTY_NAME of /etc/os-release)
      controller.json  each controller: address, Bluetooth and LMP versions, manufacturer,
                       settings and features (the kernel's management interface and HCI);
                       or why they could not be read
      bluez.json       the adapters' and the known phones' properties as bluetoothd shows
                       them on D-Bus (address, pairing and connection state, UUIDs, GATT
                       services and characteristics; never a key, never a value)
      doctor.json      "ancsd doctor --json"
      status.json      "ancsd status --json", or why the daemon did not answer
      journal.txt      the last 2,000 lines of ancsd.service's journal at priority info and
                       above (debug lines may hold notification content and are left out)
      capture.btsnoop  with --capture: SECONDS of the HCI monitor channel (as "ancsd
                       capture"), scrubbed: every ANCS and AMS attribute value, device name,
                       advertised name and log text replaced by x's of the same length,
                       keys zeroed; headers, handles, opcodes, lengths and timing kept, so
                       "ancsd decode", "btmon -r" and "tshark -r" still read the exchange
      README.txt       what the archive holds and what was removed, and the handles
                       "ancsd decode --handles" needs for a capture begun on a live link

    Names are replaced by "<name: N bytes>" in every member (in the capture, by x's): a
    phone's name is usually its owner's. Addresses are kept: the log names phones by them.

    Options:
      -o, --output FILE|-   where to write (default ancsd-report-HOST-YYYYMMDDTHHMMSSZ.tar.gz
                            in the current directory; - for standard output, not a terminal);
                            created with mode 0600
      --capture SECONDS     also record the Bluetooth traffic for SECONDS (1 to 600; root or
                            CAP_NET_RAW); reproduce the problem meanwhile. Ctrl-C ends it early
      --control PATH        the daemon's control socket (default /run/ancsd/control)
      --fifo PATH           the FIFO doctor checks (default /run/ancsd/events)
      -h, --help            show this help

    Exit status: 0 when the archive was written (members that could not be filled say why),
    1 when it could not be written, 2 for a mistake on the command line.
    """

    struct Options {
        var output: String?
        var capture: Double?
        var doctor = DoctorCommand.Options()
    }

    /// The options, or nil for --help.
    static func parse(_ arguments: [String], bus: String?) throws(UsageError) -> Options? {
        var options = Options()
        if let bus { options.doctor.bus = .address(bus) }
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            switch argument {
            case .option("--help", _), .option("-h", _): return nil
            case .option("--output", let inline), .option("-o", let inline):
                let value = try scanner.value(of: "--output", inline: inline)
                guard !value.isEmpty else { throw UsageError("--output needs a file name, or - for standard output") }
                options.output = value
            case .option("--capture", let inline):
                let value = try scanner.value(of: "--capture", inline: inline)
                guard let seconds = Double(value), seconds.isFinite, seconds >= 1, seconds <= 600 else {
                    throw UsageError("--capture needs a number of seconds from 1 to 600, not '\(value)'")
                }
                options.capture = seconds
            case .option("--control", let inline): options.doctor.control = try scanner.value(of: "--control", inline: inline)
            case .option("--fifo", let inline): options.doctor.fifo = try scanner.value(of: "--fifo", inline: inline)
            case .option(let name, _): throw UsageError("unknown option \(name)")
            case .positional(let value): throw UsageError("report takes no arguments, got '\(value)' (use --output FILE)")
            }
        }
        return options
    }

    static func run(_ arguments: [String], bus: String?, loop: EventLoop) async -> Int32 {
        let parsed: Result<Options?, UsageError> = Result { () throws(UsageError) in try parse(arguments, bus: bus) }
        let options: Options
        switch parsed {
        case .success(nil):
            print(help)
            return 0
        case .success(let value?):
            options = value
        case .failure(let error):
            return usageFailure(error, command: "report")
        }
        if options.output == "-" && isatty(STDOUT_FILENO) == 1 {
            return usageFailure(UsageError("will not write a .tar.gz to a terminal: give --output FILE or redirect standard output"), command: "report")
        }
        signal(SIGPIPE, SIG_IGN)
        let stamp = utcStamp()
        let base = "ancsd-report-\(safeHost())-\(stamp)"
        let path = options.output ?? base + ".tar.gz"
        let toStdout = path == "-"
        // What the report says goes to standard error when the archive goes to standard output;
        // each line as it is said (a pipe's buffer held "reproduce the problem now" until the end).
        let say: (String) -> Void = toStdout ? { writeStandardError($0 + "\n") } : { print($0); fflush(nil) }

        let contents = await gather(options, say: say, loop: loop)
        let members = contents.members
        let capture = contents.capture, captureNote = contents.captureNote

        var tar = TarWriter()
        let now = Int64(time(nil))
        do throws(TarError) {
            for (name, bytes) in members { try tar.add(name: "\(base)/\(name)", contents: bytes, modified: now) }
        } catch {
            logError("cannot build the archive: \(error)")
            return 1
        }
        do throws(ReportError) {
            try write(tar.finish(), to: path)
        } catch {
            logError("\(error)")
            return 1
        }
        say("wrote \(toStdout ? "the report to standard output" : path): \(base)/")
        for (name, size) in tar.members {
            say("  \(String(name.dropFirst(base.count + 1)).padding(to: 22))\(size) bytes")
        }
        say("names (the phones', the computer's) are replaced by \"<name: N bytes>\"; no key is included")
        if let capture {
            say("removed from the capture:")
            for (kind, count) in capture.counts.lines where count > 0 { say("  \(kind): \(count)") }
            if capture.masked > 0 { say("  known names found elsewhere: \(capture.masked)") }
        } else if let captureNote {
            say(captureNote.trimmingWhitespace)
        }
        say("look through it before you send it: tar -xzf \(toStdout ? "FILE" : path)")
        return 0
    }

    /// What a report holds: its members in order (README.txt first), and how its capture went.
    private struct Contents {
        var members: [(String, [UInt8])]
        var capture: (bytes: [UInt8], counts: ScrubCounts, masked: Int)?
        var captureNote: String?
    }

    /// Collects the report's members: what each source says, the capture if one was asked for
    /// (`say` tells the user when to reproduce the problem), and the README that describes them;
    /// the names found on the way are replaced in every member.
    private static func gather(_ options: Options, say: (String) -> Void, loop: EventLoop) async -> Contents {
        var names: [String] = []
        var handles = ANCSHandles()
        let versions = ReportVersions.collect()
        let controller = ReportController.collect(names: &names)
        let bluez = await ReportBlueZ.collect(bus: options.doctor.bus, names: &names, handles: &handles)
        let doctor = DoctorCommand.json(await DoctorCommand.checks(options.doctor, loop: loop))
        let status = await statusJSON(control: options.doctor.control, names: &names, loop: loop)
        let journal = ReportJournal.collect()
        var capture: (bytes: [UInt8], counts: ScrubCounts, masked: Int)? = nil
        var captureNote: String? = nil
        if let seconds = options.capture {
            say("capturing \(formatSeconds(seconds)) s of Bluetooth traffic: reproduce the problem now (Ctrl-C ends it early)")
            switch ReportCapture.record(seconds: seconds, handles: handles) {
            case .success(let (bytes, counts)):
                let masked = ReportNames.mask(names, in: bytes)
                capture = (masked.bytes, counts, masked.count)
            case .failure(let error):
                captureNote = "no capture: \(error.description)\n"
            }
        }

        var members: [(String, [UInt8])] = []
        func add(_ name: String, json value: JSONValue) {
            members.append((name, Array(ReportNames.replace(names, in: pretty(value)).utf8)))
        }
        add("versions.json", json: versions)
        add("controller.json", json: controller)
        add("bluez.json", json: bluez)
        add("doctor.json", json: doctor)
        add("status.json", json: status)
        members.append(("journal.txt", Array(ReportNames.replace(names, in: journal).utf8)))
        if let capture {
            members.append(("capture.btsnoop", capture.bytes))
            var removed = JSONObject()
            for (key, count) in capture.counts.members { removed.append(key, .int(count)) }
            removed.append("known_names_masked", .int(capture.masked))
            add("capture-scrubbed.json", json: .object(removed))
        } else if let captureNote {
            members.append(("capture-error.txt", Array(captureNote.utf8)))
        }
        let readme = readmeText(members: members, capture: capture.map { ($0.counts, $0.masked) }, captureNote: captureNote,
                                asked: options.capture, handles: handles)
        members.insert(("README.txt", Array(readme.utf8)), at: 0)
        return Contents(members: members, capture: capture, captureNote: captureNote)
    }

    /// `ancsd status --json`'s object, names replaced; or why the daemon did not answer.
    private static func statusJSON(control: String, names: inout [String], loop: EventLoop) async -> JSONValue {
        do throws(ControlClientError) {
            let answer = try await ControlClient.request(.status, path: control, timeout: .seconds(5), loop: loop)
            if case .status(let status) = answer { names += status.devices.compactMap(\.name) }
            return .object(ControlReply(id: nil, .success(answer)).json)
        } catch {
            return .object(["running": .bool(false),
                            "error": .string("the daemon did not answer on \(control): \(ClientCommands.describe(error, path: control))")])
        }
    }

    private static func readmeText(
        members: [(String, [UInt8])], capture: (counts: ScrubCounts, masked: Int)?, captureNote: String?, asked: Double?,
        handles: ANCSHandles
    ) -> String {
        var text = """
            ancsd field report
            ==================

            Made by "ancsd report" (ancsd \(ancsdVersion)) for a bug report. What each member holds:
            "ancsd report --help". Names are replaced by "<name: N bytes>" everywhere (in the capture
            by x's of the same length); Bluetooth addresses are kept; no key is included (nothing is
            read from /var/lib/bluetooth, and the capture's keys are zeroed). journal.txt leaves out
            debug lines, which may hold notification content.

            members:

            """
        for (name, bytes) in members { text += "  \(name.padding(to: 22))\(bytes.count) bytes\n" }
        if let capture {
            text += "\ncapture.btsnoop: replaced (counts of values; bytes: \(capture.counts.bytes)):\n"
            for (kind, count) in capture.counts.lines { text += "  \(kind): \(count)\n" }
            text += "  known names found elsewhere: \(capture.masked)\n"
            // A capture that begins on a live link holds no GATT discovery: decode needs the handles.
            if !handles.description.isEmpty {
                text += "\nread it with: ancsd decode --handles \(handles) capture.btsnoop\n"
            }
        } else if let captureNote {
            text += "\n" + captureNote
        } else if asked == nil {
            text += "\nno capture: \"ancsd report --capture SECONDS\" records one\n"
        }
        return text
    }

    /// Writes the archive, gzip-compressed, to `path` (mode 0600) or standard output.
    private static func write(_ tar: [UInt8], to path: String) throws(ReportError) {
        if path == "-" { return try ReportPrograms.gzip(tar, into: STDOUT_FILENO) }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ReportError("cannot create \(path): \(systemError())") }
        defer { close(fd) }
        try ReportPrograms.gzip(tar, into: fd)
        guard fsync(fd) == 0 || errno == EINVAL else { throw ReportError("cannot write \(path): \(systemError())") }
    }

    private static func pretty(_ value: JSONValue) -> String { value.serialized + "\n" }

    /// 20261205T135943Z.
    private static func utcStamp() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
    }

    /// The host name, with only letters, digits, dots, dashes and underscores (a file name).
    private static func safeHost() -> String {
        let kept = hostName().unicodeScalars.map { scalar -> Character in
            let c = Character(scalar)
            return (c.isASCII && (c.isLetter || c.isNumber)) || c == "." || c == "-" || c == "_" ? c : "_"
        }
        return String(kept.prefix(64))
    }

    private static func formatSeconds(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }
}

/// `--capture`: `ancsd capture`'s recorder for a few seconds, into memory (a memfd: the
/// unscrubbed bytes never reach a disk), then `BtsnoopScrubber`.
enum ReportCapture {
    static func record(seconds: Double, handles: ANCSHandles) -> Result<([UInt8], ScrubCounts), ReportError> {
        let socket: HCIMonitorSocket
        do {
            socket = try HCIMonitorSocket()
        } catch {
            return .failure(ReportError("\(error)"))
        }
        let memory = ancsd_memfd("ancsd-report-capture")
        guard memory >= 0 else { return .failure(ReportError("memfd_create: \(systemError())")) }
        defer { close(memory) }
        var options = CaptureOptions()
        options.output = "/proc/self/fd/\(memory)"
        options.duration = seconds
        let output: CaptureOutput
        let signals: StopSignals
        do {
            output = try CaptureOutput(path: options.output)
            signals = try StopSignals()
        } catch {
            return .failure(ReportError("\(error)"))
        }
        var session = CaptureSession(options: options, socket: socket, output: output, signals: signals)
        let status = session.run()
        signals.restore()
        guard status == 0 else { return .failure(ReportError("the capture failed (its message is above)")) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let count = pread(memory, &buffer, buffer.count, offset)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += buffer.prefix(count)
            offset += off_t(count)
        }
        do throws(BtsnoopError) {
            let (file, counts) = try BtsnoopScrubber.scrub(file: bytes, defaultHandles: handles)
            return .success((file, counts))
        } catch {
            return .failure(ReportError("the capture cannot be read back (\(error)): left out"))
        }
    }
}

extension String {
    /// The string padded with spaces to `width` characters (at least one space after it).
    func padding(to width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
