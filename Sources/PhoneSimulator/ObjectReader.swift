import JSON

/// Reads members of one line's object, remembering which were used so unknown keys
/// (usually typos) are reported.
struct ObjectReader {
    let object: JSONObject
    let line: Int
    var used: Set<String> = []

    init(object: JSONObject, line: Int) {
        self.object = object
        self.line = line
    }

    /// A reader for one line of JSON text that must hold an object.
    init(line text: String, number: Int) throws(ScenarioError) {
        let value: JSONValue
        do {
            value = try JSONValue(parsing: String(text.trimmingSpaces))
        } catch {
            throw ScenarioError(line: number, "not valid JSON: \(error)")
        }
        guard let object = value.objectValue else {
            throw ScenarioError(line: number, "expected a JSON object, found \(value.typeName)")
        }
        self.init(object: object, line: number)
    }

    func fail(_ message: String) -> ScenarioError { ScenarioError(line: line, message) }

    mutating func value(_ key: String) -> JSONValue? {
        used.insert(key)
        guard let v = object[key], v != .null else { return nil }
        return v
    }

    mutating func string(_ key: String) throws(ScenarioError) -> String? {
        guard let v = value(key) else { return nil }
        guard let s = v.stringValue else { throw fail("\"\(key)\" must be a string, not \(v.typeName)") }
        return s
    }

    /// One of `T`'s names at `key`, as an `expect` names an outcome.
    mutating func choice<T: RawRepresentable & CaseIterable>(_ key: String, of type: T.Type) throws(ScenarioError) -> T?
    where T.RawValue == String {
        guard let name = try string(key) else { return nil }
        guard let chosen = T(rawValue: name) else {
            throw fail("\"\(key)\" must be one of " + T.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))
        }
        return chosen
    }

    mutating func bool(_ key: String) throws(ScenarioError) -> Bool? {
        guard let v = value(key) else { return nil }
        guard let b = v.boolValue else { throw fail("\"\(key)\" must be true or false, not \(v.typeName)") }
        return b
    }

    mutating func number(_ key: String, min: Double = 0, max: Double = 86_400) throws(ScenarioError) -> Double? {
        guard let v = value(key) else { return nil }
        guard let d = v.doubleValue, d.isFinite else { throw fail("\"\(key)\" must be a number, not \(v.typeName)") }
        guard d >= min, d <= max else { throw fail("\"\(key)\" must be between \(min) and \(max), not \(d)") }
        return d
    }

    mutating func integer(_ key: String, min: Int, max: Int) throws(ScenarioError) -> Int? {
        guard let v = value(key) else { return nil }
        guard let i = v.intValue else { throw fail("\"\(key)\" must be an integer, not \(v.typeName)") }
        guard i >= min, i <= max else { throw fail("\"\(key)\" must be between \(min) and \(max), not \(i)") }
        return i
    }

    mutating func uid(_ key: String = "uid") throws(ScenarioError) -> UInt32 {
        guard let i = try integer(key, min: 0, max: Int(UInt32.max)) else { throw fail("\"\(key)\" is required") }
        return UInt32(i)
    }

    func finish() throws(ScenarioError) {
        let unknown = object.keys.filter { !used.contains($0) }
        guard unknown.isEmpty else {
            throw fail("unknown key\(unknown.count > 1 ? "s" : "") " + unknown.map { "\"\($0)\"" }.joined(separator: ", "))
        }
    }
}

extension StringProtocol {
    var trimmingSpaces: Substring {
        let s = Substring(self)
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let start = s.firstIndex(where: { !isSpace($0) }), let end = s.lastIndex(where: { !isSpace($0) }) else {
            return s[s.endIndex...]
        }
        return s[start...end]
    }

    var uppercasedASCII: String {
        String(decoding: utf8.map { (0x61...0x7A).contains($0) ? $0 - 0x20 : $0 }, as: UTF8.self)
    }

    func replacingAll(_ target: Character, with replacement: String) -> String {
        var out = ""
        for c in self { if c == target { out += replacement } else { out.append(c) } }
        return out
    }
}
