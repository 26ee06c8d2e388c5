public import JSON

/// The file `ancsd capture` writes, without the I/O: takes the frames of the HCI monitor channel
/// as they arrive and returns the bytes to append to the output. Pure.
///
/// Frames of other controllers are left out when `index` is set (frames about no controller
/// too). Each frame kept becomes one record of a datalink-2001 btsnoop file; in `capture`
/// format the records go through `BtsnoopCaptureConverter` and only ANCS traffic is written.
public struct MonitorRecorder: Sendable {
    /// What the output holds.
    public enum Format: Sendable {
        /// A btsnoop file, datalink 2001 (BlueZ monitor), as `btmon -w` writes.
        case btsnoop
        /// An `ancs-capture/1` file; `handles` as `BtsnoopExtractor`'s defaults, `metadata`
        /// as the header's first members after `format`.
        case capture(handles: ANCSHandles, metadata: JSONObject)
    }

    /// Keep only this controller's frames, or every frame when nil.
    public let index: UInt16?
    /// How many frames were kept (records written, in btsnoop format).
    public private(set) var recordCount = 0
    /// How many datagrams were not frames (see `reject`).
    public private(set) var rejectedCount: UInt32 = 0
    private var converter: BtsnoopCaptureConverter?
    private var started = false

    public init(format: Format, index: UInt16? = nil) {
        self.index = index
        if case .capture(let handles, let metadata) = format {
            converter = BtsnoopCaptureConverter(datalink: .monitor, handles: handles, metadata: metadata)
        }
    }

    /// The bytes the file starts with: the btsnoop file header (an `ancs-capture/1` header
    /// comes with the first record, which gives its start time).
    public mutating func start() -> [UInt8] {
        guard !started else { return [] }
        started = true
        return converter == nil ? BtsnoopWriter.fileHeader(.monitor) : []
    }

    /// A frame received at `unixMicroseconds`: the bytes to append (none for a frame left out,
    /// or without ANCS traffic in `capture` format). Throws when the extractor finds the
    /// frame's HCI packet corrupt (`capture` format only); the capture can go on.
    public mutating func record(_ frame: MonitorFrame, unixMicroseconds: Int64) throws(BtsnoopError) -> [UInt8] {
        guard index.map({ $0 == frame.index }) ?? true else { return [] }
        var out = start()
        recordCount += 1
        let record = frame.btsnoopRecord(number: recordCount, timestamp: btsnoopUnixEpoch &+ unixMicroseconds, drops: rejectedCount)
        guard converter != nil else { return out + BtsnoopWriter.record(record) }
        for line in try converter?.lines(for: record) ?? [] { out += Array(line.utf8) + [0x0A] }
        return out
    }

    /// The warnings of the ANCS extraction since the last call (`capture` format: malformed
    /// L2CAP signaling or K-frames); the capture went on past them.
    public mutating func takeWarnings() -> [BtsnoopError] { converter?.takeWarnings() ?? [] }

    /// A datagram that was not a frame: counted, and told by the cumulative drops of the
    /// btsnoop records that follow.
    public mutating func reject() {
        rejectedCount &+= 1
    }

    /// The bytes that end the file: in `capture` format, the header if no frame came, and
    /// Control Point writes still waiting for an answer.
    public mutating func finish() -> [UInt8] {
        var out = start()
        for line in converter?.finish() ?? [] { out += Array(line.utf8) + [0x0A] }
        return out
    }
}
