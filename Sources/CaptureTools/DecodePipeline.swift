import ANCSCapture
import ANCSRuntime
public import Btsnoop
import Dispatch
import JSON
import Synchronization

/// Why reading a capture stopped, as its reader said it.
struct DecodeFailure: Error, Sendable, CustomStringConvertible {
    var description: String
}

/// What `ancsd decode` does: decodes an `ancs-capture/1` file or a btsnoop file and prints one
/// JSON object per line, or (`--to-capture`) turns a btsnoop file into an `ancs-capture/1` file.
/// Reading, decoding and writing each run on a thread of their own.
public enum DecodePipeline {
    /// Decodes the file at `path` ("-": standard input), or with `toCapture` converts a btsnoop
    /// file; prints JSON Lines on standard output and problems on standard error. The exit
    /// status of `ancsd decode`.
    public static func run(path file: String, handles: ANCSHandles, toCapture: Bool) -> Int32 {
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

    /// The exit status of every decode, once its output is written: 2 with the reader's message
    /// on a failure, else 1 if the bytes gave `problems` (protocol errors, warnings), else 0.
    static func exitStatus(path: String, failure: (any Error)?, problems: Int) -> Int32 {
        if let failure {
            logError("\(displayName(path)): \(failure)")
            return 2
        }
        return problems > 0 ? 1 : 0
    }
}
