public import ANCS
public import JSON

/// Turns capture records into the JSON objects that `ancsd decode` prints, one per line.
///
/// A `cp` record sets the request that the following `ds` records answer; the Data Source is
/// reassembled with `DataSourceReassembler`. A response still open when the next request is
/// written, at a disconnect or at the end of the capture is reported with `"complete": false`.
public struct CaptureDecoder: Sendable {
    private var reassembler: DataSourceReassembler
    /// How many protocol errors the bytes held so far.
    public private(set) var protocolErrorCount = 0

    public init(limits: DataSourceLimits = DataSourceLimits()) {
        reassembler = DataSourceReassembler(limits: limits)
    }

    /// Decodes one record from line `line` of the file.
    public mutating func decode(_ record: CaptureRecord, line: Int) -> [JSONValue] {
        switch record {
        case .header:
            return []
        case .event(_, let event):
            var out = closeOpenResponse()
            out.append(["event": .string(event.rawValue)])
            return out
        case .value(_, .ns, let bytes, _):
            do {
                return [Self.json(for: try NotificationSourceEvent(decoding: bytes))]
            } catch {
                return [protocolError(.ns, code: error.code, detail: error.description, line: line)]
            }
        case .value(_, .cp, let bytes, let attError):
            var out = closeOpenResponse()
            let request: ControlPointRequest
            do {
                request = try ControlPointRequest(decoding: bytes)
            } catch {
                out.append(protocolError(.cp, code: error.code, detail: error.description, line: line))
                return out
            }
            out.append(Self.json(for: request, attError: attError))
            if attError == nil {
                do { try reassembler.expect(request) } catch {
                    out.append(protocolError(.cp, code: error.code, detail: error.description, line: line))
                }
            }
            return out
        case .value(_, .ds, let bytes, _):
            let output = reassembler.feed(bytes)
            var out: [JSONValue] = []
            if let response = output.response { out.append(Self.json(for: response)) }
            if let error = output.error {
                var object = protocolError(.ds, code: error.code, detail: error.description, line: line).objectValue ?? [:]
                object["offset"] = .int(error.offset)
                out.append(.object(object))
            }
            return out
        }
    }

    /// Ends the capture: reports a response still in progress.
    public mutating func finish() -> [JSONValue] { closeOpenResponse() }

    private mutating func closeOpenResponse() -> [JSONValue] {
        guard let response = reassembler.finishEarly() else { return [] }
        return [Self.json(for: response)]
    }

    private mutating func protocolError(_ char: CaptureCharacteristic, code: String, detail: String, line: Int) -> JSONValue {
        protocolErrorCount += 1
        return ["char": .string(char.rawValue), "error": .string(code), "detail": .string(detail), "line": .int(line)]
    }

    /// The JSON form of a Notification Source event.
    public static func json(for event: NotificationSourceEvent) -> JSONValue {
        var object: JSONObject = ["char": "ns"]
        object.append("event", .string(event.eventID.name ?? "reserved"))
        object.append("event_id", .int(Int(event.eventID.rawValue)))
        object.append("uid", .int(Int(event.notificationUID)))
        object.append("flags", .array(event.flags.names.map { .string($0) }))
        object.append("flags_raw", .int(Int(event.flags.rawValue)))
        object.append("category", .string(event.categoryID.name ?? "reserved"))
        object.append("category_id", .int(Int(event.categoryID.rawValue)))
        object.append("category_count", .int(Int(event.categoryCount)))
        return .object(object)
    }

    /// The JSON form of a Control Point request, with the phone's ATT error if it refused it.
    public static func json(for request: ControlPointRequest, attError: UInt8?) -> JSONValue {
        var object: JSONObject = ["char": "cp"]
        object.append("command", .string(request.commandID.name ?? "reserved"))
        switch request {
        case .getNotificationAttributes(let uid, let attributes):
            object.append("uid", .int(Int(uid)))
            object.append("attributes", .array(attributes.map { attribute in
                var entry: JSONObject = ["id": .int(Int(attribute.id.rawValue)), "name": .string(attribute.id.description)]
                if let max = attribute.maxLength { entry.append("max_length", .int(Int(max))) }
                return .object(entry)
            }))
        case .getAppAttributes(let appIdentifier, let attributes):
            object.append("app_id", .string(appIdentifier))
            object.append("attributes", .array(attributes.map {
                ["id": .int(Int($0.rawValue)), "name": .string($0.description)]
            }))
        case .performNotificationAction(let uid, let action):
            object.append("uid", .int(Int(uid)))
            object.append("action", .string(action.description))
        }
        if let attError {
            object.append("att_error", .int(Int(attError)))
            object.append("att_error_name", .string(ATTErrorCode(rawValue: attError).description))
        }
        return .object(object)
    }

    /// The JSON form of a reassembled Data Source response.
    public static func json(for response: DataSourceResponse) -> JSONValue {
        var object: JSONObject = ["char": "ds"]
        let isApp: Bool
        switch response.subject {
        case .notification(let uid):
            object.append("response", "notification_attributes")
            object.append("uid", .int(Int(uid)))
            isApp = false
        case .app(let identifier):
            object.append("response", "app_attributes")
            object.append("app_id", .string(identifier))
            isApp = true
        }
        object.append("complete", .bool(response.isComplete))
        object.append("missing", .array(response.missingAttributeIDs.map { .int(Int($0)) }))
        object.append("attributes", .array(response.attributes.map { json(for: $0, isApp: isApp) }))
        if !isApp, let message = response.value(of: .message),
           let sizeBytes = response.value(of: .messageSize), let size = parseMessageSize(sizeBytes) {
            object.append("truncated", .bool(isMessageTruncated(message: AttributeText(message).string, messageSize: size)))
        }
        return .object(object)
    }

    private static func json(for attribute: DataSourceAttribute, isApp: Bool) -> JSONValue {
        let name = isApp ? AppAttributeID(rawValue: attribute.rawID).description
            : NotificationAttributeID(rawValue: attribute.rawID).description
        let text = AttributeText(attribute.value)
        var object: JSONObject = [
            "id": .int(Int(attribute.rawID)), "name": .string(name), "length": .int(attribute.value.count),
            "value": .string(text.string), "utf8_valid": .bool(!text.wasRepaired),
        ]
        if text.wasRepaired { object.append("value_hex", .string(encodeHex(attribute.value))) }
        guard !isApp else { return .object(object) }
        switch NotificationAttributeID(rawValue: attribute.rawID) {
        case .date:
            switch DateAttribute(attribute.value) {
            case .valid(let date): object.append("date", .string(date.iso8601))
            case .empty: object.append("date", .null)
            case .malformed: object.append("date_error", "malformed")
            }
        case .messageSize:
            object.append("message_size", JSONValue(parseMessageSize(attribute.value)))
        default:
            break
        }
        return .object(object)
    }
}
