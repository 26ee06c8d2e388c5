import ANCS
import ANCSDaemon
import ANCSRuntime
import ANCSSession
import Foundation
import JSON
import Testing

/// `--exec` at sink level, with real /bin/sh commands; one test at a time, so the churn test
/// counts only its own descriptors (only this suite makes pidfds in this process).
@Suite(.serialized) struct ExecSinkTests {
    private static let quiet = Logger(threshold: .error, journald: false)

    private static func event(uid: UInt32, device: String = "AA:BB:CC:DD:EE:01", message: String = "Tea at five?") -> OutputRecord {
        var n = PhoneNotification(uid: uid, flags: [.positiveAction], category: .social, categoryCount: 1)
        n.appIdentifier = "com.apple.MobileSMS"
        n.appName = "Messages"
        n.title = "Ada"
        n.message = message
        n.attributesComplete = true
        return OutputRecord(.notification(NotificationEvent(kind: .added, notification: n), device: device))
    }

    private static func directory() throws -> String {
        let path = NSTemporaryDirectory() + "ancsd-exec-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    private static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    /// Each command gets the event's JSON line on stdin and its metadata in the environment, one
    /// at a time per phone, in event order.
    @Test func commandsGetTheEventInOrderPerPhone() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // Each phone's commands append to that phone's file; a slow first command shows that
        // the next one waits for it.
        let script = #"""
            f="\#(dir)/$(echo "$ANCSD_DEVICE" | tr -d :)"
            [ "$ANCSD_UID" = 0 ] && sleep 0.3
            { printf 'env %s %s %s %s %s\n' "$ANCSD_TYPE" "$ANCSD_DEVICE" "$ANCSD_UID" "$ANCSD_APP_ID" "$ANCSD_CATEGORY"; cat; } >> "$f"
            """#
        let sink = ExecSink(command: script, logger: Self.quiet, loop: sinkTestLoop)
        var sent: [String: [OutputRecord]] = [:]
        for uid in UInt32(0)..<12 {
            for device in ["AA:BB:CC:DD:EE:01", "AA:BB:CC:DD:EE:02"] {
                let record = Self.event(uid: uid, device: device, message: "line \(uid)\nwith \"quotes\" and é")
                sent[device, default: []].append(record)
                sink.send(record)
            }
        }
        let connected = OutputRecord(.connected(device: "AA:BB:CC:DD:EE:01", name: "Ada's iPhone"))
        sink.send(connected)
        #expect(await sink.flush(timeout: .seconds(30)))
        for (device, records) in sent {
            var expected = records.map { record -> String in
                guard case .notification(let change, _, _) = record.event else { return "" }
                return "env added \(device) \(change.notification.uid) com.apple.MobileSMS social\n" + record.jsonLine + "\n"
            }
            if device == "AA:BB:CC:DD:EE:01" { expected.append("env connected \(device)   \n" + connected.jsonLine + "\n") }
            #expect(Self.read("\(dir)/\(device.filter { $0 != ":" })") == expected.joined())
        }
        let counts = await sink.counts
        #expect(counts.started == 25 && counts.succeeded == 25 && counts.failed == 0)
    }

    /// The descriptors this process has open now, and how many of them are pidfds.
    private static func openDescriptors() -> (all: Int, pidfds: Int) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        let targets = names.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }
        return (names.count, targets.count { $0 == "anon_inode:[pidfd]" })
    }

    /// Thousands of short commands back to back, on four phones at once (the soak's bursts):
    /// every one runs, in order, nothing is lost, each one's standard error read, and no
    /// descriptor is left open: no pidfd at all, and no pipe (two ends in the parent per
    /// command: a leak would show thousands, where the suites running beside this one hold a
    /// few dozen at a time). This churn crashed libdispatch in the soak (docs/soak.md section 5), when the
    /// sink ran on dispatch sources; `SOAK_SEED=5 SOAK_SECONDS=40 make soak` was its reproducer.
    @Test func thousandsOfShortCommandsInARowAllRun() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = ExecSink(command: #"echo "$ANCSD_UID" >&2; exec cat >> "\#(dir)/$ANCSD_DEVICE""#, logger: Self.quiet, loop: sinkTestLoop)
        let descriptorsBefore = Self.openDescriptors()
        let devices = (1...4).map { "AA:BB:CC:DD:EE:0\($0)" }
        var sent: [String: [String]] = [:]
        for round in UInt32(0)..<10 {
            for uid in round * 60..<(round + 1) * 60 {
                for device in devices {
                    let record = Self.event(uid: uid, device: device)
                    sent[device, default: []].append(record.jsonLine)
                    sink.send(record)
                }
            }
            #expect(await sink.flush(timeout: .seconds(60)))
        }
        for device in devices {
            #expect(Self.read("\(dir)/\(device)") == sent[device, default: []].map { $0 + "\n" }.joined())
        }
        let counts = await sink.counts
        #expect(counts.started == 2400 && counts.succeeded == 2400 && counts.dropped == 0)
        #expect(counts.stderrBytes == 4 * (0..<600).reduce(0) { $0 + "\($1)\n".utf8.count })
        let descriptorsAfter = Self.openDescriptors()
        #expect(descriptorsAfter.pidfds == descriptorsBefore.pidfds)
        #expect(descriptorsAfter.all - descriptorsBefore.all < 200, "\(descriptorsBefore.all) descriptors open before, \(descriptorsAfter.all) after")
    }

    /// A failing command is logged and counted; the next event still runs.
    @Test func aFailingCommandDoesNotStopTheNext() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = ExecSink(command: #"echo "$ANCSD_UID" >> "\#(dir)/ran"; [ "$ANCSD_UID" != 1 ] || exit 3"#, logger: Self.quiet, loop: sinkTestLoop)
        for uid in UInt32(1)...3 { sink.send(Self.event(uid: uid)) }
        #expect(await sink.flush(timeout: .seconds(30)))
        #expect(Self.read("\(dir)/ran") == "1\n2\n3\n")
        let counts = await sink.counts
        #expect(counts.failed == 1 && counts.succeeded == 2)
        let expected: JSONObject = [
            "started": 3, "succeeded": 2, "failed": 1, "timed_out": 0, "spawn_failures": 0, "dropped": 0, "running": 0, "waiting": 0,
        ]
        #expect(await sink.report() == expected)
    }

    /// A command that hangs is killed with its process group after the timeout; the next runs.
    @Test func aHangingCommandIsKilledWithItsProcessGroup() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let command = #"""
            if [ "$ANCSD_UID" = 1 ]; then sleep 60 & echo $! > "\#(dir)/child"; wait; fi
            echo "$ANCSD_UID" >> "\#(dir)/ran"
            """#
        let sink = ExecSink(command: command, timeout: .milliseconds(300), logger: Self.quiet, loop: sinkTestLoop)
        let start = ContinuousClock.now
        sink.send(Self.event(uid: 1))
        sink.send(Self.event(uid: 2))
        #expect(await sink.flush(timeout: .seconds(30)))
        #expect(ContinuousClock.now - start < .seconds(30))
        #expect(Self.read("\(dir)/ran") == "2\n", "the killed command did not go on; the next one ran")
        let counts = await sink.counts
        #expect(counts.timedOut == 1 && counts.failed == 1 && counts.succeeded == 1)
        // The background `sleep` was in the command's process group: killed too (gone, or a
        // zombie waiting for whoever adopted it).
        let pid = Int32(Self.read("\(dir)/child").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        #expect(pid > 0)
        var state = "gone"
        for _ in 0..<50 {
            let stat = Self.read("/proc/\(pid)/stat")
            state = stat.isEmpty ? "gone" : String(stat.split(separator: ")").last?.split(separator: " ").first ?? "?")
            if state == "gone" || state == "Z" { break }
            usleep(20_000)
        }
        #expect(state == "gone" || state == "Z", "the process group's sleep is \(state)")
    }

    /// Stopping the sink (a reload that removed `exec`, the daemon ending) drops what
    /// waits and kills what runs.
    @Test func stopKillsTheRunningCommandAndDropsTheWaiting() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = ExecSink(command: #"echo $$ > "\#(dir)/pid"; exec sleep 60"#, logger: Self.quiet, loop: sinkTestLoop)
        for uid in UInt32(1)...4 { sink.send(Self.event(uid: uid)) }
        var pid: Int32 = 0
        for _ in 0..<500 where pid == 0 {
            pid = Int32(Self.read("\(dir)/pid").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            usleep(10_000)
        }
        #expect(pid > 0)
        sink.stop()
        sink.send(Self.event(uid: 5))  // after stop: ignored
        #expect(await sink.flush(timeout: .seconds(30)))
        let counts = await sink.counts
        #expect(counts.started == 1 && counts.failed == 1 && counts.timedOut == 0 && counts.dropped == 3)
        #expect(kill(pid, 0) != 0, "reaped")
    }

    /// A reload's new command runs for the events not yet started; the running one finishes
    /// under its own limit (the new, shorter one would have killed it), and each phone keeps
    /// its order: nothing lost, nothing run twice.
    @Test func reconfigureChangesTheCommandForWhatHasNotStarted() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = ExecSink(
            command: #"echo $$ > "\#(dir)/pid"; sleep 1; echo "A $ANCSD_UID" >> "\#(dir)/ran""#, timeout: .seconds(20), logger: Self.quiet, loop: sinkTestLoop)
        for uid in UInt32(1)...3 { sink.send(Self.event(uid: uid)) }
        var started = false
        for _ in 0..<500 where !started {
            started = !Self.read("\(dir)/pid").isEmpty
            usleep(10_000)
        }
        #expect(started)
        sink.reconfigure(command: #"echo "B $ANCSD_UID" >> "\#(dir)/ran""#, timeout: .milliseconds(500))
        let settings = await sink.settings
        #expect(settings.command.hasPrefix("echo \"B") && settings.timeout == .milliseconds(500))
        sink.send(Self.event(uid: 4))
        #expect(await sink.flush(timeout: .seconds(30)))
        #expect(Self.read("\(dir)/ran") == "A 1\nB 2\nB 3\nB 4\n")
        let counts = await sink.counts
        #expect(counts.started == 4 && counts.succeeded == 4 && counts.failed == 0 && counts.dropped == 0)
    }

    /// Megabytes on stderr are read (never blocking the command) and only a bounded part is kept.
    @Test func aStderrFloodIsReadAndBounded() async throws {
        let sink = ExecSink(command: "head -c 8000000 /dev/zero | tr '\\0' x >&2; exit 1", logger: Self.quiet, loop: sinkTestLoop)
        sink.send(Self.event(uid: 1))
        sink.send(Self.event(uid: 2))
        #expect(await sink.flush(timeout: .seconds(60)))
        let counts = await sink.counts
        #expect(counts.stderrBytes == 16_000_000 && counts.failed == 2 && counts.timedOut == 0)
    }

    /// A command that never reads its input, given an event far larger than a pipe holds: no deadlock.
    @Test func aCommandThatReadsNothingGetsABigEvent() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = ExecSink(command: #"sleep 0.2; echo "$ANCSD_UID" >> "\#(dir)/ran""#, logger: Self.quiet, loop: sinkTestLoop)
        let big = String(repeating: "x", count: 4 << 20)
        for uid in UInt32(1)...3 { sink.send(Self.event(uid: uid, message: big)) }
        #expect(await sink.flush(timeout: .seconds(30)))
        #expect(Self.read("\(dir)/ran") == "1\n2\n3\n")
        let counts = await sink.counts
        #expect(counts.succeeded == 3 && counts.timedOut == 0)
        // And one that reads it all gets every byte.
        let reader = ExecSink(command: #"wc -c > "\#(dir)/size""#, logger: Self.quiet, loop: sinkTestLoop)
        let record = Self.event(uid: 9, message: big)
        reader.send(record)
        #expect(await reader.flush(timeout: .seconds(30)))
        #expect(Self.read("\(dir)/size").trimmingCharacters(in: .whitespacesAndNewlines) == "\(record.jsonLine.utf8.count + 1)")
    }

    /// Past the bound, the oldest waiting events of that phone are dropped; the newest run.
    @Test func aFullQueueDropsTheOldestWaiting() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = ExecSink(command: #"[ "$ANCSD_UID" = 0 ] && sleep 1; echo "$ANCSD_UID" >> "\#(dir)/ran""#, maxWaiting: 4, logger: Self.quiet, loop: sinkTestLoop)
        for uid in UInt32(0)..<20 { sink.send(Self.event(uid: uid)) }
        #expect(await sink.flush(timeout: .seconds(30)))
        #expect(Self.read("\(dir)/ran") == "0\n16\n17\n18\n19\n")
        let counts = await sink.counts
        #expect(counts.dropped == 15 && counts.started == 5)
    }

    /// The command sees only standard input, output and error: no descriptor of the daemon, and
    /// no signal ignored or blocked.
    @Test func theCommandInheritsNoDescriptorsAndDefaultSignals() async throws {
        let dir = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let leaked = open("/dev/null", O_RDONLY)  // not close-on-exec, as a careless library might open it
        defer { close(leaked) }
        signal(SIGPIPE, SIG_IGN)
        let sink = ExecSink(
            // (`exec >`: a plain redirection would make dash keep a copy of its standard output.)
            // The masks are read by the shell itself: dash blocks every signal while it vforks a
            // command, so a `grep` of its status could see that moment.
            command: #"""
                exec > "\#(dir)/fds"; ls /proc/$$/fd
                while read -r key value; do case $key in SigBlk:|SigIgn:) echo "$key	$value";; esac; done < /proc/$$/status > "\#(dir)/signals"
                """#,
            logger: Self.quiet, loop: sinkTestLoop)
        sink.send(Self.event(uid: 1))
        #expect(await sink.flush(timeout: .seconds(30)))
        #expect(Self.read("\(dir)/fds").split(separator: "\n") == ["0", "1", "2"])
        // The standard signals 1-31 (glibc keeps the real-time ones it uses itself out of reach).
        let masks = Self.read("\(dir)/signals").split(separator: "\n").map { UInt64($0.split(separator: "\t").last ?? "", radix: 16) }
        let text = Self.read("\(dir)/signals")
        #expect(masks.count == 2 && masks.allSatisfy { $0.map { $0 & 0x7FFF_FFFF == 0 } ?? false }, "\(text)")
    }

    @Test func settingsAreChecked() throws {
        var settings = RunSettings()
        try settings.set("exec", "notify-send \"$ANCSD_TYPE\"")
        try settings.set("exec-timeout", "2.5")
        #expect(settings.execCommand == "notify-send \"$ANCSD_TYPE\"" && settings.execTimeout == .milliseconds(2500))
        for bad in ["0", "-1", "x", "1e9", "nan"] { #expect(throws: SettingError.self) { try settings.set("exec-timeout", bad) } }
        #expect(throws: SettingError.self) { try settings.set("exec", "") }
    }
}
