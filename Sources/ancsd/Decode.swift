import ANCSCapture
import JSON

/// `ancsd decode`: decodes an `ancs-capture/1` file and prints one JSON object per line.
enum DecodeCommand {
    static let help = """
    Usage: ancsd decode [FILE|-]

    Decodes a capture of ANCS traffic in the ancs-capture/1 format (JSON Lines, see
    docs/capture-format.md) and prints one JSON object per line:

      ns records      the decoded Notification Source event
                      {"char":"ns","event":"added","event_id":0,"uid":67,"flags":["silent"],...}
      cp records      the decoded Control Point request; it sets the request that the
                      following ds records answer
                      {"char":"cp","command":"get_notification_attributes","uid":20,"attributes":[...]}
      ds records      each reassembled response, when its last requested tuple arrives
                      {"char":"ds","response":"notification_attributes","uid":20,"complete":true,...}
                      A response still open at the next request, at a disconnect or at the
                      end of the capture is printed with "complete":false and its "missing" IDs.
      events          {"event":"connected"} / {"event":"disconnected"}
      protocol errors {"char":"ds","error":"uid_mismatch","detail":"...","line":7,"offset":1}
                      decoding goes on with the next record.

    FILE defaults to standard input; "-" also means standard input.

    Exit status:
      0  every record decoded
      1  the bytes held protocol errors (each printed as an error object)
      2  the file is not a valid capture (bad JSON, bad hex, unknown char: the message
         names the line; what was decoded before it stays printed) or cannot be read,
         or the command line is wrong
    """

    static func run(_ arguments: [String]) -> Int32 {
        var scanner = ArgumentScanner(arguments)
        var path: String? = nil
        do {
            while let argument = scanner.next() {
                switch argument {
                case .option("--help", _), .option("-h", _):
                    print(help)
                    return 0
                case .option(let name, _):
                    throw UsageError("unknown option \(name)")
                case .positional(let value):
                    guard path == nil else { throw UsageError("decode takes one file, got a second: \(value)") }
                    path = value
                }
            }
        } catch {
            return usageFailure(error, command: "decode")
        }
        return decode(path: path ?? "-")
    }

    private static func decode(path: String) -> Int32 {
        var parser = CaptureParser()
        var decoder = CaptureDecoder()
        var lineNumber = 0
        do {
            let reader = try LineReader(path: path)
            while let line = try reader.nextLine() {
                lineNumber += 1
                guard let record = try parser.parse(line: line) else { continue }
                emit(decoder.decode(record, line: lineNumber))
            }
        } catch let error as CaptureFormatError {
            emit(decoder.finish())
            logError("\(displayName(path)): \(error)")
            return 2
        } catch {
            emit(decoder.finish())
            logError("\(displayName(path)): \(error)")
            return 2
        }
        emit(decoder.finish())
        return decoder.protocolErrorCount > 0 ? 1 : 0
    }

    private static func displayName(_ path: String) -> String { path == "-" ? "standard input" : path }

    private static func emit(_ values: [JSONValue]) {
        for value in values { print(value.serialized) }
    }
}
