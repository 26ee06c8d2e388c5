// dbus-bench: method-call round trips of the DBus layer against python3-dbus on a private
// dbus-daemon, and the idle wakeups of a connected process.
//
//   dbus-bench [--calls N] [--idle-seconds S]     (env: DBUS_BENCH_CALLS, DBUS_BENCH_IDLE_SECONDS,
//                                                  DBUS_BENCH_PYTHON, DBUS_BENCH_SCRIPT,
//                                                  DBUS_BENCH_TIMEOUT_MS)
//   dbus-bench --serve ADDRESS    (internal) export Echo(s)->s, print "ready NAME"
//   dbus-bench --idle ADDRESS     (internal) connect, export, subscribe, then sit idle
//   dbus-bench --write-client ADDRESS NAME N   N WriteValue-shaped calls (ay, a{sv}) with
//                                 startCall from the connection's loop, as ancsd makes them
//                                 (for callgrind: run with two N and divide the difference)
//
// No Foundation here: the idle child must be the same kind of process as the daemon.
import DBus
import Glibc

// MARK: - Small POSIX helpers

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

func env(_ name: String) -> String? {
    guard let p = getenv(name) else { return nil }
    return String(cString: p)
}

func option(_ flag: String) -> String? {
    let args = CommandLine.arguments
    guard let i = args.firstIndex(of: flag), i + 1 < args.count else { return nil }
    return args[i + 1]
}

func readFile(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = read(fd, &buf, buf.count)
        if n <= 0 { break }
        out += buf[0..<n]
    }
    return String(decoding: out, as: UTF8.self)
}

func writeFile(_ path: String, _ text: String) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw BenchError("cannot write \(path)") }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    guard write(fd, bytes, bytes.count) == bytes.count else { throw BenchError("short write to \(path)") }
}

func selfExecutable() -> String {
    var buf = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/exe", &buf, buf.count - 1)
    return n > 0 ? String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
}

/// A child process with its stdout on a pipe.
struct Child {
    let pid: pid_t
    let stdout: Int32

    /// Spawns `argv` with an empty signal mask and default signal actions (a child of a
    /// thread that blocks signals would otherwise inherit the mask).
    static func spawn(_ argv: [String], quiet: Bool = false) throws -> Child {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw BenchError("pipe failed") }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        if quiet { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attr, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in [SIGTERM, SIGINT, SIGPIPE, SIGCHLD, SIGHUP] { sigaddset(&defaults, s) }
        posix_spawnattr_setsigdefault(&attr, &defaults)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var cargs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for p in cargs { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, &attr, &cargs, environ)
        close(fds[1])
        guard rc == 0 else {
            close(fds[0])
            throw BenchError("cannot run \(argv[0]): \(String(cString: strerror(rc)))")
        }
        return Child(pid: pid, stdout: fds[0])
    }

    /// One line of the child's stdout, or an error after `timeout` seconds.
    func readLine(timeout: Int32 = 20) throws -> String {
        var bytes: [UInt8] = []
        var pfd = pollfd(fd: stdout, events: Int16(POLLIN), revents: 0)
        while true {
            guard poll(&pfd, 1, timeout * 1000) > 0 else { throw BenchError("child \(pid) printed nothing") }
            var c: UInt8 = 0
            guard read(stdout, &c, 1) == 1 else { throw BenchError("child \(pid) exited") }
            if c == 10 { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(c)
        }
    }

    func kill() {
        _ = Glibc.kill(pid, SIGKILL)
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
        close(stdout)
    }
}

func sleepSeconds(_ s: Double) {
    var request = timespec(tv_sec: Int(s), tv_nsec: Int((s - Double(Int(s))) * 1e9))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

/// Voluntary + nonvoluntary context switches of every thread of `pid`.
func contextSwitches(_ pid: pid_t) -> Int {
    guard let dir = opendir("/proc/\(pid)/task") else { return -1 }
    defer { closedir(dir) }
    var total = 0
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        guard name.first?.isNumber == true, let status = readFile("/proc/\(pid)/task/\(name)/status") else { continue }
        for line in status.split(separator: "\n") where line.hasSuffix("") {
            if line.hasPrefix("voluntary_ctxt_switches:") || line.hasPrefix("nonvoluntary_ctxt_switches:") {
                total += Int(line.split(separator: "\t").last.map { $0.trimmingPrefix(while: { $0 == " " }) } ?? "") ?? 0
            }
        }
    }
    return total
}

func statusField(_ pid: pid_t, _ field: String) -> String {
    guard let status = readFile("/proc/\(pid)/status") else { return "?" }
    for line in status.split(separator: "\n") where line.hasPrefix(field + ":") {
        return String(line.dropFirst(field.count + 1).trimmingPrefix(while: { $0 == " " || $0 == "\t" }))
    }
    return "?"
}

// MARK: - The echo service

let benchInterface: InterfaceName = "com.example.Bench"
/// Per-call timeout: DBUS_BENCH_TIMEOUT_MS, default libdbus's 25 s.
let callTimeout: Duration = .milliseconds(Int(env("DBUS_BENCH_TIMEOUT_MS") ?? "") ?? 25_000)
let benchPath: ObjectPath = "/bench"

func echoService() -> ExportedObject {
    ExportedObject(ExportedInterface(benchInterface, methods: [
        .immediate("Echo", input: "s", output: "s") { $0.arguments },
        // The shape of BlueZ's GattCharacteristic1.WriteValue, which ancsd calls per request.
        .immediate("Write", input: "aya{sv}") { _ in [] },
    ]))
}

/// Child mode: serve Echo until killed.
func serve(_ address: String) async throws {
    let connection = try await DBusConnection.connect(to: .address(address))
    try await connection.export(echoService(), at: benchPath)
    print("ready", connection.uniqueName)
    fflush(nil)
    await connection.waitUntilDisconnected()
}

/// Child mode: a daemon-like connected process doing nothing.
func idle(_ address: String) async throws {
    let connection = try await DBusConnection.connect(to: .address(address))
    try await connection.export(echoService(), at: benchPath)
    let subscription = try await connection.subscribe(
        to: .propertiesChanged(sender: "org.bluez", pathNamespace: "/org/bluez")) { _ in }
    print("ready", connection.uniqueName)
    fflush(nil)
    await connection.waitUntilDisconnected()
    await connection.unsubscribe(subscription)
}

struct Stats {
    let median: Double
    let p99: Double
    /// Context switches of the client process (all threads) per call, when known.
    var switchesPerCall: Double?

    init(nanoseconds samples: [Int64]) {
        let sorted = samples.sorted()
        median = Double(sorted[sorted.count / 2]) / 1000
        p99 = Double(sorted[min(sorted.count - 1, sorted.count * 99 / 100)]) / 1000
    }

    init(median: Double, p99: Double) {
        self.median = median
        self.p99 = p99
    }
}

/// Round-trip samples in nanoseconds, and context switches of this process per call.
struct Samples: Sendable {
    var nanoseconds: [Int64] = []
    var switches = 0
    var calls = 0

    mutating func add(_ other: Samples) {
        nanoseconds += other.nanoseconds
        switches += other.switches
        calls += other.calls
    }

    var stats: Stats {
        var s = Stats(nanoseconds: nanoseconds)
        if calls > 0 && switches >= 0 { s.switchesPerCall = Double(switches) / Double(calls) }
        return s
    }
}

/// Times `calls` round trips after `warmup` untimed ones, in the caller's isolation.
func measure(
    calls: Int, warmup: Int, isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> Message
) async throws -> Samples {
    var samples: [Int64] = []
    samples.reserveCapacity(calls)
    let clock = ContinuousClock()
    var switches = 0
    for i in 0..<(warmup + calls) {
        if i == warmup { switches = contextSwitches(getpid()) }
        let start = clock.now
        let reply = try await body()
        let elapsed = clock.now - start
        guard reply.arguments == [.string("hello")] else { throw BenchError("bad echo") }
        if i >= warmup {
            let (s, atto) = elapsed.components
            samples.append(s * 1_000_000_000 + atto / 1_000_000_000)
        }
    }
    return Samples(nanoseconds: samples, switches: contextSwitches(getpid()) - switches, calls: calls)
}

/// Swift client: `calls` timed Echo round trips after `warmup` untimed ones, in a task on
/// the global executor (plain use) or preferring the connection's task executor.
func swiftClient(
    _ address: String, _ destination: String, calls: Int, warmup: Int, onConnectionQueue: Bool
) async throws -> Samples {
    let connection = try await DBusConnection.connect(to: .address(address))
    let dest = try BusName(destination)
    let body: @Sendable () async throws -> Samples = {
        try await measure(calls: calls, warmup: warmup) {
            try await connection.call(
                destination: dest, path: benchPath, interface: benchInterface, member: "Echo", arguments: [.string("hello")],
                timeout: callTimeout)
        }
    }
    let stats = onConnectionQueue
        ? try await Task(executorPreference: connection.taskExecutor, operation: body).value
        : try await Task.detached(operation: body).value
    await connection.close()
    return stats
}

func pythonClient(_ python: String, _ script: String, _ address: String, _ destination: String, calls: Int, warmup: Int) throws -> Samples {
    let child = try Child.spawn([python, script, "call", address, destination, String(calls), String(warmup)])
    defer { child.kill() }
    let values = try child.readLine(timeout: 300).split(separator: " ").compactMap { Int64($0) }
    guard values.count == calls else { throw BenchError("python client printed something unexpected") }
    return Samples(nanoseconds: values, switches: -1, calls: calls)
}

func format(_ v: Double) -> String {
    let tenths = Int((v * 10).rounded())
    let s = "\(tenths / 10).\(tenths % 10) µs"
    return String(repeating: " ", count: max(0, 10 - s.count)) + s
}

// MARK: - Main

func runBench() async throws {
    let calls = Int(option("--calls") ?? env("DBUS_BENCH_CALLS") ?? "") ?? 10_000
    let idleSeconds = Double(option("--idle-seconds") ?? env("DBUS_BENCH_IDLE_SECONDS") ?? "") ?? 30
    let warmup = max(100, calls / 10)
    let python = env("DBUS_BENCH_PYTHON") ?? "/usr/bin/python3"
    let sourceDirectory = String(#filePath.dropLast("main.swift".count))
    let script = env("DBUS_BENCH_SCRIPT") ?? sourceDirectory + "echo_bench.py"
    let me = selfExecutable()

    // A private bus.
    var template = Array("/tmp/dbus-bench-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { throw BenchError("mkdtemp failed") }
    let dir = String(cString: made)
    defer {
        unlink(dir + "/bus.conf")
        unlink(dir + "/bus")
        rmdir(dir)
    }
    try writeFile(dir + "/bus.conf", """
        <busconfig><type>session</type><listen>unix:path=\(dir)/bus</listen><auth>EXTERNAL</auth>
        <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/>
        <allow own="*"/></policy></busconfig>
        """)
    let daemon = try Child.spawn(["/usr/bin/dbus-daemon", "--config-file=\(dir)/bus.conf", "--nofork", "--print-address"], quiet: true)
    defer { daemon.kill() }
    let address = try daemon.readLine()

    print("dbus-bench: Echo(s) -> s round trips on a private dbus-daemon; \(calls) timed calls after \(warmup) warm-up")
    print("  client  -> server                                        median         p99")

    let swiftServer = try Child.spawn([me, "--serve", address])
    defer { swiftServer.kill() }
    let swiftName = String(try swiftServer.readLine().dropFirst("ready ".count))

    var pythonServer: Child?
    var pythonName: String?
    do {
        let child = try Child.spawn([python, script, "serve", address])
        pythonServer = child
        pythonName = String(try child.readLine().dropFirst("ready ".count))
    } catch {
        print("  (python3-dbus reference unavailable: \(error))")
    }
    defer { pythonServer?.kill() }

    func row(_ label: String, _ s: Stats) {
        let switches = s.switchesPerCall.map { v in
            let h = Int((v * 10).rounded())
            return "   (\(h / 10).\(h % 10) context switches per call in the client)"
        } ?? ""
        print("  \(label)\(format(s.median))  \(format(s.p99))\(switches)")
        fflush(nil)
    }
    // Interleaved rounds, so that load from elsewhere on the machine hits all clients alike.
    let rounds = 5
    let perRound = max(1, calls / rounds)
    var plain = Samples()
    var onQueue = Samples()
    var reference = Samples()
    for _ in 0..<rounds {
        plain.add(try await swiftClient(address, swiftName, calls: perRound, warmup: warmup, onConnectionQueue: false))
        onQueue.add(try await swiftClient(address, swiftName, calls: perRound, warmup: warmup, onConnectionQueue: true))
        if let pythonName {
            reference.add(try pythonClient(python, script, address, pythonName, calls: perRound, warmup: warmup))
        }
    }
    row("swift   -> swift, task on the connection's executor", onQueue.stats)
    row("swift   -> swift, plain task (global executor)     ", plain.stats)
    if let pythonName {
        row("python  -> python (reference)                      ", reference.stats)
        row("python  -> swift                                   ",
            try pythonClient(python, script, address, swiftName, calls: perRound, warmup: warmup).stats)
        row("swift   -> python, task on the connection's executor",
            try await swiftClient(address, pythonName, calls: perRound, warmup: warmup, onConnectionQueue: true).stats)
        func ratio(_ a: Stats) -> String {
            let r = Int((a.median / reference.stats.median * 100).rounded())
            return "\(r / 100).\(r % 100 < 10 ? "0" : "")\(r % 100)"
        }
        print("  median ratio swift/python: \(ratio(onQueue.stats)) on the connection's executor, "
              + "\(ratio(plain.stats)) from a plain task")
        let plainRatio = plain.stats.median / reference.stats.median
        let met = plainRatio <= 1.0 ? "met" : "BELOW TARGET"
        print("  dbus round trip from a plain task: \(format(plain.stats.median).trimmingPrefix(while: { $0 == " " })) median "
              + "(python3-dbus \(format(reference.stats.median).trimmingPrefix(while: { $0 == " " })), ratio \(ratio(plain.stats)))   [target ≤ 1.00: \(met)]")
    }

    // Idle wakeups of a connected process, next to a Swift process that only ran one task:
    // libdispatch on Linux keeps a 1 Hz workqueue-monitor timer in any process that ever
    // used a worker thread, which no library can switch off.
    func idleWakeups(_ mode: String) throws -> (delta: Int, threads: String, rss: String) {
        let child = try Child.spawn([me, mode, address])
        defer { child.kill() }
        _ = try child.readLine()
        // libdispatch retires worker threads idle for 5 s; let that happen before measuring,
        // since an exited thread's switches vanish from /proc.
        sleepSeconds(6)
        let before = contextSwitches(child.pid)
        let threadsBefore = statusField(child.pid, "Threads")
        sleepSeconds(idleSeconds)
        let after = contextSwitches(child.pid)
        return (after - before, "\(threadsBefore) then \(statusField(child.pid, "Threads"))", statusField(child.pid, "VmRSS"))
    }
    let idle = try idleWakeups("--idle")
    let baseline = try idleWakeups("--baseline-idle")
    print("idle: context switches (voluntary + nonvoluntary, all threads) over \(Int(idleSeconds)) s, after 6 s to settle:")
    print("  connected DBus process (export + signal match), \(idle.threads) threads: delta \(idle.delta), VmRSS \(idle.rss)")
    print("  baseline Swift process (one Task, no D-Bus),    \(baseline.threads) threads: delta \(baseline.delta), VmRSS \(baseline.rss)")
    print("  attributable to the DBus layer: \(idle.delta - baseline.delta) (target 0)")
}

/// `calls` Control-Point-like writes, one at a time, each started by the previous one's
/// completion on the connection's loop (no task per call), as ancsd's GattClient makes them.
func writeClient(_ address: String, _ destination: String, calls: Int) async throws {
    let connection = try await DBusConnection.connect(to: .address(address))
    let dest = try BusName(destination)
    let value: [UInt8] = [0, 1, 2, 3, 4, 0, 1, 64, 0, 3, 0, 1]
    let requestOptions = DBusValue.variantDictionary(["type": .string("request")])  // built once, as GattClient does
    let failures = try await withCheckedThrowingContinuation { (done: CheckedContinuation<Int, any Error>) in
        @Sendable func write(_ left: Int, _ failures: Int) {
            guard left > 0 else { return done.resume(returning: failures) }
            do {
                try connection.startCall(
                    destination: dest, path: benchPath, interface: benchInterface, member: "Write",
                    arguments: [.byteArray(value), requestOptions], timeout: callTimeout
                ) { reply in
                    var failed = failures
                    if case .failure = reply { failed += 1 }
                    write(left - 1, failed)
                }
            } catch {
                done.resume(throwing: error)
            }
        }
        write(calls, 0)  // the first from this thread, every later one from the loop
    }
    print("writes: \(calls), failed: \(failures)")
    await connection.close()
}

let arguments = CommandLine.arguments
do {
    if arguments.count >= 3 && arguments[1] == "--serve" {
        try await serve(arguments[2])
    } else if arguments.count >= 5 && arguments[1] == "--client" {
        for onQueue in [false, true] {
            let s = try await swiftClient(arguments[2], arguments[3], calls: Int(arguments[4]) ?? 1000, warmup: 100, onConnectionQueue: onQueue).stats
            print("\(onQueue ? "queue" : "plain"): median \(s.median) µs, p99 \(s.p99) µs, \(s.switchesPerCall ?? -1) switches per call")
        }
    } else if arguments.count >= 5 && arguments[1] == "--write-client" {
        try await writeClient(arguments[2], arguments[3], calls: Int(arguments[4]) ?? 1000)
    } else if arguments.count >= 3 && arguments[1] == "--baseline-idle" {
        _ = await Task.detached { 1 }.value
        print("ready")
        fflush(nil)
        while true { pause() }
    } else if arguments.count >= 3 && arguments[1] == "--idle" {
        try await idle(arguments[2])
    } else {
        try await runBench()
    }
} catch {
    print("dbus-bench: \(error)")
    exit(1)
}
