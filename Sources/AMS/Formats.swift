// The byte layouts of AMS's three characteristics, and the text forms of the attribute values.
// Every decoder takes any bytes: what does not fit is a typed error or nil, never a trap.

/// A value decoded leniently as UTF-8: invalid sequences become U+FFFD and `wasRepaired` says so.
public struct AMSText: Hashable, Sendable, CustomStringConvertible {
    /// The bytes exactly as the phone sent them.
    public let raw: [UInt8]
    /// The decoded text.
    public let string: String
    /// True if the bytes were not valid UTF-8 and had to be repaired.
    public let wasRepaired: Bool

    public init(_ raw: [UInt8]) {
        self.raw = raw
        if let valid = String(validating: raw, as: UTF8.self) {
            string = valid
            wasRepaired = false
        } else {
            string = String(decoding: raw, as: UTF8.self)
            wasRepaired = true
        }
    }

    public var description: String { string }
}

/// Why an AMS value could not be decoded.
public enum AMSFormatError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The value was shorter than its fixed part: `length` bytes, `needed` at least.
    case tooShort(length: Int, needed: Int)
    /// The value was longer than its layout allows: `length` bytes, `allowed` at most.
    case tooLong(length: Int, allowed: Int)

    /// A stable snake_case code for machine-readable output.
    public var code: String {
        switch self {
        case .tooShort: "too_short"
        case .tooLong: "too_long"
        }
    }

    public var description: String {
        switch self {
        case .tooShort(let length, let needed): "\(length) bytes, at least \(needed) expected"
        case .tooLong(let length, let allowed): "\(length) bytes, at most \(allowed) expected"
        }
    }
}

/// One Entity Update notification: `[EntityID][AttributeID][EntityUpdateFlags][value…]`, the
/// value UTF-8 without a terminating NUL. Unknown ids and reserved flags are kept as they came.
public struct EntityUpdate: Hashable, Sendable {
    /// The size of the fixed part before the value.
    public static let headerSize = 3

    public var attribute: EntityAttribute
    public var flags: EntityUpdateFlags
    /// The value's bytes, as sent.
    public var value: [UInt8]

    public init(attribute: EntityAttribute, flags: EntityUpdateFlags = [], value: [UInt8]) {
        self.attribute = attribute
        self.flags = flags
        self.value = value
    }

    /// An update whose value is `text`.
    public init(attribute: EntityAttribute, flags: EntityUpdateFlags = [], text: String) {
        self.init(attribute: attribute, flags: flags, value: Array(text.utf8))
    }

    /// Decodes a notification of the Entity Update characteristic (3 bytes at least).
    public init(decoding bytes: [UInt8]) throws(AMSFormatError) {
        guard bytes.count >= Self.headerSize else { throw .tooShort(length: bytes.count, needed: Self.headerSize) }
        attribute = EntityAttribute(entity: EntityID(rawValue: bytes[0]), attribute: bytes[1])
        flags = EntityUpdateFlags(rawValue: bytes[2])
        value = Array(bytes[Self.headerSize...])
    }

    /// The value as text (repaired if it is not UTF-8).
    public var text: AMSText { AMSText(value) }

    /// True if the phone cut the value to fit the MTU.
    public var isTruncated: Bool { flags.contains(.truncated) }

    /// The bytes of this notification as the phone sends them.
    public var encoded: [UInt8] { [attribute.entity.rawValue, attribute.attribute, flags.rawValue] + value }
}

/// A registration written to Entity Update: one entity and the attributes whose updates the
/// client wants, `[EntityID][AttributeID…]`.
public struct EntityRegistration: Hashable, Sendable {
    public var entity: EntityID
    /// The attribute ids, in the order written.
    public var attributes: [UInt8]

    public init(entity: EntityID, attributes: [UInt8]) {
        self.entity = entity
        self.attributes = attributes
    }

    /// The registration for every attribute the specification defines for `entity`.
    public init(allOf entity: EntityID) {
        self.init(entity: entity, attributes: entity.definedAttributes.map(\.attribute))
    }

    /// The three registrations a client makes, in the order it makes them: Player, Queue, Track.
    public static let standard: [EntityRegistration] = [.init(allOf: .player), .init(allOf: .queue), .init(allOf: .track)]

    /// Decodes a value written to Entity Update (an entity and at least one attribute).
    public init(decoding bytes: [UInt8]) throws(AMSFormatError) {
        guard bytes.count >= 2 else { throw .tooShort(length: bytes.count, needed: 2) }
        entity = EntityID(rawValue: bytes[0])
        attributes = Array(bytes[1...])
    }

    /// The bytes to write.
    public var encoded: [UInt8] { [entity.rawValue] + attributes }
}

/// The value written to Entity Attribute to choose the attribute its next read returns:
/// `[EntityID][AttributeID]`.
public struct EntityAttributeRequest: Hashable, Sendable {
    public var attribute: EntityAttribute

    public init(_ attribute: EntityAttribute) { self.attribute = attribute }

    /// Decodes a value written to Entity Attribute (exactly 2 bytes).
    public init(decoding bytes: [UInt8]) throws(AMSFormatError) {
        guard bytes.count >= 2 else { throw .tooShort(length: bytes.count, needed: 2) }
        guard bytes.count == 2 else { throw .tooLong(length: bytes.count, allowed: 2) }
        attribute = EntityAttribute(entity: EntityID(rawValue: bytes[0]), attribute: bytes[1])
    }

    /// The bytes to write.
    public var encoded: [UInt8] { [attribute.entity.rawValue, attribute.attribute] }
}

/// The Remote Command characteristic's notification: the commands the player supports now,
/// one byte each (any length, empty too). Order kept, repeats dropped, unknown ids kept.
public func decodeSupportedCommands(_ bytes: [UInt8]) -> [RemoteCommand] {
    var seen = Set<UInt8>()
    var commands: [RemoteCommand] = []
    for byte in bytes where seen.insert(byte).inserted { commands.append(RemoteCommand(rawValue: byte)) }
    return commands
}

/// The Remote Command characteristic's notification for `commands`.
public func encodeSupportedCommands(_ commands: [RemoteCommand]) -> [UInt8] { commands.map(\.rawValue) }

extension RemoteCommand {
    /// The byte written to Remote Command to send this command.
    public var encoded: [UInt8] { [rawValue] }

    /// Decodes a value written to Remote Command (exactly 1 byte).
    public init(decoding bytes: [UInt8]) throws(AMSFormatError) {
        guard let first = bytes.first else { throw .tooShort(length: 0, needed: 1) }
        guard bytes.count == 1 else { throw .tooLong(length: bytes.count, allowed: 1) }
        self.init(rawValue: first)
    }
}

// MARK: Attribute values

/// The largest rate, elapsed time or duration (in magnitude) that is a number: 1e9 (seconds: 31
/// years; a rate of a billion). Past it, or not finite, the value is unknown (nil), so every
/// output says the same of it (null in JSON, MQTT and `ancsd media`, no clock in text) instead
/// of one clamping it and another overflowing. No player comes near it, and below it the
/// milliseconds of JSON and the microseconds of MPRIS stay exact.
public let largestMediaNumber = 1e9

/// `value` when it is a number ancsd shows (finite, at most `largestMediaNumber` in magnitude), else nil.
public func mediaNumber(_ value: Double?) -> Double? {
    guard let value, value.isFinite, abs(value) <= largestMediaNumber else { return nil }
    return value
}

/// Player's PlaybackInfo: "PlaybackState,PlaybackRate,ElapsedTime" (e.g. "1,1.0,12.345"). Any
/// part may be empty or unreadable: it is then nil.
public struct PlaybackInfo: Hashable, Sendable {
    public var state: PlaybackState?
    /// 1.0 at normal speed, 0 when paused; negative when rewinding.
    public var rate: Double?
    /// Seconds into the track when the phone sent the value.
    public var elapsed: Double?

    public init(state: PlaybackState?, rate: Double?, elapsed: Double?) {
        self.state = state
        self.rate = rate
        self.elapsed = elapsed
    }

    /// Reads the text form; parts beyond the third are ignored, and so is a rate or an elapsed
    /// time past `largestMediaNumber`.
    public init(parsing text: String) {
        let parts = text.split(separator: ",", maxSplits: 3, omittingEmptySubsequences: false)
        state = parts.count > 0 ? parseAMSInteger(parts[0]).map(PlaybackState.init(rawValue:)) : nil
        rate = parts.count > 1 ? mediaNumber(parseAMSDecimal(parts[1])) : nil
        elapsed = parts.count > 2 ? mediaNumber(parseAMSDecimal(parts[2])).map { max(0, $0) } : nil
    }

    /// The text form, as the phone sends it (empty parts for nil).
    public var text: String {
        [state.map { String($0.rawValue) }, rate.map { String($0) }, elapsed.map { String($0) }]
            .map { $0 ?? "" }.joined(separator: ",")
    }
}

/// Player's Volume: a decimal from 0 to 1; a value outside is clamped, an unreadable one nil.
public func parseVolume(_ text: some StringProtocol) -> Double? {
    parseAMSDecimal(text).map { min(1, max(0, $0)) }
}

/// Track's Duration: seconds, a decimal; nil if unreadable, negative or past `largestMediaNumber`.
public func parseTrackDuration(_ text: some StringProtocol) -> Double? {
    mediaNumber(parseAMSDecimal(text)).flatMap { $0 >= 0 ? $0 : nil }
}

/// A decimal integer as text (Queue's attributes, the playback state), spaces around allowed;
/// nil if it is not one or does not fit an `Int`.
public func parseAMSInteger(_ text: some StringProtocol) -> Int? {
    let trimmed = trimSpaces(text)
    guard !trimmed.isEmpty, trimmed.utf8.count <= 40 else { return nil }
    return Int(trimmed)
}

/// A decimal number as text ("1.0", "-1", "12.345", "1e2"), spaces around allowed; nil if it is
/// not one, or if it is infinite or not a number ("inf", "nan", "1e999" are refused, and so are
/// hexadecimal forms).
public func parseAMSDecimal(_ text: some StringProtocol) -> Double? {
    let trimmed = trimSpaces(text)
    guard !trimmed.isEmpty, trimmed.utf8.count <= 64 else { return nil }
    let allowed: ClosedRange<UInt8> = UInt8(ascii: "0")...UInt8(ascii: "9")
    var sawDigit = false
    for byte in trimmed.utf8 {
        if allowed.contains(byte) {
            sawDigit = true
        } else if ![UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(byte) {
            return nil
        }
    }
    guard sawDigit, let value = Double(trimmed), value.isFinite else { return nil }
    return value == 0 ? 0 : value  // no -0
}

private func trimSpaces(_ text: some StringProtocol) -> Substring {
    let substring = Substring(text)
    let start = substring.firstIndex { $0 != " " } ?? substring.endIndex
    let end = substring.lastIndex { $0 != " " }.map { substring.index(after: $0) } ?? start
    return substring[start..<max(start, end)]
}
