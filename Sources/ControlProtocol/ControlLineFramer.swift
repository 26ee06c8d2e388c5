/// Cuts a client's byte stream into request lines, as the server reads it: lines end with a
/// newline, empty lines are skipped, a line may come in any number of pieces, and a line
/// longer than `ControlRequest.maxLineLength` ends the stream (`overflowed`). At the end of the
/// stream, a last line without its newline is a request too.
public struct ControlLineFramer: Sendable {
    private var pending: [UInt8] = []
    /// A line grew past the limit: nothing more is read from this client.
    public private(set) var overflowed = false

    public init() {}

    /// The complete lines in `bytes` (with what came before), without their newlines.
    public mutating func feed(_ bytes: some Collection<UInt8>) -> [[UInt8]] {
        guard !overflowed else { return [] }
        var lines: [[UInt8]] = []
        var rest = bytes[...]
        while let newline = rest.firstIndex(of: 0x0A) {
            pending += rest[..<newline]
            rest = rest[rest.index(after: newline)...]
            if pending.count > ControlRequest.maxLineLength {
                overflowed = true
                pending = []
                return lines
            }
            if !pending.isEmpty { lines.append(pending) }
            pending = []
        }
        pending += rest
        if pending.count > ControlRequest.maxLineLength {
            overflowed = true
            pending = []
        }
        return lines
    }

    /// The stream ended: the last line, if one waits without its newline.
    public mutating func finish() -> [UInt8]? {
        defer { pending = [] }
        return overflowed || pending.isEmpty ? nil : pending
    }
}
