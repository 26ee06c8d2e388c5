import ANCSDaemon
import ANCSRuntime
import Foundation
import JSON
import Synchronization
import Testing

/// A handler whose `subscribe` emits an event before its reply is out, as the daemon does when a
/// notification arrives between registering the subscriber and answering it.
private final class EagerHandler: ControlHandler {
    let server = Mutex<ControlServer?>(nil)

    func reply(to request: JSONObject, client: ControlServer.ClientID) async -> JSONObject {
        guard request["cmd"]?.stringValue == "subscribe" else { return ["ok": true] }
        server.withLock { $0 }?.send(#"{"v":1,"type":"added","uid":7}"#, to: client)
        return ["ok": true, "subscribed": true]
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
        let server = try ControlServer(path: path, handler: handler, logger: Logger(threshold: .error, journald: false))
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
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
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
}
