import DBus
import Foundation
import Testing
import TestSupport

/// The built `ancs-phone-sim` as a test harness runs it: command line, exit statuses, timeline.
@Suite("ancs-phone-sim executable", .serialized)
struct ExecutableTests {
    static var binary: String {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("ancs-phone-sim").path
    }

    struct Result {
        var status: Int32
        var stderr: String
    }

    /// Runs the binary, killing it after `timeout` seconds. Polls without blocking a thread.
    static func run(_ arguments: [String], input: String? = nil, timeout: Double = 15) async throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        let err = Pipe()
        process.standardError = err
        process.standardOutput = err
        let stdin = Pipe()
        if input != nil { process.standardInput = stdin }
        try process.run()
        if let input {
            stdin.fileHandleForWriting.write(Data(input.utf8))
            try stdin.fileHandleForWriting.close()
        }
        let fd = err.fileHandleForReading.fileDescriptor
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n > 0 {
                data += buffer[0..<n]
                continue
            }
            if n == 0 { break }
            guard ContinuousClock.now < deadline else {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                throw TestFailure("ancs-phone-sim \(arguments) did not finish within \(timeout) s")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        process.waitUntilExit()
        return Result(status: process.terminationStatus, stderr: String(decoding: data, as: UTF8.self))
    }

    static func temporaryFile(_ contents: String) throws -> String {
        let path = NSTemporaryDirectory() + "sim-\(UUID().uuidString).jsonl"
        try contents.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("--help and bad command lines")
    func commandLine() async throws {
        let help = try await Self.run(["--help"])
        #expect(help.status == 0 && help.stderr.contains("--scenario FILE"))
        for arguments in [[], ["--frobnicate"], ["--scenario", "/nonexistent/x.jsonl"], ["--scenario"]] {
            #expect(try await Self.run(arguments).status == 2, "\(arguments)")
        }
    }

    @Test("a bad scenario exits 2, naming the line")
    func badScenario() async throws {
        let path = try Self.temporaryFile("{\"scenario\":\"bad\"}\n{\"do\":\"add\",\"uid\":1}\n{\"do\":\"jump\"}\n")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try await Self.run(["--scenario", path, "--bus", "unix:path=/nonexistent"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("line 3: unknown step \"jump\""), "\(result.stderr)")
    }

    @Test("no bus: exit 1")
    func noBus() async throws {
        let path = try Self.temporaryFile("{\"scenario\":\"nobus\"}\n{\"do\":\"end\"}\n")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try await Self.run(["--scenario", path, "--bus", "unix:path=/nonexistent/bus"])
        #expect(result.status == 1, "\(result.stderr)")
    }

    @Test("--follow runs steps from standard input and answers each; --events logs what the phone did")
    func follow() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let events = NSTemporaryDirectory() + "events-\(UUID().uuidString).jsonl"
        defer { try? FileManager.default.removeItem(atPath: events) }
        let path = try Self.temporaryFile("{\"scenario\":\"follow\",\"devices\":[{\"address\":\"AA:BB:CC:DD:EE:01\",\"name\":\"Ada\"}]}\n")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try await Self.run(
            ["--scenario", path, "--bus", bus.address, "--events", events, "--follow"],
            input: "{\"do\":\"add\",\"uid\":1,\"title\":\"Hi\"}\n\n{\"do\":\"jump\"}\n{\"do\":\"disconnect\"}\n{\"do\":\"end\"}\n")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("{\"line\":1,\"ok\":true}\n"))
        #expect(result.stderr.contains("{\"line\":3,\"ok\":false,\"error\":\"line 3: unknown step \\\"jump\\\"\"}\n"))
        #expect(result.stderr.contains("{\"line\":4,\"ok\":true}\n"))
        #expect(result.stderr.contains("{\"line\":5,\"ok\":true}\n"))
        let log = try String(contentsOfFile: events, encoding: .utf8)
        #expect(log.contains("\"kind\":\"link\",\"dev\":0,\"up\":false,\"session\":1}"), "\(log)")
    }

    @Test("a scenario that ends exits 0 and writes its timeline; a wait that times out exits 3")
    func endsAndTimeline() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let timeline = NSTemporaryDirectory() + "timeline-\(UUID().uuidString).jsonl"
        defer { try? FileManager.default.removeItem(atPath: timeline) }
        let path = try Self.temporaryFile("""
            {"scenario":"short","devices":[{"address":"AA:BB:CC:DD:EE:01","name":"Ada"}]}
            {"do":"add","uid":5,"category":"social","title":"Hello"}
            {"do":"wait_subscribed","timeout":10}
            {"do":"add","uid":6,"category":"email","title":"Live"}
            {"after":0.3,"do":"end"}
            """)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let address = bus.address
        let run = Task { try await Self.run(["--scenario", path, "--bus", address, "--timeline", timeline]) }
        let client = try await DBusConnection.connect(to: .address(bus.address))
        let ns: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010/char0011"
        try await eventually("the simulator owns org.bluez") { try await client.nameOwner("org.bluez") != nil }
        let reply = try await client.call(
            destination: "org.bluez", path: ns, interface: "org.bluez.GattCharacteristic1", member: "AcquireNotify",
            arguments: [.variantDictionary([:])], expecting: "hq")
        let fd = try #require(reply[0].unixFDValue?.take())
        defer { close(fd) }
        let result = try await run.value
        await client.close()
        #expect(result.status == 0, "\(result.stderr)")
        let lines = try String(contentsOfFile: timeline, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 2)
        #expect(lines.first?.hasPrefix("{\"uid\":5,\"event\":\"added\",\"t_ns\":") == true)
        #expect(lines.last?.hasPrefix("{\"uid\":6,\"event\":\"added\",\"t_ns\":") == true)

        let waits = try Self.temporaryFile("{\"scenario\":\"waits\"}\n{\"do\":\"wait_subscribed\",\"timeout\":0.2}\n{\"do\":\"end\"}\n")
        defer { try? FileManager.default.removeItem(atPath: waits) }
        let timedOut = try await Self.run(["--scenario", waits, "--bus", bus.address])
        #expect(timedOut.status == 3, "\(timedOut.stderr)")
        #expect(timedOut.stderr.contains("line 2:"))
    }
}
