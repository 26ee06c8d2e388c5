import Foundation
import JSON
import Testing
import TestSupport

/// ancsd as systemd runs it: readiness, status, watchdog, reload and stop over NOTIFY_SOCKET,
/// and the configuration file.
@Suite(.serialized) struct ServiceTests {
    private func environment(_ extra: [String: String]) -> [String: String] {
        ProcessInfo.processInfo.environment.merging(extra) { _, new in new }
    }

    @Test func notifiesSystemdAndReloadsWithoutDroppingThePhone() throws {
        let bus = try PrivateBus()
        let notify = try DatagramListener(directory: bus.directory)
        let config = bus.directory + "/ancsd.conf"
        try "format = json\nlog-level = info\n".write(toFile: config, atomically: true, encoding: .utf8)
        let scenario = bus.directory + "/phone.jsonl"
        try """
            {"scenario":"service","devices":[{"address":"AA:BB:CC:DD:EE:01","name":"Ada's iPhone"}],"apps":{"a":"App"}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"a","title":"Before the reload","message":"x"}
            {"do":"sleep","seconds":30}
            {"do":"end"}
            """.write(toFile: scenario, atomically: true, encoding: .utf8)
        let ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", bus.address, "run", "--config", config],
            environment: environment(["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"]))
        let ready = try notify.receive(until: "READY=1", timeout: .seconds(20))
        #expect(ready.last?.contains("STATUS=waiting for bluetoothd") == true, "\(ready)")
        let phone = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", bus.address, "--scenario", scenario])
        defer { _ = try? phone.stop() }
        try ancsd.waitForLine { $0.contains("Before the reload") }
        let status = try notify.receive(until: "STATUS=1 phone connected, 1 notification", timeout: .seconds(10))
        #expect(status.contains { $0 == "WATCHDOG=1" }, "the watchdog is answered: \(status)")
        #expect(!ancsd.standardError.contains("debug:"))
        #expect(!ancsd.standardError.contains("Before the reload"), "no notification content at the info level")
        #expect(ancsd.standardError.contains("AA:BB:CC:DD:EE:01: notification 1 added (social)"), "that it arrived is logged")

        try "format = json\nlog-level = debug\n".write(toFile: config, atomically: true, encoding: .utf8)
        ancsd.signal(SIGHUP)
        let reload = try notify.receive(until: "READY=1", timeout: .seconds(10))
        #expect(reload.contains { $0.hasPrefix("RELOADING=1\nMONOTONIC_USEC=") })
        #expect(reload.last?.hasSuffix("STATUS=1 phone connected, 1 notification") == true, "\(reload)")
        #expect(notify.receive(timeout: .milliseconds(300)).map { !$0.hasPrefix("STATUS=") } ?? true, "the status line stays")
        try ancsd.waitForStandardError(containing: "reloaded the configuration")
        #expect(!ancsd.lines.contains { $0.text.contains("disconnected") }, "the phone stays connected")
        let debugBefore = ancsd.standardError.components(separatedBy: "debug:").count

        ancsd.signal(SIGTERM)
        _ = try notify.receive(until: "STOPPING=1", timeout: .seconds(10))
        #expect(try ancsd.wait() == 0)
        #expect(ancsd.standardError.components(separatedBy: "debug:").count >= debugBefore)
        #expect(ancsd.lines.last?.text.contains(#""type":"disconnected""#) == true, "a clean stop says goodbye")
    }

    /// Started at boot before any adapter exists, ancsd must not make the bus activate bluetoothd
    /// (systemd would skip it for want of an adapter and the call would wait 25 s): READY at once.
    @Test func readyAtOnceWithoutActivatingBluetoothd() throws {
        let services = NSTemporaryDirectory() + "ancsd-services-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: services) }
        let mark = services + "/bluetoothd-activated"
        try "[D-BUS Service]\nName=org.bluez\nExec=/bin/sh -c 'touch \(mark); sleep 60'\n"
            .write(toFile: services + "/org.bluez.service", atomically: true, encoding: .utf8)
        let bus = try PrivateBus(serviceDirectory: services)
        let notify = try DatagramListener(directory: bus.directory)
        let started = ContinuousClock.now
        let ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "run"],
            environment: environment(["NOTIFY_SOCKET": notify.path]))
        let ready = try notify.receive(until: "READY=1", timeout: .seconds(20))
        #expect(ContinuousClock.now - started < .seconds(3), "READY after \(ContinuousClock.now - started)")
        #expect(ready.last?.contains("STATUS=waiting for bluetoothd") == true, "\(ready)")
        Thread.sleep(forTimeInterval: 0.5)
        #expect(!FileManager.default.fileExists(atPath: mark), "ancsd made the bus start bluetoothd")
        #expect(try ancsd.stop() == 0)
    }

    /// Under a systemd unit standard output is the journal: events (the phone's titles and
    /// messages) must not go there, only to the FIFO and the control socket.
    @Test func noEventsIntoTheJournal() throws {
        let bus = try PrivateBus()
        let fifo = bus.directory + "/events"
        let scenario = bus.directory + "/phone.jsonl"
        try """
            {"scenario":"journal","devices":[{"address":"AA:BB:CC:DD:EE:01","name":"Ada's iPhone"}],"apps":{"a":"App"}}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"a","title":"Private title","message":"Private message"}
            {"after":1,"do":"end"}
            """.write(toFile: scenario, atomically: true, encoding: .utf8)
        // JOURNAL_STREAM names the shell's standard output, as systemd names the journal's stream.
        let ancsdPath = builtProductsDirectory.appendingPathComponent("ancsd").path
        let ancsd = try ChildProcess(
            URL(fileURLWithPath: "/bin/sh"),
            ["-c", "JOURNAL_STREAM=$(stat -L -c %d:%i /proc/$$/fd/1) exec \"$0\" \"$@\"", ancsdPath,
             "--bus", bus.address, "run", "--format", "json", "--fifo", fifo])
        try ancsd.waitForStandardError(containing: "bluetoothd is not running")
        let reader = open(fifo, O_RDONLY | O_NONBLOCK)
        #expect(reader >= 0)
        defer { close(reader) }
        let phone = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancs-phone-sim"), ["--bus", bus.address, "--scenario", scenario])
        #expect(try phone.wait(timeout: .seconds(60)) == 0)
        var data = [UInt8](repeating: 0, count: 1 << 16)
        let count = read(reader, &data, data.count)
        #expect(String(decoding: data.prefix(max(count, 0)), as: UTF8.self).contains("Private message"), "the FIFO has the events")
        #expect(try ancsd.stop() == 0)
        #expect(ancsd.lines.isEmpty, "nothing on the journal's stream: \(ancsd.lines.map(\.text))")
        #expect(ancsd.standardError.contains("standard output is the journal: events are not written there"))
        #expect(!ancsd.standardError.contains("Private"))
    }

    @Test func aBadConfigurationStopsBeforeReady() throws {
        let bus = try PrivateBus()
        let notify = try DatagramListener(directory: bus.directory)
        let config = bus.directory + "/ancsd.conf"
        try "format = json\n\nfifo-mode = rw-rw----\n".write(toFile: config, atomically: true, encoding: .utf8)
        let ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "run", "--config", config],
            environment: environment(["NOTIFY_SOCKET": notify.path]))
        #expect(try ancsd.wait() == 2)
        #expect(ancsd.standardError.contains("ancsd.conf:3: fifo-mode must be octal permissions"))
        #expect(notify.receive(timeout: .milliseconds(200)) == nil, "never READY")
    }

    @Test func theCommandLineOverridesTheFile() throws {
        let bus = try PrivateBus()
        let config = bus.directory + "/ancsd.conf"
        try "format = text\nlog-level = error\n".write(toFile: config, atomically: true, encoding: .utf8)
        let ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"),
            ["--bus", bus.address, "run", "--config", config, "--log-level", "info"])
        try ancsd.waitForStandardError(containing: "bluetoothd is not running")
        #expect(try ancsd.stop() == 0)
    }

    /// SIGTERM at any moment of start-up (connecting, reading bluetoothd's tree, READY, starting
    /// the watchers) stops ancsd with status 0: a stop that came before the daemon waited for the
    /// bus to go away once left it waiting forever.
    @Test func sigtermDuringStartUpStops() throws {
        let bus = try PrivateBus()
        for attempt in 0..<40 {
            let ancsd = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "run", "--format", "json"])
            try waitUntilHandled(SIGTERM, by: ancsd)
            // 0 to 38 ms in steps of 2 ms (start-up on an idle machine), then every 13 ms up to
            // 287 ms (past READY on a loaded one).
            let delay = attempt < 20 ? attempt * 2 : 40 + (attempt - 20) * 13
            Thread.sleep(forTimeInterval: Double(delay) / 1000)
            ancsd.signal(SIGTERM)
            let status = try ancsd.wait(timeout: .seconds(5))
            #expect(status == 0, "SIGTERM \(delay) ms into start-up: status \(status); stderr:\n\(ancsd.standardError)")
        }
    }

    /// SIGHUP during start-up re-reads the configuration and never kills ancsd.
    @Test func sighupDuringStartUpKeepsRunning() throws {
        let bus = try PrivateBus()
        for attempt in 0..<12 {
            let ancsd = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "run", "--format", "json"])
            try waitUntilHandled(SIGHUP, by: ancsd)
            Thread.sleep(forTimeInterval: Double(attempt) * 0.01)
            ancsd.signal(SIGHUP)
            try ancsd.waitForStandardError(containing: "bluetoothd is not running", timeout: .seconds(10))
            try ancsd.waitForStandardError(containing: "reloaded the configuration", timeout: .seconds(10))
            #expect(ancsd.isRunning, "SIGHUP \(attempt * 10) ms into start-up killed ancsd")
            #expect(try ancsd.stop(timeout: .seconds(5)) == 0)
        }
    }

    /// SIGTERM, SIGINT and SIGHUP are blocked in every thread of `ancsd run` and caught by none
    /// (no signal handler: they are read from a signalfd on the loop), so none can meet a thread
    /// that would give it its default action.
    @Test func theSignalsAreBlockedInEveryThread() throws {
        let bus = try PrivateBus()
        let ancsd = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "run", "--format", "json"])
        try ancsd.waitForStandardError(containing: "bluetoothd is not running", timeout: .seconds(10))
        let handled = [SIGTERM, SIGINT, SIGHUP].reduce(UInt64(0)) { $0 | UInt64(1) << UInt64($1 - 1) }
        let threads = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(ancsd.pid)/task")
        #expect(!threads.isEmpty)
        for thread in threads {
            let status = try String(contentsOfFile: "/proc/\(ancsd.pid)/task/\(thread)/status", encoding: .utf8)
            func mask(_ key: String) -> UInt64? {
                status.split(separator: "\n").first { $0.hasPrefix(key) }.flatMap { UInt64($0.split(separator: "\t").last ?? "", radix: 16) }
            }
            #expect(mask("SigBlk:").map { $0 & handled == handled } == true, "thread \(thread):\n\(status)")
            #expect(mask("SigCgt:").map { $0 & handled == 0 } == true, "thread \(thread):\n\(status)")
        }
        #expect(try ancsd.stop() == 0)
    }

    /// Waits until `process` no longer has the default action for `signal` (/proc/PID/status):
    /// blocks it (ancsd run reads it from a signalfd), ignores it or catches it.
    private func waitUntilHandled(_ signal: Int32, by process: ChildProcess) throws {
        let bit = UInt64(1) << UInt64(signal - 1)
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            let status = (try? String(contentsOfFile: "/proc/\(process.pid)/status", encoding: .utf8)) ?? ""
            for line in status.split(separator: "\n") where ["SigBlk:", "SigIgn:", "SigCgt:"].contains(where: line.hasPrefix) {
                if let mask = UInt64(line.split(separator: "\t").last ?? "", radix: 16), mask & bit != 0 { return }
            }
            guard process.isRunning else { throw TestFailure("ancsd ended before it handled signal \(signal): \(process.standardError)") }
            Thread.sleep(forTimeInterval: 0.001)
        }
        throw TestFailure("ancsd did not handle signal \(signal) within 10 s")
    }

    @Test func aMissingBusIsAClearError() throws {
        let ancsd = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", "unix:path=/nonexistent/bus", "run"])
        #expect(try ancsd.wait() == 1)
        #expect(ancsd.standardError.contains("cannot connect to the D-Bus bus"))
    }
}
