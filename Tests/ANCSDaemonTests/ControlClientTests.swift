import ANCSControl
@testable import ANCSDaemon
import ANCSRuntime
import EventLoop
import Foundation
import JSON
import Synchronization
import Testing

/// `ControlClient`, the one client of the control socket, against the real server.
@Suite("Control client")
struct ControlClientTests {
    /// Answers `status` with `ControlMessageTests.status`, refuses `list`, takes 60 s over `get`,
    /// and streams one event after `subscribe`.
    private final class Handler: ControlHandler {
        let server = Mutex<ControlServer?>(nil)

        func reply(to request: ControlRequest, client: ControlServer.ClientID) async -> Result<ControlAnswer, ControlError> {
            switch request.command {
            case .status:
                return .success(.status(ControlMessageTests.status))
            case .list:
                return .failure(ControlError(.noSuchDevice, "no connected phone AA:BB:CC:DD:EE:99"))
            case .get:
                try? await Task.sleep(for: .seconds(60))
                return .success(.notification(ControlMessageTests.notification))
            case .action:
                return .success(.performed)
            case .media, .mediaCommand:
                return .failure(ControlError(.notAvailable, "no media player in this test"))
            case .subscribe:
                server.withLock { $0 }?.send(#"{"v":1,"type":"sharing","device":"AA:BB:CC:DD:EE:01","state":"off"}"#, to: client)
                return .success(.subscribed)
            }
        }

        func clientClosed(_ client: ControlServer.ClientID) async {}
    }

    private static func serve() throws -> (ControlServer, String, EventLoop) {
        let path = NSTemporaryDirectory() + "control-client-\(UUID().uuidString)"
        let loop = try EventLoop(name: "control-client-test")
        let handler = Handler()
        let server = try ControlServer(path: path, handler: handler, logger: Logger(threshold: .error, journald: false), loop: loop)
        handler.server.withLock { $0 = server }
        server.start()
        return (server, path, loop)
    }

    @Test("a request gets its typed answer; a refusal, a timeout and a missing socket are typed errors")
    func requests() async throws {
        let (server, path, loop) = try Self.serve()
        defer { server.stop() }
        let status = try await ControlClient.request(.status, path: path, timeout: .seconds(10), loop: loop)
        #expect(status == .status(ControlMessageTests.status))

        await #expect { try await ControlClient.request(.list(device: nil), path: path, timeout: .seconds(10), loop: loop) } throws: {
            guard case .refused(let error) = $0 as? ControlClientError else { return false }
            return error.code == .noSuchDevice
        }
        let address = try #require(BluetoothAddressText("aa-bb-cc-dd-ee-01"))
        let started = ContinuousClock.now
        await #expect {
            try await ControlClient.request(.get(device: address, uid: 1, full: false), path: path, timeout: .milliseconds(200), loop: loop)
        } throws: {
            guard case .timedOut = $0 as? ControlClientError else { return false }
            return true
        }
        #expect(ContinuousClock.now - started < .seconds(30), "the timeout, not the reply, ended the wait")
        await #expect { try await ControlClient.request(.status, path: path + ".missing", timeout: .seconds(1), loop: loop) } throws: {
            guard case .unreachable(let missing, _) = $0 as? ControlClientError else { return false }
            return missing == path + ".missing"
        }
    }

    @Test("a subscriber reads its reply, then the events, in order and typed")
    func subscribe() async throws {
        let (server, path, loop) = try Self.serve()
        defer { server.stop() }
        let client = try ControlClient.connect(path: path, loop: loop).get()
        defer { client.close() }
        let id = await withCheckedContinuation { done in loop.execute { done.resume(returning: client.send(.subscribe)) } }
        var iterator = client.incoming.makeAsyncIterator()
        let reply = await iterator.next()
        let event = await iterator.next()
        client.close()
        let end = await iterator.next()
        #expect(reply == .reply(ControlReply(id: id.map { .int($0) }, .success(.subscribed))))
        #expect(event == .event(.sharing(device: "AA:BB:CC:DD:EE:01", allowed: false)))
        #expect(end == nil, "closing ends the stream")
    }

    @Test("a reply of another version of ancsd is an error that says so, never a trap")
    func aReplyOfAnotherVersion() async throws {
        let path = NSTemporaryDirectory() + "control-old-\(UUID().uuidString)"
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener); unlink(path) }
        var address = ControlServerTests.address(path)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0 && listen(listener, 1) == 0)
        // An "older daemon": its status reply lacks most members.
        Thread.detachNewThread {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { return }
            _ = ControlServerTests.readLine(fd)
            ControlServerTests.send(fd, #"{"ok":true,"version":"0.0.1","id":1}"# + "\n")
            _ = ControlServerTests.readLine(fd)  // until the client goes
            close(fd)
        }
        let loop = try EventLoop(name: "control-old-test")
        await #expect { try await ControlClient.request(.status, path: path, timeout: .seconds(10), loop: loop) } throws: {
            guard case .unreadable(let error) = $0 as? ControlClientError else { return false }
            return error.requestID == 1 && error.message.contains("uptime_s") && "\(error)".contains("another version")
        }
    }
}
