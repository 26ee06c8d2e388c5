import ANCSCapture
import ANCSRuntime
import Btsnoop
import Dispatch
import JSON

/// The btsnoop side of `ancsd decode`: decoding a btsnoop file's ANCS and Apple Media Service
/// traffic, and turning its ANCS traffic into an `ancs-capture/1` file.
extension DecodePipeline {
    /// The end of a decode written through an `OutputBuffer`, whether the input ended or its
    /// reader failed: the output written, then `exitStatus`.
    private static func end(_ out: OutputBuffer, path: String, failure: (any Error)?, problems: Int) -> Int32 {
        out.flush()
        return exitStatus(path: path, failure: failure, problems: problems)
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
        /// `extractor` is made (a flag: asking the optional costs a call per record).
        var started = false
        var batch: [SnoopItem] = []
        var records: [ExtractedRecord] = []

        init(handles: ANCSHandles, channel: BatchChannel<SnoopItem>) {
            self.handles = handles
            self.channel = channel
        }

        mutating func process(_ record: BtsnoopRecordView) throws(BtsnoopError) {
            if !started {
                extractor = BtsnoopExtractor(datalink: record.datalink, defaultHandles: handles)
                started = true
            }
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
            // A mutating call: reading `hasWarnings` through the optional copied the whole
            // extractor for every record.
            guard let taken = extractor?.takeWarnings(), !taken.isEmpty else { return }
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
    static func decodeBtsnoop(_ reader: LineReader, path: String, handles: ANCSHandles) -> Int32 {
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
                        decoders.decode(extracted, connection: name, into: &writer)
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
    static func convertBtsnoop(_ reader: LineReader, path: String, handles: ANCSHandles) -> Int32 {
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
