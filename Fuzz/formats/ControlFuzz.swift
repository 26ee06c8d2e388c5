// libFuzzer target for the control socket's input path (make fuzz FUZZ_TARGETS=control): the
// bytes a client sends, cut into lines by `ControlLineFramer` in pieces as the server reads
// them, each line parsed by `ControlRequest.parse` as the server does before it dispatches
// (the daemon's dispatcher switches over every `ControlCommand`, so a parsed request is always
// dispatched). Byte 0 sets the piece size (1 + b % 64; 0xFF: one piece). Traps when:
// - the lines depend on how the stream was cut into pieces;
// - a parsed request, written as a client would (`json`), does not parse back to itself;
// - a refusal has a code the parser must not give (only bad_request, unknown_command, too_long),
//   loses a readable `id`, or its reply is not a JSON object with "ok": false that parses back;
// - a line read as a client reads the daemon's (`ControlIncoming`, answering the command byte 0
//   picks) that reads as a reply or an event does not read back as itself once written
//   (`json`). (A line of another version of ancsd reads as `unreadable`, never a trap.)
import ControlProtocol
import JSON

func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard let first = input.first else { return 0 }
    let stream = input.dropFirst()
    let piece = first == 0xFF ? max(1, stream.count) : 1 + Int(first % 64)

    var whole = ControlLineFramer()
    var wholeLines = whole.feed(stream)
    if let last = whole.finish() { wholeLines.append(last) }

    var framer = ControlLineFramer()
    var lines: [[UInt8]] = []
    var rest = stream[...]
    while !rest.isEmpty {
        lines += framer.feed(rest.prefix(piece))
        rest = rest.dropFirst(piece)
    }
    if let last = framer.finish() { lines.append(last) }
    check(lines == wholeLines && framer.overflowed == whole.overflowed, "the lines depend on the pieces")

    let commands: [ControlCommand?] = [
        .status, .list(device: nil), .get(device: BluetoothAddressText("AA:BB:CC:DD:EE:01")!, uid: 1, full: false),
        .action(device: BluetoothAddressText("AA:BB:CC:DD:EE:01")!, uid: 1, action: .positive), .subscribe, nil,
    ]
    let answering = commands[Int(first) % commands.count]
    for line in lines {
        checkIncoming(line, answering: answering)
        check(!line.isEmpty && !line.contains(0x0A) && line.count <= ControlRequest.maxLineLength, "a line the server would not read")
        switch ControlRequest.parse(line: line) {
        case .success(let request):
            check(ControlCommand.names.contains(request.json["cmd"]?.stringValue ?? ""), "an unnamed command")
            let text = Array(JSONValue.object(request.json).serialized.utf8)
            guard case .success(let again) = ControlRequest.parse(line: text) else { fatalError("a request does not parse back") }
            check(again == request, "a request written and parsed again changed")
        case .failure(let error):
            check([.badRequest, .unknownCommand, .tooLong].contains(error.code), "the parser gave \(error.code)")
            let object = (try? JSONValue(parsing: line))?.objectValue
            check(error.requestID == object?["id"], "the refusal lost the request's id")
            let reply = JSONValue.object(error.reply).serialized
            guard let read = (try? JSONValue(parsing: reply))?.objectValue else { fatalError("a refusal that is not JSON: \(reply)") }
            check(read["ok"] == .bool(false) && read["error"]?["code"]?.stringValue == error.code.rawValue, "a refusal's shape: \(reply)")
        }
    }
    return 0
}

/// A line read as a client reads it: a reply or event written back reads as itself.
func checkIncoming(_ line: [UInt8], answering command: ControlCommand?) {
    let read = ControlIncoming(line: line) { _ in command }
    let written: JSONObject
    switch read {
    case .reply(let reply): written = reply.json
    case .event(let event): written = event.json
    case .unreadable: return
    }
    let again = ControlIncoming(line: Array(JSONValue.object(written).serialized.utf8)) { _ in command }
    check(again == read, "read, written and read again changed: \(read) → \(again)")
}
