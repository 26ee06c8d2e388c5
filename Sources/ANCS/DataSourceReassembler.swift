/// Caps on what one Data Source response may hold, so a misbehaving phone cannot make the
/// consumer buffer without bound.
///
/// A Title, Subtitle or Message may always be as long as the maximum it was requested with: ANCS
/// lengths are 16-bit, so a request for 65,535 bytes (`ancsd get … full: true`) takes a 65,535-byte
/// value. `maxAttributeLength` caps every other attribute, and those three when requested with a
/// smaller maximum. `maxResponseLength` bounds the whole response, and with it the memory one phone
/// can pin (the consumer keeps one request in flight per phone): by default 256 KiB, room for
/// Title, Subtitle and Message all at 65,535 bytes (196,614 bytes with their headers) and 64 KiB
/// for everything else.
public struct DataSourceLimits: Hashable, Sendable {
    /// The longest value accepted for an attribute requested without a larger maximum, in bytes.
    public var maxAttributeLength: Int
    /// The longest response accepted, headers included, in bytes.
    public var maxResponseLength: Int

    public init(maxAttributeLength: Int = 32_768, maxResponseLength: Int = 262_144) {
        self.maxAttributeLength = maxAttributeLength
        self.maxResponseLength = maxResponseLength
    }
}

/// What one `feed` produced: a finished response, an error, both (a response followed by
/// stray bytes), or neither (more data is needed).
public struct DataSourceOutput: Hashable, Sendable {
    public var response: DataSourceResponse?
    public var error: DataSourceError?

    public init(response: DataSourceResponse? = nil, error: DataSourceError? = nil) {
        self.response = response
        self.error = error
    }

    /// Nothing finished yet.
    public static let needMore = DataSourceOutput()
}

/// Reassembles Data Source responses from GATT notification values, driven by the pending request.
///
/// ANCS responses carry no total length and may be split at any byte; a response is complete
/// when every requested tuple has arrived. Tell the reassembler what was asked with `expect(_:)`,
/// then `feed(_:)` it each notification value as it comes. Memory is bounded by `limits`; the only
/// allocations are the response's own values, and with `feed(_:completing:)`, which hands the
/// response over in place, not even those once the storage has grown to fit. After an error the
/// broken response is dropped and the reassembler is idle, ready for the next request.
public struct DataSourceReassembler: Sendable {
    // Performance notes (the behaviour is that of a byte-at-a-time state machine; see Fuzz/):
    // - What the response must echo is kept in plain scalar fields, so `feed` copies and
    //   retains nothing; the request itself is only read to answer `pendingRequest` and to list
    //   missing IDs.
    // - `expect` validates the request exactly as `ControlPointRequest.encoded()` does (same
    //   checks, same order, same errors) without building the bytes, so it allocates nothing.
    // - A UID, a tuple header or a whole value that lies inside one fragment is taken in one
    //   step; only fields cut by a fragment boundary go through the byte-at-a-time stages.
    // - The values are collected end to end in one buffer (`values`, `spans`), kept from one
    //   response to the next up to `keptCapacity`; `feed(_:)` copies them out into the
    //   `DataSourceResponse`, `feed(_:completing:)` shows them where they are.
    private enum Stage: Sendable { case command, uid, appIdentifier, attributeID, attributeLength, value }

    /// The caps this reassembler enforces.
    public let limits: DataSourceLimits

    /// The request whose response is awaited; nil when idle.
    private var request: ControlPointRequest?
    private var command = CommandID.getNotificationAttributes
    private var uid: UInt32 = 0
    private var appIdentifier = ""
    private var requestedMask: UInt16 = 0
    /// The max length requested for each notification attribute ID (0 for none).
    private var requestedMaxLengths = SIMD8<UInt16>()
    private var knownIDCount: UInt8 = 0

    private var stage = Stage.command
    private var offset = 0
    private var fieldValue: UInt32 = 0
    private var fieldCount = 0
    private var receivedMask: UInt16 = 0
    private var currentID: UInt8 = 0
    private var currentLength = 0
    /// Where the value being collected starts in `values`.
    private var currentStart = 0
    /// The values of the tuples, end to end: the finished ones (`spans`), then the one being
    /// collected. Kept from one response to the next while small, so a response costs no
    /// allocation until it is handed out as a `DataSourceResponse`.
    private var values: [UInt8] = []
    /// The finished tuples, in the order they arrived.
    private var spans: [DataSourceResponseView.Span] = []

    /// The most value bytes whose storage is kept for the next response.
    private static let keptCapacity = 16_384

    public init(limits: DataSourceLimits = DataSourceLimits()) {
        self.limits = limits
    }

    /// The request whose response is being reassembled, or nil when idle.
    public var pendingRequest: ControlPointRequest? { request }

    /// How many bytes of the pending response have arrived.
    public var bytesReceived: Int { request == nil ? 0 : offset }

    /// Whether the pending response stops inside its header or a tuple: more bytes must follow
    /// before it can end (false when idle, before the first byte, and between tuples).
    public var isCutShort: Bool { request != nil && offset > 0 && stage != .attributeID }

    /// Starts waiting for the response to `request`, dropping any response in progress.
    /// A PerformNotificationAction has no Data Source response: it leaves the reassembler idle.
    public mutating func expect(_ request: ControlPointRequest) throws(ControlPointError) {
        try Self.validate(request)  // the same validation as on the wire
        reset()
        switch request {
        case .getNotificationAttributes(let uid, let requested):
            // validate() refused reserved IDs, so every ID is below 8 and fits the mask.
            var mask: UInt16 = 0
            for attribute in requested {
                mask |= 1 << UInt16(attribute.id.rawValue & 0x0F)
                requestedMaxLengths[Int(attribute.id.rawValue & 0x07)] = attribute.maxLength ?? 0
            }
            begin(request, .getNotificationAttributes, uid: uid, appIdentifier: "", mask: mask,
                  count: requested.count, knownIDCount: 8)
        case .getAppAttributes(let identifier, let requested):
            var mask: UInt16 = 0
            for id in requested { mask |= 1 << UInt16(id.rawValue & 0x0F) }
            begin(request, .getAppAttributes, uid: 0, appIdentifier: identifier, mask: mask,
                  count: requested.count, knownIDCount: 1)
        case .performNotificationAction:
            break
        }
    }

    private mutating func begin(
        _ request: ControlPointRequest, _ command: CommandID, uid: UInt32, appIdentifier: String,
        mask: UInt16, count: Int, knownIDCount: UInt8
    ) {
        self.request = request
        self.command = command
        self.uid = uid
        self.appIdentifier = appIdentifier
        self.requestedMask = mask
        self.knownIDCount = knownIDCount
        spans.reserveCapacity(count)
    }

    /// Throws exactly what `request.encoded()` throws, in the same order, without encoding.
    private static func validate(_ request: ControlPointRequest) throws(ControlPointError) {
        var seen = ByteSet()
        let size: Int
        switch request {
        case .getNotificationAttributes(_, let attributes):
            guard !attributes.isEmpty else { throw .noAttributes }
            var length = 5
            for attribute in attributes {
                let id = attribute.id
                guard !reservedNotificationAttributeIDs.contains(id.rawValue) else { throw .reservedAttribute(id.rawValue) }
                guard seen.insert(id.rawValue) else { throw .duplicateAttribute(id.rawValue) }
                length += 1
                switch (id.takesMaxLength, attribute.maxLength) {
                case (true, _?): length += 2
                case (true, nil): throw .maxLengthRequired(id)
                case (false, nil): break
                case (false, _?): throw .maxLengthNotAllowed(id)
                }
            }
            size = length
        case .getAppAttributes(let appIdentifier, let attributes):
            guard !attributes.isEmpty else { throw .noAttributes }
            let identifier = appIdentifier.utf8
            guard !identifier.isEmpty else { throw .emptyAppIdentifier }
            guard !identifier.contains(0) else { throw .appIdentifierContainsNUL }
            for id in attributes {
                guard !reservedAppAttributeIDs.contains(id.rawValue) else { throw .reservedAttribute(id.rawValue) }
                guard seen.insert(id.rawValue) else { throw .duplicateAttribute(id.rawValue) }
            }
            size = 2 + identifier.count + attributes.count
        case .performNotificationAction(_, let action):
            guard !action.isReserved else { throw .reservedAction(action.rawValue) }
            size = 6
        }
        guard size <= ControlPointRequest.maxEncodedSize else { throw .tooLong(size) }
    }

    /// The raw values whose `isReserved` is true, computed once from the identifier types, so that
    /// `validate` needs no name lookups.
    private static let reservedNotificationAttributeIDs = ByteSet(where: { NotificationAttributeID(rawValue: $0).isReserved })
    private static let reservedAppAttributeIDs = ByteSet(where: { AppAttributeID(rawValue: $0).isReserved })


    /// Drops the response in progress, if any, and becomes idle.
    public mutating func reset() {
        request = nil
        if !appIdentifier.isEmpty { appIdentifier = "" }
        stage = .command
        offset = 0
        fieldValue = 0
        fieldCount = 0
        receivedMask = 0
        requestedMaxLengths = SIMD8()
        if values.capacity > Self.keptCapacity { values = [] } else { values.removeAll(keepingCapacity: true) }
        spans.removeAll(keepingCapacity: true)
    }

    /// Ends the pending response now, returning what arrived marked incomplete with the IDs that
    /// are missing (a tuple cut short counts as missing). For a phone that omits a requested
    /// tuple. Returns nil when no response is pending.
    public mutating func finishEarly() -> DataSourceResponse? {
        var response: DataSourceResponse? = nil
        finishEarly { response = $0.response }
        return response
    }

    /// `finishEarly()` handing the response in place to `body` (see `feed(_:completing:)`);
    /// false when no response is pending.
    @discardableResult
    public mutating func finishEarly(_ body: (DataSourceResponseView) -> Void) -> Bool {
        guard request != nil else { return false }
        withView(body)
        reset()
        return true
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
        switch step(bytes) {
        case .more:
            return DataSourceOutput()  // need more; built in place rather than copied from `.needMore`
        case .failed(let error):
            return DataSourceOutput(error: error)
        case .completed(let trailing):
            let response = makeResponse()
            reset()
            return DataSourceOutput(response: response, error: trailing)
        }
    }

    /// Feeds one value as `feed(_:)` does, but hands a response it completes to `body` in place,
    /// its values pointing into the reassembler (valid only during the call), rather than
    /// building a `DataSourceResponse`. Returns the error `feed(_:)` would give with it.
    public mutating func feed(
        _ bytes: UnsafeBufferPointer<UInt8>, completing body: (DataSourceResponseView) -> Void
    ) -> DataSourceError? {
        switch step(bytes) {
        case .more:
            return nil
        case .failed(let error):
            return error
        case .completed(let trailing):
            withView(body)
            reset()
            return trailing
        }
    }

    /// What one step of `feed` led to.
    private enum Step {
        case more
        /// The response is complete (and not reset yet), with the error of bytes after it.
        case completed(trailing: DataSourceError?)
        /// The reassembler is idle again.
        case failed(DataSourceError)
    }

    private mutating func step(_ bytes: UnsafeBufferPointer<UInt8>) -> Step {
        guard request != nil else {
            return bytes.isEmpty ? .more : .failed(DataSourceError(.noPendingRequest, offset: 0))
        }
        var index = 0
        let end = bytes.count
        while index < end {
            switch stage {
            case .value:
                let take = min(end - index, currentLength - (values.count - currentStart))
                values.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[index..<(index + take)]))
                advance(&index, by: take)
                if values.count - currentStart == currentLength, finishAttribute() { return completed(remaining: end - index) }
            case .attributeID:
                switch readAttributeID(bytes, &index) {
                case .more: break
                case .complete: return completed(remaining: end - index)
                case .failed(let kind): return fail(kind)
                }
            case .attributeLength:
                fieldValue |= UInt32(bytes[index]) << UInt32(8 * fieldCount)
                fieldCount += 1
                advance(&index, by: 1)
                if fieldCount == 2 {
                    switch lengthComplete(bytes, &index) {
                    case .more: break
                    case .complete: return completed(remaining: end - index)
                    case .failed(let kind): return fail(kind)
                    }
                }
            case .command:
                if let mismatch = readCommand(bytes[index], &index) { return fail(mismatch) }
            case .uid:
                if let mismatch = readUID(bytes, &index) { return fail(mismatch) }
            case .appIdentifier:
                if let mismatch = readAppIdentifier(bytes, &index) { return fail(mismatch) }
            }
        }
        return .more
    }

    /// A tuple's attribute ID at `index`, which must be one requested and not received yet; when
    /// the whole tuple header is in this fragment, its length too.
    @inline(__always)
    private mutating func readAttributeID(_ bytes: UnsafeBufferPointer<UInt8>, _ index: inout Int) -> Progress {
        let id = bytes[index]
        let bit: UInt16 = id < 16 ? 1 << UInt16(id) : 0
        guard bit & requestedMask != 0 else {
            return .failed(id >= knownIDCount ? .unknownAttribute(id) : .unrequestedAttribute(id))
        }
        guard bit & receivedMask == 0 else { return .failed(.duplicateAttribute(id)) }
        currentID = id
        if bytes.count - index >= 3 {
            // The whole tuple header is here: take the length at once.
            fieldValue = UInt32(bytes[index + 1]) | UInt32(bytes[index + 2]) << 8
            advance(&index, by: 3)
            return lengthComplete(bytes, &index)
        }
        fieldValue = 0
        fieldCount = 0
        advance(&index, by: 1)
        stage = .attributeLength
        return .more
    }

    /// The response's command byte, which must be the request's; nil when it is.
    @inline(__always)
    private mutating func readCommand(_ byte: UInt8, _ index: inout Int) -> DataSourceError.Kind? {
        let received = CommandID(rawValue: byte)
        guard received == command else { return .commandMismatch(expected: command, received: received) }
        advance(&index, by: 1)
        stage = command == .getAppAttributes ? .appIdentifier : .uid
        fieldValue = 0
        fieldCount = 0
        return nil
    }

    /// The notification's UID from `index` on (whole, or the bytes of it this fragment holds),
    /// which must be the request's; nil when it is, or is not complete yet.
    @inline(__always)
    private mutating func readUID(_ bytes: UnsafeBufferPointer<UInt8>, _ index: inout Int) -> DataSourceError.Kind? {
        if fieldCount == 0 && bytes.count - index >= 4 {
            fieldValue = UInt32(bytes[index]) | UInt32(bytes[index + 1]) << 8
                | UInt32(bytes[index + 2]) << 16 | UInt32(bytes[index + 3]) << 24
            fieldCount = 4
            advance(&index, by: 4)
        } else {
            fieldValue |= UInt32(bytes[index]) << UInt32(8 * fieldCount)
            fieldCount += 1
            advance(&index, by: 1)
        }
        if fieldCount == 4 {
            guard fieldValue == uid else {
                offset -= 4
                return .notificationUIDMismatch(expected: uid, received: fieldValue)
            }
            stage = .attributeID
        }
        return nil
    }

    /// The app identifier and its NUL from `index` on, compared as far as this fragment goes;
    /// nil while they match.
    private mutating func readAppIdentifier(_ bytes: UnsafeBufferPointer<UInt8>, _ index: inout Int) -> DataSourceError.Kind? {
        let matched = matchAppIdentifier(bytes, from: index)
        advance(&index, by: matched)
        fieldCount += matched
        if index < bytes.count && fieldCount <= appIdentifier.utf8.count {
            return .appIdentifierMismatch(expected: appIdentifier)
        }
        if fieldCount > appIdentifier.utf8.count { stage = .attributeID }
        return nil
    }

    /// How many bytes from `index` on match the expected app identifier from position
    /// `fieldCount` on, followed by its NUL terminator; stops after the terminator.
    private func matchAppIdentifier(_ bytes: UnsafeBufferPointer<UInt8>, from index: Int) -> Int {
        let position = fieldCount
        func match(_ identifier: UnsafeBufferPointer<UInt8>) -> Int {
            var count = 0
            while index + count < bytes.count {
                let at = position + count
                let wanted: UInt8 = at < identifier.count ? identifier[at] : 0
                guard bytes[index + count] == wanted else { break }
                count += 1
                if at == identifier.count { break }
            }
            return count
        }
        // Native strings always have contiguous UTF-8; the copy is only a fallback.
        return appIdentifier.utf8.withContiguousStorageIfAvailable(match)
            ?? Array(appIdentifier.utf8).withUnsafeBufferPointer(match)
    }

    /// What a step inside `feed` leads to. (Steps return this rather than a `DataSourceOutput?`,
    /// which the caller would have to copy out of the optional.)
    private enum Progress { case more, complete, failed(DataSourceError.Kind) }

    /// The tuple's length (`fieldValue`) has arrived and `offset` is just past it: checks the
    /// limits, then stores an empty value, takes a value that is all in this fragment, or starts
    /// collecting one.
    private mutating func lengthComplete(_ bytes: UnsafeBufferPointer<UInt8>, _ index: inout Int) -> Progress {
        currentLength = Int(fieldValue)
        let limit = attributeLimit(currentID)
        guard currentLength <= limit else {
            offset -= 3
            return .failed(.attributeTooLong(id: currentID, length: currentLength, limit: limit))
        }
        guard offset + currentLength <= limits.maxResponseLength else {
            return .failed(.responseTooLong(length: offset + currentLength, limit: limits.maxResponseLength))
        }
        currentStart = values.count
        if currentLength <= bytes.count - index {
            values.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[index..<(index + currentLength)]))
            advance(&index, by: currentLength)
            return finishAttribute() ? .complete : .more
        }
        values.reserveCapacity(currentStart + currentLength)
        stage = .value
        return .more
    }

    /// The longest value accepted for attribute `id` of the pending response: the limit, or the
    /// max length it was requested with if that is larger.
    private func attributeLimit(_ id: UInt8) -> Int {
        guard command == .getNotificationAttributes, id < 8 else { return limits.maxAttributeLength }
        return max(limits.maxAttributeLength, Int(requestedMaxLengths[Int(id)]))
    }

    private mutating func advance(_ index: inout Int, by count: Int) {
        index += count
        offset += count
    }

    /// Stores the finished tuple; true if that completed the response.
    private mutating func finishAttribute() -> Bool {
        spans.append(DataSourceResponseView.Span(rawID: currentID, start: currentStart, count: values.count - currentStart))
        receivedMask |= 1 << UInt16(currentID)
        stage = .attributeID
        return receivedMask == requestedMask
    }

    /// The step for a response just completed, with `remaining` bytes of the fragment after it.
    private func completed(remaining: Int) -> Step {
        .completed(trailing: remaining > 0 ? DataSourceError(.trailingBytes(count: remaining), offset: offset) : nil)
    }

    private func makeResponse() -> DataSourceResponse {
        let subject: DataSourceResponse.Subject = command == .getAppAttributes
            ? .app(identifier: appIdentifier) : .notification(uid: uid)
        // Copied out through a buffer pointer: one memcpy per value (an ArraySlice takes the
        // generic path, a third slower in ancs-bench).
        let attributes = values.withUnsafeBufferPointer { values in
            spans.map { span in
                DataSourceAttribute(
                    rawID: span.rawID, value: Array(UnsafeBufferPointer(rebasing: values[span.start..<span.start + span.count])))
            }
        }
        return DataSourceResponse(subject: subject, attributes: attributes, missingAttributeIDs: missingIDs())
    }

    /// Hands the response as it stands to `body`, in place.
    private func withView(_ body: (DataSourceResponseView) -> Void) {
        let subject: DataSourceResponse.Subject = command == .getAppAttributes
            ? .app(identifier: appIdentifier) : .notification(uid: uid)
        let missing = missingIDs()
        values.withUnsafeBufferPointer { values in
            spans.withUnsafeBufferPointer { spans in
                body(DataSourceResponseView(subject: subject, missingAttributeIDs: missing, values: values, spans: spans))
            }
        }
    }

    /// The requested IDs that have not arrived, in request order.
    private func missingIDs() -> [UInt8] {
        guard receivedMask != requestedMask else { return [] }  // every requested bit is set
        var missing: [UInt8] = []
        switch request {
        case .getNotificationAttributes(_, let requested):
            for attribute in requested where receivedMask & (1 << UInt16(attribute.id.rawValue)) == 0 {
                missing.append(attribute.id.rawValue)
            }
        case .getAppAttributes(_, let requested):
            for id in requested where receivedMask & (1 << UInt16(id.rawValue)) == 0 { missing.append(id.rawValue) }
        case .performNotificationAction, nil:
            break  // no response is pending for these
        }
        return missing
    }

    private mutating func fail(_ kind: DataSourceError.Kind) -> Step {
        let error = DataSourceError(kind, offset: offset)
        reset()
        return .failed(error)
    }
}

/// A reassembled Data Source response read in place: its values point into the reassembler
/// that hands it over (`DataSourceReassembler.feed(_:completing:)`), valid only during that
/// call. What a `DataSourceResponse` says, without an allocation per value.
public struct DataSourceResponseView {
    /// Where one tuple's value lies.
    struct Span {
        var rawID: UInt8
        var start: Int
        var count: Int
    }

    /// What the response is about.
    public let subject: DataSourceResponse.Subject
    /// Requested attribute IDs that never (fully) arrived, in request order; empty when complete.
    public let missingAttributeIDs: [UInt8]
    private let values: UnsafeBufferPointer<UInt8>
    private let spans: UnsafeBufferPointer<Span>

    init(subject: DataSourceResponse.Subject, missingAttributeIDs: [UInt8], values: UnsafeBufferPointer<UInt8>,
         spans: UnsafeBufferPointer<Span>) {
        self.subject = subject
        self.missingAttributeIDs = missingAttributeIDs
        self.values = values
        self.spans = spans
    }

    /// True if every requested tuple arrived.
    public var isComplete: Bool { missingAttributeIDs.isEmpty }

    /// How many tuples arrived.
    public var count: Int { spans.count }

    /// The attribute ID byte of tuple `index`, in the order they arrived.
    public func rawID(at index: Int) -> UInt8 { spans[index].rawID }

    /// The value of tuple `index`, exactly as the phone sent it.
    public func value(at index: Int) -> UnsafeBufferPointer<UInt8> {
        let span = spans[index]
        return UnsafeBufferPointer(rebasing: values[span.start..<span.start + span.count])
    }

    /// The response as a value of its own (its values copied).
    public var response: DataSourceResponse {
        DataSourceResponse(subject: subject, attributes: (0..<count).map { DataSourceAttribute(rawID: rawID(at: $0), value: Array(value(at: $0))) },
                           missingAttributeIDs: missingAttributeIDs)
    }
}
