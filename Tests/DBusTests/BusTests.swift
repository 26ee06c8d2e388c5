@testable import DBus
import Foundation
import Synchronization
import Testing
import TestSupport

extension DBusTests {
    @Suite struct Bus {
        @Test func nameOwnership() async throws {
            try await withBus { bus in
                let a = try await DBusConnection.connect(to: .address(bus.address))
                let b = try await DBusConnection.connect(to: .address(bus.address))
                let watcher = try await DBusConnection.connect(to: .address(bus.address))
                let changes = try await watcher.signals(matching: .nameOwnerChanged(name: "org.bluez"))
                #expect(try await watcher.nameOwner("org.bluez") == nil)

                #expect(try await a.requestName("org.bluez", flags: .allowReplacement) == .primaryOwner)
                #expect(try await a.requestName("org.bluez", flags: .allowReplacement) == .alreadyOwner)
                #expect(try await b.requestName("org.bluez", flags: .doNotQueue) == .exists)
                #expect(try await b.requestName("org.bluez") == .inQueue)
                #expect(try await watcher.nameOwner("org.bluez") == a.uniqueName)
                #expect(try await b.releaseName("org.bluez") == .released)  // left the queue
                #expect(try await b.releaseName("org.bluez") == .notOwner)
                #expect(try await b.releaseName("com.example.NeverOwned") == .nonExistent)
                #expect(try await b.requestName("org.bluez", flags: .replaceExisting) == .primaryOwner)
                #expect(try await a.releaseName("org.bluez") == .released)  // a was queued behind b
                #expect(try await b.releaseName("org.bluez") == .released)
                await #expect(throws: DBusError.self) { _ = try await a.requestName(BusName(a.uniqueName)) }

                let seen = try await next(3, from: changes).map { try NameOwnerChanged($0) }
                #expect(seen.map(\.name) == ["org.bluez", "org.bluez", "org.bluez"])
                #expect(seen[0].oldOwner == nil && seen[0].newOwner == a.uniqueName)
                #expect(seen[1].oldOwner == a.uniqueName && seen[1].newOwner == b.uniqueName)
                #expect(seen[2].oldOwner == b.uniqueName && seen[2].newOwner == nil)
                for c in [a, b, watcher] { await c.close() }
            }
        }

        /// A task cancelled before it waits returns at once: the cancellation handler's job on
        /// the connection's queue can run before the waiter is added (ancsd stopped during
        /// start-up waited forever).
        @Test func waitingAfterCancellationReturns() async throws {
            try await withBus { bus in
                let client = try await DBusConnection.connect(to: .address(bus.address))
                let executor = QueueTaskExecutor()
                for preferred in [nil, executor] as [QueueTaskExecutor?] {
                    for _ in 0..<20 {
                        let returned = Mutex(false)
                        Task(executorPreference: preferred) {
                            withUnsafeCurrentTask { $0?.cancel() }
                            await client.waitUntilDisconnected()
                            returned.withLock { $0 = true }
                        }
                        // Polled, not awaited: a waiter that missed its cancellation never returns.
                        let deadline = ContinuousClock.now + .seconds(5)
                        while !returned.withLock({ $0 }), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
                        #expect(returned.withLock { $0 }, "a waiter cancelled before it waited still waits")
                    }
                }
                #expect(await client.isConnected)
                await client.close()
            }
        }

        @Test func busDyingUnderALiveConnection() async throws {
            let bus = try TestBus()
            let server = try await DBusConnection.connect(to: .address(bus.address))
            let client = try await DBusConnection.connect(to: .address(bus.address))
            try await server.export(trickyObject(), at: trickyPath)
            let dest = try BusName(server.uniqueName)
            let stream = try await client.signals(matching: MatchRule(interface: "com.example.Signals"))
            let streamEnded = Task { for await _ in stream {} }
            let pending = Task {
                try await client.call(
                    destination: dest, path: trickyPath, interface: "com.example.Tricky", member: "Sleep",
                    arguments: [.uint32(10_000)])
            }
            let disconnected = Task { await client.waitUntilDisconnected() }
            try await eventually("the call sent") { await client.pendingCallCount == 1 }
            #expect(await client.isConnected)

            bus.stop(signal: SIGKILL)

            do {
                _ = try await withTimeout(5, "pending call after the bus died") { try await pending.value }
                Issue.record("the pending call succeeded")
            } catch let error as DBusError {
                #expect(error == .disconnected)
            }
            try await withTimeout(5, "disconnect notification") { await disconnected.value }
            try await withTimeout(5, "signal stream end") { await streamEnded.value }
            #expect(await client.isConnected == false)
            try await withTimeout(5, "server disconnect") { await server.waitUntilDisconnected() }
            await expectDBusError(.disconnected) {
                _ = try await client.call(destination: dest, path: "/", interface: "a.B", member: "C")
            }
            await expectDBusError(.disconnected) {
                try await client.emitSignal(path: "/", interface: "a.B", member: "C")
            }
            await #expect(throws: DBusError.self) { try await server.export(deviceObject(), at: "/x") }
            // Waiting after the fact returns at once; closing again is harmless.
            await client.waitUntilDisconnected()
            await client.close()
            await server.close()
        }

        @Test func closeFailsPendingCalls() async throws {
            try await withPair { pair in
                try await pair.server.export(trickyObject(), at: trickyPath)
                let client = pair.client
                let dest = pair.serverName
                let pending = Task {
                    try await client.call(
                        destination: dest, path: trickyPath, interface: "com.example.Tricky", member: "Sleep",
                        arguments: [.uint32(10_000)])
                }
                try await eventually("the call sent") { await client.pendingCallCount == 1 }
                await client.close()
                await #expect(throws: DBusError.disconnected) { _ = try await withTimeout(2) { try await pending.value } }
                await client.close()
                #expect(await client.isConnected == false)
            }
        }

        @Test func droppingAnOpenConnectionDoesNotAbort() async throws {
            try await withBus { bus in
                for _ in 0..<20 {
                    var connection: DBusConnection? = try await DBusConnection.connect(to: .address(bus.address))
                    _ = try await connection?.requestName("com.example.Dropped")
                    _ = try await connection?.subscribe(to: MatchRule(interface: "com.example.X")) { _ in }
                    connection = nil
                }
                // Another client sees the name released: the connection really closed.
                let probe = try await DBusConnection.connect(to: .address(bus.address))
                try await withTimeout(5, "dropped connections to close") {
                    while try await probe.nameOwner("com.example.Dropped") != nil {
                        try await Task.sleep(for: .milliseconds(5))
                    }
                }
                await probe.close()
            }
        }

        @Test func connectFailuresAreErrors() async throws {
            await #expect(throws: DBusError.self) {
                _ = try await DBusConnection.connect(to: .address("unix:path=/nonexistent/socket"))
            }
            await #expect(throws: DBusError.self) {
                _ = try await DBusConnection.connect(to: .address("this is not an address"))
            }
            await #expect(throws: DBusError.self) {
                _ = try await DBusConnection.connect(to: .address(""))
            }
            // A listening socket that never answers authentication: Hello times out.
            let dir = NSTemporaryDirectory() + "dbt-silent-\(getpid())"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            let path = dir + "/s"
            withUnsafeMutableBytes(of: &addr.sun_path) { raw in
                for (i, b) in path.utf8.enumerated() { raw[i] = b }
            }
            let bound = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            #expect(bound == 0)
            #expect(listen(fd, 4) == 0)
            let start = ContinuousClock.now
            await expectDBusError(.timeout) {
                _ = try await DBusConnection.connect(to: .address("unix:path=" + path), timeout: .milliseconds(200))
            }
            #expect(ContinuousClock.now - start < .seconds(3))
        }

        @Test func busAddressesFromTheEnvironment() async throws {
            try await withBus { bus in
                let savedSystem = getenv("DBUS_SYSTEM_BUS_ADDRESS").map { String(cString: $0) }
                let savedSession = getenv("DBUS_SESSION_BUS_ADDRESS").map { String(cString: $0) }
                defer {
                    if let savedSystem { setenv("DBUS_SYSTEM_BUS_ADDRESS", savedSystem, 1) } else { unsetenv("DBUS_SYSTEM_BUS_ADDRESS") }
                    if let savedSession { setenv("DBUS_SESSION_BUS_ADDRESS", savedSession, 1) } else { unsetenv("DBUS_SESSION_BUS_ADDRESS") }
                }
                setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address, 1)
                setenv("DBUS_SESSION_BUS_ADDRESS", bus.address, 1)
                #expect(try BusAddress.system.resolve() == bus.address)
                let system = try await DBusConnection.connect(to: .system)
                let session = try await DBusConnection.connect(to: .session)
                #expect(try await system.nameOwner(BusName(session.uniqueName)) == session.uniqueName)
                await system.close()
                await session.close()
                unsetenv("DBUS_SYSTEM_BUS_ADDRESS")
                #expect(try BusAddress.system.resolve() == "unix:path=/var/run/dbus/system_bus_socket")
            }
        }

        /// 10,000 calls in a row: memory stays flat once warmed up.
        @Test func tenThousandCallsWithFlatMemory() async throws {
            try await withPair { pair in
                try await pair.server.export(echoObject(), at: echoPath)
                let payload: [DBusValue] = [.variant(.variantDictionary(["a": .byteArray(Array(repeating: 7, count: 64)), "b": .string("x")]))]
                func burst(_ n: Int) async throws {
                    for _ in 0..<n {
                        let reply = try await pair.client.call(
                            destination: pair.serverName, path: echoPath, interface: "com.example.Echo",
                            member: "EchoAsync", arguments: payload)
                        guard reply.arguments == payload else { throw TestFailure("bad echo") }
                    }
                }
                try await burst(2_000)
                let before = residentKiB()
                let start = ContinuousClock.now
                try await burst(10_000)
                let elapsed = ContinuousClock.now - start
                let after = residentKiB()
                print("10,000 calls: \(elapsed), VmRSS \(before) → \(after) KiB")
                #expect(before > 0)
                #expect(after - before < 4 * 1024, "RSS grew by \(after - before) KiB")
            }
        }

        /// A callback that closes its own connection while libdbus is dispatching.
        @Test func closingFromInsideACallback() async throws {
            try await withPair { pair in
                let client = pair.client
                _ = try await client.subscribe(to: MatchRule(interface: "com.example.Signals")) { _ in
                    client.assumeIsolated { $0.close() }
                }
                try await pair.server.emitSignal(path: "/s", interface: "com.example.Signals", member: "Tick")
                try await pair.server.emitSignal(path: "/s", interface: "com.example.Signals", member: "Tick")
                try await withTimeout(5, "close from a callback") { await client.waitUntilDisconnected() }
                #expect(await client.isConnected == false)
                await expectDBusError(.disconnected) {
                    _ = try await client.call(destination: .bus, path: "/", interface: "a.B", member: "C")
                }
            }
        }

        /// Regression: libdbus closes a socket right after removing its watch, and the next
        /// connection gets the same fd number; a DispatchSource on libdbus's own fd could then
        /// lose the new socket's interest when the old source's cancellation completed late,
        /// and Hello timed out (about 1 in 500 connects under load).
        @Test func connectAndCloseInALoop() async throws {
            try await withBus { bus in
                try await withTimeout(60, "800 connects") {
                    for _ in 0..<800 {
                        let c = try await DBusConnection.connect(to: .address(bus.address), timeout: .seconds(5))
                        await c.close()
                    }
                }
            }
        }
    }
}

/// A task executor on a queue of its own, as ancsd's DaemonExecutor.
final class QueueTaskExecutor: TaskExecutor, @unchecked Sendable {
    let queue = DispatchQueue(label: "test-executor")
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
