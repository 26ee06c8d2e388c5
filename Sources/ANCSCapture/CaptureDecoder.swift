public import ANCS
public import JSON

/// Turns capture records into the JSON objects that `ancsd decode` prints, one per line.
///
/// A `cp` record sets the request that the following `ds` records answer; the Data Source is
/// reassembled with `DataSourceReassembler`. A response still open when the next request is
/// written, at a disconnect or at the end of the capture is reported with `"complete": false`.
///
/// The objects are written straight into a `JSONWriter` as JSON Lines (`decode(_:line:into:)`),
/// the way `ancsd decode` prints them; the `JSONValue` forms are read back from those bytes, so
/// both say exactly the same.
public struct CaptureDecoder: Sendable {
    /// How each object is tagged: the connection it belongs to (written first, as `"conn"`) and
    /// the name of the position member of protocol errors (`"line"`, or `"record"` for btsnoop).
    public struct Tag: Sendable {
        public var connection: String?
        public var positionKey: String

        public init(connection: String? = nil, positionKey: String = "line") {
            self.connection = connection
            self.positionKey = positionKey
        }
    }

    private var reassembler: DataSourceReassembler
    /// How many protocol errors the bytes held so far.
    public private(set) var protocolErrorCount = 0

    public init(limits: DataSourceLimits = DataSourceLimits()) {
        reassembler = DataSourceReassembler(limits: limits)
    }

    /// Decodes one record from line `line` of the file.
    public mutating func decode(_ record: CaptureRecord, line: Int) -> [JSONValue] {
        var out = JSONWriter()
        decode(record, line: line, into: &out)
        return Self.values(of: out)
    }

    /// Decodes one record from position `line` of the file, appending one line of JSON per
    /// object to `out`, each tagged with `tag`.
    public mutating func decode(_ record: CaptureRecord, line: Int, tag: Tag = Tag(), into out: inout JSONWriter) {
        switch record {
        case .header:
            return
        case .event(_, let event):
            decode(event, tag, &out)
        case .value(_, let characteristic, let bytes, let attError):
            bytes.withUnsafeBufferPointer { decode(characteristic, $0, attError: attError, line: line, tag, &out) }
        }
    }

    /// Decodes one record of a batch (`CaptureRecordBatch`), as `decode(_:line:tag:into:)` does
    /// its `record`, with `line` as its position.
    public mutating func decode(_ record: CaptureRecordView, line: Int, tag: Tag = Tag(), into out: inout JSONWriter) {
        switch record.kind {
        case .header:
            return
        case .event(let event):
            decode(event, tag, &out)
        case .value(let characteristic, let attError):
            decode(characteristic, record.bytes, attError: attError, line: line, tag, &out)
        }
    }

    private mutating func decode(_ event: CaptureEvent, _ tag: Tag, _ out: inout JSONWriter) {
        closeOpenResponse(tag, &out)
        Self.open(tag, &out)
        out.appendASCII("\"event\":")
        out.write(event.rawValue)
        Self.close(&out)
    }

    // Each object is written as soon as it is decoded, from what the decoding gave: nothing is
    // built to be written later, so an object costs no copy of its values.
    private mutating func decode(
        _ characteristic: CaptureCharacteristic, _ bytes: UnsafeBufferPointer<UInt8>, attError: UInt8?, line: Int,
        _ tag: Tag, _ out: inout JSONWriter
    ) {
        switch characteristic {
        case .ns:
            do {
                let event = try NotificationSourceEvent(decoding: bytes)
                Self.open(tag, &out)
                Self.writeMembers(of: event, &out)
                Self.close(&out)
            } catch {
                protocolError(.ns, code: error.code, detail: error.description, line: line, offset: nil, tag, &out)
            }
        case .cp:
            closeOpenResponse(tag, &out)
            let request: ControlPointRequest
            do {
                request = try ControlPointRequest(decoding: Array(bytes))  // the array form is compiled in ANCS, specialized
            } catch {
                protocolError(.cp, code: error.code, detail: error.description, line: line, offset: nil, tag, &out)
                return
            }
            Self.open(tag, &out)
            Self.writeMembers(of: request, attError: attError, &out)
            Self.close(&out)
            if attError == nil {
                do { try reassembler.expect(request) } catch {
                    protocolError(.cp, code: error.code, detail: error.description, line: line, offset: nil, tag, &out)
                }
            }
        case .ds:
            let error = reassembler.feed(bytes) { Self.write($0, tag, &out) }
            if let error {
                protocolError(.ds, code: error.code, detail: error.description, line: line, offset: error.offset, tag, &out)
            }
        }
    }

    /// Ends the capture: reports a response still in progress.
    public mutating func finish() -> [JSONValue] {
        var out = JSONWriter()
        finish(into: &out)
        return Self.values(of: out)
    }

    /// Ends the capture: appends the line of a response still in progress.
    public mutating func finish(tag: Tag = Tag(), into out: inout JSONWriter) { closeOpenResponse(tag, &out) }

    private mutating func closeOpenResponse(_ tag: Tag, _ out: inout JSONWriter) {
        reassembler.finishEarly { Self.write($0, tag, &out) }
    }

    private mutating func protocolError(
        _ char: CaptureCharacteristic, code: String, detail: String, line: Int, offset: Int?, _ tag: Tag,
        _ out: inout JSONWriter
    ) {
        protocolErrorCount += 1
        Self.open(tag, &out)
        out.appendASCII("\"char\":")
        out.write(char.rawValue)
        out.appendASCII(",\"error\":")
        out.write(code)
        out.appendASCII(",\"detail\":")
        out.write(detail)
        out.appendASCII(",")
        out.write(tag.positionKey)
        out.appendASCII(":")
        out.write(line)
        if let offset {
            out.appendASCII(",\"offset\":")
            out.write(offset)
        }
        Self.close(&out)
    }

    private static func write(_ response: DataSourceResponseView, _ tag: Tag, _ out: inout JSONWriter) {
        open(tag, &out)
        writeMembers(of: response, &out)
        close(&out)
    }

    // MARK: - The objects

    private static func open(_ tag: Tag, _ out: inout JSONWriter) {
        out.appendASCII("{")
        if let connection = tag.connection {
            out.appendASCII("\"conn\":")
            out.write(connection)
            out.appendASCII(",")
        }
    }

    private static func close(_ out: inout JSONWriter) { out.appendASCII("}\n") }

    /// A name: its text made in advance (`JSONNames`) if there is one, else `slow` as a string.
    @inline(__always)
    private static func name(_ fast: StaticString?, _ slow: @autoclosure () -> String, _ out: inout JSONWriter) {
        if let fast { out.appendASCII(fast) } else { out.write(slow()) }
    }

    /// The lines of `out`, each read back as a value.
    private static func values(of out: borrowing JSONWriter) -> [JSONValue] {
        out.bytes.split(separator: 0x0A).compactMap { line in
            line.withUnsafeBufferPointer { try? JSONValue(parsing: $0) }
        }
    }

    private static func value(_ write: (inout JSONWriter) -> Void) -> JSONValue {
        var out = JSONWriter()
        out.appendASCII("{")
        write(&out)
        out.appendASCII("}")
        return out.bytes.withUnsafeBufferPointer { (try? JSONValue(parsing: $0)) ?? .null }
    }

    /// The JSON form of a Notification Source event.
    public static func json(for event: NotificationSourceEvent) -> JSONValue { value { writeMembers(of: event, &$0) } }

    /// The JSON form of a Control Point request, with the phone's ATT error if it refused it.
    public static func json(for request: ControlPointRequest, attError: UInt8?) -> JSONValue {
        value { writeMembers(of: request, attError: attError, &$0) }
    }

    /// The JSON form of a reassembled Data Source response.
    public static func json(for response: DataSourceResponse) -> JSONValue {
        response.withView { response in value { writeMembers(of: response, &$0) } }
    }

    private static func writeMembers(of event: NotificationSourceEvent, _ out: inout JSONWriter) {
        out.appendASCII("\"char\":\"ns\",\"event\":")
        name(JSONNames.event(event.eventID), event.eventID.name ?? "reserved", &out)
        out.appendASCII(",\"event_id\":")
        out.write(Int(event.eventID.rawValue))
        out.appendASCII(",\"uid\":")
        out.write(Int(event.notificationUID))
        out.appendASCII(",\"flags\":[")
        var first = true
        for bit in 0..<5 where event.flags.rawValue & 1 << bit != 0 {  // the defined flags, as `flags.names`
            if !first { out.appendASCII(",") }
            first = false
            name(JSONNames.flag(bit: bit), EventFlags.named[bit].name, &out)
        }
        out.appendASCII("],\"flags_raw\":")
        out.write(Int(event.flags.rawValue))
        out.appendASCII(",\"category\":")
        name(JSONNames.category(event.categoryID), event.categoryID.name ?? "reserved", &out)
        out.appendASCII(",\"category_id\":")
        out.write(Int(event.categoryID.rawValue))
        out.appendASCII(",\"category_count\":")
        out.write(Int(event.categoryCount))
    }

    private static func writeMembers(of request: ControlPointRequest, attError: UInt8?, _ out: inout JSONWriter) {
        out.appendASCII("\"char\":\"cp\",\"command\":")
        name(JSONNames.command(request.commandID), request.commandID.name ?? "reserved", &out)
        switch request {
        case .getNotificationAttributes(let uid, let attributes):
            out.appendASCII(",\"uid\":")
            out.write(Int(uid))
            out.appendASCII(",\"attributes\":[")
            for (index, attribute) in attributes.enumerated() {
                if index > 0 { out.appendASCII(",") }
                if let start = JSONNames.requestedNotificationAttribute(attribute.id) {
                    out.appendASCII(start)
                } else {
                    out.appendASCII("{\"id\":")
                    out.write(Int(attribute.id.rawValue))
                    out.appendASCII(",\"name\":")
                    out.write(attribute.id.description)
                }
                if let max = attribute.maxLength {
                    out.appendASCII(",\"max_length\":")
                    out.write(Int(max))
                }
                out.appendASCII("}")
            }
            out.appendASCII("]")
        case .getAppAttributes(let appIdentifier, let attributes):
            out.appendASCII(",\"app_id\":")
            out.write(appIdentifier)
            out.appendASCII(",\"attributes\":[")
            for (index, id) in attributes.enumerated() {
                if index > 0 { out.appendASCII(",") }
                if let start = JSONNames.requestedAppAttribute(id) {
                    out.appendASCII(start)
                } else {
                    out.appendASCII("{\"id\":")
                    out.write(Int(id.rawValue))
                    out.appendASCII(",\"name\":")
                    out.write(id.description)
                }
                out.appendASCII("}")
            }
            out.appendASCII("]")
        case .performNotificationAction(let uid, let action):
            out.appendASCII(",\"uid\":")
            out.write(Int(uid))
            out.appendASCII(",\"action\":")
            name(JSONNames.action(action), action.description, &out)
        }
        if let attError {
            out.appendASCII(",\"att_error\":")
            out.write(Int(attError))
            out.appendASCII(",\"att_error_name\":")
            name(JSONNames.attError(ATTErrorCode(rawValue: attError)), ATTErrorCode(rawValue: attError).description, &out)
        }
    }

    private static func writeMembers(of response: DataSourceResponseView, _ out: inout JSONWriter) {
        out.appendASCII("\"char\":\"ds\"")
        let isApp: Bool
        switch response.subject {
        case .notification(let uid):
            out.appendASCII(",\"response\":\"notification_attributes\",\"uid\":")
            out.write(Int(uid))
            isApp = false
        case .app(let identifier):
            out.appendASCII(",\"response\":\"app_attributes\",\"app_id\":")
            out.write(identifier)
            isApp = true
        }
        out.appendASCII(response.isComplete ? ",\"complete\":true,\"missing\":[" : ",\"complete\":false,\"missing\":[")
        for (index, id) in response.missingAttributeIDs.enumerated() {
            if index > 0 { out.appendASCII(",") }
            out.write(Int(id))
        }
        out.appendASCII("],\"attributes\":[")
        var message: UnsafeBufferPointer<UInt8>? = nil
        var messageSize: UnsafeBufferPointer<UInt8>? = nil
        for index in 0..<response.count {
            if index > 0 { out.appendASCII(",") }
            let rawID = response.rawID(at: index), value = response.value(at: index)
            writeAttribute(rawID, value, isApp: isApp, &out)
            // The first of each, as `response.value(of:)` finds them.
            if !isApp, message == nil, rawID == AttributeRawID.message { message = value }
            if !isApp, messageSize == nil, rawID == AttributeRawID.messageSize { messageSize = value }
        }
        out.appendASCII("]")
        if let message, let messageSize, let size = parseMessageSize(messageSize) {
            let truncated = isMessageTruncated(messageBytes: message, messageSize: size)
            out.appendASCII(truncated ? ",\"truncated\":true" : ",\"truncated\":false")
        }
    }

    private static func writeAttribute(_ rawID: UInt8, _ value: UnsafeBufferPointer<UInt8>, isApp: Bool, _ out: inout JSONWriter) {
        if let start = isApp ? JSONNames.appAttribute(AppAttributeID(rawValue: rawID))
            : JSONNames.notificationAttribute(NotificationAttributeID(rawValue: rawID)) {
            out.appendASCII(start)
        } else {
            out.appendASCII("{\"id\":")
            out.write(Int(rawID))
            out.appendASCII(",\"name\":")
            if isApp {
                out.write(AppAttributeID(rawValue: rawID).description)
            } else {
                out.write(NotificationAttributeID(rawValue: rawID).description)
            }
            out.appendASCII(",\"length\":")
        }
        out.write(value.count)
        out.appendASCII(",\"value\":")
        let valid = out.writeString(utf8: value)
        out.appendASCII(valid ? ",\"utf8_valid\":true" : ",\"utf8_valid\":false,\"value_hex\":")
        if !valid { out.writeHexString(value) }
        if !isApp {
            switch rawID {
            case AttributeRawID.date:
                // As `DateAttribute(value)` reads it.
                if value.isEmpty {
                    out.appendASCII(",\"date\":null")
                } else if let date = ANCSDate(parsing: value) {
                    out.appendASCII(",\"date\":")
                    writeISO8601(date, &out)
                } else {
                    out.appendASCII(",\"date_error\":\"malformed\"")
                }
            case AttributeRawID.messageSize:
                out.appendASCII(",\"message_size\":")
                if let size = parseMessageSize(value) { out.write(size) } else { out.appendASCII("null") }
            default:
                break
            }
        }
        out.appendASCII("}")
    }
}

/// The raw values of the notification attributes the decoder reads, as constants (the
/// `NotificationAttributeID` statics live in another module: each use would be a call).
private enum AttributeRawID {
    static let message: UInt8 = 3
    static let messageSize: UInt8 = 4
    static let date: UInt8 = 5
}

/// `date.iso8601` as a JSON string, from its bytes (no `String` made).
private func writeISO8601(_ date: ANCSDate, _ out: inout JSONWriter) {
    date.withISO8601 { _ = out.writeString(utf8: $0) }
}
