import ANCS
import ANCSDaemon
import ANCSRuntime
import ANCSSession
import ControlProtocol
import Foundation
import JSON
import EventLoop
import Synchronization
import Testing

private func sample(_ kind: NotificationEvent.Kind = .added) -> NotificationEvent {
    var n = PhoneNotification(uid: 7, flags: [.positiveAction, .negativeAction, .preExisting], category: .incomingCall, categoryCount: 1)
    n.appIdentifier = "com.apple.mobilephone"
    n.appName = "Phone"
    n.title = "\u{202E}Ada\u{202C}"
    n.subtitle = ""
    n.message = "Incoming\nCall\u{7}"
    n.messageSize = 13
    n.truncated = false
    n.date = .valid(ANCSDate(year: 2026, month: 11, day: 30, hour: 9, minute: 5, second: 0))
    n.positiveAction = "Answer"
    n.negativeAction = "Decline"
    n.attributesComplete = true
    return NotificationEvent(kind: kind, notification: n)
}

@Suite struct EventFormatterTests {
    @Test func jsonVersionOne() throws {
        let line = EventFormatter.line(.notification(sample(), device: "AA:BB:CC:DD:EE:FF"), format: .json)
        #expect(line == #"{"v":1,"type":"added","device":"AA:BB:CC:DD:EE:FF","uid":7,"category":"incoming_call","category_id":1,"category_count":1,"flags":["pre_existing","positive_action","negative_action"],"pre_existing":true,"seen_before":false,"app_id":"com.apple.mobilephone","app_name":"Phone","title":"\#u{202E}Ada\#u{202C}","subtitle":"","message":"Incoming\nCall\u0007","message_size":13,"truncated":false,"date":"2026-11-30T09:05:00","positive_action":"Answer","negative_action":"Decline","complete":true}"#)
    }

    @Test func unknownFieldsAreNull() throws {
        let n = PhoneNotification(uid: 1, flags: [], category: CategoryID(rawValue: 40), categoryCount: 0)
        let json = EventFormatter.json(.notification(NotificationEvent(kind: .removed, notification: n), device: "AA"))
        for key in ["app_id", "app_name", "title", "subtitle", "message", "message_size", "truncated", "date", "positive_action", "negative_action"] {
            #expect(json[key] == .null, "\(key)")
        }
        #expect(json["category"] == "reserved" && json["complete"] == false && json["pre_existing"] == false)
    }

    @Test func connectionEvents() {
        #expect(EventFormatter.line(.connected(device: "AA", name: "Ada's iPhone"), format: .json) == #"{"v":1,"type":"connected","device":"AA","name":"Ada's iPhone"}"#)
        #expect(EventFormatter.line(.disconnected(device: "AA", reason: nil), format: .json) == #"{"v":1,"type":"disconnected","device":"AA","reason":null}"#)
        #expect(EventFormatter.line(.connected(device: "AA", name: "x\u{1B}[2J"), format: .text) == "connected     AA (x [2J)")
    }

    @Test func sharingEvents() {
        let off = OutputEvent.sharing(device: "AA:BB:CC:DD:EE:01", allowed: false)
        #expect(EventFormatter.line(off, format: .json) == #"{"v":1,"type":"sharing","device":"AA:BB:CC:DD:EE:01","state":"off"}"#)
        #expect(EventFormatter.json(off).serialized == EventFormatter.line(off, format: .json))
        #expect(EventFormatter.line(.sharing(device: "AA", allowed: true), format: .json) == #"{"v":1,"type":"sharing","device":"AA","state":"on"}"#)
        #expect(EventFormatter.line(off, format: .text).contains("Share System Notifications"))
        #expect(OutputRecord(off).device == "AA:BB:CC:DD:EE:01")
        #expect(MQTTTopics(prefix: "ancsd").sharing("aabbccddee01") == "ancsd/aabbccddee01/sharing")
    }

    @Test func textIsOneSafeLine() {
        let line = EventFormatter.line(.notification(sample(), device: "AA:BB"), format: .text)
        #expect(line == "added         Phone · Ada: Incoming Call  [incoming_call, #7, earlier, actions: Answer/Decline, AA:BB]")
        #expect(!line.unicodeScalars.contains { $0.value < 0x20 || (0x202A...0x202E).contains($0.value) })
    }

    @Test func seenBeforeIsMarked() {
        let event = OutputEvent.notification(sample(), device: "AA:BB", seenBefore: true)
        #expect(EventFormatter.json(event)["seen_before"] == true)
        #expect(EventFormatter.line(event, format: .text).contains("[incoming_call, #7, seen before, actions"))
    }

    /// A record's renderings are the formatter's, byte for byte, in both formats, over events
    /// of every kind with awkward text (control characters, invalid UTF-8 repaired, bidi marks).
    @Test func recordRendersAsTheFormatter() {
        let events = VariedEvents.events
        #expect(events.count > 600)
        for event in events {
            let record = OutputRecord(event)
            #expect(record.jsonLine == EventFormatter.line(event, format: .json))
            #expect(record.json == EventFormatter.json(event))
            #expect(record.lineBytes(.json) == Array(record.jsonLine.utf8) + [0x0A])
            #expect(record.lineBytes(.text) == Array(EventFormatter.text(event).utf8) + [0x0A])
        }
    }

    @Test func sanitizeRemovesControlsAndBidi() {
        #expect(EventFormatter.sanitize("\u{200E}+1 555\u{200F}\r\n\tx\u{2066}y\u{2069}  ") == "+1 555 xy", "the text format uses TerminalText")
        #expect(EventFormatter.sanitize("Pebble Time β „quotes“ 👍") == "Pebble Time β „quotes“ 👍")
    }
}

@Suite struct LoggerTests {
    @Test func formats() {
        #expect(Logger(threshold: .info, journald: true).format(.warning, "a\nb") == "<4>a b")
        #expect(Logger(threshold: .info, journald: false).format(.debug, "x") == "ancsd: debug: x")
        #expect(LogLevel(name: "WARN") == .warning && LogLevel(name: "loud") == nil)
    }
}

/// The loop the output sinks under test run on, as the daemon's run on its own.
let sinkTestLoop: EventLoop = {
    do {
        return try EventLoop(name: "sink-test")
    } catch {
        preconditionFailure("cannot start the sinks' event loop: \(error)")
    }
}()

@Suite struct LineSinkTests {
    @Test func writesLinesInOrder() async throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let sink = LineSink(fd: fds[1], name: "pipe", ownsDescriptor: true, logger: Logger(threshold: .error, journald: false), loop: sinkTestLoop)
        for i in 0..<100 { sink.send("line \(i)") }
        #expect(await sink.flush(timeout: .seconds(5)))
        let handle = FileHandle(fileDescriptor: fds[0], closeOnDealloc: true)
        let data = handle.availableData
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n")
        #expect(lines.count == 100 && lines.first == "line 0" && lines.last == "line 99")
        #expect(await sink.counts == (written: 100, dropped: 0))
    }

    /// Lines written at once while the pipe has room, then cut where it filled (the rest of that
    /// line queued first), then queued: the reader gets every line whole and in order.
    @Test func linesStayWholeAndInOrderAcrossAFullPipe() async throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let sink = LineSink(fd: fds[1], name: "pipe", ownsDescriptor: true, logger: Logger(threshold: .error, journald: false), loop: sinkTestLoop)
        let lines = (0..<300).map { i in "\(i) " + String(repeating: "x", count: 997 + i % 7) }
        for line in lines { sink.send(line) }  // about 300 kB, the pipe holds 64 kB: nobody reads yet
        let handle = FileHandle(fileDescriptor: fds[0], closeOnDealloc: true)
        var received = Data()
        let expected = lines.reduce(0) { $0 + $1.utf8.count + 1 }
        while received.count < expected {
            let chunk = handle.availableData
            if chunk.isEmpty { break }
            received.append(chunk)
        }
        #expect(await sink.flush(timeout: .seconds(5)))
        #expect(String(decoding: received, as: UTF8.self).split(separator: "\n").map(String.init) == lines)
        #expect(await sink.counts == (written: 300, dropped: 0))
    }

    /// No reader at all: the FIFO fills, the sink keeps a bounded backlog and never blocks the caller.
    @Test func fifoWithoutReaderNeverBlocksAndBoundsTheBacklog() async throws {
        let path = NSTemporaryDirectory() + "ancsd-fifo-\(UUID().uuidString)"
        defer { unlink(path) }
        let fifo = try openOutputFIFO(path: path, mode: 0o600)
        var info = stat()
        #expect(stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFIFO && (info.st_mode & 0o777) == 0o600)
        let sink = LineSink(owning: fifo, name: path, maxPendingBytes: 64 * 1024, logger: Logger(threshold: .error, journald: false), loop: sinkTestLoop)
        let line = String(repeating: "x", count: 1023)
        let start = ContinuousClock.now
        for _ in 0..<20_000 { sink.send(line) }  // 20 MB: far more than the pipe and the backlog hold
        #expect(ContinuousClock.now - start < .seconds(5), "sending never blocks")
        #expect(await sink.counts.dropped > 10_000)

        // A reader that attaches now gets the oldest kept events, whole lines.
        let reader = open(path, O_RDONLY | O_NONBLOCK)
        #expect(reader >= 0)
        defer { close(reader) }
        // The sink writes from its own queue: wait (bounded) until it has refilled the pipe.
        var available: Int32 = 0
        let deadline = ContinuousClock.now + .seconds(5)
        while ioctl(reader, UInt(FIONREAD), &available) == 0, available < 4096, ContinuousClock.now < deadline {
            usleep(1000)
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = read(reader, &buffer, buffer.count)
        #expect(count == 4096)
        #expect(buffer.prefix(1024) == ArraySlice(Array(line.utf8) + [0x0A]))
    }

    @Test func refusesAPathThatIsNotAFIFO() {
        let path = NSTemporaryDirectory() + "ancsd-file-\(UUID().uuidString)"
        #expect(FileManager.default.createFile(atPath: path, contents: Data()))
        defer { unlink(path) }
        #expect(throws: FIFOError.self) { _ = try openOutputFIFO(path: path, mode: 0o600) }
        #expect(throws: FIFOError.self) { _ = try openOutputFIFO(path: "/nonexistent-dir/fifo", mode: 0o600) }
    }

    /// Issue 27: an existing FIFO owned by another user with mode 0666 was used silently, and
    /// `--fifo-mode` ignored for it; a symbolic link was followed.
    @Test func aFIFOThatIsNotAncsdsOrGivesMoreThanItsModeIsRefused() throws {
        let directory = NSTemporaryDirectory() + "ancsd-fifos-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func refusal(_ path: String, mode: mode_t = 0o600) -> String? {
            do {
                _ = try openOutputFIFO(path: path, mode: mode)
                return nil
            } catch {
                return error.description
            }
        }
        let open = directory + "/open"
        #expect(mkfifo(open, 0o600) == 0 && chmod(open, 0o666) == 0)
        #expect(refusal(open)?.contains("has mode 666, more than --fifo-mode 600 allows") == true, "\(refusal(open) ?? "accepted")")
        #expect(refusal(open, mode: 0o666) == nil, "what --fifo-mode allows is accepted")
        if geteuid() == 0 {
            let strangers = directory + "/strangers"
            #expect(mkfifo(strangers, 0o600) == 0 && chown(strangers, 65_534, 65_534) == 0)
            #expect(refusal(strangers)?.contains("belongs to uid 65534") == true, "\(refusal(strangers) ?? "accepted")")
        }
        let link = directory + "/link"
        #expect(symlink(open, link) == 0)
        #expect(refusal(link, mode: 0o666)?.contains("exists and is not a FIFO") == true, "\(refusal(link) ?? "accepted")")
        // A new FIFO has the mode asked for whatever the umask (022 or 077 alike).
        let made = directory + "/made"
        #expect(refusal(made, mode: 0o640) == nil)
        var info = stat()
        #expect(lstat(made, &info) == 0 && info.st_mode & 0o7777 == 0o640)
    }

    /// A terminal takes no non-waiting writes (`RWF_NOWAIT`): the sink writes through a
    /// non-blocking description of its own, past a full terminal buffer, and leaves the flags
    /// of the description it shares with other processes as they were.
    @Test func aTerminalGetsEveryLineAndKeepsItsFlags() async throws {
        let master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)
        try #require(master >= 0)
        defer { close(master) }
        var locked: Int32 = 0
        #expect(ioctl(master, 0x4004_5431, &locked) == 0)  // TIOCSPTLCK: unlock the terminal
        let terminal = ioctl(master, 0x5441, O_RDWR | O_NOCTTY | O_CLOEXEC)  // TIOCGPTPEER: its other side
        try #require(terminal >= 0)
        let flags = fcntl(terminal, F_GETFL)
        let sink = LineSink(fd: terminal, name: "terminal", ownsDescriptor: true, logger: Logger(threshold: .error, journald: false), loop: sinkTestLoop)
        let lines = (0..<200).map { "line \($0) " + String(repeating: "x", count: 200) }  // 40 kB: more than a terminal holds
        for line in lines { sink.send(line) }
        let expected = lines.reduce(0) { $0 + $1.utf8.count + 1 }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let deadline = ContinuousClock.now + .seconds(10)
        while received.count < expected, ContinuousClock.now < deadline {
            var ready = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 100) == 1 else { continue }
            let count = read(master, &buffer, buffer.count)
            if count > 0 { received += buffer.prefix(count).filter { $0 != 0x0D } }  // the terminal's CR before each LF
        }
        #expect(await sink.flush(timeout: .seconds(5)))
        #expect(String(decoding: received, as: UTF8.self).split(separator: "\n").map(String.init) == lines)
        #expect(await sink.counts == (written: 200, dropped: 0))
        #expect(fcntl(terminal, F_GETFL) == flags, "the shared description keeps its flags (no O_NONBLOCK)")
    }

    /// A regular file may take no non-waiting writes either: it gets ordinary ones, every line in order.
    @Test func aRegularFileGetsEveryLine() async throws {
        let path = NSTemporaryDirectory() + "ancsd-lines-\(UUID().uuidString)"
        defer { unlink(path) }
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        let sink = LineSink(fd: fd, name: path, ownsDescriptor: true, logger: Logger(threshold: .error, journald: false), loop: sinkTestLoop)
        let lines = (0..<1000).map { "line \($0)" }
        for line in lines { sink.send(line) }
        #expect(await sink.flush(timeout: .seconds(5)))
        #expect(try String(contentsOfFile: path, encoding: .utf8) == lines.map { $0 + "\n" }.joined())
        #expect(await sink.counts == (written: 1000, dropped: 0))
    }

    @Test func aReaderThatLeavesEndsTheSinkQuietly() async throws {
        signal(SIGPIPE, SIG_IGN)
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        close(fds[0])
        let sink = LineSink(fd: fds[1], name: "pipe", ownsDescriptor: true, logger: Logger(threshold: .error, journald: false), loop: sinkTestLoop)
        sink.send("a")
        _ = await sink.flush(timeout: .seconds(5))
        sink.send("b")
        _ = await sink.flush(timeout: .seconds(5))
        #expect(await sink.counts.written == 0)
    }
}

/// A sink that keeps what it is given.
private final class RecordingSink: OutputSink {
    let name: String
    private let state = Mutex<(events: [OutputRecord], started: Int, stopped: Int)>(([], 0, 0))
    init(_ name: String) { self.name = name }
    func start(_ context: OutputContext) { state.withLock { $0.started += 1 } }
    func send(_ event: OutputRecord) { state.withLock { $0.events.append(event) } }
    func stop() { state.withLock { $0.stopped += 1 } }
    var events: [OutputRecord] { state.withLock { $0.events } }
    var started: Int { state.withLock { $0.started } }
    var stopped: Int { state.withLock { $0.stopped } }
}

private struct NoActions: PhoneActions {
    func performAction(_ action: ActionID, uid: UInt32, device: String) async -> JSONObject { ["ok": false] }
    func performMediaCommand(_ command: ControlMediaCommand, device: String) async -> JSONObject { ["ok": false] }
}

@Suite struct OutputRouterTests {
    @Test func everySinkGetsTheSameRecordFormattedOnce() throws {
        let a = RecordingSink("a"), b = RecordingSink("b")
        let executor = try DaemonExecutor(name: "test")
        defer { executor.shutdown() }
        let router = OutputRouter(sinks: [a, b], loop: executor)
        router.start(OutputContext(actions: NoActions(), executor: executor))
        router.start(OutputContext(actions: NoActions(), executor: executor))
        #expect(a.started == 1 && b.started == 1, "started once")
        let event = OutputEvent.notification(sample(), device: "AA:BB")
        router.emit(event)
        router.emit(.connected(device: "AA:BB", name: nil))
        #expect(a.events.count == 2 && b.events.count == 2)
        #expect(a.events[0] === b.events[0], "one record shared by every sink")
        let record = a.events[0]
        #expect(record.jsonLine == EventFormatter.line(event, format: .json))
        #expect(record.line(.text) == EventFormatter.line(event, format: .text))
        #expect(record.line(.json) == record.jsonLine && record.device == "AA:BB")
        #expect(a.events[1].device == "AA:BB")
    }

    @Test func attachedSinksComeGoAndMoveToANewRouter() async {
        let fixed = RecordingSink("fixed"), client = RecordingSink("client")
        let router = OutputRouter(sinks: [fixed], loop: sinkTestLoop)
        router.attach(client, key: "control client 1")
        router.emit(.connected(device: "A", name: nil))
        let next = OutputRouter(sinks: [], loop: sinkTestLoop)
        router.moveAttached(to: next)
        router.stop()
        #expect(fixed.stopped == 1 && client.stopped == 0)
        router.emit(.connected(device: "B", name: nil))
        next.emit(.connected(device: "C", name: nil))
        #expect(client.events.map(\.device) == ["A", "C"])
        #expect(await next.attachedKeys == ["control client 1"])
        next.detach(key: "control client 1")
        next.emit(.connected(device: "D", name: nil))
        #expect(client.events.count == 2 && client.stopped == 1)
        #expect(await next.attachedKeys.isEmpty)
    }

    /// A sink whose reader never reads does not hold up the others.
    @Test func aStuckSinkDoesNotBlockTheRouter() async throws {
        signal(SIGPIPE, SIG_IGN)  // the read end closes while the sink may still be writing
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]) }
        let stuck = LineSink(fd: fds[1], name: "stuck", ownsDescriptor: true, format: .json, maxPendingBytes: 64 * 1024, logger: Logger(threshold: .error, journald: false), loop: sinkTestLoop)
        let other = RecordingSink("other")
        let router = OutputRouter(sinks: [stuck, other], loop: sinkTestLoop)
        for _ in 0..<5_000 { router.emit(.notification(sample(), device: "AA:BB")) }  // ~2.5 MB, far more than the pipe holds
        #expect(other.events.count == 5_000)
        #expect(await stuck.counts.dropped > 0)
    }
}
