/// What went wrong in a Data Source response, and where.
public struct DataSourceError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        /// Data arrived while no request was waiting for an answer.
        case noPendingRequest
        /// The echoed command ID is not the one requested.
        case commandMismatch(expected: CommandID, received: CommandID)
        /// The echoed notification UID is not the one requested.
        case notificationUIDMismatch(expected: UInt32, received: UInt32)
        /// The echoed app identifier differs from the one requested.
        case appIdentifierMismatch(expected: String)
        /// An attribute ID that the specification does not define for this command.
        case unknownAttribute(UInt8)
        /// A defined attribute that the request did not ask for.
        case unrequestedAttribute(UInt8)
        /// An attribute that already arrived in this response.
        case duplicateAttribute(UInt8)
        /// An attribute longer than `DataSourceLimits.maxAttributeLength`.
        case attributeTooLong(id: UInt8, length: Int, limit: Int)
        /// A response longer than `DataSourceLimits.maxResponseLength`.
        case responseTooLong(length: Int, limit: Int)
        /// Bytes after the last requested tuple.
        case trailingBytes(count: Int)
    }

    public var kind: Kind
    /// The byte offset in the response (0 is its command ID) where the problem starts.
    public var offset: Int

    public init(_ kind: Kind, offset: Int) {
        self.kind = kind
        self.offset = offset
    }

    /// True when the bytes' header names another command, notification or app: they answer
    /// something else (a late answer to an earlier request, or noise), not the pending request.
    public var isAnotherResponse: Bool {
        switch kind {
        case .commandMismatch, .notificationUIDMismatch, .appIdentifierMismatch: true
        default: false
        }
    }

    /// A stable snake_case code for machine-readable output.
    public var code: String {
        switch kind {
        case .noPendingRequest: "no_pending_request"
        case .commandMismatch: "command_mismatch"
        case .notificationUIDMismatch: "uid_mismatch"
        case .appIdentifierMismatch: "app_identifier_mismatch"
        case .unknownAttribute: "unknown_attribute"
        case .unrequestedAttribute: "unrequested_attribute"
        case .duplicateAttribute: "duplicate_attribute"
        case .attributeTooLong: "attribute_too_long"
        case .responseTooLong: "response_too_long"
        case .trailingBytes: "trailing_bytes"
        }
    }

    public var description: String {
        let what: String = switch kind {
        case .noPendingRequest: "Data Source bytes arrived while no request was pending"
        case .commandMismatch(let expected, let received): "the response is for \(received), the request was \(expected)"
        case .notificationUIDMismatch(let expected, let received): "the response is for notification \(received), the request was for \(expected)"
        case .appIdentifierMismatch(let expected): "the response's app identifier differs from the requested \"\(expected)\""
        case .unknownAttribute(let id): "attribute ID \(hexByte(id)) is not defined for this command"
        case .unrequestedAttribute(let id): "attribute ID \(hexByte(id)) was not requested"
        case .duplicateAttribute(let id): "attribute ID \(hexByte(id)) arrived twice"
        case .attributeTooLong(let id, let length, let limit): "attribute \(hexByte(id)) is \(length) bytes long, over the limit of \(limit)"
        case .responseTooLong(let length, let limit): "the response reaches \(length) bytes, over the limit of \(limit)"
        case .trailingBytes(let count): "\(count) unexpected bytes after the end of the response"
        }
        return what + " (at byte \(offset))"
    }
}
