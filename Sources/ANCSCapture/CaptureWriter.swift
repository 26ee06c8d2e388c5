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

/// `2026-11-30T10:12:00.123456Z` for microseconds since the Unix epoch (UTC).
public func iso8601UTC(unixMicroseconds: Int64) -> String {
    let seconds = unixMicroseconds >= 0 ? unixMicroseconds / 1_000_000 : (unixMicroseconds - 999_999) / 1_000_000
    let micros = unixMicroseconds - seconds * 1_000_000
    var days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
    let secondOfDay = seconds - days * 86_400
    // Howard Hinnant's civil_from_days.
    days += 719_468
    let era = (days >= 0 ? days : days - 146_096) / 146_097
    let dayOfEra = days - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let mp = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * mp + 2) / 5 + 1
    let month = mp < 10 ? mp + 3 : mp - 9
    let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    func pad(_ value: Int64, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }
    return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3600, 2)):\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2)).\(pad(micros, 6))Z"
}
