// libFuzzer target for the ancs-capture/1 reader (make fuzz): files users attach to bug reports.
// The input is a capture file. Each line goes through both CaptureParser paths, the plain one
// (`parseRecord(line:)`, bytes read in place) and the general one (`parseEntry(line:)`, a full
// JSON parse), and through `CaptureRecordBatch` (what `ancsd decode` reads with), which must all
// agree on every record and every error; the records then go through CaptureDecoder, whose
// every output line must be JSON and equal the JSONValue it reports, and a decoder fed the
// batch's records must write the same bytes.
import ANCS
import ANCSCapture
import JSON

func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    var plain = CaptureParser()
    var general = CaptureParser()
    var decoder = CaptureDecoder(limits: DataSourceLimits(maxAttributeLength: 64, maxResponseLength: 512))
    var twin = decoder
    var batched = decoder
    var batchParser = CaptureParser()
    var batch = CaptureRecordBatch()
    var lineNumber = 0
    for line in input.split(separator: 0x0A, omittingEmptySubsequences: false) {
        lineNumber += 1
        let bytes = Array(line)
        let fast: Result<(record: CaptureRecord, connection: String?)?, CaptureFormatError> = bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(CaptureFormatError) in try plain.parseRecord(line: buffer) }
        }
        let slow: Result<CaptureEntry?, CaptureFormatError> = Result { () throws(CaptureFormatError) in try general.parseEntry(line: bytes) }
        batch.removeAll()
        let inBatch: Result<Void, CaptureFormatError> = bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(CaptureFormatError) in try batch.append(line: buffer, number: lineNumber, parser: &batchParser) }
        }
        switch (inBatch, slow) {
        case (.success, .success(let entry)):
            check(batch.count == (entry == nil ? 0 : 1), "line \(lineNumber): the batch holds another number of records")
            batch.forEach { view in
                if case .header = entry?.record {} else { check(view.record == entry?.record, "line \(lineNumber): the batch read another record") }
                check(view.connection == entry?.connection && view.line == lineNumber, "line \(lineNumber): the batch read another conn")
            }
        case (.failure(let a), .failure(let b)):
            check(a == b, "line \(lineNumber): the batch gave another error: \(a) / \(b)")
        default:
            fatalError("line \(lineNumber): the batch and the general parser disagree: \(inBatch) / \(slow)")
        }
        switch (fast, slow) {
        case (.success(let a?), .success(let b?)):
            check(a.record == b.record && a.connection == b.connection, "line \(lineNumber): the paths read different records")
            var out = JSONWriter()
            decoder.decode(a.record, line: lineNumber, tag: .init(connection: a.connection), into: &out)
            var viaBatch = JSONWriter()
            batch.forEach { batched.decode($0, line: lineNumber, tag: .init(connection: $0.connection), into: &viaBatch) }
            check(viaBatch.bytes == out.bytes, "line \(lineNumber): decoding the batch wrote other bytes")
            let values = twin.decode(a.record, line: lineNumber)
            let lines = out.bytes.split(separator: 0x0A)
            check(lines.count == values.count, "line \(lineNumber): written and JSONValue outputs differ in count")
            for (text, value) in zip(lines, values) {
                let parsed = try? JSONValue(parsing: Array(text))
                check(parsed != nil, "line \(lineNumber): the decoder wrote something that is not JSON")
                if a.connection == nil { check(parsed == value, "line \(lineNumber): written and JSONValue outputs differ") }
            }
        case (.success(nil), .success(nil)):
            break
        case (.failure(let a), .failure(let b)):
            check(a == b, "line \(lineNumber): different errors: \(a) / \(b)")
        default:
            fatalError("line \(lineNumber): the paths disagree: \(fast) / \(slow)")
        }
    }
    var out = JSONWriter()
    decoder.finish(into: &out)
    check(out.bytes.split(separator: 0x0A).count == twin.finish().count, "finish differs")
    return 0
}
