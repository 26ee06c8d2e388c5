@testable import DBus
import Foundation
import Synchronization
import Testing
import TestSupport

/// An object whose replies come late, in an order the caller does not choose.
private func delayedObject() -> ExportedObject {
    ExportedObject(ExportedInterface("com.example.Delayed", methods: [
        // Sleeps `u` milliseconds, then returns `s`.
        ExportedMethod("Echo", input: "us", output: "s") { call in
            try await Task.sleep(for: .milliseconds(Int(call.arguments[0].uint32Value ?? 0)))
            return [call.arguments[1]]
        },
        // Like BlueZ's AcquireNotify: (h fd, q mtu), the fd a pipe with a message waiting.
        .immediate("Acquire", output: "hq") { _ in
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0 else { throw DBusError.failed("pipe") }
            _ = Array("datagram".utf8).withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
            close(fds[1])
            let fd = UnixFD(adopting: fds[0])
            // libdbus dups what it sends: the reply is built before this copy closes.
            Task { try await Task.sleep(for: .seconds(1)); fd.close() }
            return [.unixFD(fd), .uint16(185)]
        },
    ]))
}

private let delayedPath: ObjectPath = "/com/example/delayed"

extension DBusTests {
    /// Replies matched to their calls by serial (no DBusPendingCall).
    @Suite struct ReplyTracking {
        /// `startCall` from any thread; the outcome as a value.
        func start(
            _ pair: Pair, _ member: MemberName, _ args: [DBusValue] = [], timeout: Duration = .seconds(5),
            onCompletion: @escaping @Sendable (Result<Message, any Error>) -> Void
        ) throws -> DBusConnection.PendingCall {
            try pair.client.startCall(
                destination: pair.serverName, path: delayedPath, interface: "com.example.Delayed", member: member,
                arguments: args, timeout: timeout, completion: onCompletion)
        }

        func echo(_ pair: Pair, after ms: UInt32, _ text: String, timeout: Duration = .seconds(5)) async throws -> String? {
            try await pair.client.call(
                destination: pair.serverName, path: delayedPath, interface: "com.example.Delayed", member: "Echo",
                arguments: [.uint32(ms), .string(text)], expecting: "s", timeout: timeout)[0].stringValue
        }

        @Test func manyOutstandingCallsCompleteOutOfOrderEachWithItsOwnReply() async throws {
            try await withPair { pair in
                try await pair.server.export(delayedObject(), at: delayedPath)
                let count = 40
                let outcomes = Mutex<[(index: Int, text: String?)]>([])
                let done = AsyncStream<Void>.makeStream()
                for i in 0..<count {
                    // The first call started is answered last.
                    _ = try start(pair, "Echo", [.uint32(UInt32((count - i) * 10)), .string("call \(i)")]) { outcome in
                        let text = (try? outcome.get())?.arguments.first?.stringValue
                        let n = outcomes.withLock { $0.append((i, text)); return $0.count }
                        if n == count { done.continuation.finish() }
                    }
                }
                try await withTimeout(10, "40 replies") { for await _ in done.stream {} }
                let got = outcomes.withLock { $0 }
                #expect(got.allSatisfy { $0.text == "call \($0.index)" })
                #expect(got.map(\.index) != Array(0..<count), "the replies came in call order")
                #expect(got.first?.index == count - 1)
                #expect(await pair.client.pendingCallCount == 0)
            }
        }

        @Test func aReplyAfterItsCallTimedOutOrWasCancelledIsDropped() async throws {
            try await withPair { pair in
                try await pair.server.export(delayedObject(), at: delayedPath)
                // Anything that reached the client's signal or method dispatch would be seen here.
                let seen = Mutex(0)
                _ = try await pair.client.subscribe(to: MatchRule()) { _ in seen.withLock { $0 += 1 } }
                try await pair.client.export(ExportedObject(ExportedInterface("com.example.Sink", methods: [
                    .immediate("Anything") { _ in seen.withLock { $0 += 1 }; return [] },
                ])), at: delayedPath)

                await expectDBusError(.timeout) { _ = try await echo(pair, after: 200, "late", timeout: .milliseconds(50)) }
                let cancelled = Mutex<Result<Message, any Error>?>(nil)
                let call = try start(pair, "Echo", [.uint32(250), .string("cancelled")]) { outcome in
                    cancelled.withLock { $0 = outcome }
                }
                pair.client.cancelCall(call)
                // Both late replies arrive while this call waits: it must get its own.
                #expect(try await echo(pair, after: 450, "mine") == "mine")
                #expect(cancelled.withLock { $0.map { (try? $0.get()) == nil } } == true)
                #expect(seen.withLock { $0 } == 0)
                #expect(await pair.client.pendingCallCount == 0)
                #expect(try await echo(pair, after: 0, "still fine") == "still fine")
            }
        }

        @Test func errorRepliesAndTimeoutsLeaveNothingPending() async throws {
            try await withPair { pair in
                try await pair.server.export(delayedObject(), at: delayedPath)
                await expectErrorName(DBusError.Names.invalidArgs) {
                    _ = try await pair.client.call(
                        destination: pair.serverName, path: delayedPath, interface: "com.example.Delayed",
                        member: "Echo", arguments: [.string("wrong")])
                }
                // Several deadlines at once, the later ones answered in time.
                let a = Task { try await echo(pair, after: 2000, "a", timeout: .milliseconds(100)) }
                let b = Task { try await echo(pair, after: 10, "b", timeout: .milliseconds(1000)) }
                let c = Task { try await echo(pair, after: 2000, "c", timeout: .milliseconds(150)) }
                await expectDBusError(.timeout) { _ = try await a.value }
                #expect(try await b.value == "b")
                await expectDBusError(.timeout) { _ = try await c.value }
                #expect(await pair.client.pendingCallCount == 0)
            }
        }

        @Test func callsOutstandingWhenTheConnectionClosesFailAsDisconnected() async throws {
            try await withPair { pair in
                try await pair.server.export(delayedObject(), at: delayedPath)
                let outcomes = Mutex<[Result<Message, any Error>]>([])
                for i in 0..<5 {
                    _ = try start(pair, "Echo", [.uint32(5000), .string("\(i)")]) { outcome in
                        outcomes.withLock { $0.append(outcome) }
                    }
                }
                let awaited = Task { try await echo(pair, after: 5000, "x") }
                try await eventually("six calls sent") { await pair.client.pendingCallCount == 6 }
                await pair.client.close()
                await #expect(throws: DBusError.disconnected) { _ = try await withTimeout(2) { try await awaited.value } }
                let failed = outcomes.withLock { $0 }
                #expect(failed.count == 5)
                #expect(failed.allSatisfy {
                    if case .failure(let error) = $0, let e = error as? DBusError { return e == .disconnected }
                    return false
                })
                // Started after the close: fails at once, the same way.
                await expectDBusError(.disconnected) { _ = try await echo(pair, after: 0, "y") }
            }
        }

        @Test func aReplyCarryingAUnixFDReachesAStartedCall() async throws {
            try await withPair { pair in
                try await pair.server.export(delayedObject(), at: delayedPath)
                let (stream, continuation) = AsyncStream<Result<Message, any Error>>.makeStream()
                _ = try start(pair, "Acquire") { continuation.yield($0); continuation.finish() }
                var outcome: Result<Message, any Error>?
                for await o in stream { outcome = o }
                let reply = try #require(try outcome?.get())
                #expect(reply.signature == "hq")
                #expect(reply.arguments.last == .uint16(185))
                let fd = try #require(reply.arguments.first?.unixFDValue)
                let raw = try #require(fd.fileDescriptor)
                var buf = [UInt8](repeating: 0, count: 64)
                let n = read(raw, &buf, buf.count)
                #expect(String(decoding: buf[0..<max(0, n)], as: UTF8.self) == "datagram")
                fd.close()
            }
        }
    }
}
