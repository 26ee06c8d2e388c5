#if canImport(Glibc)
import Glibc
import SystemCalls
#endif

/// The sd_notify protocol, without libsystemd: datagrams to the socket named by `NOTIFY_SOCKET`.
///
/// Does nothing when not started by systemd with `Type=notify`. The watchdog interval comes from
/// `WATCHDOG_USEC`, honoured only when `WATCHDOG_PID` is unset or names this process.
public final class SystemdNotifier: Sendable {
    private let socketPath: [UInt8]?
    /// How often systemd expects `WATCHDOG=1`, if it does.
    public let watchdogInterval: Duration?

    /// Reads the environment systemd sets. The variables are left in place.
    public convenience init() {
        self.init(environment: { getenv($0).map { String(cString: $0) } })
    }

    /// Reads the variables from `environment` (for tests).
    public init(environment: (String) -> String?) {
        if let path = environment("NOTIFY_SOCKET"), !path.isEmpty, path.hasPrefix("/") || path.hasPrefix("@") {
            socketPath = Array(path.utf8)
        } else {
            socketPath = nil
        }
        let forUs = environment("WATCHDOG_PID").map { $0 == String(getpid()) } ?? true
        if forUs, let text = environment("WATCHDOG_USEC"), let usec = UInt64(text), usec > 0 {
            watchdogInterval = .microseconds(usec)
        } else {
            watchdogInterval = nil
        }
    }

    /// True when there is a systemd to notify.
    public var isActive: Bool { socketPath != nil }

    /// Sends `READY=1` with a status line.
    public func ready(status: String) { send("READY=1\nSTATUS=\(status)") }
    /// Sends a status line for `systemctl status`.
    public func status(_ status: String) { send("STATUS=\(status)") }
    /// Tells the watchdog the daemon is alive.
    public func watchdog() { send("WATCHDOG=1") }
    /// Sends `RELOADING=1` and the monotonic time systemd wants with it.
    public func reloading() {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let usec = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
        send("RELOADING=1\nMONOTONIC_USEC=\(usec)")
    }
    /// Sends `READY=1` after a reload.
    public func reloaded(status: String) { send("READY=1\nSTATUS=\(status)") }
    /// Tells systemd the daemon is stopping.
    public func stopping() { send("STOPPING=1") }

    /// Sends one notification; false if there is no systemd or the send failed.
    @discardableResult
    public func send(_ message: String) -> Bool {
        guard var path = socketPath else { return false }
        guard let socket = try? FileDescriptor.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)) else { return false }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.count < capacity else { return false }
        if path.first == UInt8(ascii: "@") { path[0] = 0 }  // an abstract socket
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path)
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count)  // sun_path follows sun_family
        let bytes = Array(message.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bytes.withUnsafeBytes { sendto(socket.rawValue, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), socketAddress, length) }
            }
        }
        try? socket.close()
        return sent == bytes.count
    }
}
