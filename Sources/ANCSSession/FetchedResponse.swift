import ANCS

extension PhoneNotification {
    /// Takes the attributes a GetNotificationAttributes response carries (an AppIdentifier it
    /// lacks stays as known), with the message's truncation judged from its bytes.
    mutating func takeAttributes(of response: FetchedResponse) {
        if let app = response.appIdentifier { appIdentifier = app }
        title = response.title
        subtitle = response.subtitle
        message = response.message
        messageSize = response.messageSize
        date = response.date
        positiveAction = response.positiveAction
        negativeAction = response.negativeAction
        truncated = response.truncated
        attributesComplete = response.isComplete
    }
}

/// A response as the session keeps it: its attributes decoded (text as `String`s, repaired as
/// `AttributeText` repairs it), read from the reassembler in place when the response completes,
/// with no copy of each value. The reassembler refuses an attribute that arrives twice, so each
/// field has at most one source. A class: the request in flight holds it, and is copied whole
/// whenever it changes.
final class FetchedResponse: Sendable {
    // GetNotificationAttributes
    let appIdentifier: String?
    let title: String?
    let subtitle: String?
    let message: String?
    let messageSize: Int?
    /// Whether the phone cut the message short, when both the message and its size came.
    let truncated: Bool?
    let date: DateAttribute?
    let positiveAction: String?
    let negativeAction: String?
    // GetAppAttributes
    let displayName: String?
    /// Requested attribute IDs that never (fully) arrived, in request order.
    let missingAttributeIDs: [UInt8]

    var isComplete: Bool { missingAttributeIDs.isEmpty }

    init(_ view: DataSourceResponseView) {
        func text(_ value: UnsafeBufferPointer<UInt8>) -> String { String(decoding: value, as: UTF8.self) }
        var appIdentifier, title, subtitle, message, positiveAction, negativeAction, displayName: String?
        var messageSize: Int?
        var truncated: Bool?
        var date: DateAttribute?
        switch view.subject {
        case .notification:
            var messageBytes: UnsafeBufferPointer<UInt8>?
            for index in 0..<view.count {
                let value = view.value(at: index)
                switch NotificationAttributeID(rawValue: view.rawID(at: index)) {
                case .appIdentifier: appIdentifier = text(value)
                case .title: title = text(value)
                case .subtitle: subtitle = text(value)
                case .message:
                    message = text(value)
                    messageBytes = value
                case .messageSize: messageSize = parseMessageSize(value)
                case .date: date = DateAttribute(value)
                case .positiveActionLabel: positiveAction = text(value)
                case .negativeActionLabel: negativeAction = text(value)
                default: break
                }
            }
            if let messageBytes, let size = messageSize {
                truncated = isMessageTruncated(messageBytes: messageBytes, messageSize: size)
            }
        case .app:
            for index in 0..<view.count where AppAttributeID(rawValue: view.rawID(at: index)) == .displayName {
                displayName = text(view.value(at: index))
            }
        }
        self.appIdentifier = appIdentifier
        self.title = title
        self.subtitle = subtitle
        self.message = message
        self.messageSize = messageSize
        self.truncated = truncated
        self.date = date
        self.positiveAction = positiveAction
        self.negativeAction = negativeAction
        self.displayName = displayName
        missingAttributeIDs = view.missingAttributeIDs
    }
}
