import Foundation

/// ARCHITECTURE.md's layer table: its rows, lowest layer first, each with the targets it names.
///
/// The table is the first one under `## Layers`, rows of `| layer | targets | what they know |`;
/// a row's targets are the names in backticks in its second cell.
struct LayerTable {
    struct Row {
        var name: String
        var targets: [String]
    }

    private(set) var rows: [Row] = []
    /// What could not be read, one message per line.
    private(set) var problems: [String] = []

    init(page: String) {
        let lines = page.split(separator: "\n", omittingEmptySubsequences: false)
        guard let heading = lines.firstIndex(of: "## Layers") else {
            problems.append("no \"## Layers\" heading")
            return
        }
        let table = lines[heading...].drop { !$0.hasPrefix("|") }.prefix { $0.hasPrefix("|") }
        for line in table.dropFirst(2) {  // the header and its rule
            // "| a | b | c |" splits into "", " a ", " b ", " c ", "".
            let cells = line.split(separator: "|", omittingEmptySubsequences: false)
            guard cells.count == 5 else {
                problems.append("not a row of three cells: \(line)")
                continue
            }
            rows.append(Row(name: cells[1].trimmingCharacters(in: .whitespaces), targets: backticked(cells[2]).map(String.init)))
        }
        if rows.isEmpty { problems.append("no table under \"## Layers\"") }
    }
}

/// The spans of `text` written in backticks.
func backticked(_ text: some StringProtocol) -> [Substring] {
    Substring(text).split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
}

/// The Swift symbol a span in backticks names, split at its dots; nil when it names none.
///
/// A trailing ` { }`, an argument list `(…)` and generic arguments `<…>` are dropped first; what
/// is left must be names of letters and digits joined by dots, and not a file name (`Run.swift`).
/// It is a symbol when it starts with an uppercase letter (`LoopBound`, `Daemon.perform`,
/// `ANCS.DataSourceReassembler`), is a value's member (`loop.watch(fd:interest:)`), or is one
/// name in camelCase (`armTimer`) or called with argument labels (`advance(by:)`). Everything
/// else is not: paths, options and commands (`/`, `-`, spaces), C names (`sd_notify`, `fsync`,
/// `pause()`), JSON members and one-word commands (`media`, `decode`).
func symbolPath(_ span: Substring) -> [Substring]? {
    var name = span
    if name.hasSuffix(" { }") { name = name.dropLast(4) }
    var labelled = false
    if name.hasSuffix(")"), let open = name.firstIndex(of: "(") {
        labelled = name[open...].contains(":")
        name = name[..<open]
    }
    if name.hasSuffix(">"), let open = name.firstIndex(of: "<") { name = name[..<open] }
    let parts = name.split(separator: ".", omittingEmptySubsequences: false)
    guard parts.allSatisfy({ ($0.first?.isLetter ?? false) && $0.allSatisfy { $0.isLetter || $0.isNumber } }) else { return nil }
    if parts.count > 1, ["swift", "md", "json", "conf"].contains(parts[parts.count - 1]) { return nil }
    let first = parts[0]
    if first.first!.isUppercase || parts.count > 1 || labelled || first.contains(where: \.isUppercase) { return parts }
    return nil
}

/// What the Swift files under Sources declare, read as words: a declaration is a keyword
/// (`func`, `var`, `case`, `struct`, …) followed by the name, after a space.
struct SourceIndex {
    struct File {
        /// The directory under Sources: its target.
        var target: String
        /// Every name the file declares.
        var declared: Set<Substring> = []
        /// The types the file declares or extends.
        var types: Set<Substring> = []
        var text: String
    }

    private(set) var files: [File] = []
    /// The targets: directories of Sources and of Tests.
    private(set) var targets: Set<Substring> = []
    /// Names of Swift (its Synchronization module too), libdispatch and swift-nio the page may
    /// name; no source declares them.
    let outside: Set<Substring> = ["Int32", "Sendable", "Task", "DispatchQueue", "NIOLoopBound", "assumeIsolated", "Mutex", "Atomic"]

    init(root: URL) throws {
        let manager = FileManager.default
        for folder in ["Sources", "Tests"] {
            let names = try manager.contentsOfDirectory(atPath: root.appendingPathComponent(folder).path)
            targets.formUnion(names.map { Substring($0) })
        }
        let sources = root.appendingPathComponent("Sources")
        for path in try manager.subpathsOfDirectory(atPath: sources.path) where path.hasSuffix(".swift") {
            let text = try String(contentsOf: sources.appendingPathComponent(path), encoding: .utf8)
            var file = File(target: String(path.prefix { $0 != "/" }), text: text)
            let words = text.split(whereSeparator: \.isWhitespace)
            for (keyword, next) in zip(words, words.dropFirst()) {
                let name = next.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
                guard !name.isEmpty else { continue }
                switch keyword {
                case "struct", "class", "enum", "actor", "protocol":
                    file.types.insert(name)
                    file.declared.insert(name)
                case "extension": file.types.insert(name)
                case "func", "var", "let", "case", "typealias", "associatedtype": file.declared.insert(name)
                default: break
                }
            }
            files.append(file)
        }
    }

    /// Whether `path` (from `symbolPath`) exists. `Name`: a file declares it, or it is a target,
    /// a string literal of the sources (a D-Bus name: `"AcquireNotify"`) or one of `outside`.
    /// `Owner.member`: `Owner` exists and `member` is declared in a file that declares or extends
    /// the type `Owner`, or in module `Owner`'s files. `value.member`: `member` exists.
    func declares(_ path: [Substring]) -> Bool {
        guard let name = path.last else { return false }
        guard path.count > 1 else {
            return outside.contains(name) || targets.contains(name) || files.contains { $0.declared.contains(name) || $0.text.contains("\"\(name)\"") }
        }
        let owner = path[path.count - 2]
        if owner.first!.isLowercase { return declares([name]) }
        if outside.contains(owner) { return true }
        return declares(Array(path.dropLast()))
            && files.contains { ($0.types.contains(owner) || $0.target == owner) && $0.declared.contains(name) }
    }
}
