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
            [ -z "${WATCHDOG_USEC+set}" ] || echo "WATCHDOG_USEC leaked" >> "$1/leaks"
            if [ "$ANCSD_TYPE" = disconnected ]; then echo "cannot reach the lamp" >&2; exit 3; fi
            """#.write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        let control = dir + "/control"
        let run = try DaemonRun(
            scenario: "two-phones",
            ancsdArguments: ["--exec", "\(script) '\(dir)'", "--exec-timeout", "5", "--log-level", "info", "--control", control],
            // The daemon's own ANCSD_ variables and systemd's messages to it are not passed on.
            environment: ["ANCSD_UID": "inherited", "ANCSD_APP_ID": "inherited", "WATCHDOG_USEC": "30000000"])
        // `ancsd doctor` warns about the failed command (exit status 0: a warning).
        try run.ancsd.waitForStandardError(containing: "exec: the command exited with status 3")
        let doctor = try AncsdProcess.run(["--bus", run.bus.address, "doctor", "--control", control, "--fifo", "/nonexistent"])
        #expect(doctor.stdout.contains("warn 1 of ") && doctor.stdout.contains(" commands run by exec failed"), "\(doctor.stdout)")
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
        #expect(!FileManager.default.fileExists(atPath: dir + "/leaks"))
        let log = run.ancsd.standardError
        #expect(log.contains("exec: the command exited with status 3 (event disconnected AA:BB:CC:DD:EE:02)"), "\(log)")
        #expect(log.contains("cannot reach the lamp"))
        for text in ["To Ada", "To Grace", "Still here", "Only Ada", "UIDs are per phone"] { #expect(!log.contains(text), "\(text) in the log") }
    }

    /// SIGHUP with a new `exec` command while the old one runs: the running command finishes,
    /// later events run the new one, none is lost or run twice.
    @Test func aReloadChangesTheCommand() throws {
        let bus = try PrivateBus()
        let dir = bus.directory
        let config = dir + "/ancsd.conf"
        // The first command is slow, so the reload comes while it runs.
        func settings(_ name: String, pause: String = "") -> String {
            "format = json\nexec = [ \"$ANCSD_TYPE\" != added ] || { \(pause) echo \(name) $ANCSD_UID >> '\(dir)/ran'; }\n"
        }
        try settings("A", pause: "sleep 3;").write(toFile: config, atomically: true, encoding: .utf8)
        let scenario = dir + "/phone.jsonl"
        try #"""
            {"scenario":"reload","devices":[{"address":"AA:BB:CC:DD:EE:01","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages"}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"One","message":"1"}
            {"after":4,"do":"add","uid":2,"category":"social","app":"com.apple.MobileSMS","title":"Two","message":"2"}
            {"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"Three","message":"3"}
            {"after":1,"do":"end"}
            """#.write(toFile: scenario, atomically: true, encoding: .utf8)
        let ancsd = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "run", "--config", config])
        try ancsd.waitForStandardError(containing: "bluetoothd is not running")
        let phone = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", bus.address, "--scenario", scenario])
        try ancsd.waitForLine { $0.contains(#""title":"One""#) }
        try settings("B").write(toFile: config, atomically: true, encoding: .utf8)
        ancsd.signal(SIGHUP)
        try ancsd.waitForStandardError(containing: "reloaded the configuration")
        #expect(ancsd.standardError.contains("exec: the new command runs for every event not yet started; 1 already running will finish"))
        #expect(try phone.wait(timeout: .seconds(30)) == 0)
        func ran() -> String { (try? String(contentsOfFile: dir + "/ran", encoding: .utf8)) ?? "" }
        try waitUntil("three commands run: \(ran())") { ran().split(separator: "\n").count >= 3 }
        #expect(try ancsd.stop() == 0)
        #expect(ran() == "A 1\nB 2\nB 3\n")
    }

    @Test func badSettingsAreRefused() throws {
        for arguments in [["--exec", ""], ["--exec", "true", "--exec-timeout", "0"], ["--exec-timeout", "soon"]] {
            let ancsd = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["run"] + arguments)
            #expect(try ancsd.wait(timeout: .seconds(30)) == 2)
            #expect(ancsd.standardError.contains("exec"), "\(ancsd.standardError)")
        }
    }
}
