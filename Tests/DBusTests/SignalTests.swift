import DBus
import Foundation
import Synchronization
import Testing
import TestSupport

extension DBusTests {
    @Suite struct Signals {
        func emit(_ c: DBusConnection, _ path: ObjectPath = "/s", _ member: MemberName = "Tick", _ args: [DBusValue] = []) async throws {
            try await c.emitSignal(path: path, interface: "com.example.Signals", member: member, arguments: args)
        }

        @Test func streamsGetOnlyTheirMatches() async throws {
            try await withPair { pair in
                let ticks = try await pair.client.signals(matching: MatchRule(interface: "com.example.Signals", member: "Tick"))
                let onA = try await pair.client.signals(matching: MatchRule(interface: "com.example.Signals", path: "/a"))
                try await emit(pair.server, "/b", "Tock")          // neither
                try await emit(pair.server, "/a", "Tock", [.int32(1)])  // onA only
                try await emit(pair.server, "/b", "Tick", [.int32(2)])  // ticks only
                try await emit(pair.server, "/a", "Tick", [.int32(3)])  // both
                let t = try await next(2, from: ticks)
                #expect(t.map(\.arguments) == [[.int32(2)], [.int32(3)]])
                let a = try await next(2, from: onA)
                #expect(a.map(\.arguments) == [[.int32(1)], [.int32(3)]])
                #expect(a[0].member == "Tock" && a[0].path == "/a" && a[0].interface == "com.example.Signals")
                #expect(a[0].sender == pair.server.uniqueName)
            }
        }

        @Test func argumentAndPathRules() async throws {
            try await withPair { pair in
                let tricky = "it's, a \\ test = 'x'"
                let byArg = try await pair.client.signals(
                    matching: MatchRule(interface: "com.example.Signals").argument(0, tricky))
                let byNamespace = try await pair.client.signals(
                    matching: MatchRule(interface: "com.example.Signals", pathNamespace: "/org/a"))
                let byArgPath = try await pair.client.signals(
                    matching: MatchRule(interface: "com.example.Signals").argumentPath(1, "/x/"))
                let byArg0NS = try await pair.client.signals(
                    matching: MatchRule(interface: "com.example.Signals", arg0Namespace: "com.example"))

                try await emit(pair.server, "/org/ab", "S", [.string("its"), .string("/y")])
                try await emit(pair.server, "/org/a/b", "S", [.string(tricky), .string("/x/y")])
                try await emit(pair.server, "/org", "S", [.string("com.example.Foo"), .objectPath("/x")])
                try await emit(pair.server, "/org/a", "S", [.string("com.examples"), .string("/")])

                #expect(try await next(1, from: byArg).map(\.path) == ["/org/a/b"])
                #expect(try await next(2, from: byNamespace).map(\.path) == ["/org/a/b", "/org/a"])
                // argNpath: "/x/" matches "/x/y" (prefix) and "/" (a prefix of it), not "/x" or "/y".
                #expect(try await next(2, from: byArgPath).map(\.path) == ["/org/a/b", "/org/a"])
                #expect(try await next(1, from: byArg0NS).map(\.path) == ["/org"])
            }
        }

        @Test func wellKnownSenderIsResolvedLocally() async throws {
            try await withBus { bus in
                let listener = try await DBusConnection.connect(to: .address(bus.address))
                let emitter = try await DBusConnection.connect(to: .address(bus.address))
                let impostor = try await DBusConnection.connect(to: .address(bus.address))
                #expect(try await emitter.requestName("com.example.Emitter") == .primaryOwner)
                let fromEmitter = try await listener.signals(
                    matching: MatchRule(sender: "com.example.Emitter", interface: "com.example.Signals"))
                // A broader rule on the same connection lets the impostor's signals in too.
                let everything = try await listener.signals(matching: MatchRule(interface: "com.example.Signals"))
                try await emit(impostor, "/fake")
                try await emit(emitter, "/real")
                // Signals from two connections have no order between them.
                #expect(Set(try await next(2, from: everything).map(\.path)) == ["/fake", "/real"])
                #expect(try await next(1, from: fromEmitter).map(\.path) == ["/real"])

                // The name moves to the impostor: the rule follows the new owner.
                #expect(try await emitter.releaseName("com.example.Emitter") == .released)
                #expect(try await impostor.requestName("com.example.Emitter") == .primaryOwner)
                try await emit(emitter, "/old")
                try await emit(impostor, "/new")
                #expect(Set(try await next(2, from: everything).map(\.path)) == ["/old", "/new"])
                #expect(try await next(1, from: fromEmitter).map(\.path) == ["/new"])
                for c in [listener, emitter, impostor] { await c.close() }
            }
        }

        @Test func matchRemoval() async throws {
            try await withPair { pair in
                let rule = MatchRule(interface: "com.example.Signals", member: "Gone")
                // Raw add/remove: removing twice is an error from the bus.
                try await pair.client.addMatch(rule)
                try await pair.client.removeMatch(rule)
                await expectErrorName("org.freedesktop.DBus.Error.MatchRuleNotFound") {
                    try await pair.client.removeMatch(rule)
                }

                // Ending a stream's iteration removes its rule from the bus.
                let stream = try await pair.client.signals(matching: rule)
                let consumer = Task { for await _ in stream {} }
                consumer.cancel()
                await consumer.value
                try await withTimeout(2, "RemoveMatch after the stream ended") {
                    while true {
                        do {
                            try await pair.client.removeMatch(rule)
                            // Still installed: put it back as it was and wait.
                            try await pair.client.addMatch(rule)
                            try await Task.sleep(for: .milliseconds(5))
                        } catch let e as DBusError where e.name == "org.freedesktop.DBus.Error.MatchRuleNotFound" {
                            return
                        }
                    }
                }

                // Callback subscriptions: nothing after unsubscribe, rule gone from the bus.
                let collector = Collector()
                let sentinel = Collector()
                let sub = try await pair.client.subscribe(to: rule, handler: collector.handler)
                _ = try await pair.client.subscribe(
                    to: MatchRule(interface: "com.example.Signals", member: "Sentinel"), handler: sentinel.handler)
                try await emit(pair.server, "/s", "Gone")
                _ = try await collector.wait(for: 1)
                await pair.client.unsubscribe(sub)
                try await emit(pair.server, "/s", "Gone")
                try await emit(pair.server, "/s", "Sentinel")
                _ = try await sentinel.wait(for: 1)
                #expect(collector.signals.count == 1)
                await expectErrorName("org.freedesktop.DBus.Error.MatchRuleNotFound") {
                    try await pair.client.removeMatch(rule)
                }
            }
        }

        @Test func streamsEndWhenTheConnectionCloses() async throws {
            try await withPair { pair in
                let stream = try await pair.client.signals(matching: MatchRule(interface: "com.example.Signals"))
                let received = Mutex(0)
                let consumer = Task {
                    for await _ in stream { received.withLock { $0 += 1 } }
                    return received.withLock { $0 }
                }
                try await emit(pair.server)
                try await eventually("the signal received") { received.withLock { $0 } == 1 }
                await pair.client.close()
                let count = try await withTimeout(2, "stream end") { await consumer.value }
                #expect(count == 1)
                await #expect(throws: DBusError.disconnected) {
                    _ = try await pair.client.signals(matching: MatchRule())
                }
            }
        }
    }
}
