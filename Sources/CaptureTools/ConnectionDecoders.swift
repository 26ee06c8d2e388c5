import ANCSCapture
import Btsnoop
import JSON

/// One `CaptureDecoder` per connection of a capture, so connections never mix; the objects of a
/// named connection carry `"conn"` first. Objects are written as JSON Lines into a buffer. The
/// Apple Media Service values of a btsnoop file need no decoder: each says all it says alone.
struct ConnectionDecoders {
    /// The name of the position member in protocol errors: "line" or "record".
    let lineKey: String
    private var decoders: [String: CaptureDecoder] = [:]
    private var unnamed = CaptureDecoder()
    private var order: [String] = []

    init(lineKey: String) { self.lineKey = lineKey }

    /// Malformed AMS values.
    private var amsErrorCount = 0

    var protocolErrorCount: Int {
        decoders.values.reduce(unnamed.protocolErrorCount + amsErrorCount) { $0 + $1.protocolErrorCount }
    }

    mutating func decode(_ record: CaptureRecord, connection: String?, position: Int, into out: inout JSONWriter) {
        withDecoder(of: connection) { $0.decode(record, line: position, tag: $1, into: &out) }
    }

    /// Decodes a record of a btsnoop file, at its record: an ANCS value or event as a capture's,
    /// an AMS value alone.
    mutating func decode(_ extracted: ExtractedRecord, connection: String, into out: inout JSONWriter) {
        // A switch on the borrowed parameter: its records are not copied.
        switch extracted.content {
        case .capture(let record):
            decode(record, connection: connection, position: extracted.recordNumber, into: &out)
        case .ams(let value):
            if value.write(connection: connection, position: extracted.recordNumber, positionKey: lineKey, into: &out) { amsErrorCount += 1 }
        }
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
