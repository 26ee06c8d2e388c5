import Btsnoop
import CaptureTools

/// `ancsd decode`: decodes an `ancs-capture/1` file or a btsnoop file (its ANCS and Apple Media
/// Service traffic) and prints one JSON object per line, or (`--to-capture`) turns a btsnoop
/// file's ANCS traffic into an `ancs-capture/1` file.
enum DecodeCommand {
    static let help = """
    Usage: ancsd decode [--handles ns=H,cp=H,ds=H,rc=H,eu=H,ea=H] [--to-capture] [FILE|-]

    Decodes a capture of ANCS traffic and prints one JSON object per line. FILE is either an
    ancs-capture/1 file (JSON Lines, see docs/capture-format.md) or a btsnoop file (as written
    by "btmon -w" or Android's HCI snoop log: datalinks 2001 BlueZ monitor and 1002 H4),
    recognised by its first bytes. From a btsnoop file the ATT traffic of every LE connection
    is read (ACL fragments reassembled; channel 0x0004 and Enhanced ATT bearers, the LE
    credit-based channels with SPSM 0x0027 opened in the capture), the ANCS and Apple Media
    Service (AMS) handles are found from the capture's own GATT discovery, and each connection
    is decoded on its own: every object then carries "conn":"hci0/0x0040" (controller and
    connection handle).

      ns records      the decoded Notification Source event
                      {"char":"ns","event":"added","event_id":0,"uid":67,"flags":["silent"],...}
      cp records      the decoded Control Point request; it sets the request that the
                      following ds records answer
                      {"char":"cp","command":"get_notification_attributes","uid":20,"attributes":[...]}
      ds records      each reassembled response, when its last requested tuple arrives
                      {"char":"ds","response":"notification_attributes","uid":20,"complete":true,...}
                      A response still open at the next request, at a disconnect or at the
                      end of the capture is printed with "complete":false and its "missing" IDs.
      ams records     from a btsnoop file, each AMS value alone: Remote Command notifications
                      (the commands the player takes) and writes (a command), Entity Update
                      writes (registrations) and notifications (an attribute's value),
                      Entity Attribute writes and reads (a long value's parts joined); a
                      readable "summary" and the value's fields, "att_error" if refused
                      {"service":"ams","char":"eu","characteristic":"Entity Update",
                       "direction":"notification","summary":"Entity Update track.title = ...",
                       "attribute":"title","entity":"track","value":"...",...}
                      A malformed value has "error" and "record" and counts as a protocol
                      error.
      events          {"event":"connected"} / {"event":"disconnected"}
      protocol errors {"char":"ds","error":"uid_mismatch","detail":"...","line":7,"offset":1}
                      ("record":N instead of "line" for btsnoop files); decoding goes on.
      warnings        malformed L2CAP signaling or EATT K-frames in a btsnoop file, on
                      standard error: "warning: record 812: hci0/0x0040: ..."; what they
                      break is dropped and decoding goes on.

    Options:
      --handles ns=H,cp=H,ds=H,rc=H,eu=H,ea=H
                      the value handles (hex with 0x, or decimal; any of them) of ANCS's
                      Notification Source, Control Point, Data Source and AMS's Remote
                      Command, Entity Update, Entity Attribute, for a btsnoop capture that
                      starts after GATT discovery; discovery seen in the capture
                      overrides them for its connection
      --to-capture    print the btsnoop file's ANCS traffic as an ancs-capture/1 file
                      (header, then records with "t", "conn", "char", "hex", "att_error")
                      instead of decoding it: a field capture becomes a test fixture (the
                      format holds ANCS only: AMS traffic is left out)
      -h, --help      show this help

    FILE defaults to standard input; "-" also means standard input.

    Exit status:
      0  every record decoded
      1  the bytes held protocol errors (each printed as an error object) or gave
         warnings, or the file is empty
      2  the file is not a valid capture (bad JSON, bad hex, unknown char: the message
         names the line; a truncated or corrupt btsnoop file or an unknown datalink: the
         message names the record; what was decoded before it stays printed) or cannot be
         read, or the command line is wrong
    """

    static func run(_ arguments: [String]) -> Int32 {
        var scanner = ArgumentScanner(arguments)
        var path: String? = nil
        var handles = ANCSHandles()
        var toCapture = false
        do {
            while let argument = scanner.next() {
                switch argument {
                case .option("--help", _), .option("-h", _):
                    print(help)
                    return 0
                case .option("--handles", let inline):
                    let text = try scanner.value(of: "--handles", inline: inline)
                    guard let parsed = ANCSHandles(parsing: text) else {
                        throw UsageError("--handles needs ns=H,cp=H,ds=H,rc=H,eu=H,ea=H (any of them) with handles such as 0x0010, not '\(text)'")
                    }
                    handles = parsed
                case .option("--to-capture", nil):
                    toCapture = true
                case .option(let name, _):
                    throw UsageError("unknown option \(name)")
                case .positional(let value):
                    guard path == nil else { throw UsageError("decode takes one file, got a second: \(value)") }
                    path = value
                }
            }
            if toCapture && handles.hasAMS {
                throw UsageError("--handles: rc, eu and ea do not apply to --to-capture (an ancs-capture/1 file holds ANCS traffic only)")
            }
        } catch {
            return usageFailure(error, command: "decode")
        }
        return DecodePipeline.run(path: path ?? "-", handles: handles, toCapture: toCapture)
    }
}
