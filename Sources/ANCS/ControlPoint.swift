/// A notification attribute to ask for, with the maximum length for Title, Subtitle and Message.
public struct NotificationAttributeRequest: Hashable, Sendable {
    public var id: NotificationAttributeID
    /// Required for Title, Subtitle and Message, absent for every other attribute.
    public var maxLength: UInt16?

    public init(_ id: NotificationAttributeID, maxLength: UInt16? = nil) {
        self.id = id
        self.maxLength = maxLength
    }
}

/// A command written to the Control Point.
public enum ControlPointRequest: Hashable, Sendable {
    /// Asks for attributes of a notification; the answer arrives on the Data Source.
    case getNotificationAttributes(uid: UInt32, attributes: [NotificationAttributeRequest])
    /// Asks for attributes of an app; the answer arrives on the Data Source.
    case getAppAttributes(appIdentifier: String, attributes: [AppAttributeID])
    /// Performs an action on a notification; the write's acknowledgement is the only answer.
    case performNotificationAction(uid: UInt32, action: ActionID)

    /// The largest value an ATT write can carry.
    public static let maxEncodedSize = 512

    /// The command this request sends.
    public var commandID: CommandID {
        switch self {
        case .getNotificationAttributes: .getNotificationAttributes
        case .getAppAttributes: .getAppAttributes
        case .performNotificationAction: .performNotificationAction
        }
    }

    /// True if the phone answers this request on the Data Source.
    public var expectsDataSourceResponse: Bool {
        if case .performNotificationAction = self { return false }
        return true
    }

    /// Validates the request and encodes it as the bytes to write.
    public func encoded() throws(ControlPointError) -> [UInt8] {
        // One allocation: the largest form of each command is reserved at once.
        var bytes: [UInt8] = []
        switch self {
        case .getNotificationAttributes(_, let attributes): bytes.reserveCapacity(5 + 3 * attributes.count)
        case .getAppAttributes(let appIdentifier, let attributes): bytes.reserveCapacity(2 + appIdentifier.utf8.count + attributes.count)
        case .performNotificationAction: bytes.reserveCapacity(6)
        }
        bytes.append(commandID.rawValue)
        switch self {
        case .getNotificationAttributes(let uid, let attributes):
            guard !attributes.isEmpty else { throw .noAttributes }
            appendLittleEndian(uid, to: &bytes)
            var seen = ByteSet()
            for attribute in attributes {
                let id = attribute.id
                guard !id.isReserved else { throw .reservedAttribute(id.rawValue) }
                guard seen.insert(id.rawValue) else { throw .duplicateAttribute(id.rawValue) }
                bytes.append(id.rawValue)
                switch (id.takesMaxLength, attribute.maxLength) {
                case (true, let max?):
                    bytes.append(UInt8(truncatingIfNeeded: max))
                    bytes.append(UInt8(truncatingIfNeeded: max >> 8))
                case (true, nil): throw .maxLengthRequired(id)
                case (false, nil): break
                case (false, _?): throw .maxLengthNotAllowed(id)
                }
            }
        case .getAppAttributes(let appIdentifier, let attributes):
            guard !attributes.isEmpty else { throw .noAttributes }
            let identifier = Array(appIdentifier.utf8)
            guard !identifier.isEmpty else { throw .emptyAppIdentifier }
            guard !identifier.contains(0) else { throw .appIdentifierContainsNUL }
            bytes += identifier
            bytes.append(0)
            var seen = ByteSet()
            for id in attributes {
                guard !id.isReserved else { throw .reservedAttribute(id.rawValue) }
                guard seen.insert(id.rawValue) else { throw .duplicateAttribute(id.rawValue) }
                bytes.append(id.rawValue)
            }
        case .performNotificationAction(let uid, let action):
            guard !action.isReserved else { throw .reservedAction(action.rawValue) }
            appendLittleEndian(uid, to: &bytes)
            bytes.append(action.rawValue)
        }
        guard bytes.count <= Self.maxEncodedSize else { throw .tooLong(bytes.count) }
        return bytes
    }

    /// Decodes a Control Point value, as found in a capture, with the same rules as `encoded()`.
    public init(decoding value: some Collection<UInt8>) throws(ControlPointError) {
        try self.init(decoding: Array(value))
    }

    /// Decodes a Control Point value, as found in a capture, with the same rules as `encoded()`.
    /// (The array form is compiled here, so callers in other modules get specialized code.)
    public init(decoding bytes: [UInt8]) throws(ControlPointError) {
        guard bytes.count <= Self.maxEncodedSize else { throw .tooLong(bytes.count) }
        guard let first = bytes.first else { throw .empty }
        var offset = 1
        func uid() throws(ControlPointError) -> UInt32 {
            guard bytes.count >= offset + 4 else { throw .truncated(offset: bytes.count) }
            defer { offset += 4 }
            return UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8
                | UInt32(bytes[offset + 2]) << 16 | UInt32(bytes[offset + 3]) << 24
        }
        switch CommandID(rawValue: first) {
        case .getNotificationAttributes:
            let uid = try uid()
            var attributes: [NotificationAttributeRequest] = []
            attributes.reserveCapacity(min(8, bytes.count - offset))  // at most the 8 defined IDs, once each
            var seen = ByteSet()
            while offset < bytes.count {
                let id = NotificationAttributeID(rawValue: bytes[offset])
                guard !id.isReserved else { throw .reservedAttribute(id.rawValue) }
                guard seen.insert(id.rawValue) else { throw .duplicateAttribute(id.rawValue) }
                offset += 1
                var maxLength: UInt16? = nil
                if id.takesMaxLength {
                    guard bytes.count >= offset + 2 else { throw .truncated(offset: bytes.count) }
                    maxLength = UInt16(bytes[offset]) | UInt16(bytes[offset + 1]) << 8
                    offset += 2
                }
                attributes.append(NotificationAttributeRequest(id, maxLength: maxLength))
            }
            guard !attributes.isEmpty else { throw .noAttributes }
            self = .getNotificationAttributes(uid: uid, attributes: attributes)
        case .getAppAttributes:
            guard let nul = bytes[offset...].firstIndex(of: 0) else { throw .unterminatedAppIdentifier }
            guard nul > offset else { throw .emptyAppIdentifier }
            let identifier = String(decoding: bytes[offset..<nul], as: UTF8.self)
            var attributes: [AppAttributeID] = []
            var seen = ByteSet()
            for byte in bytes[(nul + 1)...] {
                let id = AppAttributeID(rawValue: byte)
                guard !id.isReserved else { throw .reservedAttribute(byte) }
                guard seen.insert(byte) else { throw .duplicateAttribute(byte) }
                attributes.append(id)
            }
            guard !attributes.isEmpty else { throw .noAttributes }
            self = .getAppAttributes(appIdentifier: identifier, attributes: attributes)
        case .performNotificationAction:
            let uid = try uid()
            guard bytes.count == offset + 1 else {
                throw bytes.count < offset + 1 ? .truncated(offset: bytes.count) : .trailingBytes(offset: offset + 1)
            }
            let action = ActionID(rawValue: bytes[offset])
            guard !action.isReserved else { throw .reservedAction(action.rawValue) }
            self = .performNotificationAction(uid: uid, action: action)
        default:
            throw .unknownCommand(first)
        }
    }
}

/// Why a Control Point request was refused (when encoding) or not understood (when decoding).
public enum ControlPointError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The value was empty.
    case empty
    /// The command byte is not one of the three the specification defines.
    case unknownCommand(UInt8)
    /// The request names no attribute.
    case noAttributes
    /// An attribute ID the specification reserves.
    case reservedAttribute(UInt8)
    /// An attribute asked for twice.
    case duplicateAttribute(UInt8)
    /// Title, Subtitle or Message without its max length.
    case maxLengthRequired(NotificationAttributeID)
    /// A max length given for an attribute that takes none.
    case maxLengthNotAllowed(NotificationAttributeID)
    /// An empty app identifier.
    case emptyAppIdentifier
    /// An app identifier with an embedded NUL, which would end it early on the wire.
    case appIdentifierContainsNUL
    /// An app identifier without its terminating NUL.
    case unterminatedAppIdentifier
    /// An action ID the specification reserves.
    case reservedAction(UInt8)
    /// The value ends inside a field; the offset is where it ended.
    case truncated(offset: Int)
    /// Bytes after the end of a complete command.
    case trailingBytes(offset: Int)
    /// The encoded request is longer than an ATT write can carry (512 bytes).
    case tooLong(Int)

    /// A stable snake_case code for machine-readable output.
    public var code: String {
        switch self {
        case .empty: "empty"
        case .unknownCommand: "unknown_command"
        case .noAttributes: "no_attributes"
        case .reservedAttribute: "reserved_attribute"
        case .duplicateAttribute: "duplicate_attribute"
        case .maxLengthRequired: "max_length_required"
        case .maxLengthNotAllowed: "max_length_not_allowed"
        case .emptyAppIdentifier: "empty_app_identifier"
        case .appIdentifierContainsNUL: "app_identifier_contains_nul"
        case .unterminatedAppIdentifier: "unterminated_app_identifier"
        case .reservedAction: "reserved_action"
        case .truncated: "truncated"
        case .trailingBytes: "trailing_bytes"
        case .tooLong: "too_long"
        }
    }

    public var description: String {
        switch self {
        case .empty: "the Control Point value is empty"
        case .unknownCommand(let id): "unknown command ID \(hexByte(id))"
        case .noAttributes: "the request names no attribute"
        case .reservedAttribute(let id): "attribute ID \(hexByte(id)) is reserved"
        case .duplicateAttribute(let id): "attribute ID \(hexByte(id)) is requested twice"
        case .maxLengthRequired(let id): "\(id) needs a max length"
        case .maxLengthNotAllowed(let id): "\(id) takes no max length"
        case .emptyAppIdentifier: "the app identifier is empty"
        case .appIdentifierContainsNUL: "the app identifier contains a NUL byte"
        case .unterminatedAppIdentifier: "the app identifier has no terminating NUL"
        case .reservedAction(let id): "action ID \(hexByte(id)) is reserved"
        case .truncated(let offset): "the value ends inside a field at byte \(offset)"
        case .trailingBytes(let offset): "unexpected bytes after the command, from byte \(offset)"
        case .tooLong(let size): "\(size) bytes exceed the 512 that one ATT write can carry"
        }
    }
}
