// libFuzzer target for the btsnoop reader (make fuzz): files users attach to bug reports, read
// through HCI, L2CAP (ACL fragments, signaling, LE credit-based channels) and ATT to ANCS records
// and Apple Media Service values (notifications, writes and their answers, reads joined from
// their parts), each decoded as `ancsd decode` prints it.
// Byte 0 picks the input: 0xFF, the rest is a whole file; otherwise a file header (datalink 1002
// H4 for an even byte, 2001 BlueZ monitor for an odd one) is put before the rest, so the fuzzer
// spends its time on records. Byte 1 is the size of the chunks the file is read in. Nothing may
// trap; every decoded record must come out as JSON; reading the records in place
// (`withNext`, `process(_:into:)`, as `ancsd decode` does) must give the same records and error
// as copying each out (`next`, `process(_:)`).
import ANCSCapture
import Btsnoop
import JSON

/// The ANCS and AMS handles of the seeds (Benchmarks/decode/make_btsnoop.py, with --ams for
/// AMS), as `--handles` gives them: a file without discovery reaches both.
let handles = ANCSHandles(notificationSource: 0x000C, controlPoint: 0x000F, dataSource: 0x0012,
                          remoteCommand: 0x0020, entityUpdate: 0x0023, entityAttribute: 0x0026)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard input.count >= 2 else { return 0 }
    var file: [UInt8]
    if input[0] == 0xFF {
        file = Array(input[2...])
    } else {
        file = BtsnoopWriter.fileHeader(input[0] % 2 == 0 ? .h4 : .monitor) + input[2...]
    }
    let chunkSize = Int(input[1]) * 64 + 1
    var reader = BtsnoopReader()
    var extractor: BtsnoopExtractor? = nil
    var all: [ExtractedRecord] = []
    var failure: BtsnoopError? = nil
    var decoder = CaptureDecoder()
    var out = JSONWriter()
    var offset = 0
    func decode(_ records: [ExtractedRecord]) {
        all += records
        for extracted in records {
            switch extracted.content {
            case .capture(let record):
                decoder.decode(record, line: extracted.recordNumber, tag: .init(connection: extracted.connection.description, positionKey: "record"), into: &out)
            case .ams(let value):
                let malformed = value.write(connection: extracted.connection.description, position: extracted.recordNumber, into: &out)
                if malformed != value.isMalformed { fatalError("an AMS value written as malformed is not, or the other way") }
            }
        }
    }
    do {
        while true {
            let atEnd = offset >= file.count
            if !atEnd {
                reader.append(file[offset..<min(file.count, offset + chunkSize)])
                offset += chunkSize
            }
            while let record = try reader.next(atEnd: atEnd) {
                if extractor == nil, let datalink = reader.datalink { extractor = BtsnoopExtractor(datalink: datalink, defaultHandles: handles) }
                decode(try extractor?.process(record) ?? [])
                _ = extractor?.takeWarnings()
            }
            if atEnd { break }
        }
    } catch {
        failure = error
    }
    decode(extractor?.finish() ?? [])
    let (inPlace, inPlaceFailure) = extractInPlace(file, chunkSize: chunkSize)
    if inPlace != all || inPlaceFailure != failure { fatalError("reading records in place gives other records or another error") }
    decoder.finish(into: &out)
    for line in out.bytes.split(separator: 0x0A) where (try? JSONValue(parsing: Array(line))) == nil {
        fatalError("a decoded record is not JSON")
    }
    return 0
}

/// The file's records read in place, and the error that stopped them.
func extractInPlace(_ file: [UInt8], chunkSize: Int) -> ([ExtractedRecord], BtsnoopError?) {
    var reader = BtsnoopReader()
    var extractor: BtsnoopExtractor? = nil
    var out: [ExtractedRecord] = []
    var offset = 0
    do {
        while true {
            let atEnd = offset >= file.count
            if !atEnd {
                reader.append(Array(file[offset..<min(file.count, offset + chunkSize)]))
                offset += chunkSize
            }
            while try reader.withNext(atEnd: atEnd, { record throws(BtsnoopError) in
                if extractor == nil { extractor = BtsnoopExtractor(datalink: record.datalink, defaultHandles: handles) }
                try extractor?.process(record, into: &out)
                _ = extractor?.takeWarnings()
            }) {}
            if atEnd { break }
        }
    } catch {
        out += extractor?.finish() ?? []
        return (out, error)
    }
    out += extractor?.finish() ?? []
    return (out, nil)
}
