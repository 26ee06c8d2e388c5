// The reassembler exactly as it was before any performance work (commit b5a18c0), used by the
// fuzz target as a differential oracle: the optimised `DataSourceReassembler` must produce the
// same outputs, errors and offsets as this one for every input. Do not optimise this copy.

/// Reassembles Data Source responses from GATT notification values, driven by the pending request.
///
/// ANCS responses carry no total length and may be split at any byte; a response is complete
/// when every requested tuple has arrived. Tell the reassembler what was asked with `expect(_:)`,
/// then `feed(_:)` it each notification value as it comes. Memory is bounded by `limits`; the only
/// allocations are the response's own values. After an error the broken response is dropped and
/// the reassembler is idle, ready for the next request.
struct ReferenceReassembler: Sendable {
    private enum Stage: Sendable { case command, uid, appIdentifier, attributeID, attributeLength, value }

    private struct Expectation: Sendable {
        var request: ControlPointRequest
        var command: CommandID
        var uid: UInt32
        var appIdentifier: [UInt8]
        var appIdentifierText: String
        var requestedIDs: [UInt8]
        var requestedMask: UInt16
        var knownIDCount: UInt8
    }

    /// The caps this reassembler enforces.
    public let limits: DataSourceLimits

    private var expectation: Expectation?
    private var stage = Stage.command
    private var offset = 0
    private var fieldValue: UInt32 = 0
    private var fieldCount = 0
    private var receivedMask: UInt16 = 0
    private var currentID: UInt8 = 0
    private var currentLength = 0
    private var currentValue: [UInt8] = []
    private var attributes: [DataSourceAttribute] = []

    public init(limits: DataSourceLimits = DataSourceLimits()) {
        self.limits = limits
    }

    /// The request whose response is being reassembled, or nil when idle.
    public var pendingRequest: ControlPointRequest? { expectation?.request }

    /// How many bytes of the pending response have arrived.
    public var bytesReceived: Int { expectation == nil ? 0 : offset }

    /// Starts waiting for the response to `request`, dropping any response in progress.
    /// A PerformNotificationAction has no Data Source response: it leaves the reassembler idle.
    public mutating func expect(_ request: ControlPointRequest) throws(ControlPointError) {
        _ = try request.encoded()  // the same validation as on the wire
        reset()
        switch request {
        case .getNotificationAttributes(let uid, let requested):
            begin(request, .getNotificationAttributes, uid: uid, appIdentifier: "",
                  ids: requested.map(\.id.rawValue), knownIDCount: 8)
        case .getAppAttributes(let identifier, let requested):
            begin(request, .getAppAttributes, uid: 0, appIdentifier: identifier,
                  ids: requested.map(\.rawValue), knownIDCount: 1)
        case .performNotificationAction:
            break
        }
    }

    private mutating func begin(
        _ request: ControlPointRequest, _ command: CommandID, uid: UInt32, appIdentifier: String,
        ids: [UInt8], knownIDCount: UInt8
    ) {
        // encoded() refused reserved IDs, so every ID is below 8 and fits the mask.
        let mask = ids.reduce(UInt16(0)) { $0 | 1 << UInt16($1 & 0x0F) }
        expectation = Expectation(
            request: request, command: command, uid: uid, appIdentifier: Array(appIdentifier.utf8),
            appIdentifierText: appIdentifier, requestedIDs: ids, requestedMask: mask,
            knownIDCount: knownIDCount)
        attributes.reserveCapacity(ids.count)
    }

    /// Drops the response in progress, if any, and becomes idle.
    public mutating func reset() {
        expectation = nil
        stage = .command
        offset = 0
        fieldValue = 0
        fieldCount = 0
        receivedMask = 0
        currentValue = []
        attributes = []
    }

    /// Ends the pending response now, returning what arrived marked incomplete with the IDs that
    /// are missing (a tuple cut short counts as missing). For a phone that omits a requested
    /// tuple. Returns nil when no response is pending.
    public mutating func finishEarly() -> DataSourceResponse? {
        guard let expectation else { return nil }
        let response = makeResponse(expectation)
        reset()
        return response
    }

    /// Feeds one GATT notification value of the Data Source.
    public mutating func feed(_ fragment: [UInt8]) -> DataSourceOutput {
        fragment.withUnsafeBufferPointer { feed($0) }
    }

    /// Feeds one GATT notification value of the Data Source, from any contiguous bytes.
    public mutating func feed(_ fragment: some Collection<UInt8>) -> DataSourceOutput {
        if let output = fragment.withContiguousStorageIfAvailable({ feed($0) }) { return output }
        return feed(Array(fragment))
    }

    /// Feeds one GATT notification value of the Data Source from a buffer.
    public mutating func feed(_ bytes: UnsafeBufferPointer<UInt8>) -> DataSourceOutput {
        guard let expected = expectation else {
            return bytes.isEmpty ? .needMore : DataSourceOutput(error: DataSourceError(.noPendingRequest, offset: 0))
        }
        var index = 0
        let end = bytes.count
        while index < end {
            switch stage {
            case .command:
                let received = CommandID(rawValue: bytes[index])
                guard received == expected.command else {
                    return fail(.commandMismatch(expected: expected.command, received: received))
                }
                advance(&index, by: 1)
                stage = expected.command == .getAppAttributes ? .appIdentifier : .uid
                fieldValue = 0
                fieldCount = 0
            case .uid:
                fieldValue |= UInt32(bytes[index]) << UInt32(8 * fieldCount)
                fieldCount += 1
                advance(&index, by: 1)
                if fieldCount == 4 {
                    guard fieldValue == expected.uid else {
                        offset -= 4
                        return fail(.notificationUIDMismatch(expected: expected.uid, received: fieldValue))
                    }
                    stage = .attributeID
                }
            case .appIdentifier:
                let byte = bytes[index]
                let wanted: UInt8 = fieldCount < expected.appIdentifier.count ? expected.appIdentifier[fieldCount] : 0
                guard byte == wanted else { return fail(.appIdentifierMismatch(expected: expected.appIdentifierText)) }
                fieldCount += 1
                advance(&index, by: 1)
                if fieldCount > expected.appIdentifier.count { stage = .attributeID }
            case .attributeID:
                let id = bytes[index]
                let bit: UInt16 = id < 16 ? 1 << UInt16(id) : 0
                guard bit & expected.requestedMask != 0 else {
                    return fail(id >= expected.knownIDCount ? .unknownAttribute(id) : .unrequestedAttribute(id))
                }
                guard bit & receivedMask == 0 else { return fail(.duplicateAttribute(id)) }
                currentID = id
                fieldValue = 0
                fieldCount = 0
                advance(&index, by: 1)
                stage = .attributeLength
            case .attributeLength:
                fieldValue |= UInt32(bytes[index]) << UInt32(8 * fieldCount)
                fieldCount += 1
                advance(&index, by: 1)
                if fieldCount == 2 {
                    currentLength = Int(fieldValue)
                    // A Title, Subtitle or Message may be as long as the max length it was requested with.
                    var limit = limits.maxAttributeLength
                    if case .getNotificationAttributes(_, let requested)? = expectation?.request,
                       let max = requested.first(where: { $0.id.rawValue == currentID })?.maxLength {
                        limit = Swift.max(limit, Int(max))
                    }
                    guard currentLength <= limit else {
                        offset -= 3
                        return fail(.attributeTooLong(id: currentID, length: currentLength, limit: limit))
                    }
                    guard offset + currentLength <= limits.maxResponseLength else {
                        return fail(.responseTooLong(length: offset + currentLength, limit: limits.maxResponseLength))
                    }
                    if currentLength == 0 {
                        if let done = finishAttribute(expected, remaining: end - index) { return done }
                    } else {
                        currentValue.reserveCapacity(currentLength)
                        stage = .value
                    }
                }
            case .value:
                let take = min(end - index, currentLength - currentValue.count)
                currentValue.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[index..<(index + take)]))
                advance(&index, by: take)
                if currentValue.count == currentLength, let done = finishAttribute(expected, remaining: end - index) {
                    return done
                }
            }
        }
        return .needMore
    }

    private mutating func advance(_ index: inout Int, by count: Int) {
        index += count
        offset += count
    }

    /// Stores the finished tuple; returns the output if that completed the response.
    private mutating func finishAttribute(_ expected: Expectation, remaining: Int) -> DataSourceOutput? {
        attributes.append(DataSourceAttribute(rawID: currentID, value: currentValue))
        currentValue = []
        receivedMask |= 1 << UInt16(currentID)
        stage = .attributeID
        guard receivedMask == expected.requestedMask else { return nil }
        let response = makeResponse(expected)
        let trailingAt = offset
        reset()
        let error = remaining > 0 ? DataSourceError(.trailingBytes(count: remaining), offset: trailingAt) : nil
        return DataSourceOutput(response: response, error: error)
    }

    private func makeResponse(_ expected: Expectation) -> DataSourceResponse {
        let subject: DataSourceResponse.Subject = expected.command == .getAppAttributes
            ? .app(identifier: expected.appIdentifierText) : .notification(uid: expected.uid)
        let missing = expected.requestedIDs.filter { receivedMask & (1 << UInt16($0)) == 0 }
        return DataSourceResponse(subject: subject, attributes: attributes, missingAttributeIDs: missing)
    }

    private mutating func fail(_ kind: DataSourceError.Kind) -> DataSourceOutput {
        let error = DataSourceError(kind, offset: offset)
        reset()
        return DataSourceOutput(error: error)
    }
}
