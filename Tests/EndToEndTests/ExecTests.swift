import Foundation
import JSON
import Testing
import TestSupport

/// `ancsd run --exec` end to end: the built binary, the simulated phones, a real /bin/sh script.
@Suite(.serialized) struct ExecTests {
    /// Every event reaches the command, per phone in order, its stdin exactly the line
    /// `--format json` prints, its metadata in the environment; a failing command's status and
    /// stderr are logged, and no notification content is.
    @Test func everyEventRunsTheCommandInOrder() throws {
        let bus = try PrivateBus()
        let dir = bus.directory
        let script = dir + "/on-event"
        try #"""
            #!/bin/sh
            f="$1/$(echo "$ANCSD_DEVICE" | tr -d :)"
            echo "$ANCSD_TYPE $ANCSD_DEVICE ${ANCSD_UID:--} ${ANCSD_APP_ID:--} ${ANCSD_CATEGORY:--}" >> "$f.env"
            cat >> "$f.stdin"
            if [ "$ANCSD_TYPE" = disconnected ]; then echo "cannot reach the lamp" >&2; exit 3; fi
            """#.write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        let run = try DaemonRun(
            scenario: "two-phones", ancsdArguments: ["--exec", "\(script) '\(dir)'", "--exec-timeout", "5", "--log-level", "info"])
        let events = try run.finish()
        #expect(events.count >= 6)
        for device in ["AA:BB:CC:DD:EE:01", "AA:BB:CC:DD:EE:02"] {
            let printed = run.ancsd.lines.map(\.text).filter { (try? JSONValue(parsing: $0))?["device"]?.stringValue == device }
            let file = dir + "/" + device.filter { $0 != ":" }
            let stdin = (try? String(contentsOfFile: file + ".stdin", encoding: .utf8)) ?? ""
            #expect(stdin == printed.map { $0 + "\n" }.joined(), "the command's stdin is the JSON output, in order")
            let environment = (try? String(contentsOfFile: file + ".env", encoding: .utf8)) ?? ""
            let expected = printed.compactMap { try? JSONValue(parsing: $0) }.map { event -> String in
                let uid = event["uid"]?.intValue.map(String.init) ?? "-"
                let app = event["app_id"]?.stringValue ?? "-"
                let category = event["category"]?.stringValue ?? "-"
                return "\(event["type"]?.stringValue ?? "?") \(device) \(uid) \(app) \(category)\n"
            }
            #expect(environment == expected.joined())
        }
        let log = run.ancsd.standardError
        #expect(log.contains("exec: the command exited with status 3 (event disconnected AA:BB:CC:DD:EE:02)"), "\(log)")
        #expect(log.contains("cannot reach the lamp"))
        for text in ["To Ada", "To Grace", "Still here", "Only Ada", "UIDs are per phone"] { #expect(!log.contains(text), "\(text) in the log") }
    }

    @Test func badSettingsAreRefused() throws {
        for arguments in [["--exec", ""], ["--exec", "true", "--exec-timeout", "0"], ["--exec-timeout", "soon"]] {
            let ancsd = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["run"] + arguments)
            #expect(try ancsd.wait(timeout: .seconds(30)) == 2)
            #expect(ancsd.standardError.contains("exec"), "\(ancsd.standardError)")
        }
    }
}
