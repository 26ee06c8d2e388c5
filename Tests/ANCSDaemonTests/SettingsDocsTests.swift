import ANCSDaemon
import Foundation
import Testing
import TestSupport

/// The man page, the bash completion and the commented `ancsd.conf` hold prose of their own, so
/// they are written by hand and checked here against `Setting.all`: every setting, nothing
/// else, the same flags, placeholders, choices and reload kinds.
@Suite struct SettingsDocsTests {
    private func text(_ path: String) throws -> String {
        try String(contentsOf: repositoryRoot.appendingPathComponent(path), encoding: .utf8)
    }

    /// The options as `--help` shows them (`--fifo PATH`, `--no-advertise`), and `--config PATH`.
    private var usages: Set<String> { Set(Setting.all.map(\.usage) + ["--config PATH"]) }

    @Test func manPageListsEveryOptionOfRun() throws {
        let page = try ManPage(try text("docs/ancsd.8"))
        let options = page.section("OPTIONS OF RUN")
        let listed = options.indices.filter { options[$0] == ".TP" && $0 + 1 < options.count }.map { ManPage.plain(options[$0 + 1]) }
        #expect(Set(listed) == usages, "missing: \(usages.subtracting(listed)), extra: \(Set(listed).subtracting(usages))")
        #expect(listed == Setting.all.map(\.usage) + ["--config PATH"], "each once, in the table's order")
    }

    @Test func manPageNamesEveryKeyOfTheConfiguration() throws {
        let page = try ManPage(try text("docs/ancsd.8"))
        let lines = page.section("CONFIGURATION")
        let start = try #require(lines.firstIndex { $0.contains("without the dashes:") })
        let end = try #require(lines.firstIndex { $0.hasPrefix("A list given") })
        let keys = lines[(start + 1)..<end].filter { $0.hasPrefix(".B") }.map(ManPage.firstWord)
        #expect(keys == RunSettings.keys, "in the table's order")
    }

    /// SIGHUP's entry names each setting under what a reload does with it.
    @Test func manPageSaysWhatAReloadDoesWithEachKey() throws {
        let page = try ManPage(try text("docs/ancsd.8"))
        let lines = page.section("SIGNALS")
        let start = try #require(lines.firstIndex(of: ".B SIGHUP"))
        let end = try #require(lines[start...].dropFirst().firstIndex(of: ".TP"))
        let phrases: [(String, Setting.Reload)] = [
            ("take effect only when ancsd starts", .restart), ("make the outputs again", .outputs),
            ("apply to the sessions that start afterwards", .newSessions), ("apply at once", .live),
        ]
        var named: [String] = []
        var found: [Setting.Reload: [String]] = [:]
        for line in lines[start + 1..<end] {
            if line.hasPrefix(".B") {
                named.append(ManPage.firstWord(line))
            } else if let kind = phrases.first(where: { line.contains($0.0) })?.1 {
                found[kind, default: []] += named
                named = []
            } else if line != "and" && line != "or" {
                named = []  // a bold word inside a sentence, not a list of keys
            }
        }
        for kind in Setting.Reload.allCases {
            let expected = Setting.all.filter { $0.reload == kind }.map(\.key)
            #expect(found[kind] ?? [] == expected, "\(kind)")
        }
    }

    @Test func bashCompletionOffersEveryOptionOfRun() throws {
        let script = try text("completions/ancsd.bash")
        let line = try #require(script.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("run) COMPREPLY") })
        let words = try #require(line.split(separator: "\"").dropFirst().first).split(separator: " ").map(String.init)
        let options = Setting.all.map { $0.usage.split(separator: " ")[0] }.map(String.init) + ["--config", "--help"]
        #expect(Set(words) == Set(options), "missing: \(Set(options).subtracting(words)), extra: \(Set(words).subtracting(options))")

        // After an option that takes a value, the value is completed (never another option).
        let previous = Completion(script)
        for setting in Setting.all {
            let option = "--\(setting.key)"
            if let flag = setting.flag {
                #expect(previous.action(for: flag.option) == nil, "\(flag.option) takes no value")
                continue
            }
            let action = try #require(previous.action(for: option), "\(option) takes a value")
            if !setting.choices.isEmpty {
                #expect(action.contains("compgen -W \"\(setting.choices.joined(separator: " "))\""), "\(option): \(action)")
            } else if setting.placeholder == "DIR" {
                #expect(action.contains("_filedir -d"), "\(option): \(action)")
            } else if setting.placeholder == "PATH" {
                #expect(action.contains("_filedir") && !action.contains("_filedir -d"), "\(option): \(action)")
            }
        }
    }

    /// `systemd/ancsd.conf` shows every key once, set or commented out, with a value it takes.
    @Test func configurationFileShowsEveryKey() throws {
        var shown: [String] = []
        for line in try text("systemd/ancsd.conf").split(separator: "\n") {
            let setting = line.hasPrefix("#") ? line.dropFirst() : line[...]
            guard let equals = setting.range(of: " = "), setting.first?.isLetter == true,
                  setting[..<equals.lowerBound].allSatisfy({ $0.isLetter || $0 == "-" }) else { continue }
            let key = String(setting[..<equals.lowerBound])
            shown.append(key)
            var settings = RunSettings()
            #expect(throws: Never.self, "\(line)") { try settings.set(key, String(setting[equals.upperBound...])) }
        }
        #expect(shown.sorted() == RunSettings.keys.sorted(), "missing: \(Set(RunSettings.keys).subtracting(shown)), extra: \(Set(shown).subtracting(RunSettings.keys))")
    }
}

/// The lines of a man page's source, by section.
private struct ManPage {
    let lines: [String]

    init(_ text: String) throws { lines = text.split(separator: "\n").map(String.init) }

    /// The lines after `.SH NAME` up to the next section.
    func section(_ name: String) -> [String] {
        guard let start = lines.firstIndex(of: ".SH \(name)") else { return [] }
        return Array(lines[(start + 1)...].prefix { !$0.hasPrefix(".SH ") })
    }

    /// A font macro's first argument as shown: `.BR fifo\-mode ,` is `fifo-mode`.
    static func firstWord(_ line: String) -> String {
        let words = line.split(separator: " ")
        return words.count > 1 ? words[1].replacingOccurrences(of: "\\-", with: "-") : ""
    }

    /// A font macro's words as shown: `.BI \-\-fifo " PATH"` is `--fifo PATH`,
    /// `.BR \-\-format " " text | json` is `--format text|json`.
    static func plain(_ line: String) -> String {
        let arguments = line.split(separator: " ", maxSplits: 1).dropFirst().first ?? ""
        var words: [String] = []
        var quoted: String? = nil
        for word in arguments.split(separator: " ", omittingEmptySubsequences: false) {
            if var open = quoted {
                open += " " + word
                if word.hasSuffix("\"") { words.append(String(open.dropFirst().dropLast())); quoted = nil } else { quoted = open }
            } else if word.hasPrefix("\"") && !(word.count > 1 && word.hasSuffix("\"")) {
                quoted = String(word)
            } else {
                words.append(word.hasPrefix("\"") ? String(word.dropFirst().dropLast()) : String(word))
            }
        }
        return words.joined().replacingOccurrences(of: "\\-", with: "-").trimmingCharacters(in: .whitespaces)
    }
}

/// The `case $prev in` of a bash completion script: what follows an option.
private struct Completion {
    let cases: [(patterns: [String], action: String)]

    init(_ script: String) {
        let lines = script.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        let start = lines.firstIndex(of: "case $prev in") ?? lines.endIndex
        var cases: [(patterns: [String], action: String)] = []
        for line in lines[start...].dropFirst() {
            if line == "esac" { break }
            guard let close = line.firstIndex(of: ")"), line.first == "-" else {
                if !cases.isEmpty { cases[cases.count - 1].action += " " + line }
                continue
            }
            cases.append((line[..<close].split(separator: "|").map(String.init), String(line[line.index(after: close)...])))
        }
        self.cases = cases
    }

    /// What completes the word after `option` (bash takes the first pattern that matches).
    func action(for option: String) -> String? { cases.first { $0.patterns.contains(option) }?.action }
}
