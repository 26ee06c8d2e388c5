#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import Btsnoop
import CaptureTools

/// `ancsd capture`: records the Bluetooth traffic of the kernel's HCI monitor channel into a
/// btsnoop file or an `ancs-capture/1` file, until a signal, `--duration` or `--count`.
enum CaptureCommand {
    static let help = """
    Usage: ancsd capture [--output FILE|-] [--format btsnoop|capture] [--index hciN]
                         [--duration SECONDS] [--count N] [--handles ns=H,cp=H,ds=H]

    Records the Bluetooth traffic of every controller (or of one, with --index) from the
    kernel's HCI monitor channel, the one btmon reads, until SIGINT (Ctrl-C) or SIGTERM,
    --duration or --count; then the file is flushed, closed and complete. Needs root or
    CAP_NET_RAW. The kernel first replays the controllers that exist (NEW_INDEX, OPEN_INDEX,
    INDEX_INFO), so the file says which controllers it saw.

      btsnoop   (default) a btsnoop file, datalink 2001 (BlueZ monitor), as "btmon -w"
                writes it: every frame as the kernel gave it, with the kernel's receive
                time. "ancsd decode", "btmon -r" and Wireshark ("tshark -r") read it.
      capture   only the ANCS traffic, as an ancs-capture/1 file (docs/capture-format.md):
                what "ancsd decode --to-capture" makes of the btsnoop file. The ANCS handles
                come from the GATT discovery in the capture, or from --handles. A bonded
                phone that reconnects is usually not discovered again (bluetoothd keeps its
                GATT database): give --handles, or capture btsnoop and decode it later.

    Options:
      -o, --output FILE|-   where to write (default "-", standard output; a btsnoop file is
                            not written to a terminal). A file is created with mode 0600 (it
                            holds notification content); an existing one is overwritten
      --format btsnoop|capture
                            what to write (default btsnoop)
      --index hciN          keep only this controller's frames (hci0, or 0); frames about
                            no controller (kernel notes, bluetoothd's logging) are left out
      --duration SECONDS    stop after this many seconds (decimals allowed)
      --count N             stop after N frames kept
      --handles ns=H,cp=H,ds=H
                            with --format capture: the ANCS value handles (hex with 0x, or
                            decimal) of connections whose discovery the capture does not see
      -h, --help            show this help

    A line on standard error says where the capture goes, and one what it recorded. Datagrams
    that are not monitor frames are left out with a warning and counted in the btsnoop
    records' cumulative drops. With --format capture, corrupt HCI packets and malformed L2CAP
    signaling or EATT K-frames give a warning naming the frame, and the capture goes on.

    Exit status:
      0  stopped by SIGINT, SIGTERM, --duration or --count; the file is complete
      1  the monitor channel cannot be opened (no Bluetooth in the kernel, not root and no
         CAP_NET_RAW) or read, or the output cannot be written
      2  the command line is wrong, or a btsnoop file would go to a terminal
    """

    typealias Options = CaptureOptions
    typealias Format = CaptureOptions.Format

    /// The options, or nil for --help.
    static func parse(_ arguments: [String]) throws(UsageError) -> Options? {
        var options = Options()
        var scanner = ArgumentScanner(arguments)
        while let argument = scanner.next() {
            switch argument {
            case .option("--help", _), .option("-h", _):
                return nil
            case .option("--output", let inline), .option("-o", let inline):
                options.output = try scanner.value(of: "--output", inline: inline)
                guard !options.output.isEmpty else { throw UsageError("--output needs a file name, or - for standard output") }
            case .option("--format", let inline):
                let value = try scanner.value(of: "--format", inline: inline)
                guard let format = Format(rawValue: value) else { throw UsageError("--format must be btsnoop or capture, not '\(value)'") }
                options.format = format
            case .option("--index", let inline):
                let value = try scanner.value(of: "--index", inline: inline)
                let digits = value.hasPrefix("hci") ? String(value.dropFirst(3)) : value
                guard let index = UInt16(digits), index != MonitorFrame.noController else {
                    throw UsageError("--index needs a controller such as hci0, not '\(value)'")
                }
                options.index = index
            case .option("--duration", let inline):
                let value = try scanner.value(of: "--duration", inline: inline)
                guard let seconds = Double(value), seconds.isFinite, seconds > 0, seconds <= 1e9 else {
                    throw UsageError("--duration needs a number of seconds greater than 0, not '\(value)'")
                }
                options.duration = seconds
            case .option("--count", let inline):
                let value = try scanner.value(of: "--count", inline: inline)
                guard let count = Int(value), count > 0 else { throw UsageError("--count needs a number of frames greater than 0, not '\(value)'") }
                options.count = count
            case .option("--handles", let inline):
                let text = try scanner.value(of: "--handles", inline: inline)
                guard let parsed = ANCSHandles(parsing: text) else {
                    throw UsageError("--handles needs ns=H,cp=H,ds=H with handles such as 0x0010, not '\(text)'")
                }
                options.handles = parsed
            case .option(let name, _):
                throw UsageError("unknown option \(name)")
            case .positional(let value):
                throw UsageError("capture takes no file argument, got '\(value)' (use --output FILE)")
            }
        }
        if options.format != .capture && options.handles != ANCSHandles() {
            throw UsageError("--handles applies only to --format capture")
        }
        if options.handles.hasAMS {
            throw UsageError("--handles: rc, eu and ea apply only to ancsd decode (an ancs-capture/1 file holds ANCS traffic only)")
        }
        return options
    }

    static func run(_ arguments: [String]) -> Int32 {
        let options: Options
        do {
            guard let parsed = try parse(arguments) else {
                print(help)
                return 0
            }
            options = parsed
        } catch {
            return usageFailure(error, command: "capture")
        }
        let terminalMessage = "will not write a binary btsnoop file to a terminal: give --output FILE, redirect standard output, or use --format capture"
        if options.output == "-" && options.format == .btsnoop && isatty(STDOUT_FILENO) == 1 {
            return usageFailure(UsageError(terminalMessage), command: "capture")
        }
        signal(SIGPIPE, SIG_IGN)
        let socket: HCIMonitorSocket
        let output: CaptureOutput
        let signals: StopSignals
        do {
            // The channel first: when it cannot be opened, an existing file stays as it was.
            socket = try HCIMonitorSocket()
            output = try CaptureOutput(path: options.output)
            guard options.format != .btsnoop || !output.isTerminal else { return usageFailure(UsageError(terminalMessage), command: "capture") }
            signals = try StopSignals()
        } catch {
            logError("\(error)")
            return 1
        }
        defer { signals.restore() }
        let what = options.index.map { "hci\($0)" } ?? "all controllers"
        logError("capturing \(what) from the HCI monitor channel to \(output.name) (\(options.format == .capture ? "ancs-capture/1" : "btsnoop")); Ctrl-C stops")
        var session = CaptureSession(options: options, socket: socket, output: output, signals: signals)
        return session.run()
    }
}
