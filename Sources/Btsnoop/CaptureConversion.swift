import ANCSCapture
public import JSON

/// Turns the records of a btsnoop file into the lines of an `ancs-capture/1` file: the header,
/// then one line per ANCS record the `BtsnoopExtractor` finds (with `conn`, and `peer` on
/// `connected` events). What `ancsd decode --to-capture` prints and `ancsd capture --format
/// capture` writes. The format holds ANCS only: the extractor's AMS values are left out. Pure.
public struct BtsnoopCaptureConverter: Sendable {
    private var extractor: BtsnoopExtractor
    private let metadata: JSONObject
    private var headerWritten = false

    /// `metadata` are the header's members after `format` (such as `source`); `datalink`,
    /// `start` (the first record's time) and `handles` (when given) follow them.
    public init(datalink: BtsnoopDatalink, handles: ANCSHandles = ANCSHandles(), metadata: JSONObject = [:]) {
        extractor = BtsnoopExtractor(datalink: datalink, defaultHandles: handles)
        self.metadata = metadata
    }

    /// The lines a record completes, the header first if it was not written yet. Throws on a
    /// record the extractor finds corrupt; what it held back stays for later lines.
    public mutating func lines(for record: BtsnoopRecord) throws(BtsnoopError) -> [String] {
        let extracted = try extractor.process(record)
        return header(start: record.timestamp) + extracted.compactMap(Self.line)
    }

    /// The warnings since the last call (malformed L2CAP signaling or K-frames): the
    /// conversion went on past them.
    public mutating func takeWarnings() -> [BtsnoopError] { extractor.takeWarnings() }

    /// How many warnings the file gave so far.
    public var warningCount: Int { extractor.warningCount }

    /// The end of the file: the header if no record came, and Control Point writes still
    /// waiting for an answer.
    public mutating func finish() -> [String] {
        header(start: extractor.firstTimestamp) + extractor.finish().compactMap(Self.line)
    }

    private mutating func header(start: Int64?) -> [String] {
        guard !headerWritten else { return [] }
        headerWritten = true
        var header: JSONObject = ["format": .string(CaptureParser.formatName)]
        for member in metadata { header.append(member.key, member.value) }
        header.append("datalink", .string(extractor.datalink.name))
        if let start { header.append("start", .string(iso8601UTC(unixMicroseconds: start &- btsnoopUnixEpoch))) }
        if extractor.defaultHandles != ANCSHandles() { header.append("handles", .string(extractor.defaultHandles.description)) }
        return [JSONValue.object(header).serialized]
    }

    /// The line of an ANCS record or a connection event; nil for an AMS value.
    private static func line(_ extracted: ExtractedRecord) -> String? {
        guard let record = extracted.record else { return nil }
        let extra: JSONObject = extracted.peer.map { ["peer": .string($0)] } ?? [:]
        return CaptureWriter.line(for: record, connection: extracted.connection.description, extra: extra)
    }
}
