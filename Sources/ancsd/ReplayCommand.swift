import ANCSSession
import ANCSDaemon
import CaptureTools

/// `ancsd replay`: runs the session engine against a recorded capture with a simulated clock and
/// prints what `ancsd run` printed live.
enum ReplayCommand {
    static let help = """
    Usage: ancsd replay [--format json|text] [--device ADDR] [--replays all|unseen|none]
                        [--state-dir DIR] [--only-app P] [--ignore-app P] [--ignore-category C]
                        [FILE|-]

    Runs ancsd's ANCS session engine against a recorded capture (ancs-capture/1, as written by
    "ancsd run --record" or "ancsd decode --to-capture") and prints the events that
    "ancsd run" printed live, in the same format: a recorded session reproduces exactly.

    The clock is simulated: each record is fed at its "t"; the session's timeouts fire at
    their deadlines in between. The session's Control Point writes are answered from the
    capture: each must match the next recorded cp record, whose "att_error" (or "write_error")
    becomes the write's result, delivered at the record's "t_answer" (at its "t" when absent;
    never when null). The Notification Source and Data Source values follow as recorded.
    A "connected" record prints "connected"; a "disconnected" record prints "disconnected"
    (with its "reason") and starts a fresh session.

    Options:
      --format json|text   output format (default json, as "ancsd run --format json")
      --device ADDR        the phone's address in the output (default: the header's "device")
      --replays all|unseen|none
                           which replayed (pre_existing) notifications are printed, as in
                           "ancsd run" (default unseen)
      --state-dir DIR      what the phone showed before, as "ancsd run --state-dir" keeps it
                           (read and updated): replay a phone's recordings in order with one
                           DIR to reproduce a run's seen_before marks across its sessions
      --only-app PATTERN, --ignore-app PATTERN, --ignore-category NAME
                           the filters "ancsd run" had (a recording does not hold them):
                           with app filters its requests differ
      -h, --help           show this help

    Warnings on standard error name the line where the session and the capture disagree: a
    write the capture does not have, a recorded write the session did not make, a write left
    unanswered.

    Exit status:
      0  the capture answered everything the session asked
      1  the session and the capture disagreed (each disagreement is a warning)
      2  the file is not a valid capture (the message names the line) or cannot be read, or
         the command line is wrong
    """

    static func run(_ arguments: [String]) -> Int32 {
        var scanner = ArgumentScanner(arguments)
        var path: String? = nil
        var format = OutputFormat.json
        var device: String? = nil
        var replays = ReplayPolicy.unseen
        var stateDirectory: String? = nil
        var filters = RunSettings()
        do {
            while let argument = scanner.next() {
                switch argument {
                case .option("--help", _), .option("-h", _):
                    print(help)
                    return 0
                case .option("--format", let inline):
                    let value = try scanner.value(of: "--format", inline: inline)
                    guard let parsed = OutputFormat(rawValue: value) else { throw UsageError("--format must be text or json, not '\(value)'") }
                    format = parsed
                case .option("--device", let inline):
                    device = try scanner.value(of: "--device", inline: inline)
                case .option("--replays", let inline):
                    let value = try scanner.value(of: "--replays", inline: inline)
                    guard let parsed = ReplayPolicy(rawValue: value) else { throw UsageError("--replays must be all, unseen or none, not '\(value)'") }
                    replays = parsed
                case .option("--state-dir", let inline):
                    stateDirectory = try scanner.value(of: "--state-dir", inline: inline)
                case .option(let name, let inline) where ["--only-app", "--ignore-app", "--ignore-category"].contains(name):
                    let value = try scanner.value(of: name, inline: inline)
                    do { try filters.set(String(name.dropFirst(2)), value) } catch { throw UsageError("--\(error.description)") }
                case .option(let name, _):
                    throw UsageError("unknown option \(name)")
                case .positional(let value):
                    guard path == nil else { throw UsageError("replay takes one file, got a second: \(value)") }
                    path = value
                }
            }
        } catch {
            return usageFailure(error, command: "replay")
        }
        return Replayer.run(
            path: path ?? "-", format: format, device: device, replays: replays, stateDirectory: stateDirectory,
            filter: filters.options.session.filter)
    }
}
