@testable import DBus
import EventLoop
import Foundation
import Synchronization
import Testing
import TestSupport

struct NotADBusError: Error, CustomStringConvertible {
    var description: String { "plain Swift error" }
}

/// An object with methods that fail, sleep, misbehave or check their caller.
func trickyObject(trusted: String? = nil) -> ExportedObject {
    ExportedObject(ExportedInterface("com.example.Tricky", methods: [
        .immediate("Fail") { _ in throw DBusError.error("com.example.Error.Nope", "nope, \"quoted\" ✓") },
        .immediate("FailPlain") { _ in throw NotADBusError() },
        .immediate("FailBadName") { _ in throw DBusError.remote(name: "not a valid name", message: "x\0y") },
        .immediate("WrongOutput", output: "s") { _ in [.int32(1)] },
        .immediate("InvalidOutput", output: "s") { _ in [.string("nul\0inside")] },
        .immediate("ReturnsInt", output: "i") { _ in [.int32(42)] },
        ExportedMethod("Sleep", input: "u") { call in
            try await Task.sleep(for: .milliseconds(Int(call.arguments[0].uint32Value ?? 0)))
            return []
        },
        ExportedMethod("SlowEcho", input: "s", output: "s") { call in
            try await Task.sleep(for: .milliseconds(20))
            return call.arguments
        },
        .immediate("WhoAmI", output: "s") { call in [.string(call.sender)] },
        .immediate("Guarded", output: "s") { call in
            guard call.sender == trusted else {
                throw DBusError.error("org.freedesktop.DBus.Error.AccessDenied", "caller \(call.sender) is not trusted")
            }
            return [.string("welcome")]
        },
        .immediate("NoArgs") { _ in [] },
    ]))
}

let trickyPath: ObjectPath = "/com/example/tricky"

extension DBusTests {
    @Suite struct Calls {
        func call(_ pair: Pair, _ member: MemberName, _ args: [DBusValue] = [], timeout: Duration = .seconds(5)) async throws -> Message {
            try await pair.client.call(
                destination: pair.serverName, path: trickyPath, interface: "com.example.Tricky", member: member,
                arguments: args, timeout: timeout)
        }

        @Test func errorReplies() async throws {
            try await withPair { pair in
                try await pair.server.export(trickyObject(), at: trickyPath)
                await expectDBusError(.remote(name: "com.example.Error.Nope", message: "nope, \"quoted\" ✓")) {
                    _ = try await call(pair, "Fail")
                }
                await expectDBusError(.remote(name: DBusError.Names.failed, message: "plain Swift error")) {
                    _ = try await call(pair, "FailPlain")
                }
                // An invalid error name from a handler must not reach libdbus (it would abort).
                await expectDBusError(.remote(name: DBusError.Names.failed, message: "xy")) {
                    _ = try await call(pair, "FailBadName")
                }
                await expectErrorName(DBusError.Names.failed) { _ = try await call(pair, "WrongOutput") }
                await expectErrorName(DBusError.Names.failed) { _ = try await call(pair, "InvalidOutput") }
                await expectErrorName(DBusError.Names.unknownMethod) { _ = try await call(pair, "Missing") }
                await expectErrorName(DBusError.Names.invalidArgs) { _ = try await call(pair, "NoArgs", [.int32(1)]) }
                await expectErrorName(DBusError.Names.unknownObject) {
                    _ = try await pair.client.call(
                        destination: pair.serverName, path: "/nowhere", interface: "com.example.Tricky", member: "NoArgs")
                }
                await expectErrorName(DBusError.Names.unknownInterface) {
                    _ = try await pair.client.call(
                        destination: pair.serverName, path: trickyPath, interface: "com.example.Other", member: "NoArgs")
                }
                // Without an interface the method is looked up in all of them.
                let reply = try await pair.client.call(
                    destination: pair.serverName, path: trickyPath, interface: nil, member: "ReturnsInt")
                #expect(reply.arguments == [.int32(42)])
                await expectErrorName(DBusError.Names.serviceUnknown) {
                    _ = try await pair.client.call(
                        destination: "com.example.Nobody", path: "/", interface: "com.example.X", member: "Y")
                }
                // After all that, the connection still works.
                #expect(try await call(pair, "ReturnsInt").arguments == [.int32(42)])
            }
        }

        @Test func unexpectedReplySignatureIsATypedError() async throws {
            try await withPair { pair in
                try await pair.server.export(trickyObject(), at: trickyPath)
                await expectDBusError(.unexpectedSignature(expected: "s", actual: "i")) {
                    _ = try await pair.client.call(
                        destination: pair.serverName, path: trickyPath, interface: "com.example.Tricky",
                        member: "ReturnsInt", expecting: "s")
                }
                // Typed decoders refuse wrong signals the same way.
                let stream = try await pair.client.signals(matching: MatchRule(member: "PropertiesChanged"))
                try await pair.server.emitSignal(
                    path: "/x", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                    arguments: [.string("only one argument")])
                let signal = try #require(try await next(1, from: stream).first)
                #expect(throws: DBusError.unexpectedSignature(expected: "sa{sv}as", actual: "s")) {
                    try PropertiesChanged(signal)
                }
                #expect(throws: DBusError.self) { try InterfacesAdded(signal) }
                #expect(throws: DBusError.self) { try NameOwnerChanged(signal) }
            }
        }

        @Test func timeoutsAndCancellation() async throws {
            try await withPair { pair in
                try await pair.server.export(trickyObject(), at: trickyPath)
                let start = ContinuousClock.now
                await expectDBusError(.timeout) {
                    _ = try await call(pair, "Sleep", [.uint32(3000)], timeout: .milliseconds(100))
                }
                let elapsed = ContinuousClock.now - start
                #expect(elapsed >= .milliseconds(90) && elapsed < .seconds(2), "took \(elapsed)")

                // Cancelling the awaiting task cancels the pending call promptly.
                let client = pair.client
                let server = pair.serverName
                let task = Task {
                    try await client.call(
                        destination: server, path: trickyPath, interface: "com.example.Tricky", member: "Sleep",
                        arguments: [.uint32(5000)])
                }
                try await eventually("the call sent") { await client.pendingCallCount == 1 }
                let cancelledAt = ContinuousClock.now
                task.cancel()
                do {
                    _ = try await withTimeout(2, "cancelled call") { try await task.value }
                    Issue.record("a cancelled call returned")
                } catch is CancellationError {
                    #expect(ContinuousClock.now - cancelledAt < .seconds(1))
                }
                // A task cancelled before calling never sends.
                let early = Task {
                    withUnsafeCurrentTask { $0?.cancel() }
                    return try await client.call(
                        destination: server, path: trickyPath, interface: "com.example.Tricky", member: "NoArgs")
                }
                await #expect(throws: CancellationError.self) { try await early.value }
                // The connection is fine afterwards.
                #expect(try await call(pair, "ReturnsInt").arguments == [.int32(42)])
                await expectDBusError(.invalidArgument("timeout must be positive")) {
                    _ = try await call(pair, "NoArgs", timeout: .zero)
                }
            }
        }

        @Test func concurrentAsyncHandlersReplyLater() async throws {
            try await withPair { pair in
                try await pair.server.export(trickyObject(), at: trickyPath)
                let replies = try await withThrowingTaskGroup(of: String.self) { group in
                    for i in 0..<100 {
                        group.addTask {
                            try await pair.client.call(
                                destination: pair.serverName, path: trickyPath, interface: "com.example.Tricky",
                                member: "SlowEcho", arguments: [.string("n\(i)")], expecting: "s")[0].stringValue ?? ""
                        }
                    }
                    var out: [String] = []
                    for try await r in group { out.append(r) }
                    return out
                }
                #expect(Set(replies) == Set((0..<100).map { "n\($0)" }))
            }
        }

        @Test func handlersSeeTheCaller() async throws {
            try await withBus { bus in
                let server = try await DBusConnection.connect(to: .address(bus.address))
                let friend = try await DBusConnection.connect(to: .address(bus.address))
                let stranger = try await DBusConnection.connect(to: .address(bus.address))
                try await server.export(trickyObject(trusted: friend.uniqueName), at: trickyPath)
                let dest = try BusName(server.uniqueName)
                let who = try await stranger.call(
                    destination: dest, path: trickyPath, interface: "com.example.Tricky", member: "WhoAmI", expecting: "s")
                #expect(who == [.string(stranger.uniqueName)])
                let welcome = try await friend.call(
                    destination: dest, path: trickyPath, interface: "com.example.Tricky", member: "Guarded", expecting: "s")
                #expect(welcome == [.string("welcome")])
                await expectErrorName(DBusError.Names.accessDenied) {
                    _ = try await stranger.call(
                        destination: dest, path: trickyPath, interface: "com.example.Tricky", member: "Guarded")
                }
                for c in [server, friend, stranger] { await c.close() }
            }
        }

        @Test func noReplyCallsAndSignalsWithBadInputAreRefusedNotAborted() async throws {
            try await withPair { pair in
                let calls = Mutex(0)
                try await pair.server.export(ExportedObject(ExportedInterface("com.example.Count", methods: [
                    .immediate("Bump") { _ in
                        calls.withLock { $0 += 1 }
                        return []
                    },
                ])), at: "/count")
                for _ in 0..<3 {
                    try await pair.client.callNoReply(
                        destination: pair.serverName, path: "/count", interface: "com.example.Count", member: "Bump")
                }
                // Ordered after the three: once this returns, they have been handled.
                await expectErrorName(DBusError.Names.unknownMethod) {
                    _ = try await pair.client.call(
                        destination: pair.serverName, path: "/count", interface: "com.example.Count", member: "Sync")
                }
                #expect(calls.withLock { $0 } == 3)

                let bad: [[DBusValue]] = [
                    [.string("a\0b")],
                    [.array("s", [.int32(1)])],
                    [.structure([])],
                    [.dictionary(key: "as", value: "s", [])],
                    [.unixFD(UnixFD(adopting: -1))],
                    Array(repeating: .byte(0), count: 300),
                ]
                for args in bad {
                    await #expect(throws: DBusError.self) {
                        _ = try await pair.client.call(
                            destination: pair.serverName, path: "/count", interface: "com.example.Count", member: "Bump",
                            arguments: args)
                    }
                    await #expect(throws: DBusError.self) {
                        try await pair.client.callNoReply(
                            destination: pair.serverName, path: "/count", interface: "com.example.Count", member: "Bump",
                            arguments: args)
                    }
                    await #expect(throws: DBusError.self) {
                        try await pair.client.emitSignal(path: "/x", interface: "com.example.S", member: "S", arguments: args)
                    }
                }
                await #expect(throws: DBusError.self) {
                    _ = try await pair.client.getProperty(
                        destination: pair.serverName, path: "/count", interface: "com.example.Count", name: "a\0")
                }
                // Names from outside go through throwing initialisers. (With a literal argument,
                // `ObjectPath("…")` is literal coercion and traps on an invalid literal.)
                let outside = ["relative/path", "nodots", "has.dot", "org..bluez", "a{vs}", "x"]
                #expect(throws: DBusError.self) { try ObjectPath(outside[0]) }
                #expect(throws: DBusError.self) { try InterfaceName(outside[1]) }
                #expect(throws: DBusError.self) { try MemberName(outside[2]) }
                #expect(throws: DBusError.self) { try BusName(outside[3]) }
                #expect(throws: DBusError.self) { try Signature(outside[4]) }
                #expect(throws: DBusError.self) { try ErrorName(outside[5]) }
                // Still alive and well.
                #expect(calls.withLock { $0 } == 3)
                #expect(await pair.client.isConnected)
            }
        }

        /// Tasks preferring a connection's executor: calls to ourselves, and two connections
        /// calling each other from each other's queues at the same time (no deadlock).
        /// `startCall` from code on the connection's loop: the outcome comes back as a callback,
        /// on the loop, for replies, error replies, timeouts and cancellation alike.
        @Test func callsWithoutATask() async throws {
            try await withPair { pair in
                try await pair.server.export(trickyObject(), at: trickyPath)
                let client = pair.client, server = pair.serverName
                func start(_ member: MemberName, _ args: [DBusValue] = [], timeout: Duration = .seconds(5),
                           cancel: Bool = false) async throws -> Result<Message, any Error> {
                    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Result<Message, any Error>, any Error>) in
                        do {
                            let call = try client.startCall(
                                destination: server, path: trickyPath, interface: "com.example.Tricky", member: member,
                                arguments: args, timeout: timeout
                            ) { outcome in
                                client.preconditionIsolated("a completion runs on the connection's loop")
                                continuation.resume(returning: outcome)
                            }
                            if cancel { client.cancelCall(call) }
                        } catch {
                            continuation.resume(throwing: error)
                        }
                    }
                }
                let answered = try await start("ReturnsInt")
                #expect(try answered.get().arguments == [.int32(42)])
                let failed = try await start("Fail")
                #expect(throws: DBusError.remote(name: "com.example.Error.Nope", message: "nope, \"quoted\" ✓")) {
                    try failed.get()
                }
                let late = try await start("Sleep", [.uint32(3000)], timeout: .milliseconds(100))
                #expect(throws: DBusError.timeout) { try late.get() }
                let cancelled = try await start("Sleep", [.uint32(3000)], cancel: true)
                #expect(throws: CancellationError.self) { try cancelled.get() }
                await #expect(throws: DBusError.invalidArgument("timeout must be positive")) {
                    _ = try await start("NoArgs", timeout: .zero)
                }
            }
        }

        /// The timeouts' one timer is left armed at an earlier deadline while calls follow each
        /// other: firing early must not fail a call, a later deadline must not delay an earlier
        /// one, and once no call is pending the timer is off (no wakeup when idle).
        @Test func timeoutsStayExactWhileTheTimerIsArmedLazily() async throws {
            let loop = try EventLoop(name: "lazy-timer")
            defer { loop.shutdown() }
            try await withBus { bus in
                let server = try await DBusConnection.connect(to: .address(bus.address))
                let client = try await DBusConnection.connect(to: .address(bus.address), loop: loop)
                try await server.export(trickyObject(), at: trickyPath)
                let pair = Pair(bus: bus, server: server, client: client)
                // Armed for 150 ms, answered after 20 ms: the timer stays armed for 150 ms.
                #expect(try await call(pair, "SlowEcho", [.string("a")], timeout: .milliseconds(150)).arguments == [.string("a")])
                // It fires early for this call, which must still get its reply after 400 ms.
                _ = try await call(pair, "Sleep", [.uint32(400)], timeout: .seconds(3))
                // A 10 s call leaves a late deadline behind; a 200 ms one still times out on time.
                _ = try await call(pair, "SlowEcho", [.string("b")], timeout: .seconds(10))
                let start = ContinuousClock.now
                await expectDBusError(.timeout) { _ = try await call(pair, "Sleep", [.uint32(3000)], timeout: .milliseconds(200)) }
                #expect(ContinuousClock.now - start < .seconds(2))
                // Answered long before its 300 ms deadline: with nothing else pending, the timer
                // is switched off rather than left to fire.
                _ = try await call(pair, "SlowEcho", [.string("c")], timeout: .milliseconds(300))
                // Nothing pending: the loop sleeps, even past every deadline used above.
                let tid = try #require(threadID(named: "lazy-timer"))
                try await eventually("the loop back in epoll_wait") { isWaitingInEpoll(thread: tid) }
                let before = try #require(voluntarySwitches(ofThread: tid))
                try await Task.sleep(for: .milliseconds(700))
                let after = try #require(voluntarySwitches(ofThread: tid))
                #expect(after == before, "the idle connection's loop woke \(after - before) times")
                await client.close()
                await server.close()
            }
        }

        @Test func callsFromConnectionQueues() async throws {
            try await withPair { pair in
                try await pair.server.export(trickyObject(), at: trickyPath)
                try await pair.client.export(trickyObject(), at: trickyPath)
                let a = pair.server
                let b = pair.client
                let aName = try BusName(a.uniqueName)
                let bName = try BusName(b.uniqueName)
                func hammer(_ from: DBusConnection, _ to: BusName) -> Task<Int, any Error> {
                    Task(executorPreference: from.taskExecutor) {
                        var n = 0
                        for i in 0..<300 {
                            let r = try await from.call(
                                destination: to, path: trickyPath, interface: "com.example.Tricky", member: "WhoAmI",
                                expecting: "s")
                            if r == [.string(from.uniqueName)] { n += 1 }
                            if i % 50 == 0 {
                                try await from.emitSignal(path: "/x", interface: "com.example.Signals", member: "Tick")
                            }
                        }
                        return n
                    }
                }
                let tasks = [hammer(a, bName), hammer(b, aName), hammer(a, aName), hammer(b, bName)]
                let counts = try await withTimeout(30, "cross-connection calls") {
                    var out: [Int] = []
                    for t in tasks { out.append(try await t.value) }
                    return out
                }
                #expect(counts == [300, 300, 300, 300])
            }
        }
    }
}
