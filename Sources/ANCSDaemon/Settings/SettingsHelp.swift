/// `ancsd run --help`'s options and its words on SIGHUP, rendered from `Setting.all`.
extension Setting {
    /// The column where an option's description starts.
    static let helpColumn = 23
    /// The width help lines are wrapped to.
    static let helpWidth = 90

    /// One entry per setting, in the table's order: its usage and its help, with
    /// `(config: KEY = VALUE)` after a flag's.
    public static var optionsHelp: String {
        all.map { setting in
            let text = setting.flag.map { "\(setting.help) (config: \(setting.key) = \($0.value))" } ?? setting.help
            return helpEntry(setting.usage, text)
        }.joined(separator: "\n")
    }

    /// One option of a help text: two spaces and `usage`, then `text` wrapped from column 23
    /// (below `usage` when it reaches that column).
    public static func helpEntry(_ usage: String, _ text: String) -> String {
        let head = "  " + usage
        let indent = String(repeating: " ", count: helpColumn)
        let lines = wrap(text, width: helpWidth - helpColumn)
        guard head.count < helpColumn, let first = lines.first else {
            return ([head] + lines.map { indent + $0 }).joined(separator: "\n")
        }
        let padded = head + String(repeating: " ", count: helpColumn - head.count) + first
        return ([padded] + lines.dropFirst().map { indent + $0 }).joined(separator: "\n")
    }

    /// What SIGHUP does with each kind of setting, wrapped to the help's width.
    public static var reloadHelp: String {
        func keys(_ reload: Reload) -> String { spelledOut(all.filter { $0.reload == reload }.map(\.key), "and") }
        let text = """
            SIGHUP re-reads the configuration and applies it without dropping the phones: \(keys(.outputs)) make the \
            outputs again; \(keys(.newSessions)) apply to the sessions that start afterwards; \(keys(.restart)) take \
            effect only when ancsd starts (a reload that changes one changes nothing); the others apply at once.
            """
        return wrap(text, width: helpWidth).joined(separator: "\n")
    }

    /// `text` in lines of at most `width` characters, broken between words.
    static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if line.isEmpty {
                line = String(word)
            } else if line.count + 1 + word.count <= width {
                line += " " + word
            } else {
                lines.append(line)
                line = String(word)
            }
        }
        if !line.isEmpty { lines.append(line) }
        return lines
    }
}
