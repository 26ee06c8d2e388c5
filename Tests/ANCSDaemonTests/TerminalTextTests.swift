import ANCSRuntime
import Testing

/// `TerminalText.sanitize`, the one function every printed or logged string from outside the
/// process goes through (issue 27: a phone's name with ESC and BEL reached the info log, `list`
/// and `status` raw; content logged at debug level kept its control characters).
@Suite struct TerminalTextTests {
    /// Each row: what arrives, what a terminal or log is given.
    static let table: [(String, String, String)] = [
        ("plain text is untouched", "Pebble Time β „quotes“ 👍", "Pebble Time β „quotes“ 👍"),
        ("combining marks and emoji sequences stay", "e\u{301} 👩‍👩‍👧", "e\u{301} 👩‍👩‍👧"),
        ("an ANSI colour sequence loses its ESC", "\u{1B}[31mred\u{1B}[0m", "[31mred [0m"),
        ("BEL and backspace become a space", "ring\u{07}\u{08}bell", "ring bell"),
        ("newlines cannot forge a log line", "name\nancsd: error: forged", "name ancsd: error: forged"),
        ("CR, tab and a run of controls collapse", "a\r\n\t\u{0B}b", "a b"),
        ("DEL and C1 controls (CSI 0x9B)", "x\u{7F}y\u{9B}2Jz", "x y 2Jz"),
        ("line and paragraph separators", "one\u{2028}two\u{2029}three", "one two three"),
        ("bidirectional overrides and marks are removed", "\u{202E}gnp.exe\u{202C} \u{200E}+1\u{200F}", "gnp.exe +1"),
        ("isolates and the Arabic letter mark are removed", "\u{2066}a\u{2069}\u{061C}b", "ab"),
        ("spaces at the ends are trimmed", "  \u{1B} name \u{07} ", "name"),
        ("the repair character of invalid UTF-8 stays visible", "com.example.\u{FFFD}", "com.example.\u{FFFD}"),
        ("empty stays empty", "", ""),
    ]

    @Test(arguments: table)
    func sanitizes(_ row: (String, String, String)) {
        #expect(TerminalText.sanitize(row.1) == row.2, "\(row.0)")
    }

    @Test func everyLogLineIsSanitized() {
        let logger = Logger(threshold: .debug, journald: false)
        #expect(logger.format(.info, "AA:BB:CC:DD:EE:01: connected (\u{1B}]0;pwned\u{07}iPhone\n)") == "ancsd: info: AA:BB:CC:DD:EE:01: connected ( ]0;pwned iPhone )")
        let journal = Logger(threshold: .debug, journald: true)
        #expect(journal.format(.debug, "added 1 Messages: \u{1B}[2J/\u{9B}x") == "<7>added 1 Messages: [2J/ x")
    }
}
