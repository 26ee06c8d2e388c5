/// How a setting's text becomes its value, and what it says when the text will not do.
///
/// Its messages name the key and, when there is one, the refused text:
/// "format must be text or json, not 'yaml'".
struct SettingParser<Value: Sendable>: Sendable {
    /// The values it takes, when they are a fixed set (for `--help` and completion).
    var choices: [String] = []
    let read: @Sendable (_ key: String, _ text: String) -> Result<Value, SettingError>

    /// Text `make` accepts; otherwise "KEY NEEDS, not 'TEXT'".
    static func checked(_ needs: String, choices: [String] = [], _ make: @escaping @Sendable (String) -> Value?) -> Self {
        Self(choices: choices) { key, text in
            make(text).map { .success($0) } ?? .failure(SettingError("\(key) \(needs), not '\(text)'"))
        }
    }

    /// One of `names`, which `make` turns into values: "KEY must be a, b or c, not 'TEXT'".
    static func choice(_ names: [String], _ make: @escaping @Sendable (String) -> Value?) -> Self {
        checked("must be \(spelledOut(names, "or"))", choices: names, make)
    }

    /// The same text, its value turned into another.
    func map<Other: Sendable>(_ transform: @escaping @Sendable (Value) -> Other) -> SettingParser<Other> {
        let read = self.read
        return SettingParser<Other>(choices: choices) { key, text in read(key, text).map(transform) }
    }
}

extension SettingParser where Value: CaseIterable & RawRepresentable, Value.RawValue == String {
    /// One of the cases, by raw value (in any case of letters when `lowercasing`).
    static func cases(lowercasing: Bool = false) -> Self {
        choice(Value.allCases.map(\.rawValue)) { Value(rawValue: lowercasing ? $0.lowercased() : $0) }
    }
}

extension SettingParser where Value == Bool {
    /// yes or no (also true/false, on/off, 1/0).
    static var yesNo: Self {
        choice(["yes", "no"]) { text in
            switch text.lowercased() {
            case "yes", "true", "on", "1": return true
            case "no", "false", "off", "0": return false
            default: return nil
            }
        }
    }
}

extension SettingParser where Value == String {
    /// Any text but the empty one; "KEY NEEDS" otherwise.
    static func nonEmpty(_ needs: String) -> Self {
        Self { key, text in text.isEmpty ? .failure(SettingError("\(key) \(needs)")) : .success(text) }
    }

    /// A path from the root: "KEY NEEDS, not 'TEXT'" otherwise.
    static func absolutePath(_ needs: String) -> Self {
        checked(needs) { $0.hasPrefix("/") ? $0 : nil }
    }
}

extension SettingParser where Value == Duration? {
    /// A whole number of seconds up to a week; 0 (nil) turns the check off.
    static func wholeSeconds(example: Int) -> Self {
        checked("needs a whole number of seconds from 0 (off) to 604800, such as \(example)") { text -> Duration?? in
            guard let seconds = Int(text), (0...604_800).contains(seconds) else { return nil }
            return .some(seconds == 0 ? nil : .seconds(seconds))
        }
    }
}

/// "a", "a or b", "a, b or c".
func spelledOut(_ words: [String], _ conjunction: String) -> String {
    guard let last = words.last, words.count > 1 else { return words.first ?? "" }
    return "\(words.dropLast().joined(separator: ", ")) \(conjunction) \(last)"
}
