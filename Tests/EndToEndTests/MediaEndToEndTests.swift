import Foundation
import JSON
import Testing
import TestSupport

private let phone = "AA:BB:CC:DD:EE:01"
/// Longer than fits one Entity Update notification at MTU 185 (179 bytes of value): the phone
/// cuts it and ancsd reads it whole through Entity Attribute.
private let longTitle = "Variations on a theme that never ends, " + String(repeating: "and then the theme comes back once more, ", count: 5) + "fin"

private func scenario(characteristics: String? = nil) -> String {
    let subset = characteristics.map { #","ams_characteristics":\#($0)"# } ?? ""
    return """
        {"scenario":"media","mtu":185,"devices":[{"address":"\(phone)","name":"Ada's iPhone"}],"ams":true\(subset),"media":{"player":"Music","title":"Clair de lune","artist":"Claude Debussy","album":"Suite bergamasque","duration":300,"state":"playing","volume":0.5,"commands":["play","pause","toggle"]}}
        {"do":"wait_subscribed","timeout":30}
        {"do":"wait_state","media_commands_received":1,"timeout":120}
        {"after":0.3,"do":"media_track","title":"\(longTitle)","artist":"Anon","album":"Long Ones","duration":90}
        {"after":1.0,"do":"media_service","present":false}
        {"after":4.0,"do":"media_service","present":true}
        {"do":"sleep","seconds":300}
        {"do":"end"}
        """
}

/// The phone's player end to end: `ancsd run` against the simulated iPhone serving the Apple
/// Media Service, its `media` events, and `ancsd media` reading and commanding the player
/// through the control socket. Part of the serialized DaemonTests suite.
extension DaemonTests {
    @Test func thePhonesPlayerReachesTheOutputAndTakesCommands() async throws {
        let bus = try PrivateBus()
        let control = bus.directory + "/control"
        let file = bus.directory + "/media.jsonl"
        try scenario().write(toFile: file, atomically: true, encoding: .utf8)
        let ancsd = builtProductsDirectory.appendingPathComponent("ancsd")
        let daemon = try ChildProcess(ancsd, ["--bus", bus.address, "run", "--format", "json", "--control", control])
        defer { _ = try? daemon.stop(timeout: .seconds(5)) }
        try daemon.waitForStandardError(containing: "bluetoothd is not running")
        let sim = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", bus.address, "--scenario", file])
        defer { _ = try? sim.stop(timeout: .seconds(5)) }

        func media(_ predicate: @escaping (JSONObject) -> Bool) throws -> JSONObject {
            let line = try daemon.waitForLine(timeout: .seconds(30)) { text in
                guard let object = try? JSONValue(parsing: Array(text.utf8)).objectValue, object["type"] == "media" else { return false }
                return predicate(object)
            }
            return try JSONValue(parsing: Array(line.utf8)).objectValue ?? [:]
        }
        func cli(_ arguments: String...) throws -> (status: Int32, text: String) {
            try runTool(ancsd.path, ["media"] + arguments + ["--control", control])
        }

        // The player's state as one event, every member present.
        let first = try media { $0["title"] == "Clair de lune" }
        #expect(first["device"] == .string(phone))
        #expect(first["player"] == "Music")
        #expect(first["state"] == "playing")
        #expect(first["artist"] == "Claude Debussy")
        #expect(first["album"] == "Suite bergamasque")
        #expect(first["duration"]?.doubleValue == 300)
        #expect(first["volume"]?.doubleValue == 0.5)
        #expect(first["commands"] == .array(["play", "pause", "toggle"]))
        #expect(first["truncated"] == .array([]))

        // ancsd media shows it; a command the player does not take is refused with those it does.
        let shown = try cli()
        #expect(shown.status == 0)
        #expect(shown.text.contains("\(phone): Music playing") && shown.text.contains("Clair de lune"), "\(shown.text)")
        let refused = try cli(phone, "next")
        #expect(refused.status == 1)
        #expect(refused.text.contains("play, pause, toggle"), "\(refused.text)")

        // toggle (the only phone: no DEVICE needed) reaches the phone, and its new state comes back.
        let toggled = try cli("toggle")
        #expect(toggled.status == 0, "\(toggled.text)")
        _ = try media { $0["state"] == "paused" }

        // A title longer than a notification carries: read whole through Entity Attribute.
        let long = try media { $0["artist"] == "Anon" && $0["album"] == "Long Ones" }
        #expect(long["title"] == .string(longTitle))
        #expect(long["truncated"] == .array([]))

        // The phone withdraws AMS: no player, and a command finds none.
        try daemon.waitForStandardError(containing: "AMS stopped")
        #expect(try cli().text.contains("no phone's player is known"))
        let none = try cli(phone, "play")
        #expect(none.status == 1)
        #expect(none.text.contains("offers no media player"), "\(none.text)")

        // ... and offers it again: ancsd follows, and the player's state comes again.
        try daemon.waitForStandardError(containing: "subscribed to AMS", occurrences: 2, timeout: .seconds(30))
        _ = try daemon.waitForLine(timeout: .seconds(30)) { $0.contains(#""type":"media""#) && $0.contains(#""state":"paused""#) && $0.contains("Anon") }
        #expect(try cli(phone, "play").status == 0)
        // What plays is content: not in the log at the default level.
        #expect(!daemon.standardError.contains("Clair de lune") && !daemon.standardError.contains("Anon"))
    }

    @Test func aPhoneThatOffersOnlyRemoteCommandTakesCommandsAndTellsNoTrack() async throws {
        let bus = try PrivateBus()
        let control = bus.directory + "/control"
        let file = bus.directory + "/media.jsonl"
        let steps = """
            {"scenario":"media-subset","devices":[{"address":"\(phone)","name":"Ada's iPhone"}],"ams":true,"ams_characteristics":["remote_command"],"media":{"player":"Music","title":"Clair de lune","state":"playing","commands":["play","pause"]}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"wait_state","media_commands_received":1,"timeout":120}
            {"after":0.3,"do":"media_commands","commands":["play"]}
            {"do":"sleep","seconds":300}
            {"do":"end"}
            """
        try steps.write(toFile: file, atomically: true, encoding: .utf8)
        let ancsd = builtProductsDirectory.appendingPathComponent("ancsd")
        let daemon = try ChildProcess(ancsd, ["--bus", bus.address, "run", "--format", "json", "--control", control])
        defer { _ = try? daemon.stop(timeout: .seconds(5)) }
        try daemon.waitForStandardError(containing: "bluetoothd is not running")
        let sim = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", bus.address, "--scenario", file])
        defer { _ = try? sim.stop(timeout: .seconds(5)) }

        let line = try daemon.waitForLine(timeout: .seconds(30)) { $0.contains(#""type":"media""#) }
        let event = try JSONValue(parsing: Array(line.utf8)).objectValue ?? [:]
        #expect(event["commands"] == .array(["play", "pause"]))
        #expect(event["title"] == .null && event["state"] == .null, "no Entity Update: no track, no state")
        let sent = try runTool(ancsd.path, ["media", phone, "pause", "--control", control])
        #expect(sent.status == 0, "\(sent.text)")
        _ = try daemon.waitForLine(timeout: .seconds(30)) { $0.contains(#""type":"media""#) && $0.contains(#""commands":["play"]"#) }
    }
}
