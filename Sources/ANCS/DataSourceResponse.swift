/// One attribute tuple of a Data Source response: the ID as sent, and the value's bytes.
public struct DataSourceAttribute: Hashable, Sendable {
    /// The attribute ID byte: a `NotificationAttributeID` or an `AppAttributeID`, by response.
    public var rawID: UInt8
    /// The value exactly as the phone sent it.
    public var value: [UInt8]

    public init(rawID: UInt8, value: [UInt8]) {
        self.rawID = rawID
        self.value = value
    }
}

/// A reassembled Data Source response.
public struct DataSourceResponse: Hashable, Sendable {
    /// What the response is about.
    public enum Subject: Hashable, Sendable {
        /// The answer to GetNotificationAttributes.
        case notification(uid: UInt32)
        /// The answer to GetAppAttributes.
        case app(identifier: String)
    }

    public var subject: Subject
    /// The tuples in the order they arrived.
    public var attributes: [DataSourceAttribute]
    /// Requested attribute IDs that never (fully) arrived, in request order; empty when complete.
    public var missingAttributeIDs: [UInt8]

    public init(subject: Subject, attributes: [DataSourceAttribute], missingAttributeIDs: [UInt8] = []) {
        self.subject = subject
        self.attributes = attributes
        self.missingAttributeIDs = missingAttributeIDs
    }

    /// True if every requested tuple arrived.
    public var isComplete: Bool { missingAttributeIDs.isEmpty }

    /// The command this response answers.
    public var commandID: CommandID {
        switch subject {
        case .notification: .getNotificationAttributes
        case .app: .getAppAttributes
        }
    }

    /// The value of a notification attribute, if this response carries it.
    public func value(of id: NotificationAttributeID) -> [UInt8]? {
        guard case .notification = subject else { return nil }
        return attributes.first { $0.rawID == id.rawValue }?.value
    }

    /// The value of an app attribute, if this response carries it.
    public func value(of id: AppAttributeID) -> [UInt8]? {
        guard case .app = subject else { return nil }
        return attributes.first { $0.rawID == id.rawValue }?.value
    }
}

extension DataSourceResponse {
    /// Hands the response to `body` as a `DataSourceResponseView` (its values copied end to end).
    public func withView<Result>(_ body: (DataSourceResponseView) throws -> Result) rethrows -> Result {
        var values: [UInt8] = []
        var spans: [DataSourceResponseView.Span] = []
        for attribute in attributes {
            spans.append(DataSourceResponseView.Span(rawID: attribute.rawID, start: values.count, count: attribute.value.count))
            values += attribute.value
        }
        return try values.withUnsafeBufferPointer { values in
            try spans.withUnsafeBufferPointer { spans in
                try body(DataSourceResponseView(subject: subject, missingAttributeIDs: missingAttributeIDs, values: values, spans: spans))
            }
        }
    }
}
