#if canImport(Glibc)
import Glibc
#endif
import ANCSControl
import ANCSRuntime
import JSON

/// A blocking client of the daemon's control socket, for the command-line clients.
final class ControlClient {
    /// Where `ancsd run` listens under systemd.
    static let defaultPath = ControlSocket.defaultPath

    private let fd: Int32
    private var buffer: [UInt8] = []

    /// Connects to the socket at `path`.
    init(path: String) throws(ReadError) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw ReadError(description: "the control socket path is empty or too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ReadError(description: "socket: \(systemError())") }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            let reason = systemError()
            close(fd)
            throw ReadError(description: "cannot reach ancsd at \(path): \(reason); is \"ancsd run --control \(path)\" running (systemctl status ancsd), and may you use it (group ancsd)?")
        }
    }

    deinit { close(fd) }

    /// Sends one request and waits (at most `timeout` seconds) for its reply.
    func request(_ object: JSONObject, timeout: Int32 = 15) throws(ReadError) -> JSONValue {
        let line = Array(JSONValue.object(object).serialized.utf8) + [0x0A]
        guard writeAll(line) else { throw ReadError(description: "cannot send to ancsd: \(systemError())") }
        return try readReply(timeout: timeout)
    }

    private func writeAll(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }

    private func readReply(timeout: Int32) throws(ReadError) -> JSONValue {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                do { return try JSONValue(parsing: line) } catch {
                    throw ReadError(description: "ancsd sent something that is not JSON: \(error)")
                }
            }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, timeout * 1000)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { throw ReadError(description: "ancsd did not answer within \(timeout) s") }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { throw ReadError(description: "ancsd closed the connection") }
            buffer += chunk[0..<count]
        }
    }
}

/// The reply's error message, if it is an error reply.
func controlError(_ reply: JSONValue) -> (code: String, message: String)? {
    guard reply["ok"] != true else { return nil }
    return (reply["error"]?["code"]?.stringValue ?? "error", reply["error"]?["message"]?.stringValue ?? reply.serialized)
}
