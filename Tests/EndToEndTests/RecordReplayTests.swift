import Foundation
import JSON
import Testing
import TestSupport

/// The capture files in `directory`, oldest session first (by the header's start).
private func recordings(in directory: String) throws -> [(path: String, header: JSONValue, text: String)] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".jsonl") }
        return try names.map { name in
            let path = directory + "/" + name
            let text = try String(contentsOfFile: path, encoding: .utf8)
            let header = try JSONValue(parsing: String(text.prefix { $0 != "\n" }))
            return (path, header, text)
        }.sorted { ($0.header["start"]?.stringValue ?? "") < ($1.header["start"]?.stringValue ?? "") }
}

/// `ancsd run --record`, then `ancsd replay` and `ancsd decode` of what it wrote. Part of the
/// serialized DaemonTests suite, so that daemon runs do not overlap and load the machine.
extension DaemonTests {

    @Test(arguments: ["demo", "cp-errors", "disconnect", "omitted-tuple", "deny-sharing", "two-phones"])
    func replayReproducesTheLiveOutput(scenario: String) throws {
        let directory = try PrivateBus().directory + "/captures"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let run = try DaemonRun(scenario: scenario, ancsdArguments: ["--record", directory])
        _ = try run.finish()
        let live = run.ancsd.lines.map(\.text)
        let files = try recordings(in: directory)
        #expect(!files.isEmpty)
        var replayed: [String: [String]] = [:]
        // One state directory per phone, its recordings in order: the seen_before marks and
        // the replays held back come out as they did live.
        let state = directory + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        for file in files {
            #expect(file.header["format"] == "ancs-capture/1" && file.header["source"] == "ancsd")
            #expect(file.header["ancsd_version"]?.stringValue?.isEmpty == false && file.header["redacted"] == false)
            let device = try #require(file.header["device"]?.stringValue)
            #expect(file.path.contains(device.replacingOccurrences(of: ":", with: "-") + "_"))
            let result = try AncsdProcess.run(["replay", "--state-dir", state, file.path])
            #expect(result.status == 0, "\(file.path):\n\(result.stderr)\n\(file.text)")
            replayed[device, default: []] += result.lines

            let decoded = try AncsdProcess.run(["decode", file.path])
            #expect(decoded.status == 0, "\(decoded.stderr)\n\(decoded.stdout)")
            #expect(decoded.stderr.isEmpty)
        }
        for (device, lines) in replayed {
            let liveLines = live.filter { (try? JSONValue(parsing: $0))?["device"]?.stringValue == device }
            #expect(lines == liveLines, "replay of \(device) differs:\nlive:\n\(liveLines.joined(separator: "\n"))\nreplay:\n\(lines.joined(separator: "\n"))")
        }
        #expect(replayed.values.reduce(0) { $0 + $1.count } == live.count)
    }

    @Test func redactionLeavesNoTextAndKeepsLengths() throws {
        let directory = try PrivateBus().directory + "/captures"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let run = try DaemonRun(scenario: "demo", ancsdArguments: ["--record", directory, "--record-redact"])
        _ = try run.finish()
        let files = try recordings(in: directory)
        let file = try #require(files.first)
        #expect(files.count == 1)
        #expect(file.header["redacted"] == true && file.header["name"] == nil)

        // Every title, subtitle, message and action label of the scenario is gone, as text and as hex.
        let scenario = try String(contentsOf: repositoryRoot.appendingPathComponent("scenarios/demo.jsonl"), encoding: .utf8)
        var secrets: [String] = []
        for line in scenario.split(separator: "\n") {
            let object = try JSONValue(parsing: String(line))
            for key in ["title", "subtitle", "message", "positive_action", "negative_action"] {
                if let text = object[key]?.stringValue, text.utf8.count >= 3 { secrets.append(text) }
            }
        }
        #expect(secrets.count >= 10)
        let lowered = file.text.lowercased()
        for secret in secrets {
            let hex = secret.utf8.map { String(format: "%02x", $0) }.joined()
            #expect(!lowered.contains(hex), "\(secret) is in the file")
            #expect(!file.text.contains(secret))
            // Fragments cut values: no 6-byte run of a secret survives either.
            let bytes = Array(secret.utf8)
            if bytes.count >= 6 {
                for start in 0...(bytes.count - 6) {
                    let piece = bytes[start..<start + 6].map { String(format: "%02x", $0) }.joined()
                    #expect(!lowered.contains(piece), "part of \(secret) is in the file")
                }
            }
        }
        // Same lengths: the replay shows placeholders of the byte lengths the phone sent.
        let live = run.events.filter { $0["type"] == "added" || $0["type"] == "modified" }
        let result = try AncsdProcess.run(["replay", file.path])
        #expect(result.status == 0, "\(result.stderr)")
        let replayed = try result.lines.map { try JSONValue(parsing: $0) }.filter { $0["type"] == "added" || $0["type"] == "modified" }
        #expect(replayed.count == live.count)
        for (original, redacted) in zip(live, replayed) {
            #expect(redacted["uid"] == original["uid"] && redacted["app_id"] == original["app_id"] && redacted["date"] == original["date"])
            for key in ["title", "subtitle", "message"] {
                if let text = original[key]?.stringValue {
                    #expect(redacted[key]?.stringValue == String(repeating: "x", count: text.utf8.count), "\(key) of \(original)")
                }
            }
        }
        let decoded = try AncsdProcess.run(["decode", file.path])
        #expect(decoded.status == 0)
    }

    @Test func replayReportsWhatTheCaptureDoesNotAnswer() throws {
        // The session asks for the attributes of UID 7; the capture wrote something else.
        let file = try temporaryFile("""
            {"format":"ancs-capture/1","device":"AA:BB:CC:DD:EE:09"}
            {"t":0,"event":"connected"}
            {"t":0.1,"char":"ns","hex":"0000040107000000"}
            {"t":0.2,"char":"cp","hex":"0008000000010800"}
            {"t":9,"event":"disconnected"}
            """)
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try AncsdProcess.run(["replay", file.path])
        #expect(result.status == 1)
        #expect(result.stderr.contains("line 4: the session wrote 0007000000"), "\(result.stderr)")
        #expect(result.lines.first?.contains(#""type":"connected","device":"AA:BB:CC:DD:EE:09""#) == true)
        #expect(result.lines.last?.contains(#""type":"disconnected""#) == true)

        let bad = try temporaryFile("{\"t\":0,\"event\":\"connected\"}\n{\"char\":\"zz\",\"hex\":\"\"}\n")
        defer { try? FileManager.default.removeItem(at: bad) }
        let broken = try AncsdProcess.run(["replay", bad.path])
        #expect(broken.status == 2 && broken.stderr.contains("line 2"))
        #expect(broken.lines.count == 1, "what came before stays printed")
        let help = try AncsdProcess.run(["replay", "--help"])
        #expect(help.status == 0 && help.stdout.contains("Usage: ancsd replay"))
    }
}
