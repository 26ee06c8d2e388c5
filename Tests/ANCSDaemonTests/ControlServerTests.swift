@testable import ANCSDaemon
import ANCSRuntime
import ControlProtocol
import EventLoop
import Foundation
import JSON
import Synchronization
import Testing

/// A handler whose `subscribe` emits an event before its reply is out, as the daemon does when a
/// notification arrives between registering the subscriber and answering it.
private final class EagerHandler: ControlHandler {
    let server = Mutex<ControlServer?>(nil)

    func reply(to request: ControlRequest, client: ControlServer.ClientID) async -> Result<ControlAnswer, ControlError> {
        guard request.command == .subscribe else { return .success(.performed) }
        server.withLock { $0 }?.send(#"{"v":1,"type":"added","uid":7}"#, to: client)
        return .success(.subscribed)
    }

    func clientClosed(_ client: ControlServer.ClientID) async {}
}

@Suite("Control server")
struct ControlServerTests {
    /// Found by make soak (seed 345850489, 600 s, at 573.9 s): a control subscriber read an event
    /// before `{"ok":true,"subscribed":true}`, which docs/control.md promises first.
    @Test("a subscriber gets its reply before the first event, however soon the event comes")
    func replyBeforeEvents() async throws {
        let path = NSTemporaryDirectory() + "control-\(UUID().uuidString)"
        let handler = EagerHandler()
        let server = try ControlServer(
            path: path, handler: handler, logger: Logger(threshold: .error, journald: false), loop: try EventLoop(name: "control-test"))
        handler.server.withLock { $0 = server }
        server.start()
        defer { server.stop() }

        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in path.utf8.enumerated() { raw[i] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(connected == 0)
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = Array(#"{"cmd":"subscribe","id":1}"#.utf8) + [0x0A, 0x7B]  // and half of the next line
        #expect(write(fd, request, request.count - 1) == request.count - 1)

        // The blocking reads run on a thread of their own: on the cooperative pool (two threads
        // on two cores) they could starve the server's reply task while other tests block too.
        let received = await withCheckedContinuation { (done: CheckedContinuation<[UInt8], Never>) in
            Thread.detachNewThread {
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while received.filter({ $0 == 0x0A }).count < 2 {
                    let n = read(fd, &buffer, buffer.count)
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { break }
                    received += buffer[0..<n]
                }
                done.resume(returning: received)
            }
        }
        let lines = String(decoding: received, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines == [#"{"ok":true,"subscribed":true,"id":1}"#, #"{"v":1,"type":"added","uid":7}"#])
    }

    // MARK: Careless and hostile clients (docs/control.md, "Who may connect" and "Bad input")

    private static let quiet = Logger(threshold: .error, journald: false)

    private static func makeServer(_ path: String, handler: any ControlHandler = Answerer()) throws -> ControlServer {
        let server = try ControlServer(path: path, handler: handler, logger: quiet, loop: try EventLoop(name: "control-test"))
        server.start()
        return server
    }

    private static func temporaryPath() -> String { NSTemporaryDirectory() + "control-\(UUID().uuidString)" }

    /// Found by a probe of issue 27: when a client closed and the next connected at once, about
    /// 4 % of connections were never read (the old client's close cancelled its dispatch sources
    /// and closed the descriptor at once, so a reused number lost its registration).
    @Test("1,000 connect-request-close rounds in a row: every request answered, no descriptor kept")
    func sequentialClientsAreAllServed() async throws {
        let path = Self.temporaryPath()
        let server = try Self.makeServer(path)
        defer { server.stop() }
        var unanswered: [Int] = []
        for round in 0..<1_000 {
            let fd = try #require(Self.connect(to: path))
            Self.send(fd, #"{"cmd":"status","id":\#(round)}"# + "\n")
            let reply = Self.readLine(fd)
            close(fd)
            if reply != #"{"ok":true,"result":"performed","id":\#(round)}"# { unanswered.append(round) }
        }
        #expect(unanswered.isEmpty, "rounds without their reply: \(unanswered)")
        // Every connection let go (the daemon's descriptor count is checked in the end-to-end
        // test, a process of its own: here other tests open and close descriptors meanwhile).
        var held = await server.clientCount
        for _ in 0..<200 where held > 0 {
            try await Task.sleep(for: .milliseconds(10))
            held = await server.clientCount
        }
        #expect(held == 0, "clients still held after all closed: \(held)")
    }

    /// `printf '…\n' | socat - UNIX-CONNECT:…` shuts down its sending side at the end of its
    /// input: the reply must still come (it was dropped with the connection before).
    @Test("a client that shuts down its sending side still gets its reply, then the end of the stream")
    func halfClosedClientsGetTheirReply() throws {
        let path = Self.temporaryPath()
        let server = try Self.makeServer(path, handler: Answerer(delay: .milliseconds(200)))
        defer { server.stop() }
        let fd = try #require(Self.connect(to: path))
        defer { close(fd) }
        Self.send(fd, #"{"cmd":"status","id":1}"# + "\n" + #"{"cmd":"status","id":2}"#)  // the last line without its newline
        shutdown(fd, Int32(SHUT_WR))
        #expect(Self.readAll(fd) == #"{"ok":true,"result":"performed","id":1}"# + "\n" + #"{"ok":true,"result":"performed","id":2}"# + "\n")
    }

    @Test("a second server on a live socket's path is refused and the first keeps its socket")
    func aLiveSocketIsNeverTakenOver() throws {
        let path = Self.temporaryPath()
        let first = try Self.makeServer(path)
        defer { first.stop() }
        #expect {
            try Self.makeServer(path).stop()
        } throws: { error in
            "\(error)".contains("another ancsd is listening on \(path)")
        }
        let fd = try #require(Self.connect(to: path), "the first server's socket is still there")
        defer { close(fd) }
        Self.send(fd, #"{"cmd":"status"}"# + "\n")
        #expect(Self.readLine(fd) == #"{"ok":true,"result":"performed"}"#)
    }

    @Test("a stale socket (nobody listens) is replaced; stop removes only the server's own socket")
    func aStaleSocketIsReplaced() throws {
        let path = Self.temporaryPath()
        let stale = try Self.makeServer(path)
        stale.stop()
        // Made again by hand: a socket file nobody listens on, as a killed daemon leaves it.
        let leftover = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = Self.address(path)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(leftover, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        close(leftover)
        let server = try Self.makeServer(path)
        // Another program replaced the path meanwhile: stopping must not remove its file.
        unlink(path)
        let other = FileManager.default.createFile(atPath: path, contents: Data("not ours".utf8))
        #expect(other)
        server.stop()
        #expect(Self.poll { true } && FileManager.default.fileExists(atPath: path), "stop removed a file that was not its socket")
        unlink(path)
    }

    @Test("the socket file never has more than its final mode, from the moment it exists")
    func theSocketIsMadeWithItsFinalMode() throws {
        let path = Self.temporaryPath()
        let seen = Mutex<mode_t?>(nil)
        ControlServer.afterBind.withLock { $0 = { made in
            var info = stat()
            if lstat(made, &info) == 0 { seen.withLock { $0 = info.st_mode & 0o7777 } }
        } }
        defer { ControlServer.afterBind.withLock { $0 = nil } }
        let server = try Self.makeServer(path)
        defer { server.stop() }
        let made = seen.withLock { $0 } ?? 0o7777  // nothing seen: fails below
        #expect(made & ~0o660 == 0, "mode right after bind: \(String(made, radix: 8)), more than 660")
        var info = stat()
        #expect(lstat(path, &info) == 0 && info.st_mode & 0o7777 == 0o660, "and exactly 660 once set up")
    }

    @Test("a peer that is neither root, the daemon's user nor in the socket's group is refused")
    func strangersAreRefused() throws {
        #expect(ControlServer.isMember(uid: 0, primaryGroup: 0, of: 0))
        // nobody (65534) is in no group of root's: refused whatever the file's mode.
        #expect(!ControlServer.isMember(uid: 65_534, primaryGroup: 65_534, of: 0))
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { return }
        // In a directory nobody can reach, whatever the temporary directory's mode.
        let directory = "/tmp/ancsd-peer-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/control"
        let server = try Self.makeServer(path)
        defer { server.stop() }
        chmod(path, 0o666)  // a careless mode: the peer check still holds
        let client = Process()
        client.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        client.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", """
            import socket; s = socket.socket(socket.AF_UNIX); s.connect("\(path)")
            print(s.makefile().readline().strip())
            """]
        let output = Pipe(), errors = Pipe()
        client.standardOutput = output
        client.standardError = errors
        try client.run()
        let line = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let problem = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        client.waitUntilExit()
        #expect(line.contains(#""code":"forbidden""#), "nobody's client got: \(line) \(problem)")
    }

    // MARK: Helpers

    static func address(_ path: String) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in path.utf8.enumerated() { raw[i] = byte }
        }
        return address
    }

    static func connect(to path: String) -> Int32? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = address(path)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    static func send(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// One line (without its newline), or nil at the end of the stream or after 10 s.
    static func readLine(_ fd: Int32) -> String? {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = read(fd, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            guard n == 1 else { return nil }
            if byte == 0x0A { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
    }

    /// Everything until the end of the stream.
    static func readAll(_ fd: Int32) -> String {
        String(decoding: FileHandle(fileDescriptor: fd, closeOnDealloc: false).readDataToEndOfFile(), as: UTF8.self)
    }

    /// Polls `condition` for up to 5 s.
    static func poll(_ condition: () -> Bool) -> Bool {
        for _ in 0..<500 {
            if condition() { return true }
            usleep(10_000)
        }
        return condition()
    }
}

/// Answers every request `{"ok":true,"result":"performed"}`, after `delay`.
private struct Answerer: ControlHandler {
    var delay: Duration = .zero

    func reply(to request: ControlRequest, client: ControlServer.ClientID) async -> Result<ControlAnswer, ControlError> {
        if delay > .zero { try? await Task.sleep(for: delay) }
        return .success(.performed)
    }

    func clientClosed(_ client: ControlServer.ClientID) async {}
}
