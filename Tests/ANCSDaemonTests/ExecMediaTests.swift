import ControlProtocol
import Foundation
@testable import ANCSDaemon
import ANCSRuntime
import Testing

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
        #expect(sink.counts.succeeded == 1)
    }
}
