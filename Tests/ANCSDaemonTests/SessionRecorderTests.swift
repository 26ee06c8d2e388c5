@testable import ANCSDaemon
import ANCSRuntime
import ANCSSession
@testable import BlueZ
import DBus
import Foundation
import JSON
import Testing

/// `--record` files (docs/capture-format.md).
@Suite struct SessionRecorderTests {
    /// Issue 27: a write whose Data Source response came before bluetoothd's reply to the write
    /// (the session then sends its next write at once) was recorded with `"t_answer": null`.
    @Test func aWriteAnsweredAfterTheNextOneWasSentKeepsItsAnswer() throws {
        let directory = NSTemporaryDirectory() + "ancsd-record-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = RecordingOptions()
        options.directory = directory
        let device = BlueZDevice(
            path: ObjectPath("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01"), address: "AA:BB:CC:DD:EE:01", name: "Ada's iPhone",
            adapter: ObjectPath("/org/bluez/hci0"), paired: true, bonded: true, trusted: true, connected: true, servicesResolved: true)
        let recorder = try #require(SessionRecorder.start(device: device, options: options, logger: Logger(threshold: .error, journald: false)))
        recorder.connected(at: .milliseconds(0))
        recorder.wroteControlPoint([0x01, 0x61, 0x00, 0x00], at: .milliseconds(10))
        recorder.received(.ds, [0x01, 0x61, 0x00, 0x00, 0x00, 0x00], at: .milliseconds(20))
        recorder.wroteControlPoint([0x01, 0x62, 0x00, 0x00], at: .milliseconds(21))  // before the first write's reply
        recorder.writeFinished(.accepted, at: .milliseconds(22))
        recorder.received(.ds, [0x01, 0x62, 0x00, 0x00, 0x00, 0x00], at: .milliseconds(30))
        recorder.writeFinished(.attError(.invalidParameter), at: .milliseconds(31))
        recorder.wroteControlPoint([0x01, 0x63, 0x00, 0x00], at: .milliseconds(40))  // never answered
        recorder.finish(at: .milliseconds(50), reason: "disconnected")
        let lines = try String(contentsOfFile: recorder.path, encoding: .utf8).split(separator: "\n").map { try JSONValue(parsing: String($0)) }
        let body = lines.dropFirst().map { line -> String in
            let kind = line["char"]?.stringValue ?? line["event"]?.stringValue ?? "?"
            return "\(kind) \(line["hex"]?.stringValue ?? "") \(line["t_answer"].map(\.serialized) ?? "-")"
        }
        #expect(body == [
            "connected  -", "cp 01610000 0.022", "ds 016100000000 -", "cp 01620000 0.031", "ds 016200000000 -",
            "cp 01630000 null", "disconnected  -",
        ], "\(body)")
    }
}
