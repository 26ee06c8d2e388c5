#if canImport(Glibc)
import Glibc
#endif
import ANCSDaemon
import ANCSRuntime
import EventLoop

let topLevelHelp = """
Usage: ancsd [--bus ADDRESS] <command> [options]

ancsd shows an iPhone's notifications on Linux: it speaks Apple Notification Center
Service (ANCS) over Bluetooth LE through BlueZ.

Commands:
  pair              pair an iPhone: open a pairing window, confirm the passkey, trust it
  run               show the notifications of bonded iPhones (the daemon)
  decode [FILE|-]   decode a capture of ANCS traffic (ancs-capture/1, or a btsnoop file
                    from btmon -w or Android's HCI snoop log, Apple Media Service too)
                    to JSON Lines; with --to-capture, turn a btsnoop file into an
                    ancs-capture/1 file
  replay [FILE|-]   run the session engine against a capture recorded with
                    "run --record" and print what "ancsd run" printed live
  capture           record the Bluetooth traffic of the kernel's HCI monitor channel
                    (as btmon does) to a btsnoop file, or its ANCS traffic to an
                    ancs-capture/1 file (needs root or CAP_NET_RAW)
  list              the notifications the running daemon holds (control socket)
  action DEVICE UID positive|negative
                    answer, decline or clear a notification on the phone
  media [DEVICE] [COMMAND]
                    the phone's player (what plays), or send it play, pause, next, …
  status            what the running daemon is doing (--json for machines)
  doctor            check the setup, with a plain-language fix for each problem
  report            write one archive to attach to a bug report (versions, controller,
                    doctor, status, log; --capture: a scrubbed HCI capture), names and
                    keys left out
  desktop           show the phones' notifications as desktop notifications (session)

Options:
  --bus ADDRESS     the D-Bus bus where bluetoothd runs (default: the system bus)
  -h, --help        show this help (or a command's: ancsd <command> --help)
  --version         print the version

Run "ancsd <command> --help" for a command's options.
"""

/// Reports a command-line mistake and returns exit status 2.
func usageFailure(_ error: any Error, command: String?) -> Int32 {
    logError("\(error)")
    writeStandardError("Try 'ancsd \(command.map { "\($0) " } ?? "")--help'.\n")
    return 2
}

func runMain(_ arguments: [String], executor: DaemonExecutor) async -> Int32 {
    var arguments = arguments
    var bus: String? = nil
    if let first = arguments.first, first == "--bus" || first.hasPrefix("--bus=") {
        if first == "--bus" {
            guard arguments.count > 1 else { return usageFailure(UsageError("--bus needs a D-Bus address"), command: nil) }
            bus = arguments[1]
            arguments.removeFirst(2)
        } else {
            bus = String(first.dropFirst("--bus=".count))
            arguments.removeFirst()
        }
    }
    guard let command = arguments.first else {
        writeStandardError(topLevelHelp + "\n")
        return 2
    }
    let rest = Array(arguments.dropFirst())
    switch command {
    case "-h", "--help", "help":
        print(topLevelHelp)
        return 0
    case "--version":
        print("ancsd \(ancsdVersion)")
        return 0
    case "decode":
        return DecodeCommand.run(rest)
    case "run":
        return await RunCommand.run(rest, bus: bus, executor: executor)
    case "pair":
        return await PairCommand.run(rest, bus: bus, loop: executor)
    case "replay":
        return ReplayCommand.run(rest)
    case "capture":
        return CaptureCommand.run(rest)
    case "list":
        return await ClientCommands.list(rest, loop: executor)
    case "action":
        return await ClientCommands.action(rest, loop: executor)
    case "status":
        return await ClientCommands.status(rest, loop: executor)
    case "media":
        return await MediaCommand.run(rest, loop: executor)
    case "doctor":
        return await DoctorCommand.run(rest, bus: bus, loop: executor)
    case "desktop":
        return await DesktopCommand.run(rest, executor: executor)
    case "report":
        return await ReportCommand.run(rest, bus: bus, loop: executor)
    default:
        return usageFailure(UsageError("unknown command '\(command)'"), command: nil)
    }
}

/// The subcommand `arguments` (without the program name) run, past a leading `--bus`.
func subcommand(of arguments: [String]) -> String? {
    guard let first = arguments.first else { return nil }
    if first == "--bus" { return arguments.dropFirst(2).first }
    return first.hasPrefix("--bus=") ? arguments.dropFirst().first : first
}

// `run`, `desktop` and `pair` read their signals from a signalfd on the event loop (SignalWatch): blocked
// here, before the loop's thread or any other starts, so every thread inherits the mask and a
// signal that comes during start-up waits, pending, for the watch (one that came before main, to
// a process whose parent left it blocked, is pending too: it must not be unblocked here, which
// would give it its default action). A parent may have left the others blocked (a process spawned
// from a thread that blocks them inherits its mask): they are unblocked, so ancsd receives them.
let watchedSignals: [Int32] = switch subcommand(of: Array(CommandLine.arguments.dropFirst())) {
case "run": RunCommand.handledSignals
case "desktop": DesktopCommand.handledSignals
case "pair": PairCommand.handledSignals
default: []
}
var receivedSignals = sigset_t()
sigemptyset(&receivedSignals)
for number in [SIGTERM, SIGINT, SIGHUP, SIGPIPE] where !watchedSignals.contains(number) { sigaddset(&receivedSignals, number) }
pthread_sigmask(SIG_UNBLOCK, &receivedSignals, nil)
SignalWatch.block(watchedSignals)

// The long-running commands keep malloc's thresholds fixed (ProcessMemory), set before any
// thread allocates.
if ["run", "desktop"].contains(subcommand(of: Array(CommandLine.arguments.dropFirst()))) {
    ProcessMemory.fixMallocThresholds()
}

// All asynchronous work runs on one event loop (see DaemonExecutor), never on Swift's global
// executor: an idle daemon then makes no wakeups.
let executor: DaemonExecutor
do {
    executor = try DaemonExecutor(name: "ancsd")
} catch {
    let message = Array("ancsd: \(error)\n".utf8)
    _ = write(2, message, message.count)
    exit(1)
}

/// Runs the command on the loop, which ends the process with its status; the main thread only
/// waits. Not in `dispatch_main` (what an async main ends in): it parks the main thread in
/// `sigsuspend` with an empty mask, and a SIGTERM that `run` keeps blocked for its signalfd would
/// meet that thread and its default action.
func runOnLoop(_ arguments: [String], executor: DaemonExecutor) -> Never {
    Task(executorPreference: executor) { exit(await runMain(arguments, executor: executor)) }
    while true { pause() }
}

runOnLoop(Array(CommandLine.arguments.dropFirst()), executor: executor)
