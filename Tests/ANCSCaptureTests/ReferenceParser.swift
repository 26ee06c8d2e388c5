import ANCS

/// A deliberately simple, whole-buffer parser of one Data Source response, written from the
/// specification independently of `DataSourceReassembler`: the oracle of the property tests.
enum ReferenceParser {
    static func parse(_ request: ControlPointRequest, _ bytes: [UInt8], limits: DataSourceLimits = DataSourceLimits()) -> Outcome {
        let requested: [UInt8]
        let known: Int
        var subject: DataSourceResponse.Subject
        switch request {
        case .getNotificationAttributes(let uid, let attributes):
            requested = attributes.map(\.id.rawValue)
            known = 8
            subject = .notification(uid: uid)
        case .getAppAttributes(let identifier, let attributes):
            requested = attributes.map(\.rawValue)
            known = 1
            subject = .app(identifier: identifier)
        case .performNotificationAction:
            return .error(DataSourceError(.noPendingRequest, offset: 0))
        }
        var attributes: [DataSourceAttribute] = []
        func endedEarly() -> Outcome {
            let got = Set(attributes.map(\.rawID))
            return .endedEarly(DataSourceResponse(subject: subject, attributes: attributes, missingAttributeIDs: requested.filter { !got.contains($0) }))
        }
        var i = 0
        guard i < bytes.count else { return endedEarly() }
        guard bytes[i] == request.commandID.rawValue else {
            return .error(DataSourceError(.commandMismatch(expected: request.commandID, received: CommandID(rawValue: bytes[i])), offset: 0))
        }
        i += 1
        switch subject {
        case .notification(let uid):
            guard bytes.count >= 5 else { return endedEarly() }
            let got = bytes[1..<5].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            guard got == uid else { return .error(DataSourceError(.notificationUIDMismatch(expected: uid, received: got), offset: 1)) }
            i = 5
        case .app(let identifier):
            let expected = Array(identifier.utf8) + [0]
            for byte in expected {
                guard i < bytes.count else { return endedEarly() }
                guard bytes[i] == byte else { return .error(DataSourceError(.appIdentifierMismatch(expected: identifier), offset: i)) }
                i += 1
            }
        }
        while true {
            guard i < bytes.count else { return endedEarly() }
            let id = bytes[i]
            if !requested.contains(id) {
                return .error(DataSourceError(Int(id) >= known ? .unknownAttribute(id) : .unrequestedAttribute(id), offset: i))
            }
            if attributes.contains(where: { $0.rawID == id }) { return .error(DataSourceError(.duplicateAttribute(id), offset: i)) }
            guard i + 3 <= bytes.count else { return endedEarly() }
            let length = Int(bytes[i + 1]) | Int(bytes[i + 2]) << 8
            // A Title, Subtitle or Message may be as long as the max length it was requested with.
            var limit = limits.maxAttributeLength
            if case .getNotificationAttributes(_, let attributes) = request,
               let max = attributes.first(where: { $0.id.rawValue == id })?.maxLength {
                limit = Swift.max(limit, Int(max))
            }
            if length > limit {
                return .error(DataSourceError(.attributeTooLong(id: id, length: length, limit: limit), offset: i))
            }
            if i + 3 + length > limits.maxResponseLength {
                return .error(DataSourceError(.responseTooLong(length: i + 3 + length, limit: limits.maxResponseLength), offset: i + 3))
            }
            guard i + 3 + length <= bytes.count else { return endedEarly() }
            attributes.append(DataSourceAttribute(rawID: id, value: Array(bytes[(i + 3)..<(i + 3 + length)])))
            i += 3 + length
            if attributes.count == requested.count {
                return .response(DataSourceResponse(subject: subject, attributes: attributes))
            }
        }
    }
}
