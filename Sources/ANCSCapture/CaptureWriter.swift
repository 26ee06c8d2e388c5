public import JSON

/// Writes `ancs-capture/1` lines: the inverse of `CaptureParser`.
public enum CaptureWriter {
    /// The JSON object of a record. `connection` adds `conn`; `extra` members come last.
    public static func object(for record: CaptureRecord, connection: String? = nil, extra: JSONObject = [:]) -> JSONObject {
        var object = JSONObject()
        switch record {
        case .header(let header):
            return header
        case .value(let time, let characteristic, let bytes, let attError):
            if let time { object.append("t", .double(roundedTime(time))) }
            if let connection { object.append("conn", .string(connection)) }
            object.append("char", .string(characteristic.rawValue))
            object.append("hex", .string(encodeHex(bytes)))
            if let attError { object.append("att_error", .int(Int(attError))) }
        case .event(let time, let event):
            if let time { object.append("t", .double(roundedTime(time))) }
            if let connection { object.append("conn", .string(connection)) }
            object.append("event", .string(event.rawValue))
        }
        for member in extra { object.append(member.key, member.value) }
        return object
    }

    /// One line of text (without the newline).
    public static func line(for record: CaptureRecord, connection: String? = nil, extra: JSONObject = [:]) -> String {
        JSONValue.object(object(for: record, connection: connection, extra: extra)).serialized
    }

    /// Seconds rounded to the microsecond, so lines stay short and exact enough to replay.
    public static func roundedTime(_ seconds: Double) -> Double {
        (seconds * 1_000_000).rounded() / 1_000_000
    }
}
