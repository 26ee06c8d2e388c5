import Foundation
import Synchronization

/// A private `mosquitto` broker for one test: its own configuration in a fresh temporary
/// directory, listening on 127.0.0.1 at a port the kernel picked, never the system's broker.
/// `restart()` starts it again on the same port with the same persistence file.
public final class MosquittoBroker: Sendable {
    /// What the listener asks of clients.
    public struct Security: Sendable {
        /// `user:password` pairs, hashed with `mosquitto_passwd`; anonymous clients are refused.
        public var users: [String: String] = [:]
        /// TLS with a server certificate for `localhost` and 127.0.0.1 signed by a test CA.
        public var tls = false
        public init(users: [String: String] = [:], tls: Bool = false) {
            self.users = users
            self.tls = tls
        }
    }

    public let directory: String
    public let port: Int32
    /// With `tls`: the test CA's certificate, for the client's `--mqtt-ca`.
    public let caFile: String
    private let process = Mutex<ChildProcess?>(nil)

    public init(security: Security = Security()) throws {
        var template = Array((NSTemporaryDirectory() + "ancsd-mqtt-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw TestFailure("mkdtemp failed") }
        directory = String(cString: made)
        chmod(directory, 0o755)
        port = try freeTCPPort()
        caFile = directory + "/ca.crt"
        var config = """
            listener \(port) 127.0.0.1
            persistence true
            persistence_location \(directory)/
            log_dest stderr
            log_type error
            log_type warning
            log_type notice
            log_type information
            log_type subscribe
            user root

            """
        if security.users.isEmpty {
            config += "allow_anonymous true\n"
        } else {
            let passwords = directory + "/passwd"
            _ = FileManager.default.createFile(atPath: passwords, contents: Data())
            for (user, password) in security.users {
                let result = try runTool("/usr/bin/mosquitto_passwd", ["-b", passwords, user, password])
                guard result.status == 0 else { throw TestFailure("mosquitto_passwd: \(result.text)") }
            }
            config += "allow_anonymous false\npassword_file \(passwords)\n"
        }
        if security.tls {
            try Self.makeCertificates(in: directory)
            config += "cafile \(directory)/ca.crt\ncertfile \(directory)/server.crt\nkeyfile \(directory)/server.key\n"
        }
        try config.write(toFile: directory + "/mosquitto.conf", atomically: true, encoding: .utf8)
        try start()
    }

    /// A CA and a server certificate for localhost / 127.0.0.1 signed by it, made by openssl.
    static func makeCertificates(in directory: String) throws {
        let openssl = "/usr/bin/openssl"
        let steps: [[String]] = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ancsd test CA",
             "-keyout", "\(directory)/ca.key", "-out", "\(directory)/ca.crt"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
             "-keyout", "\(directory)/server.key", "-out", "\(directory)/server.csr"],
            ["x509", "-req", "-in", "\(directory)/server.csr", "-CA", "\(directory)/ca.crt", "-CAkey", "\(directory)/ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "\(directory)/san.ext", "-out", "\(directory)/server.crt"],
        ]
        try "subjectAltName = DNS:localhost, IP:127.0.0.1\n".write(toFile: "\(directory)/san.ext", atomically: true, encoding: .utf8)
        for step in steps {
            let result = try runTool(openssl, step)
            guard result.status == 0 else { throw TestFailure("openssl \(step[0]): \(result.text)") }
        }
        chmod("\(directory)/server.key", 0o644)
    }

    /// Starts the broker and waits until it listens.
    public func start() throws {
        try UnitRun.needs("mosquitto")
        let child = try ChildProcess(URL(fileURLWithPath: "/usr/sbin/mosquitto"), ["-c", directory + "/mosquitto.conf"])
        process.withLock { $0 = child }
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if child.standardError.contains("Opening ipv4 listen socket") || child.standardError.contains("Opening ipv4 listen") {
                if canConnect() { return }
            }
            guard child.isRunning else { throw TestFailure("mosquitto ended: \(child.standardError)") }
            Thread.sleep(forTimeInterval: 0.02)
        }
        throw TestFailure("mosquitto did not listen on \(port): \(child.standardError)")
    }

    /// Stops the broker (SIGTERM: it saves its persistence file) and waits for it.
    public func stop() {
        let child = process.withLock { current -> ChildProcess? in
            defer { current = nil }
            return current
        }
        _ = try? child?.stop()
    }

    public func restart() throws {
        stop()
        try start()
    }

    /// The broker's log so far.
    public var log: String { process.withLock { $0?.standardError ?? "" } }

    /// How many subscriptions to `topic` (a filter, as subscribed) the running broker has taken:
    /// it logs each (`client qos topic`) once it holds it, before it acknowledges it.
    public func subscriptions(to topic: String) -> Int {
        log.split(separator: "\n").filter { $0.hasSuffix(" " + topic) && $0.split(separator: " ").count == 4 }.count
    }

    /// Sends `number` to the running broker (SIGSTOP: it holds its connections and answers nothing).
    public func signal(_ number: Int32) {
        process.withLock { $0?.signal(number) }
    }

    private func canConnect() -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    /// Arguments of `mosquitto_sub` / `mosquitto_pub` that reach this broker.
    public func clientArguments(user: String? = nil, password: String? = nil) -> [String] {
        var arguments = ["-h", "127.0.0.1", "-p", String(port)]
        if let user { arguments += ["-u", user] }
        if let password { arguments += ["-P", password] }
        return arguments
    }

    /// A `mosquitto_sub` printing `topic payload` lines for `topics`; with `sessionID` a
    /// persistent session (QoS 1), so it misses nothing across broker restarts.
    public func subscriber(_ topics: [String], sessionID: String? = nil, user: String? = nil, password: String? = nil) throws -> ChildProcess {
        var arguments = clientArguments(user: user, password: password) + ["-v", "-q", "1"]
        if let sessionID { arguments += ["-c", "-i", sessionID] }
        for topic in topics { arguments += ["-t", topic] }
        // mosquitto_sub says nothing when subscribed; the broker logs the subscription, its
        // topics in order.
        let last = topics.last ?? ""
        let before = subscriptions(to: last)
        let child = try ChildProcess(URL(fileURLWithPath: "/usr/bin/mosquitto_sub"), arguments)
        try waitUntil("mosquitto_sub subscribed to \(topics):\n\(log)\n\(child.standardError)", timeout: .seconds(10)) {
            subscriptions(to: last) > before && child.isRunning
        }
        return child
    }

    /// The first `count` retained messages under `topic` (`topic payload` lines), read by a fresh
    /// subscriber that ends once it has them, or is killed after 5 s with what it got. (Not
    /// mosquitto_sub's own `-W`: in 2.0.11 its timeout handler can hang in a TLS connection.)
    public func retained(_ topic: String, count: Int = 1, extra: [String] = [], host: String = "127.0.0.1") throws -> [String] {
        var arguments = ["-s", "KILL", "5", "/usr/bin/mosquitto_sub", "-h", host, "-p", String(port)] + extra
        arguments += ["-v", "--retained-only", "-C", String(count), "-t", topic]
        let result = try runTool("/usr/bin/timeout", arguments)
        return result.text.split(separator: "\n").map(String.init)
    }

    /// Publishes one message with `mosquitto_pub`.
    public func publish(_ topic: String, _ payload: String) throws {
        let result = try runTool("/usr/bin/mosquitto_pub", clientArguments() + ["-q", "1", "-t", topic, "-m", payload])
        guard result.status == 0 else { throw TestFailure("mosquitto_pub: \(result.text)") }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now (the kernel's choice).
public func freeTCPPort() throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestFailure("socket failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw TestFailure("bind failed") }
    return Int32(UInt16(bigEndian: address.sin_port))
}
