import Foundation
import JSON
import Testing
import TestSupport

private let ada = "AA:BB:CC:DD:EE:01"
private let header = """
    {"scenario":"replays","devices":[{"address":"\(ada)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages","com.apple.mobilemail":"Mail"}}
    """

private func add(_ uid: Int, _ title: String, _ message: String, app: String = "com.apple.MobileSMS", category: String = "social") -> String {
    #"{"do":"add","uid":\#(uid),"category":"\#(category)","app":"\#(app)","title":"\#(title)","message":"\#(message)","date":"20261130T101500"}"#
}

/// A phone that reconnects twice: between the first two sessions one notification changes and
/// one arrives; between the last two nothing happens.
private let reconnects = [
    header,
    add(1, "Kept", "Unchanged"),
    add(2, "Edited", "First version"),
    #"{"do":"wait_subscribed","timeout":30}"#,
    #"{"after":0.5,"do":"add","uid":3,"category":"social","app":"com.apple.MobileSMS","title":"Live","message":"While connected","date":"20261130T101600"}"#,
    #"{"after":1,"do":"disconnect"}"#,
    #"{"after":0.5,"do":"modify","uid":2,"message":"Second version"}"#,
    #"{"do":"add","uid":4,"category":"social","app":"com.apple.MobileSMS","title":"Offline","message":"Arrived while away","date":"20261130T101700"}"#,
    #"{"after":0.5,"do":"connect"}"#,
    #"{"do":"wait_subscribed","timeout":30}"#,
    #"{"after":1,"do":"disconnect"}"#,
    #"{"after":0.5,"do":"connect"}"#,
    #"{"do":"wait_subscribed","timeout":30}"#,
    #"{"after":1,"do":"end"}"#,
].joined(separator: "\n")

/// `seen_before` and `--replays` end to end: reconnects and daemon restarts on the simulator,
/// with identical and changed notifications.
@Suite(.serialized) struct ReplayTests {
    @Test func reconnectsDoNotFlood() throws {
        let events = try DaemonRun(text: reconnects).finish()
        let sessions = events.sessions(of: ada)
        try #require(sessions.count == 3, "\(events.map(\.serialized).joined(separator: "\n"))")
        #expect(sessions[0].titles("added") == ["Kept", "Edited", "Live"])
        #expect(sessions[0].of("added").allSatisfy { $0["seen_before"] == false })
        // The default, unseen: the changed one and the one that arrived while away, once.
        #expect(sessions[1].titles("added").sorted() == ["Edited", "Offline"], "\(sessions[1].map(\.serialized))")
        #expect(sessions[1].first("added", title: "Edited")?["message"] == "Second version")
        #expect(sessions[1].of("added").allSatisfy { $0["seen_before"] == false && $0["pre_existing"] == true })
        #expect(sessions[2].titles("added").isEmpty, "nothing new: nothing printed")
    }

    @Test func allMarksWhatWasSeen() throws {
        let events = try DaemonRun(text: reconnects, ancsdArguments: ["--replays", "all"]).finish()
        let sessions = events.sessions(of: ada)
        try #require(sessions.count == 3)
        let second = Dictionary(uniqueKeysWithValues: sessions[1].of("added").compactMap { e in e["title"]?.stringValue.map { ($0, e["seen_before"]) } })
        #expect(second == ["Kept": true, "Edited": false, "Live": true, "Offline": false])
        #expect(sessions[2].of("added").count == 4 && sessions[2].of("added").allSatisfy { $0["seen_before"] == true })
    }

    @Test func noneShowsOnlyLiveNotifications() throws {
        let events = try DaemonRun(text: reconnects, ancsdArguments: ["--replays", "none"]).finish()
        let sessions = events.sessions(of: ada)
        try #require(sessions.count == 3)
        #expect(sessions[0].titles("added") == ["Live"])
        #expect(sessions[1].titles("added").isEmpty && sessions[2].titles("added").isEmpty)
    }

    @Test func restartsRememberWhatWasShown() throws {
        let state = NSTemporaryDirectory() + "ancsd-state-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: state) }
        func phone(_ lines: [String]) -> String {
            ([header] + lines + [#"{"do":"wait_subscribed","timeout":30}"#, #"{"after":1,"do":"end"}"#]).joined(separator: "\n")
        }
        let first = try DaemonRun(text: phone([add(1, "Kept", "Unchanged"), add(2, "Edited", "First version")]),
                                  ancsdArguments: ["--state-dir", state]).finish()
        #expect(first.titles("added") == ["Kept", "Edited"])
        let file = try String(contentsOfFile: state + "/AA_BB_CC_DD_EE_01.seen", encoding: .utf8)
        #expect(file.hasPrefix("ancsd-seen/1\n") && file.split(separator: "\n").count == 3)
        #expect(!file.contains("Kept") && !file.contains("Unchanged"), "fingerprints only, no content")

        // ancsd restarts; meanwhile one notification changed and one arrived.
        let later = phone([add(1, "Kept", "Unchanged"), add(2, "Edited", "Second version"), add(4, "Offline", "Arrived while away")])
        let second = try DaemonRun(text: later, ancsdArguments: ["--state-dir", state, "--replays", "all"]).finish()
        let marks = Dictionary(uniqueKeysWithValues: second.of("added").compactMap { e in e["title"]?.stringValue.map { ($0, e["seen_before"]) } })
        #expect(marks == ["Kept": true, "Edited": false, "Offline": false], "\(second.map(\.serialized))")
        // And once more, with the default: everything was shown, nothing is printed again.
        let third = try DaemonRun(text: later, ancsdArguments: ["--state-dir", state]).finish()
        #expect(third.of("added").isEmpty, "\(third.map(\.serialized))")
        #expect(third.of("connected").count == 1)
    }
}

/// `--only-app`, `--ignore-app`, `--ignore-category` end to end, with `status`, `list` and `doctor`.
@Suite(.serialized) struct FilterTests {
    @Test func filteredNotificationsReachNothing() throws {
        let socketPath = NSTemporaryDirectory() + "ancsd-control-\(UUID().uuidString.prefix(8))"
        let scenario = [
            header,
            #"{"do":"wait_subscribed","timeout":30}"#,
            add(1, "Headline", "Read all about it", app: "com.apple.news", category: "news"),
            add(2, "Level up", "Play again?", app: "com.example.game"),
            add(3, "Grace", "Tea?"),
            add(4, "Invoice", "Due today", app: "com.apple.mobilemail", category: "email"),
            #"{"after":0.5,"do":"remove","uid":2}"#,
            add(5, "After", "the removal came first"),
            #"{"do":"sleep","seconds":60}"#,
            #"{"do":"end"}"#,
        ].joined(separator: "\n")
        let run = try DaemonRun(text: scenario, ancsdArguments: [
            "--control", socketPath, "--ignore-category", "news", "--ignore-category", "health_and_fitness",
            "--ignore-app", "com.example.*",
        ])
        // The phone's events come in order: by the one after it, the removal is handled.
        try run.ancsd.waitForLine { $0.contains(#""title":"After""#) }
        let client = try SocketClient(path: socketPath)
        let device = try #require(try client.request(["cmd": "status"])["devices"]?.arrayValue?.first)
        #expect(device["filtered"] == 2 && device["notifications"] == 3, "\(device.serialized)")
        #expect(device["filter_matches"] == [
            "ignore-app com.example.*": 1, "ignore-category news": 1, "ignore-category health_and_fitness": 0,
        ])
        let listed = try client.request(["cmd": "list"])["devices"]?.arrayValue?.first?["notifications"]?.arrayValue ?? []
        #expect(listed.compactMap { $0["title"]?.stringValue } == ["Grace", "Invoice", "After"])
        #expect(listed.allSatisfy { $0["seen_before"] == false })
        let doctor = try AncsdProcess.run(["--bus", run.bus.address, "doctor", "--control", socketPath, "--fifo", "/nonexistent"])
        #expect(doctor.stdout.contains("warn no notification of \(ada) in this session matched: ignore-category health_and_fitness"),
                "\(doctor.stdout)")
        #expect(!doctor.stdout.contains("com.example.*;"))
        _ = try run.phone.stop()
        let events = run.events
        #expect(events.titles("added") == ["Grace", "Invoice", "After"])
        #expect(events.of("removed").isEmpty, "the removal of a filtered notification is not shown")
        #expect(!run.ancsd.standardError.contains("Play again?") || run.ancsd.standardError.contains("debug"))
    }

    @Test func onlyAppKeepsTheNamedApps() throws {
        let scenario = [
            header, #"{"do":"wait_subscribed","timeout":30}"#,
            add(1, "Grace", "Tea?"), add(2, "Invoice", "Due today", app: "com.apple.mobilemail", category: "email"),
            add(3, "Level up", "Play again?", app: "com.example.game"),
            #"{"after":1,"do":"end"}"#,
        ].joined(separator: "\n")
        let events = try DaemonRun(text: scenario, ancsdArguments: ["--only-app", "com.apple.*", "--ignore-app", "com.apple.mobilemail"]).finish()
        #expect(events.titles("added") == ["Grace"])
    }

    /// SIGHUP applies changed filters; systemd's $STATE_DIRECTORY is where the fingerprints go.
    @Test func aReloadAppliesNewFilters() throws {
        let bus = try PrivateBus()
        let config = bus.directory + "/ancsd.conf"
        let state = bus.directory + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        try "format = json\nlog-level = debug\nignore-category = email\n".write(toFile: config, atomically: true, encoding: .utf8)
        let scenario = bus.directory + "/phone.jsonl"
        try [
            header, #"{"do":"wait_subscribed","timeout":30}"#,
            add(1, "Invoice", "Due today", app: "com.apple.mobilemail", category: "email"), add(2, "Grace", "Tea?"),
            #"{"after":4,"do":"add","uid":3,"category":"email","app":"com.apple.mobilemail","title":"Receipt","message":"Paid"}"#,
            add(4, "Ada", "Scones?"),
            #"{"after":1,"do":"end"}"#,
        ].joined(separator: "\n").write(toFile: scenario, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["STATE_DIRECTORY"] = state
        let ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "run", "--config", config],
            environment: environment)
        try ancsd.waitForStandardError(containing: "bluetoothd is not running")
        let phone = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", bus.address, "--scenario", scenario])
        try ancsd.waitForLine { $0.contains(#""title":"Grace""#) }
        try "format = json\nlog-level = debug\nignore-category = social\n".write(toFile: config, atomically: true, encoding: .utf8)
        ancsd.signal(SIGHUP)
        try ancsd.waitForStandardError(containing: "reloaded the configuration")
        #expect(try phone.wait(timeout: .seconds(30)) == 0)
        try ancsd.waitUntilBluetoothdGone()
        #expect(try ancsd.stop() == 0)
        let titles = ancsd.lines.compactMap { try? JSONValue(parsing: $0.text) }.titles("added")
        #expect(titles == ["Grace", "Receipt"], "email dropped before the reload, social after: \(titles)")
        #expect(FileManager.default.fileExists(atPath: state + "/AA_BB_CC_DD_EE_01.seen"), "fingerprints in $STATE_DIRECTORY")
    }

    /// Issue 27: SIGHUP with a bad `fifo` logged "keeping the current outputs" but applied the
    /// new filters and recorded the bad settings as current (the next SIGHUP just said
    /// "reloaded"); a changed `control` path was ignored silently.
    @Test func aReloadThatCannotApplyEverythingChangesNothing() throws {
        let bus = try PrivateBus()
        let config = bus.directory + "/ancsd.conf"
        try "format = json\nlog-level = debug\nignore-category = email\n".write(toFile: config, atomically: true, encoding: .utf8)
        let scenario = bus.directory + "/phone.jsonl"
        try [
            header, #"{"do":"wait_subscribed","timeout":30}"#, add(1, "Grace", "Tea?"),
            #"{"after":6,"do":"add","uid":2,"category":"email","app":"com.apple.mobilemail","title":"Receipt","message":"Paid"}"#,
            add(3, "Ada", "Scones?"),
            #"{"after":1,"do":"end"}"#,
        ].joined(separator: "\n").write(toFile: scenario, atomically: true, encoding: .utf8)
        let ancsd = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "run", "--config", config])
        try ancsd.waitForStandardError(containing: "bluetoothd is not running")
        let phone = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", bus.address, "--scenario", scenario])
        try ancsd.waitForLine { $0.contains(#""title":"Grace""#) }
        // Emails let through, and a FIFO that cannot be made: nothing of it may apply.
        try "format = json\nlog-level = debug\nfifo = /nonexistent-dir/events\n".write(toFile: config, atomically: true, encoding: .utf8)
        ancsd.signal(SIGHUP)
        try ancsd.waitForStandardError(containing: "reload failed, nothing changed")
        ancsd.signal(SIGHUP)  // the same file again: refused again, not "reloaded"
        try ancsd.waitForStandardError(containing: "reload failed, nothing changed", occurrences: 2)
        try "format = json\nlog-level = debug\nignore-category = email\ncontrol = \(bus.directory)/other.sock\n".write(toFile: config, atomically: true, encoding: .utf8)
        ancsd.signal(SIGHUP)
        try ancsd.waitForStandardError(containing: "reload refused, nothing changed: control takes effect only when ancsd starts")
        #expect(try phone.wait(timeout: .seconds(30)) == 0)
        try ancsd.waitUntilBluetoothdGone()
        #expect(try ancsd.stop() == 0)
        let titles = ancsd.lines.compactMap { try? JSONValue(parsing: $0.text) }.titles("added")
        #expect(titles == ["Grace", "Ada"], "the email filter stayed: \(titles)")
        #expect(!ancsd.standardError.contains("reloaded the configuration"), "\(ancsd.standardError)")
    }

    /// Issue 27: `--fifo` and `--control` mistakes exited 1 where the man page says 2, and a
    /// `--state-dir` that is a regular file said "Permission denied".
    @Test(arguments: [
        (["--fifo", "/nonexistent-dir/events"], "cannot create the FIFO /nonexistent-dir/events"),
        (["--control", "/nonexistent-dir/control"], "cannot make the control socket /nonexistent-dir/control"),
        (["--state-dir", "/etc/hostname"], "cannot keep state in /etc/hostname: it is not a directory"),
        (["--record", "/etc/hostname"], "cannot record into /etc/hostname: it is not a directory"),
    ])
    func settingsThatCannotWorkExitTwo(arguments: [String], message: String) throws {
        let bus = try PrivateBus()
        let result = try AncsdProcess.run(["--bus", bus.address, "run"] + arguments)
        #expect(result.status == 2 && result.stderr.contains(message), "\(result.status): \(result.stderr)")
    }
}
