import ANCSCapture
import Btsnoop
import Dispatch
import JSON
import Synchronization

/// Why reading a capture stopped, as its reader said it.
private struct DecodeFailure: Error, Sendable, CustomStringConvertible {
    var description: String
}

/// `ancsd decode`: decodes an `ancs-capture/1` file or a btsnoop file and prints one JSON object
/// per line, or (`--to-capture`) turns a btsnoop file into an `ancs-capture/1` file.
enum DecodeCommand {
    static let help = """
    Usage: ancsd decode [--handles ns=H,cp=H,ds=H] [--to-capture] [FILE|-]

    Decodes a capture of ANCS traffic and prints one JSON object per line. FILE is either an
    ancs-capture/1 file (JSON Lines, see docs/capture-format.md) or a btsnoop file (as written
    by "btmon -w" or Android's HCI snoop log: datalinks 2001 BlueZ monitor and 1002 H4),
    recognised by its first bytes. From a btsnoop file the ATT traffic of every LE connection
    is read (ACL fragments reassembled; channel 0x0004 and Enhanced ATT bearers, the LE
    credit-based channels with SPSM 0x0027 opened in the capture), the ANCS handles are found
    from the capture's own GATT discovery, and each connection is decoded on its own: every
    object then carries "conn":"hci0/0x0040" (controller and connection handle).

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
                      ("record":N instead of "line" for btsnoop files); decoding goes on.
      warnings        malformed L2CAP signaling or EATT K-frames in a btsnoop file, on
                      standard error: "warning: record 812: hci0/0x0040: ..."; what they
                      break is dropped and decoding goes on.

    Options:
      --handles ns=H,cp=H,ds=H  the ANCS value handles (hex with 0x, or decimal), for a btsnoop
                      capture that starts after GATT discovery; discovery seen in the
                      capture overrides them for its connection
      --to-capture    print the btsnoop file's ANCS traffic as an ancs-capture/1 file
                      (header, then records with "t", "conn", "char", "hex", "att_error")
                      instead of decoding it: a field capture becomes a test fixture
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
                        throw UsageError("--handles needs ns=H,cp=H,ds=H with handles such as 0x0010, not '\(text)'")
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
        } catch {
            return usageFailure(error, command: "decode")
        }
        let file = path ?? "-"
        let reader: LineReader
        let prefix: [UInt8]
        do {
            reader = try LineReader(path: file)
            prefix = try reader.peek(8)
        } catch {
            logError("\(displayName(file)): \(error)")
            return 2
        }
        if prefix.isEmpty {
            // Nothing at all (a capture that never started, the wrong file): say so.
            logError("\(displayName(file)): empty: no records to decode")
            return 1
        }
        if BtsnoopReader.looksLikeBtsnoop(prefix) {
            return toCapture ? convertBtsnoop(reader, path: file, handles: handles) : decodeBtsnoop(reader, path: file, handles: handles)
        }
        if toCapture || handles != ANCSHandles() {
            logError("\(displayName(file)): \(toCapture ? "--to-capture" : "--handles") applies only to btsnoop files")
            return 2
        }
        return decodeCapture(reader, path: file)
    }

    /// How many records the reading thread of a capture decode parses before it hands them over.
    static let batchRecords = 2048
    /// ... or how many bytes of values, whichever comes first.
    static let batchBytes = 1 << 18
    /// The room a new batch starts with for values (below malloc's mmap threshold).
    static let batchReserve = 1 << 16

    /// Reads and parses the file on another thread (`CaptureStage`), handing the records over
    /// in batches, while this one decodes them and makes the JSON, which a third writes out
    /// (`BackgroundWriter`). The batches' storage goes back to the reading thread to be filled
    /// again, so no side allocates per record.
    private static func decodeCapture(_ reader: LineReader, path: String) -> Int32 {
        let output = BackgroundWriter()
        let channel = BatchChannel<CaptureRecordBatch>(depth: 4)
        let spent = SpentBatches<CaptureRecordBatch>()
        let handoff = Handoff(value: reader)
        DispatchQueue.global().async {
            var stage = CaptureStage(channel: channel, spent: spent)
            var lineNumber = 0
            do {
                try handoff.value.forEachLine { line throws(CaptureFormatError) in
                    lineNumber += 1
                    try stage.batch.append(line: line, number: lineNumber, parser: &stage.parser)
                    if stage.batch.count >= batchRecords || stage.batch.byteCount >= batchBytes { stage.send() }
                }
                stage.send()
                channel.finish()
            } catch {
                stage.send()
                channel.finish(throwing: DecodeFailure(description: "\(error)"))
            }
        }
        var decoders = ConnectionDecoders(lineKey: "line")
        var writer = output.makeWriter()
        var failure: (any Error)? = nil
        do {
            while var batches = try channel.receive() {
                batches.reverse()
                while let batch = batches.popLast() {  // moved out, so the reading thread gets it back unshared
                    batch.forEach { record in
                        decoders.decode(record, into: &writer)
                        output.lineEnded(&writer)
                    }
                    spent.give(consume batch)
                }
            }
        } catch {
            failure = error
        }
        decoders.finish(into: &writer)  // the responses still open
        output.finish(&writer)
        return exitStatus(path: path, failure: failure, problems: decoders.protocolErrorCount)
    }

    /// The reading thread's side of a capture decode: parses lines into a batch and hands it
    /// over. (A value of its own rather than variables the reading closure captures, so its
    /// accesses are checked when compiled.)
    private struct CaptureStage {
        let channel: BatchChannel<CaptureRecordBatch>
        let spent: SpentBatches<CaptureRecordBatch>
        var parser = CaptureParser()
        var batch = CaptureRecordBatch(reservingRecords: batchRecords, bytes: batchReserve)

        init(channel: BatchChannel<CaptureRecordBatch>, spent: SpentBatches<CaptureRecordBatch>) {
            self.channel = channel
            self.spent = spent
        }

        /// Hands the batch over (if it holds records) and takes an empty one to fill next.
        mutating func send() {
            guard !batch.isEmpty else { return }
            var next = spent.take() ?? CaptureRecordBatch(reservingRecords: batchRecords, bytes: batchReserve)
            next.removeAll()  // keeps its storage
            swap(&next, &batch)
            channel.send([next])
        }
    }

    /// The end of a decode written through an `OutputBuffer`, whether the input ended or its
    /// reader failed: the output written, then `exitStatus`.
    private static func end(_ out: OutputBuffer, path: String, failure: (any Error)?, problems: Int) -> Int32 {
        out.flush()
        return exitStatus(path: path, failure: failure, problems: problems)
    }

    /// The exit status of every decode, once its output is written: 2 with the reader's message
    /// on a failure, else 1 if the bytes gave `problems` (protocol errors, warnings), else 0.
    private static func exitStatus(path: String, failure: (any Error)?, problems: Int) -> Int32 {
        if let failure {
            logError("\(displayName(path)): \(failure)")
            return 2
        }
        return problems > 0 ? 1 : 0
    }

    /// What the reading thread of a btsnoop decode hands over, in file order.
    private enum SnoopItem: Sendable {
        case records([ExtractedRecord])
        /// Warnings to print, and how many the file gave so far.
        case warnings([BtsnoopError], total: Int)
    }

    /// The reading thread's side of a btsnoop decode: extracts the records and hands them over
    /// in batches, with the warnings in their place. (A value of its own rather than variables
    /// the reading closure captures, so its accesses are checked when compiled, not at run time.)
    private struct SnoopBatcher {
        let handles: ANCSHandles
        let channel: BatchChannel<SnoopItem>
        var extractor: BtsnoopExtractor? = nil
        var batch: [SnoopItem] = []
        var records: [ExtractedRecord] = []

        init(handles: ANCSHandles, channel: BatchChannel<SnoopItem>) {
            self.handles = handles
            self.channel = channel
        }

        mutating func process(_ record: BtsnoopRecordView) throws(BtsnoopError) {
            if extractor == nil { extractor = BtsnoopExtractor(datalink: record.datalink, defaultHandles: handles) }
            try extractor?.process(record, into: &records)
            warn()
        }

        mutating func flushRecords() {
            if !records.isEmpty { batch.append(.records(records)) }
            records.removeAll(keepingCapacity: true)
        }

        mutating func send() {
            flushRecords()
            if !batch.isEmpty { channel.send(batch) }
            batch.removeAll(keepingCapacity: true)
        }

        mutating func warn() {
            guard extractor?.hasWarnings == true, let taken = extractor?.takeWarnings(), !taken.isEmpty else { return }
            flushRecords()
            batch.append(.warnings(taken, total: extractor?.warningCount ?? 0))
        }

        /// The end of the file (or of what could be read): writes still waiting are given
        /// without an answer, and the stream ends.
        mutating func finish(throwing error: (any Error & Sendable)?) {
            records += extractor?.finish() ?? []
            send()
            channel.finish(throwing: error)
        }
    }

    /// Decodes a btsnoop file: reading, HCI/L2CAP/ATT extraction on another thread, in batches;
    /// decoding and writing on this one.
    private static func decodeBtsnoop(_ reader: LineReader, path: String, handles: ANCSHandles) -> Int32 {
        let out = OutputBuffer()
        var decoders = ConnectionDecoders(lineKey: "record")
        var names: [ConnectionKey: String] = [:]  // "hci0/0x0040", made once per connection
        var last: (key: ConnectionKey, name: String)? = nil  // records come in runs of one connection
        var warnings = 0
        let channel = BatchChannel<SnoopItem>(depth: 8)
        let handoff = Handoff(value: reader)
        DispatchQueue.global().async {
            var snoop = BtsnoopReader()
            var batcher = SnoopBatcher(handles: handles, channel: channel)
            do {
                var atEnd = false
                while !atEnd {
                    let chunk = try handoff.value.nextChunk()
                    if let chunk { snoop.append(chunk) } else { atEnd = true }
                    // Each record read in place: one that completes nothing costs no allocation.
                    while try snoop.withNext(atEnd: atEnd, { record throws(BtsnoopError) in try batcher.process(record) }) {}
                    batcher.send()
                }
                batcher.finish(throwing: nil)
            } catch {
                batcher.warn()
                batcher.finish(throwing: DecodeFailure(description: "\(error)"))
            }
        }
        func consume(_ item: SnoopItem) {
            switch item {
            case .records(let records):
                out.append { writer in
                    for extracted in records {
                        let key = extracted.connection
                        let name: String
                        if let last, last.key == key {
                            name = last.name
                        } else {
                            name = names[key] ?? key.description
                            names[key] = name
                            last = (key, name)
                        }
                        decoders.decode(extracted.record, connection: name, position: extracted.recordNumber, into: &writer)
                    }
                }
            case .warnings(let taken, let total):
                out.flush()
                for warning in taken { logError("\(displayName(path)): warning: \(warning)") }
                warnings = total
            }
        }
        var failure: (any Error)? = nil
        do {
            while let batch = try channel.receive() { batch.forEach(consume) }
        } catch {
            failure = error
        }
        out.append { decoders.finish(into: &$0) }  // the responses still open
        return end(out, path: path, failure: failure, problems: decoders.protocolErrorCount + warnings)
    }

    /// Turns a btsnoop file into an `ancs-capture/1` file (`--to-capture`).
    private static func convertBtsnoop(_ reader: LineReader, path: String, handles: ANCSHandles) -> Int32 {
        let out = OutputBuffer()
        var snoop = BtsnoopReader()
        var converter: BtsnoopCaptureConverter? = nil  // once the file header gave the datalink
        var warnings = 0

        func begin() {
            guard converter == nil, let datalink = snoop.datalink else { return }
            let metadata: JSONObject = ["source": "btsnoop", "file": .string(displayName(path))]
            converter = BtsnoopCaptureConverter(datalink: datalink, handles: handles, metadata: metadata)
        }
        func warn() {
            let taken = converter?.takeWarnings() ?? []
            if !taken.isEmpty { out.flush() }
            for warning in taken {
                logError("\(displayName(path)): warning: \(warning)")
            }
            warnings = converter?.warningCount ?? 0
        }
        func finish() {
            for line in converter?.finish() ?? [] { out.line(line) }
            out.flush()
        }

        do {
            var atEnd = false
            while !atEnd {
                let chunk = try reader.nextChunk()
                if let chunk { snoop.append(chunk) } else { atEnd = true }
                while let record = try snoop.next(atEnd: atEnd) {
                    begin()
                    for line in try converter?.lines(for: record) ?? [] { out.line(line) }
                    warn()
                }
            }
            begin()
        } catch {
            warn()
            finish()
            logError("\(displayName(path)): \(error)")
            return 2
        }
        finish()
        return warnings > 0 ? 1 : 0
    }
}

/// One `CaptureDecoder` per connection of a capture, so connections never mix; the objects of a
/// named connection carry `"conn"` first. Objects are written as JSON Lines into a buffer.
struct ConnectionDecoders {
    /// The name of the position member in protocol errors: "line" or "record".
    let lineKey: String
    private var decoders: [String: CaptureDecoder] = [:]
    private var unnamed = CaptureDecoder()
    private var order: [String] = []

    init(lineKey: String) { self.lineKey = lineKey }

    var protocolErrorCount: Int { decoders.values.reduce(unnamed.protocolErrorCount) { $0 + $1.protocolErrorCount } }

    mutating func decode(_ record: CaptureRecord, connection: String?, position: Int, into out: inout JSONWriter) {
        withDecoder(of: connection) { $0.decode(record, line: position, tag: $1, into: &out) }
    }

    /// Decodes a record of a batch, at its own line.
    mutating func decode(_ record: CaptureRecordView, into out: inout JSONWriter) {
        withDecoder(of: record.connection) { $0.decode(record, line: record.line, tag: $1, into: &out) }
    }

    /// Runs `body` on the decoder of `connection` (made at its first record) with its tag.
    private mutating func withDecoder(of connection: String?, _ body: (inout CaptureDecoder, CaptureDecoder.Tag) -> Void) {
        let tag = CaptureDecoder.Tag(connection: connection, positionKey: lineKey)
        guard let connection else { return body(&unnamed, tag) }
        if let index = decoders.index(forKey: connection) {
            body(&decoders.values[index], tag)  // in place, one lookup
            return
        }
        var decoder = CaptureDecoder()
        body(&decoder, tag)
        decoders[connection] = decoder
        order.append(connection)
    }

    /// Ends every connection's decoding, appending the responses still open.
    mutating func finish(into out: inout JSONWriter) {
        unnamed.finish(tag: CaptureDecoder.Tag(positionKey: lineKey), into: &out)
        for connection in order {
            decoders[connection]?.finish(tag: CaptureDecoder.Tag(connection: connection, positionKey: lineKey), into: &out)
        }
    }
}
