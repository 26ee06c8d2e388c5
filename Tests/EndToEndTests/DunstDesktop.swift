import Foundation
import JSON
import TestSupport

/// A real desktop for `ancsd desktop`: Xvfb on a display number of its own, a private session
/// bus, and dunst with Debian's default configuration (/etc/xdg/dunst/dunstrc, as a new user
/// has it) plus a drop-in that keeps popups until closed, records each popup it shows through
/// dunst's `script`, and answers its context menu through a `dmenu` stand-in.
final class DunstDesktop {
    /// One popup as dunst's `script` saw it (each time it was shown or replaced).
    struct Popup: Equatable {
        var id: Int
        var appName: String
        var summary: String
        var body: String
        var urgency: String
        var urls: [String]
        var iconPath: String
    }

    let directory: String
    let bus: PrivateBus
    let display: String
    private let xvfb: ChildProcess
    private var dunst: ChildProcess?
    private let environment: [String: String]

    init() throws {
        bus = try PrivateBus()
        directory = bus.directory
        // -displayfd: Xvfb takes a display number nobody uses and says which.
        xvfb = try ChildProcess(
            URL(fileURLWithPath: "/usr/bin/Xvfb"), ["-displayfd", "1", "-screen", "0", "1024x600x24", "-nolisten", "tcp"])
        let number = try xvfb.waitForLine(timeout: .seconds(30)) { Int($0) != nil }
        display = ":" + number
        let config = directory + "/config/dunst"
        try FileManager.default.createDirectory(atPath: config + "/dunstrc.d", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: "/etc/xdg/dunst/dunstrc", toPath: config + "/dunstrc")
        try """
            #!/bin/sh
            # dunst's script: one record per popup shown, fields separated by US, records by RS.
            printf '%s\\037' "$DUNST_ID" "$DUNST_APP_NAME" "$DUNST_SUMMARY" "$DUNST_BODY" "$DUNST_URGENCY" "$DUNST_URLS" "$DUNST_ICON_PATH" >> "\(directory)/popups"
            printf '\\036' >> "\(directory)/popups"
            """.write(toFile: directory + "/record", atomically: true, encoding: .utf8)
        try """
            #!/bin/sh
            # dunst's context menu: keep what it offers, choose the line holding the text in "choice".
            menu=$(cat)
            printf '%s\\n' "$menu" > "\(directory)/menu.tmp" && mv "\(directory)/menu.tmp" "\(directory)/menu"
            printf '%s\\n' "$menu" | grep -F -m1 -- "$(cat "\(directory)/choice")"
            exit 0
            """.write(toFile: directory + "/dmenu", atomically: true, encoding: .utf8)
        for script in ["record", "dmenu"] {
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory + "/" + script)
        }
        try "nothing".write(toFile: directory + "/choice", atomically: true, encoding: .utf8)
        try """
            [global]
                dmenu = \(directory)/dmenu
                history_length = 100
            [urgency_low]
                timeout = 0
            [urgency_normal]
                timeout = 0
            [urgency_critical]
                timeout = 0
            [zz-ancsd-test-record]
                appname = "*"
                script = \(directory)/record
            """.write(toFile: config + "/dunstrc.d/ancsd-test.conf", atomically: true, encoding: .utf8)
        environment = [
            "PATH": "/usr/bin:/bin", "HOME": directory, "XDG_CONFIG_HOME": directory + "/config", "DISPLAY": display,
            "DBUS_SESSION_BUS_ADDRESS": bus.address, "LANG": "C.UTF-8",
        ]
        dunst = try ChildProcess(URL(fileURLWithPath: "/usr/bin/dunst"), [], environment: environment)
        let deadline = ContinuousClock.now + .seconds(30)
        while try dunstctl(["debug"]).status != 0 {
            guard ContinuousClock.now < deadline else { throw TestFailure("dunst did not start:\n\(dunst?.standardError ?? "")") }
            Thread.sleep(forTimeInterval: 0.1)
        }
    }

    /// Runs dunstctl on this desktop; its exit status and output.
    @discardableResult
    func dunstctl(_ arguments: [String]) throws -> (status: Int32, text: String) {
        try run("/usr/bin/dunstctl", arguments)
    }

    private func run(_ tool: String, _ arguments: [String]) throws -> (status: Int32, text: String) {
        try runTool(tool, arguments, environment: environment)
    }

    /// Every popup dunst showed, in order (a replaced one again under its ID).
    var popups: [Popup] {
        guard let data = FileManager.default.contents(atPath: directory + "/popups") else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\u{1E}").compactMap { record in
            let fields = record.split(separator: "\u{1F}", omittingEmptySubsequences: false).map(String.init)
            guard fields.count >= 7, let id = Int(fields[0]) else { return nil }
            return Popup(
                id: id, appName: fields[1], summary: fields[2], body: fields[3], urgency: fields[4],
                urls: fields[5].split(separator: "\n").map(String.init), iconPath: fields[6])
        }
    }

    /// `dunstctl history`: the closed popups, newest first, as (field → value).
    func history() throws -> [[String: JSONValue]] {
        let result = try dunstctl(["history"])
        guard result.status == 0 else { throw TestFailure("dunstctl history failed: \(result.text)") }
        let json = try JSONValue(parsing: Array(result.text.utf8))
        return (json["data"]?.arrayValue?.first?.arrayValue ?? []).compactMap { entry in
            guard let object = entry.objectValue else { return nil }
            var fields: [String: JSONValue] = [:]
            for (key, value) in object { fields[key] = value["data"] }
            return fields
        }
    }

    /// The IDs of the popups on screen: shown, and not closed (a closed popup is in the history).
    func displayedIDs() throws -> Set<Int> {
        let closed = Set(try history().compactMap { $0["id"]?.intValue })
        return Set(popups.map(\.id)).subtracting(closed)
    }

    /// Where `id` is in dunst's stack (what `dunstctl action N` counts): critical first, then
    /// oldest first.
    func position(of id: Int) throws -> Int? {
        let latest = Dictionary(popups.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
        let shown = try displayedIDs().sorted { a, b in
            let (ua, ub) = (latest[a]?.urgency == "CRITICAL", latest[b]?.urgency == "CRITICAL")
            return ua != ub ? ua : a < b
        }
        return shown.firstIndex(of: id)
    }

    /// Opens dunst's context menu and chooses the line that contains `choice` (none: "");
    /// returns every line the menu offered.
    @discardableResult
    func contextMenu(choosing choice: String) throws -> [String] {
        try? FileManager.default.removeItem(atPath: directory + "/menu")
        try (choice.isEmpty ? "\u{1}nothing" : choice).write(toFile: directory + "/choice", atomically: true, encoding: .utf8)
        // dunst refuses a menu while the last one is still being answered (its result is
        // dispatched 50 ms after dmenu ends): ask again until it opens.
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            let result = try dunstctl(["context"])
            guard result.status == 0 else { throw TestFailure("dunstctl context failed: \(result.text)") }
            let retry = ContinuousClock.now + .seconds(1)
            repeat {
                Thread.sleep(forTimeInterval: 0.05)
                // Checked last right before asking again: a menu that answered after this
                // check is still locked (for 50 ms) when dunst gets the next request.
                if let data = FileManager.default.contents(atPath: directory + "/menu") {
                    return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
                }
            } while ContinuousClock.now < retry
        }
        throw TestFailure("dunst never opened its context menu:\n\(dunst?.standardError ?? "")")
    }

    /// A screenshot of the whole screen as PNG at `path`.
    func screenshot(to path: String) throws {
        let result = try run("/usr/bin/import", ["-display", display, "-window", "root", path])
        guard result.status == 0 else { throw TestFailure("import failed: \(result.text)") }
    }

    /// Waits until `predicate` holds; fails after `timeout` with what dunst showed.
    @discardableResult
    func wait<T>(_ what: String, timeout: Duration = .seconds(30), _ predicate: () throws -> T?) throws -> T {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let value = try predicate() { return value }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw TestFailure("""
            dunst never showed \(what); popups:
            \(popups.map { "#\($0.id) \($0.appName) | \($0.summary) | \($0.body) | \($0.urgency)" }.joined(separator: "\n"))
            history: \((try? history().compactMap { $0["id"]?.intValue }) ?? [])
            dunst: \(dunst?.standardError ?? "")
            """)
    }

    func stop() {
        _ = try? dunst?.stop(timeout: .seconds(5))
        dunst = nil
        _ = try? xvfb.stop(timeout: .seconds(5))
        bus.stop()
    }

    deinit { stop() }
}

/// What a popup's markup (dunst's `message`) shows as text: tags dropped, entities read.
func shownText(_ markup: String) -> String {
    var text = ""
    var inTag = false
    for character in markup {
        if character == "<" { inTag = true } else if character == ">" && inTag { inTag = false } else if !inTag { text.append(character) }
    }
    var out = ""
    var rest = Substring(text)
    while let ampersand = rest.firstIndex(of: "&") {
        out += rest[..<ampersand]
        rest = rest[ampersand...]
        guard let semicolon = rest.firstIndex(of: ";"), rest.distance(from: rest.startIndex, to: semicolon) <= 10 else {
            out += "&"
            rest = rest.dropFirst()
            continue
        }
        let name = rest[rest.index(after: rest.startIndex)..<semicolon]
        let named = ["amp": "&", "lt": "<", "gt": ">", "quot": "\"", "apos": "'"]
        if let value = named[String(name)] {
            out += value
        } else if name.hasPrefix("#"), let code = UInt32(name.dropFirst()), let scalar = Unicode.Scalar(code) {
            out.unicodeScalars.append(scalar)
        } else {
            out += rest[...semicolon]
        }
        rest = rest[rest.index(after: semicolon)...]
    }
    return out + rest
}
