/// The map of the house as the doc comment at the top of Package.swift draws it: every target
/// with its layer and the targets it may use.
///
/// An entry is `/// - `Name` [A, B]: what it is.` under a `/// Layer N: …` heading; the brackets
/// may wrap onto lines that start with `///   `, and are left out for a target that uses none.
struct LayerMap {
    struct Entry {
        var layer: Int
        var allowed: Set<String>
    }

    /// The targets the map names, by name.
    private(set) var entries: [String: Entry] = [:]
    /// What could not be read, one message per line of the comment.
    private(set) var problems: [String] = []

    init(manifest: String) {
        var layer: Int? = nil
        var pending: (text: String, line: Int)? = nil
        let lines = manifest.split(separator: "\n", omittingEmptySubsequences: false)
        let start = lines.firstIndex { $0.hasPrefix("///") } ?? lines.endIndex
        for (index, raw) in lines.enumerated().dropFirst(start) {
            guard raw.hasPrefix("///") else { break }  // the comment is over
            let text = raw.dropFirst(3)
            if text.hasPrefix("   "), let entry = pending {
                pending = (entry.text + " " + text.trimmingPrefix(while: { $0 == " " }), entry.line)
                continue
            }
            if let entry = pending { add(entry.text, line: entry.line, layer: layer) }
            pending = nil
            if text.hasPrefix(" Layer ") {
                let number = text.dropFirst(" Layer ".count).prefix { $0.isNumber }
                layer = Int(number)
                if layer == nil { problems.append("line \(index + 1): a layer heading without a number: \(raw)") }
            } else if text.hasPrefix(" - `") {
                pending = (String(text.dropFirst(" - ".count)), index + 1)
            }
        }
        if let entry = pending { add(entry.text, line: entry.line, layer: layer) }
    }

    private mutating func add(_ text: String, line: Int, layer: Int?) {
        // `Name` [A, B]: description
        let parts = text.split(separator: "`", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[1].isEmpty, let layer else {
            problems.append("line \(line): not an entry of a layer: \(text)")
            return
        }
        let name = String(parts[1])
        var rest = parts[2][...]
        var allowed: Set<String> = []
        if rest.hasPrefix(" [") {
            guard let close = rest.firstIndex(of: "]") else {
                problems.append("line \(line): \(name): the list of targets has no closing bracket")
                return
            }
            let list = rest[rest.index(rest.startIndex, offsetBy: 2)..<close]
            allowed = Set(list.split(separator: ",").map { String($0.trimmingPrefix(while: { $0 == " " })) })
            rest = rest[rest.index(after: close)...]
        }
        guard rest.hasPrefix(":") else {
            problems.append("line \(line): \(name): a colon and what the target is must follow the name or the list")
            return
        }
        if entries[name] != nil { problems.append("line \(line): \(name) is on the map twice") }
        entries[name] = Entry(layer: layer, allowed: allowed)
    }
}
