import DBus
import Foundation
import Testing
import TestSupport

private let musicPhone = "AA:BB:CC:DD:EE:01"
private let musicPlayer = "ancsd_aabbccddee01"

private let musicScenario = """
    {"scenario":"mpris","devices":[{"address":"\(musicPhone)","name":"Ada's iPhone"}],"ams":true,"media":{"player":"Music","title":"Clair de lune","artist":"Claude Debussy","album":"Suite bergamasque","duration":300,"state":"playing","volume":0.5,"queue":[{"title":"Rêverie","artist":"Claude Debussy","album":"Piano Works","duration":250}],"commands":["play","pause","toggle","next","previous","volume_up","volume_down"]}}
    {"do":"wait_subscribed","timeout":30}
    {"do":"wait_state","media_commands_received":4,"timeout":120}
    {"after":0.5,"do":"media_commands","commands":["play","pause","toggle","previous"]}
    {"do":"sleep","seconds":300}
    {"do":"end"}
    """

/// `ancsd desktop`'s MPRIS player end to end: `ancsd run` against the simulated iPhone with the
/// Apple Media Service on one private bus, the companion on a second (the session bus), and
/// `playerctl` reading and driving the phone's player through both. Part of the serialized
/// DaemonTests suite, so that daemon runs do not overlap.
extension DaemonTests {
    @Test func mprisPlayerDrivesTheSimulatedPhone() async throws {
        try UnitRun.needs("playerctl")
        let system = try PrivateBus()
        let session = try PrivateBus()
        let control = system.directory + "/control"
        let scenario = system.directory + "/mpris.jsonl"
        try musicScenario.write(toFile: scenario, atomically: true, encoding: .utf8)
        let daemon = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", system.address, "run", "--format", "json", "--log-level", "debug", "--control", control])
        defer { _ = try? daemon.stop(timeout: .seconds(5)) }
        try daemon.waitForStandardError(containing: "bluetoothd is not running")
        let desktop = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["desktop", "--control", control, "--bus", session.address, "--log-level", "debug", "--state-dir", session.directory])
        defer { _ = try? desktop.stop(timeout: .seconds(5)) }
        try desktop.waitForStandardError(containing: "connected to ancsd at \(control)")
        let phone = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", system.address, "--scenario", scenario])
        defer { _ = try? phone.stop(timeout: .seconds(5)) }

        let environment = ["DBUS_SESSION_BUS_ADDRESS": session.address, "PATH": "/usr/bin:/bin", "HOME": system.directory]
        func playerctl(_ arguments: String...) throws -> String {
            try runTool("/usr/bin/playerctl", arguments, environment: environment).text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        func waitFor(_ what: String, _ expected: String, _ arguments: String...) throws {
            let deadline = ContinuousClock.now + .seconds(30)
            var last = ""
            while ContinuousClock.now < deadline {
                last = try runTool("/usr/bin/playerctl", arguments, environment: environment).text
                    .trimmingCharacters(in: .whitespacesAndNewlines)
                if last == expected { return }
                Thread.sleep(forTimeInterval: 0.1)
            }
            throw TestFailure("\(what): playerctl \(arguments.joined(separator: " ")) said '\(last)', not '\(expected)'; desktop:\n\(desktop.standardError)")
        }

        // The phone's player appears with its first state, as the simulated phone plays it.
        try waitFor("the player on the bus", musicPlayer, "-l")
        try waitFor("the track", "Clair de lune|Claude Debussy|Suite bergamasque|300000000",
                    "-p", musicPlayer, "metadata", "--format", "{{title}}|{{artist}}|{{album}}|{{mpris:length}}")
        #expect(try playerctl("-p", musicPlayer, "status") == "Playing")

        // play-pause reaches the phone (toggle) and its new state comes back.
        _ = try playerctl("-p", musicPlayer, "play-pause")
        try waitFor("paused on the phone", "Paused", "-p", musicPlayer, "status")
        // next: the next track of the phone's queue.
        _ = try playerctl("-p", musicPlayer, "next")
        try waitFor("the next track", "Rêverie", "-p", musicPlayer, "metadata", "title")
        // The volume: two steps of 1/16 from 0.5.
        _ = try playerctl("-p", musicPlayer, "volume", "0.625")
        try waitFor("the phone's volume", "0.625000", "-p", musicPlayer, "volume")
        // After those four commands the phone takes no next any more: CanGoNext follows.
        let bus = try await DBusConnection.connect(to: .address(session.address))
        let name = try BusName("org.mpris.MediaPlayer2." + musicPlayer)
        let deadline = ContinuousClock.now + .seconds(30)
        while try await bus.getProperty(
            destination: name, path: "/org/mpris/MediaPlayer2", interface: "org.mpris.MediaPlayer2.Player", name: "CanGoNext") != .bool(false) {
            guard ContinuousClock.now < deadline else { throw TestFailure("CanGoNext stayed true") }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(try await bus.getProperty(
            destination: name, path: "/org/mpris/MediaPlayer2", interface: "org.mpris.MediaPlayer2", name: "Identity") == .string("iPhone (Ada's iPhone)"))

        // A desktop program's flood of PlayPause: at most 10 a second reach the phone, the rest
        // are refused busy (a D-Bus error to the caller), and the companion says so once.
        var refused = 0
        for _ in 0..<60 {
            do {
                _ = try await bus.call(
                    destination: name, path: "/org/mpris/MediaPlayer2", interface: "org.mpris.MediaPlayer2.Player", member: "PlayPause",
                    expecting: .empty, timeout: .seconds(10))
            } catch {
                refused += 1
                #expect("\(error)".contains("Busy"), "\(error)")
            }
        }
        #expect(refused >= 40, "\(refused) of 60 refused")
        let saidRefused = desktop.standardError.split(separator: "\n").filter { !$0.contains("debug:") && $0.contains("ancsd refused toggle") }
        #expect(saidRefused.count == 1, "\(saidRefused)")

        // The phone goes: so does its player.
        _ = try phone.stop()
        while try await bus.nameOwner(name) != nil {
            guard ContinuousClock.now < deadline + .seconds(30) else { throw TestFailure("the player stayed after the phone went") }
            try await Task.sleep(for: .milliseconds(100))
        }
        await bus.close()
        // Track titles stay out of the log except at debug level.
        #expect(!desktop.standardError.split(separator: "\n").contains { !$0.contains("debug:") && ($0.contains("Clair") || $0.contains("Rêverie")) })
    }

    /// A NUL in the phone's track (ID3v2.4 separates several values with one) reaches the
    /// companion from the simulated phone through the daemon: the player appears with it, the
    /// values separated, and follows the phone's next state.
    @Test func mprisPlayerTakesANULFromTheSimulatedPhone() async throws {
        try UnitRun.needs("playerctl")
        let system = try PrivateBus()
        let session = try PrivateBus()
        let control = system.directory + "/control"
        let scenario = system.directory + "/mpris-nul.jsonl"
        try nulScenario.write(toFile: scenario, atomically: true, encoding: .utf8)
        let daemon = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", system.address, "run", "--format", "json", "--control", control])
        defer { _ = try? daemon.stop(timeout: .seconds(5)) }
        try daemon.waitForStandardError(containing: "bluetoothd is not running")
        let desktop = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["desktop", "--control", control, "--bus", session.address, "--state-dir", session.directory])
        defer { _ = try? desktop.stop(timeout: .seconds(5)) }
        try desktop.waitForStandardError(containing: "connected to ancsd at \(control)")
        let phone = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", system.address, "--scenario", scenario])
        defer { _ = try? phone.stop(timeout: .seconds(5)) }

        let environment = ["DBUS_SESSION_BUS_ADDRESS": session.address, "PATH": "/usr/bin:/bin", "HOME": system.directory]
        func waitFor(_ what: String, _ expected: String, _ arguments: String...) throws {
            let deadline = ContinuousClock.now + .seconds(30)
            var last = ""
            while ContinuousClock.now < deadline {
                last = try runTool("/usr/bin/playerctl", arguments, environment: environment).text
                    .trimmingCharacters(in: .whitespacesAndNewlines)
                if last == expected { return }
                Thread.sleep(forTimeInterval: 0.1)
            }
            throw TestFailure("\(what): playerctl \(arguments.joined(separator: " ")) said '\(last)', not '\(expected)'; desktop:\n\(desktop.standardError)")
        }
        try waitFor("the player on the bus", musicPlayer, "-l")
        try waitFor("the track, its values separated", "Clair / de lune|Claude Debussy, Maurice Ravel|Suite bergamasque",
                    "-p", musicPlayer, "metadata", "--format", "{{title}}|{{artist}}|{{album}}")
        // The daemon's JSON carried the NUL as it came.
        #expect(daemon.lines.contains { $0.text.contains(#""title":"Clair\u0000de lune""#) })
        let bus = try await DBusConnection.connect(to: .address(session.address))
        let metadata = try await bus.getProperty(
            destination: try BusName("org.mpris.MediaPlayer2." + musicPlayer), path: "/org/mpris/MediaPlayer2",
            interface: "org.mpris.MediaPlayer2.Player", name: "Metadata")
        await bus.close()
        #expect(metadata.stringKeyedDictionary?["xesam:artist"] == .stringArray(["Claude Debussy", "Maurice Ravel"]))
        // The phone pauses: the status follows.
        try waitFor("paused on the phone", "Paused", "-p", musicPlayer, "status")
        #expect(!desktop.standardError.contains("cannot put"), "\(desktop.standardError)")
        #expect(!desktop.standardError.contains("refused"), "the NUL never reached the bus: \(desktop.standardError)")
    }
}

private let nulScenario = """
    {"scenario":"mpris-nul","devices":[{"address":"\(musicPhone)","name":"Ada's iPhone"}],"ams":true,"media":{"player":"Music","title":"Clair\\u0000de lune","artist":"Claude Debussy\\u0000Maurice Ravel","album":"Suite bergamasque","duration":300,"state":"playing","volume":0.5,"commands":["play","pause","toggle"]}}
    {"do":"wait_subscribed","timeout":30}
    {"after":3,"do":"media_pause"}
    {"do":"sleep","seconds":300}
    {"do":"end"}
    """

