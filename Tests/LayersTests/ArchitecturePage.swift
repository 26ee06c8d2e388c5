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
