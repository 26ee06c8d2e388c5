import ANCS

/// Replaces the text inside Data Source attribute tuples with same-length placeholders, so a
/// capture can be shared without the notifications' content. Pure.
///
/// It follows the responses byte by byte across fragments, knowing each request from the Control
/// Point write before it: the command byte, the UID or app identifier, the attribute IDs and
/// lengths are kept, so the capture still decodes; every byte of the values of Title, Subtitle,
/// Message and the action labels becomes `x` (so the byte lengths, and the UTF-8 validity, hold).
/// App identifiers, MessageSize, Date and app display names are kept. Bytes it cannot place (no
/// request known, past the last requested tuple) are all replaced.
public struct DataSourceRedactor: Sendable {
    /// The byte every redacted byte becomes.
    public static let placeholder = UInt8(ascii: "x")
    /// The notification attributes whose values are kept.
    public static let keptNotificationAttributes: Set<UInt8> = [0, 4, 5]

    private enum State: Sendable {
        case unknown
        case command
        case uid(remaining: Int)
        case appIdentifier
        case attributeID
        case lengthLow(redact: Bool)
        case lengthHigh(low: UInt8, redact: Bool)
        case value(remaining: Int, redact: Bool)
    }

    private var state = State.unknown
    private var isApp = false
    private var tuplesLeft = 0

    public init() {}

    /// A value written to the Control Point: the Data Source answers it next.
    public mutating func expect(controlPointWrite bytes: [UInt8]) {
        switch try? ControlPointRequest(decoding: bytes) {
        case .getNotificationAttributes(_, let attributes)?:
            isApp = false
            tuplesLeft = attributes.count
            state = .command
        case .getAppAttributes(_, let attributes)?:
            isApp = true
            tuplesLeft = attributes.count
            state = .command
        default:
            state = .unknown
        }
    }

    /// The phone refused the write: no Data Source data follows it.
    public mutating func writeRefused() { state = .unknown }

    /// One Data Source notification, redacted.
    public mutating func redact(_ bytes: [UInt8]) -> [UInt8] {
        var out = bytes
        for index in out.indices {
            let byte = out[index]
            switch state {
            case .unknown:
                out[index] = Self.placeholder
            case .command:
                state = isApp ? .appIdentifier : .uid(remaining: 4)
            case .uid(let remaining):
                state = remaining > 1 ? .uid(remaining: remaining - 1) : .attributeID
            case .appIdentifier:
                if byte == 0 { state = .attributeID }
            case .attributeID:
                guard tuplesLeft > 0 else {
                    state = .unknown
                    out[index] = Self.placeholder
                    continue
                }
                tuplesLeft -= 1
                state = .lengthLow(redact: !isApp && !Self.keptNotificationAttributes.contains(byte))
            case .lengthLow(let redact):
                state = .lengthHigh(low: byte, redact: redact)
            case .lengthHigh(let low, let redact):
                let length = Int(low) | Int(byte) << 8
                state = length == 0 ? .attributeID : .value(remaining: length, redact: redact)
            case .value(let remaining, let redact):
                if redact { out[index] = Self.placeholder }
                state = remaining > 1 ? .value(remaining: remaining - 1, redact: redact) : .attributeID
            }
        }
        if case .attributeID = state, tuplesLeft == 0 { state = .unknown }
        return out
    }
}
