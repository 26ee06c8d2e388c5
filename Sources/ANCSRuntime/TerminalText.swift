/// Text from outside the process (a phone's device name, notification fields, app
/// identifiers) made safe for one line of a terminal or a log: the one function every path
/// that prints such text uses (logs, `--format text`, `list`, `status`, the desktop and MQTT
/// titles). Machine-readable outputs (JSON) keep the text exact and escape it themselves.
public enum TerminalText {
    /// Control characters (C0, DEL, C1) and line or paragraph separators become one space (runs
    /// collapse); bidirectional overrides, isolates and marks are removed; spaces at the ends
    /// are trimmed. Nothing else changes, so ordinary text reads as sent.
    public static func sanitize(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        var lastWasSpace = false
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x061C:
                continue
            case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029:
                if !lastWasSpace { out.append(" ") }
                lastWasSpace = true
            default:
                out.append(scalar)
                lastWasSpace = scalar == " "
            }
        }
        var result = Substring(String(out))
        while result.first == " " { result.removeFirst() }
        while result.last == " " { result.removeLast() }
        return String(result)
    }
}
