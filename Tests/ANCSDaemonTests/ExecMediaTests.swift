import AMS
import ControlProtocol
import Foundation
import JSON
@testable import ANCSDaemon
import ANCSRuntime
import Testing
import TestSupport

/// `--exec` gets a phone's media events like any other: the event's JSON line on standard
/// input, `ANCSD_TYPE=media`, the device and the player's state in the environment (never the
/// track: it is content).
@Suite(.serialized) struct ExecMediaTests {
    @Test func aMediaEventRunsTheCommandWithItsStateInTheEnvironment() async throws {
        let file = NSTemporaryDirectory() + "ancsd-exec-media-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: file) }
        let script = #"{ printf '%s %s %s|%s\n' "$ANCSD_TYPE" "$ANCSD_DEVICE" "$ANCSD_MEDIA_STATE" "${ANCSD_TITLE-none}"; cat; } > "\#(file)""#
        let sink = ExecSink(command: script, logger: Logger(threshold: .error, journald: false), loop: sinkTestLoop)
        let media = ControlMedia(
            device: "AA:BB:CC:DD:EE:01", player: "Music", state: "paused", position: 12, title: "Clair de lune",
            commands: ["play", "pause"])
        let record = OutputRecord(.service(MediaOutput.output(media)))
        sink.send(record)
        #expect(await sink.flush(timeout: .seconds(30)))
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        #expect(text == "media AA:BB:CC:DD:EE:01 paused|none\n" + record.jsonLine + "\n")
        #expect(record.jsonLine.hasPrefix(#"{"v":1,"type":"media","device":"AA:BB:CC:DD:EE:01","player":"Music","state":"paused""#))
        let counts = await sink.counts
        #expect(counts.succeeded == 1)
    }

    /// A rate, elapsed time and duration of 1e308 (and 2e9) from the phone are unknown in every
    /// output: null in the event's JSON (standard output, FIFO, control, `--exec`'s standard
    /// input), in the retained MQTT state and in what `ancsd media` reads; no clock in the text
    /// line (it showed a clamped 99:59:59). A long track's hours are shown as they are.
    @Test func aNumberPastTheLimitIsUnknownInEveryOutput() throws {
        // As the phone's values arrive: parsed.
        let info = PlaybackInfo(parsing: "1,1e308,1e308")
        var state = MediaState()
        (state.playbackState, state.playbackRate, state.elapsedTime, state.elapsedAt) = (info.state, info.rate, info.elapsed, .zero)
        state.duration = parseTrackDuration("2000000000")
        state.title = "Forever"
        #expect(state.playbackRate == nil && state.elapsedTime == nil && state.duration == nil)
        // And should such numbers be in a state anyway, the outputs still agree.
        for (rate, elapsed, duration) in [(nil, nil, nil), (1e308, 1e308, 1e308), (2e9, 2e9, .infinity)] as [(Double?, Double?, Double?)] {
            (state.playbackRate, state.elapsedTime, state.duration) = (rate, elapsed, duration)
            try checkUnknown(state)
        }
    }

    private func checkUnknown(_ state: MediaState) throws {
        let media = MediaOutput.control(state, device: "AA:BB:CC:DD:EE:01", now: .seconds(1))
        let output = MediaOutput.output(media)
        let record = OutputRecord(.service(output))
        let event = try JSONValue(parsing: record.jsonLine)
        for member in ["rate", "elapsed", "position", "duration"] {
            #expect(event[member] == .null, "\(member) in \(record.jsonLine)")
        }
        let retained = try #require(output.retained.first)
        let mqtt = try JSONValue(parsing: retained.payload)
        #expect(["rate", "elapsed", "position", "duration"].allSatisfy { mqtt[$0] == .null }, "\(retained.payload)")
        let read = try ControlMedia(decoding: try #require(event.objectValue))
        #expect(read.rate == nil && read.position == nil && read.duration == nil, "ancsd media shows no clock")
        #expect(!record.line(.text).contains("99:59:59") && !output.text.contains(":"), "\(record.line(.text))")
    }

    @Test func aNumberPastTheLimitIsUnknownForExec() async throws {
        var state = MediaState()
        (state.playbackState, state.playbackRate, state.elapsedTime, state.duration) = (.playing, 2e9, 2e9, 2e9)
        let record = OutputRecord(.service(MediaOutput.output(MediaOutput.control(state, device: "AA:BB:CC:DD:EE:01", now: .zero))))
        // --exec: the same JSON on standard input, the state in the environment.
        let file = NSTemporaryDirectory() + "ancsd-exec-media-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: file) }
        let sink = ExecSink(
            command: #"{ printf '%s\n' "$ANCSD_MEDIA_STATE"; cat; } > "\#(file)""#, logger: Logger(threshold: .error, journald: false),
            loop: sinkTestLoop)
        sink.send(record)
        #expect(await sink.flush(timeout: .seconds(30)))
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        #expect(text == "playing\n" + record.jsonLine + "\n")
        #expect(text.contains(#""rate":null,"elapsed":null,"position":null"#) && text.contains(#""duration":null"#), "\(text)")
    }

    /// Up to the limit a number is shown as it is: a 100-hour track shows its hours.
    @Test func aLongTrackShowsItsHours() {
        var state = MediaState()
        (state.playbackState, state.playbackRate, state.elapsedTime, state.elapsedAt, state.duration) = (.playing, 1, 360_000, .zero, 400_000)
        let long = MediaOutput.output(MediaOutput.control(state, device: "AA:BB:CC:DD:EE:01", now: .zero))
        #expect(long.text.hasSuffix("100:00:00 / 111:06:40"), "\(long.text)")
        #expect(long.fields["duration"] == .double(400_000))
    }

    /// Every `ANCSD_*` variable a command gets, for an event of each kind, is named by
    /// `run --help` (the `--exec` entry), the man page and docs/output.md.
    @Test func theHelpNamesEveryVariable() throws {
        let notification = try #require(VariedEvents.events.first { if case .notification = $0 { true } else { false } })
        let events: [OutputEvent] = [
            notification, .connected(device: "AA:BB:CC:DD:EE:01", name: "Ada"), .disconnected(device: "AA:BB:CC:DD:EE:01", reason: "gone"),
            .sharing(device: "AA:BB:CC:DD:EE:01", allowed: true),
            .service(MediaOutput.output(ControlMedia(device: "AA:BB:CC:DD:EE:01", state: "playing"))),
        ]
        let names = Set(events.flatMap { ExecSink.environment(for: OutputRecord($0)) }
            .filter { $0.hasPrefix("ANCSD_") }.compactMap { $0.split(separator: "=").first.map(String.init) })
        #expect(names.isSuperset(of: ["ANCSD_TYPE", "ANCSD_DEVICE", "ANCSD_UID", "ANCSD_SHARING", "ANCSD_MEDIA_STATE"]), "\(names)")
        let page = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/ancsd.8"), encoding: .utf8)
        let output = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/output.md"), encoding: .utf8)
        for name in names.sorted() {
            #expect(Setting.optionsHelp.contains(name), "run --help does not name \(name)")
            #expect(page.contains(name), "the man page does not name \(name)")
            #expect(output.contains(name), "docs/output.md does not name \(name)")
        }
    }
}

