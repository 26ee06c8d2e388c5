import ANCS
@testable import ANCSDaemon
import ANCSRuntime
import ControlProtocol
import Foundation
import JSON
import MQTT
import Synchronization
import Testing
import TestSupport

private let ada = "AA:BB:CC:DD:EE:01"
private let device = "aabbccddee01"

/// A phone whose player takes `play` and `pause` and refuses the rest, as the daemon answers.
private final class FakePhone: PhoneActions {
    private let calls = Mutex<[String]>([])
    var mediaCommands: [String] { calls.withLock { $0 } }

    func performAction(_ action: ActionID, uid: UInt32, device: String) async -> JSONObject {
        ["ok": false, "error": ["code": "failed", "message": "not in this test"]]
    }

    func performMediaCommand(_ command: ControlMediaCommand, device: String) async -> JSONObject {
        calls.withLock { $0.append("\(command.rawValue) \(device)") }
        guard [.play, .pause].contains(command) else {
            return ["ok": false, "error": ["code": "unsupported_command", "message": "the player takes play, pause now"]]
        }
        return ["ok": true, "result": "sent"]
    }
}

/// `topic payload` lines of a mosquitto_sub (`(null)` for an empty payload), for one topic.
private func payloads(_ subscriber: ChildProcess, _ topic: String) -> [String] {
    subscriber.lines.map(\.text).filter { $0.hasPrefix(topic + " ") }.map { String($0.dropFirst(topic.count + 1)) }
}

/// The player's state with these commands supported.
private func media(_ commands: [String], title: String = "Bohemian Rhapsody") -> OutputRecord {
    OutputRecord(.service(MediaOutput.output(ControlMedia(
        device: ada, player: "Music", state: "playing", rate: 1, elapsed: 12, position: 12, artist: "Queen", album: "A Night at the Opera",
        title: title, duration: 355, commands: commands))))
}

/// MQTTSink and the phone's player against a real mosquitto: the retained state, Home Assistant's
/// entities (buttons only with `--mqtt-actions`, removed when a command goes, again on Home
/// Assistant's birth message) and the command topic through `PhoneActions`.
@Suite(.serialized) struct MQTTMediaTests {
    let discovery = "homeassistant"

    func sink(_ broker: MosquittoBroker, actions: Bool, executor: DaemonExecutor) throws -> MQTTSink {
        var settings = MQTTSettings(endpoint: try MQTTEndpoint(url: "mqtt://127.0.0.1:\(broker.port)"))
        settings.actions = actions
        return try MQTTSink(
            settings: settings, password: nil, version: "test", logger: Logger(threshold: .error, journald: false),
            clientID: "ancsd-media-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))", executor: executor)
    }

    func button(_ object: String) -> String { "\(discovery)/button/ancsd_\(device)/media_\(object)/config" }
    func sensor(_ object: String) -> String { "\(discovery)/sensor/ancsd_\(device)/media_\(object)/config" }

    @Test("with actions: state, sensors, a button per supported command, removal, birth, and commands through PhoneActions")
    func withActions() async throws {
        let broker = try MosquittoBroker()
        let all = try broker.subscriber(["#"])
        defer { all.signal(SIGKILL) }
        let commandTopic = "ancsd/\(device)/media/command", resultTopic = commandTopic + "/result"
        // A command left retained on the broker: never acted on (an action is taken when it is sent).
        let retained = try runTool("/usr/bin/mosquitto_pub", broker.clientArguments() + ["-q", "1", "-r", "-t", commandTopic, "-m", "play"])
        #expect(retained.status == 0)

        let executor = try DaemonExecutor(name: "mqtt-media-test")
        defer { executor.shutdown() }
        let phone = FakePhone()
        let sink = try sink(broker, actions: true, executor: executor)
        sink.start(OutputContext(actions: phone, executor: executor))
        sink.send(OutputRecord(.connected(device: ada, name: "Ada's iPhone")))
        sink.send(media(["play", "pause", "toggle", "next"]))

        // The retained state: the event's JSON, as --format json prints it.
        try waitUntil("the media state") { !payloads(all, "ancsd/\(device)/media").isEmpty }
        let state = try JSONValue(parsing: try #require(payloads(all, "ancsd/\(device)/media").last))
        #expect(state["type"] == "media" && state["title"] == "Bohemian Rhapsody" && state["commands"] == ["play", "pause", "toggle", "next"])
        try waitUntil("two events") { payloads(all, "ancsd/\(device)/event").count == 2 }
        #expect(try broker.retained("ancsd/\(device)/media").first?.hasPrefix("ancsd/\(device)/media {\"v\":1,\"type\":\"media\"") == true)

        // Discovery: the five phone entities, four sensors and a button per supported command;
        // every other command's config emptied (an earlier run may have announced it).
        try waitUntil("the configs") { !payloads(all, button("bookmark")).isEmpty }
        for object in ["title", "artist", "album", "state"] { #expect(payloads(all, sensor(object)).count == 1, "\(object)") }
        for object in ["play", "pause", "toggle", "next"] { #expect(payloads(all, button(object)).count == 1, "\(object)") }
        for object in ["previous", "volume_up", "shuffle", "bookmark", "dislike"] { #expect(payloads(all, button(object)) == ["(null)"], "\(object)") }
        let configs = try broker.retained("\(discovery)/#", count: 5 + 4 + 4).map { line -> (topic: String, payload: JSONValue) in
            let space = try #require(line.firstIndex(of: " "))
            return (String(line[..<space]), try JSONValue(parsing: String(line[line.index(after: space)...])))
        }
        #expect(configs.count == 13)
        let subscribed = ["ancsd/+/action", "ancsd/+/media/command"]
        #expect(HomeAssistantSchema.problems(configs, subscribed: subscribed) == [])
        // The player's entities name topics that carry messages (the phone's own wait for notifications).
        let published = Set(all.lines.map(\.text).compactMap { $0.split(separator: " ").first.map(String.init) })
        let player = configs.filter { $0.topic.contains("/media_") }
        #expect(player.count == 8 && HomeAssistantSchema.problems(player, published: published, subscribed: subscribed) == [])
        let play = try #require(configs.first { $0.topic == button("play") }?.payload)
        #expect(play["command_topic"] == .string(commandTopic) && play["payload_press"] == "play" && play["device"]?["name"] == "Ada's iPhone")

        // The same commands again (a new title): no config is published again.
        let before = all.lines.count
        sink.send(media(["play", "pause", "toggle", "next"], title: "Love of My Life"))
        try waitUntil("the second state") { payloads(all, "ancsd/\(device)/media").count == 2 }
        #expect(all.lines.dropFirst(before).allSatisfy { !$0.text.hasPrefix(discovery + "/") })

        // A command goes: its button is removed (an empty retained config); one comes back: announced.
        sink.send(media(["play", "pause", "previous"]))
        try waitUntil("toggle and next removed") { payloads(all, button("toggle")).last == "(null)" && payloads(all, button("next")).last == "(null)" }
        try waitUntil("previous announced") { payloads(all, button("previous")).last?.hasPrefix("{") == true }
        #expect(payloads(all, button("play")).count == 1)
        #expect(try broker.retained("\(discovery)/button/#", count: 3).map { String($0.prefix { $0 != " " }) }.sorted()
            == [button("pause"), button("play"), button("previous")])

        // Home Assistant restarts: everything is announced again, removals are not repeated.
        try broker.publish("\(discovery)/status", "online")
        try waitUntil("announced again") { payloads(all, button("play")).count == 2 && payloads(all, sensor("title")).count == 2 }
        try waitUntil("the phone's own entities again") { payloads(all, "\(discovery)/sensor/ancsd_\(device)/latest/config").count == 2 }
        #expect(payloads(all, button("toggle")).count == 2 && payloads(all, button("dislike")).count == 1)

        // Commands: a name, the JSON form, any case; the phone's answers; bad requests.
        #expect(payloads(all, resultTopic).isEmpty, "the retained command was not taken: \(payloads(all, resultTopic))")
        for request in ["pause", #"{"command": "play"}"#, " Next\n", "stop", #"{"cmd": "play"}"#, "[1]"] {
            try broker.publish(commandTopic, request)
        }
        try waitUntil("six results: \(payloads(all, resultTopic))") { payloads(all, resultTopic).count == 6 }
        let results = payloads(all, resultTopic)
        #expect(results[0] == #"{"command":"pause","ok":true,"result":"sent"}"#)
        #expect(results[1] == #"{"command":"play","ok":true,"result":"sent"}"#)
        let answers = try results.map { try JSONValue(parsing: $0) }
        #expect(answers[2]["command"] == "next" && answers[2]["error"]?["code"] == "unsupported_command")
        #expect(answers.dropFirst(3).map { $0["error"]?["code"] } == ["bad_request", "bad_request", "bad_request"])
        #expect(answers[3]["command"] == "stop" && answers[4]["command"] == .null)
        #expect(phone.mediaCommands == ["pause \(ada)", "play \(ada)", "next \(ada)"])
        // A topic level that is not a phone's address.
        try broker.publish("ancsd/not-a-phone/media/command", "play")
        try waitUntil("an answer for a bad address") { !payloads(all, "ancsd/not-a-phone/media/command/result").isEmpty }
        #expect(payloads(all, "ancsd/not-a-phone/media/command/result").first?.contains("bad_request") == true)
        #expect(phone.mediaCommands.count == 3)

        #expect(await sink.flush(timeout: .seconds(5)))
        _ = try runTool("/usr/bin/mosquitto_pub", broker.clientArguments() + ["-q", "1", "-r", "-t", commandTopic, "-n"])
    }

    @Test("without actions: the sensors, no buttons (emptied), and no command taken")
    func withoutActions() async throws {
        let broker = try MosquittoBroker()
        let all = try broker.subscriber(["#"])
        defer { all.signal(SIGKILL) }
        let executor = try DaemonExecutor(name: "mqtt-media-test")
        defer { executor.shutdown() }
        let phone = FakePhone()
        let sink = try sink(broker, actions: false, executor: executor)
        sink.start(OutputContext(actions: phone, executor: executor))
        sink.send(media(["play", "pause"]))
        try waitUntil("the configs") { !payloads(all, button("bookmark")).isEmpty && !payloads(all, sensor("state")).isEmpty }
        for object in ["play", "pause", "bookmark"] { #expect(payloads(all, button(object)) == ["(null)"], "\(object)") }
        #expect(try broker.retained("\(discovery)/button/#").isEmpty)
        let sensors = try broker.retained("\(discovery)/sensor/ancsd_\(device)/+/config", count: 6)
        #expect(sensors.count == 6, "notifications, latest and the player's four")
        try broker.publish("ancsd/\(device)/media/command", "play")
        try broker.publish("ancsd/status/ping", "x")  // a later message: the command, had it been taken, answered before
        try waitUntil("the later message") { !payloads(all, "ancsd/status/ping").isEmpty }
        try await Task.sleep(for: .milliseconds(300))  // a command not taken gives no event to wait for
        #expect(payloads(all, "ancsd/\(device)/media/command/result").isEmpty && phone.mediaCommands.isEmpty)
        #expect(await sink.flush(timeout: .seconds(5)))
    }
}
