public import Btsnoop

/// What `ancsd capture` records, where to and until when.
public struct CaptureOptions: Sendable {
    /// What the output holds.
    public enum Format: String, Sendable {
        /// A btsnoop file, datalink 2001.
        case btsnoop
        /// The ANCS traffic as an ancs-capture/1 file.
        case capture
    }

    /// The file to write, "-" for standard output.
    public var output = "-"
    /// What the output holds.
    public var format = Format.btsnoop
    /// The one controller kept (hciN), nil for all.
    public var index: UInt16? = nil
    /// Stop after this many seconds.
    public var duration: Double? = nil
    /// Stop after this many frames kept.
    public var count: Int? = nil
    /// The ANCS handles of connections whose GATT discovery the capture does not see.
    public var handles = ANCSHandles()

    public init() {}
}
