extension JSONValue {
    /// The value as compact JSON text on one line (fit for JSON Lines).
    ///
    /// Non-ASCII text is written as UTF-8; control characters, U+2028 and U+2029 are escaped.
    /// Non-finite numbers, which JSON cannot express, are written as null.
    public var serialized: String {
        var out = ""
        write(to: &out)
        return out
    }

    /// Appends the compact JSON text of this value to `out`.
    public func write(to out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let value): out += value ? "true" : "false"
        case .int(let value): out += String(value)
        case .double(let value): out += value.isFinite ? formatDouble(value) : "null"
        case .string(let value): writeString(value, to: &out)
        case .array(let elements):
            out += "["
            for (index, element) in elements.enumerated() {
                if index > 0 { out += "," }
                element.write(to: &out)
            }
            out += "]"
        case .object(let object):
            out += "{"
            for (index, member) in object.members.enumerated() {
                if index > 0 { out += "," }
                writeString(member.key, to: &out)
                out += ":"
                member.value.write(to: &out)
            }
            out += "}"
        }
    }
}

private func formatDouble(_ value: Double) -> String {
    if value.rounded() == value, abs(value) < 1e15 { return String(Int(value)) + ".0" }
    return String(value)  // the shortest text that reads back as the same Double
}

private func writeString(_ value: String, to out: inout String) {
    out += "\""
    let hex = Array("0123456789abcdef")
    for scalar in value.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case "\u{08}": out += "\\b"
        case "\u{0C}": out += "\\f"
        case "\u{00}"..."\u{1F}", "\u{7F}", "\u{2028}", "\u{2029}":
            let v = Int(scalar.value)
            out += "\\u"
            for shift in [12, 8, 4, 0] { out.append(hex[(v >> shift) & 0xF]) }
        default: out.unicodeScalars.append(scalar)
        }
    }
    out += "\""
}
