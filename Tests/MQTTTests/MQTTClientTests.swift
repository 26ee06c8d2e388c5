import EventLoop
import Foundation
import MQTT
import Synchronization
import Testing
import TestSupport

/// What a client under test reported.
final class EventLog: Sendable {
    private let events = Mutex<[MQTTClientEvent]>([])
    func add(_ event: MQTTClientEvent) { events.withLock { $0.append(event) } }
    var connections: Int { events.withLock { $0.filter { if case .connected = $0 { true } else { false } }.count } }
    var reasons: [String] { events.withLock { $0.compactMap { if case .disconnected(let reason, _) = $0 { reason } else { nil } } } }
    var drops: [Int] { events.withLock { $0.compactMap { if case .dropped(let count) = $0 { count } else { nil } } } }
    var messages: [(String, String)] {
        events.withLock { $0.compactMap { if case .message(let t, let p, _) = $0 { (t, String(decoding: p, as: UTF8.self)) } else { nil } } }
    }
}

/// The loop every client under test runs on, as the daemon's clients run on the daemon's.
let testLoop: EventLoop = {
    do {
        return try EventLoop(name: "mqtt-test")
    } catch {
        preconditionFailure("cannot start the test's event loop: \(error)")
    }
}()

func makeClient(_ url: String, configure: (inout MQTTConfiguration) -> Void = { _ in }) throws -> (MQTTClient, EventLog) {
    var configuration = MQTTConfiguration(endpoint: try MQTTEndpoint(url: url), clientID: "ancsd-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
    configuration.minimumRetry = .milliseconds(100)
    configuration.maximumRetry = .milliseconds(400)
    configure(&configuration)
    let log = EventLog()
    let client = try MQTTClient(configuration: configuration, loop: testLoop, onEvent: { log.add($0) })
    return (client, log)
}

func finish(_ client: MQTTClient, timeout: Duration = .seconds(5)) throws -> Bool {
    let result = Mutex<Bool?>(nil)
    client.finish(timeout: timeout) { delivered in result.withLock { $0 = delivered } }
    try waitUntil("the client's finish", timeout: timeout + .seconds(10)) { result.withLock { $0 } != nil }
    return result.withLock { $0 } ?? false
}

func payloads(_ subscriber: ChildProcess, topic: String) -> [String] {
    subscriber.lines.map(\.text).filter { $0.hasPrefix(topic + " ") }.map { String($0.dropFirst(topic.count + 1)) }
}

@Suite("MQTT client against a real mosquitto", .serialized)
struct MQTTClientTests {
    @Test("URLs: scheme, user, host, port, IPv6; passwords and paths refused")
    func urls() throws {
        #expect(try MQTTEndpoint(url: "mqtt://broker") == MQTTEndpoint(host: "broker", port: 1883, tls: false))
        #expect(try MQTTEndpoint(url: "mqtts://ha@broker.lan:8884") == MQTTEndpoint(host: "broker.lan", port: 8884, tls: true, username: "ha"))
        #expect(try MQTTEndpoint(url: "mqtts://broker").port == 8883)
        #expect(try MQTTEndpoint(url: "mqtt://[::1]:1884/") == MQTTEndpoint(host: "::1", port: 1884, tls: false))
        for bad in ["http://x", "mqtt://", "mqtt://u:pw@host", "mqtt://host:0", "mqtt://host:99999", "mqtt://host/topic", "mqtt://ho st"] {
            #expect(throws: MQTTURLError.self, "\(bad)") { try MQTTEndpoint(url: bad) }
        }
    }

    @Test("messages arrive in order; retained state stays; finish publishes the farewell and disconnects cleanly")
    func publishAndRetain() throws {
        let broker = try MosquittoBroker()
        let subscriber = try broker.subscriber(["t/#"])
        defer { subscriber.signal(SIGKILL) }
        let (client, log) = try makeClient("mqtt://127.0.0.1:\(broker.port)") {
            $0.will = MQTTMessage(topic: "t/status", text: "offline", retain: true)
            $0.farewell = MQTTMessage(topic: "t/status", text: "offline", retain: true)
        }
        client.start()
        client.publish(MQTTMessage(topic: "t/status", text: "online", retain: true))
        for n in 1...200 { client.publish(MQTTMessage(topic: "t/event", text: "\(n)")) }
        try waitUntil("200 events") { payloads(subscriber, topic: "t/event").count >= 200 }
        #expect(payloads(subscriber, topic: "t/event") == (1...200).map(String.init))
        #expect(log.connections == 1)
        #expect(try broker.retained("t/status") == ["t/status online"])
        #expect(try finish(client))
        #expect(try broker.retained("t/status") == ["t/status offline"])
        try waitUntil("disconnect logged") { broker.log.contains("disconnected") }
        #expect(!broker.log.contains("closed its connection") || broker.log.contains("disconnected."))
    }

    @Test("password authentication: the right password delivers, a wrong one is refused and retried")
    func passwordAuthentication() throws {
        let broker = try MosquittoBroker(security: .init(users: ["ancsd": "s3cret pass"]))
        let subscriber = try broker.subscriber(["a/#"], user: "ancsd", password: "s3cret pass")
        defer { subscriber.signal(SIGKILL) }
        let (good, _) = try makeClient("mqtt://ancsd@127.0.0.1:\(broker.port)") { $0.password = "s3cret pass" }
        good.start()
        good.publish(MQTTMessage(topic: "a/x", text: "hello"))
        try waitUntil("delivery") { payloads(subscriber, topic: "a/x") == ["hello"] }
        #expect(try finish(good))

        let (bad, log) = try makeClient("mqtt://ancsd@127.0.0.1:\(broker.port)") { $0.password = "wrong" }
        bad.start()
        bad.publish(MQTTMessage(topic: "a/x", text: "never"))
        try waitUntil("two refusals") { log.reasons.count >= 2 }
        #expect(log.reasons.allSatisfy { $0.lowercased().contains("not authori") }, "\(log.reasons)")
        #expect(log.connections == 0)
        bad.stop()
        #expect(payloads(subscriber, topic: "a/x") == ["hello"])
    }

    @Test("TLS: a broker certificate signed by the given CA is accepted, another CA is refused")
    func tls() throws {
        let broker = try MosquittoBroker(security: .init(tls: true))
        let (client, log) = try makeClient("mqtts://127.0.0.1:\(broker.port)") { $0.caFile = broker.caFile }
        client.start()
        client.publish(MQTTMessage(topic: "s/state", text: "connected", retain: true))
        try waitUntil("connected") { log.connections == 1 }
        #expect(try finish(client))
        #expect(try broker.retained("s/#", extra: ["--cafile", broker.caFile], host: "127.0.0.1") == ["s/state connected"])

        // A CA that did not sign the broker's certificate: no connection, a TLS error.
        let other = try MosquittoBroker(security: .init(tls: true))
        let (refused, refusedLog) = try makeClient("mqtts://127.0.0.1:\(broker.port)") { $0.caFile = other.caFile }
        refused.start()
        try waitUntil("a refusal") { !refusedLog.reasons.isEmpty }
        #expect(refusedLog.connections == 0)
        refused.stop()
    }

    // In the next two tests the client waits 3 s before reconnecting, so that mosquitto_sub
    // (which retries after 1 s) is subscribed again before the queued messages arrive.

    @Test("a broker that restarts mid-stream loses nothing and keeps the order")
    func brokerRestart() throws {
        let broker = try MosquittoBroker()
        let subscriber = try broker.subscriber(["r/#"])
        defer { subscriber.signal(SIGKILL) }
        let (client, log) = try makeClient("mqtt://127.0.0.1:\(broker.port)") {
            $0.minimumRetry = .seconds(3)
            $0.maximumRetry = .seconds(3)
        }
        client.start()
        for n in 1...100 { client.publish(MQTTMessage(topic: "r/event", text: "\(n)")) }
        try waitUntil("first 100") { payloads(subscriber, topic: "r/event").count >= 100 }
        // The broker stops while events keep coming; they wait in the client's queue.
        let publisher = Thread {
            for n in 101...300 {
                client.publish(MQTTMessage(topic: "r/event", text: "\(n)"))
                Thread.sleep(forTimeInterval: 0.005)
            }
        }
        publisher.start()
        try waitUntil("the next events coming") { payloads(subscriber, topic: "r/event").count >= 120 }
        broker.stop()
        try waitUntil("the loss noticed") { !log.reasons.isEmpty }
        try broker.start()
        try waitUntil("reconnected") { log.connections == 2 }
        try waitUntil("all 300: \(payloads(subscriber, topic: "r/event").count)", timeout: .seconds(30)) {
            Set(payloads(subscriber, topic: "r/event")).count >= 300
        }
        let received = payloads(subscriber, topic: "r/event").compactMap(Int.init)
        var firsts: [Int] = []
        for n in received where !firsts.contains(n) { firsts.append(n) }
        #expect(firsts == Array(1...300), "order of first arrivals")
        // At least once: a message in flight when the broker went may come twice, never more.
        #expect(received.count - 300 <= MQTTClient.window, "\(received.count - 300) repeated")
        #expect(try finish(client))
    }

    /// A burst while connected to a broker that answers nothing for a moment (stopped): the
    /// drops are counted and reported in a few sums, not one report per message.
    @Test("drops while connected are reported in sums, at most once per interval and when the queue runs empty")
    func dropsWhileConnectedAreSummed() throws {
        let broker = try MosquittoBroker()
        let (client, log) = try makeClient("mqtt://127.0.0.1:\(broker.port)") { $0.queueLimit = 5 }
        client.start()
        try waitUntil("connected") { log.connections == 1 }
        broker.signal(SIGSTOP)
        for n in 1...500 { client.publish(MQTTMessage(topic: "burst/event", text: "\(n)")) }
        try waitUntil("the burst queued") { client.snapshot.dropped + client.snapshot.queued >= 500 }
        #expect(client.snapshot.connected)
        broker.signal(SIGCONT)
        try waitUntil("queue empty") { client.snapshot.queued == 0 }
        let dropped = client.snapshot.dropped
        #expect(dropped > 100, "the burst overflowed the queue of 5")
        #expect(log.drops.reduce(0, +) == dropped)
        #expect(log.drops.count <= 2, "\(log.drops.count) reports: one at the first drop, one when the queue ran empty")
        #expect(try finish(client))
    }

    @Test("a broker that is down at the start: the queue keeps the newest 10 of 25 events (bound 10), in order")
    func boundedQueue() throws {
        let broker = try MosquittoBroker()
        broker.stop()
        let (client, log) = try makeClient("mqtt://127.0.0.1:\(broker.port)") {
            $0.queueLimit = 10
            $0.minimumRetry = .seconds(3)
            $0.maximumRetry = .seconds(3)
        }
        client.start()
        client.publish(MQTTMessage(topic: "q/state", text: "connected", retain: true))
        for n in 1...25 { client.publish(MQTTMessage(topic: "q/event", text: "\(n)")) }
        try waitUntil("a failed attempt") { !log.reasons.isEmpty }
        #expect(!client.snapshot.connected)
        try broker.start()
        let subscriber = try broker.subscriber(["q/#"])
        defer { subscriber.signal(SIGKILL) }
        try waitUntil("delivery", timeout: .seconds(20)) { payloads(subscriber, topic: "q/event").count >= 9 }
        try waitUntil("queue empty") { client.snapshot.queued == 0 }
        // 26 messages for 10 places: the 16 oldest events went; the retained state stayed.
        #expect(payloads(subscriber, topic: "q/event") == (17...25).map(String.init))
        #expect(client.snapshot.dropped == 16 && client.snapshot.connected)
        #expect(try broker.retained("q/state") == ["q/state connected"])
        #expect(try finish(client))
    }

    @Test("answers to a flood of commands keep to their share: no event is dropped for them")
    func answersKeepToTheirShare() throws {
        let broker = try MosquittoBroker()
        broker.stop()
        let (client, log) = try makeClient("mqtt://127.0.0.1:\(broker.port)") {
            $0.queueLimit = 20  // answers: at most 2
            $0.minimumRetry = .seconds(3)
            $0.maximumRetry = .seconds(3)
        }
        client.start()
        for n in 1...5 { client.publish(MQTTMessage(topic: "q/event", text: "\(n)")) }
        for n in 1...500 { client.publish(MQTTMessage(topic: "q/answer", text: "\(n)", isAnswer: true)) }
        for n in 6...10 { client.publish(MQTTMessage(topic: "q/event", text: "\(n)")) }
        try waitUntil("a failed attempt") { !log.reasons.isEmpty }
        try broker.start()
        let subscriber = try broker.subscriber(["q/#"])
        defer { subscriber.signal(SIGKILL) }
        try waitUntil("delivery", timeout: .seconds(20)) { payloads(subscriber, topic: "q/event").count >= 10 }
        try waitUntil("queue empty") { client.snapshot.queued == 0 }
        #expect(payloads(subscriber, topic: "q/event") == (1...10).map(String.init), "every event, in order")
        #expect(payloads(subscriber, topic: "q/answer") == ["499", "500"], "the newest answers")
        #expect(client.snapshot.dropped == 0 && client.snapshot.droppedAnswers == 498)
        #expect(try finish(client))
    }

    @Test("a host name whose every address refuses: each attempt fails and is retried (no silent hang)", arguments: [false, true])
    func refusedByName(tls: Bool) throws {
        let port = try freeTCPPort()
        let (client, log) = try makeClient("\(tls ? "mqtts" : "mqtt")://localhost:\(port)") {
            if tls { $0.caFile = "/etc/ssl/certs/ca-certificates.crt" }
        }
        client.start()
        try waitUntil("three refusals: \(log.reasons)", timeout: .seconds(10)) { log.reasons.count >= 3 }
        #expect(log.connections == 0)
        client.stop()
    }

    @Test("subscriptions receive messages and are renewed after a reconnect")
    func subscriptions() throws {
        let broker = try MosquittoBroker()
        let (client, log) = try makeClient("mqtt://127.0.0.1:\(broker.port)")
        client.subscribe("c/+/action")
        client.start()
        try waitUntil("connected") { log.connections == 1 }
        try waitUntil("subscribed") { broker.subscriptions(to: "c/+/action") == 1 }
        try broker.publish("c/phone/action", #"{"uid":1}"#)
        try waitUntil("message") { log.messages.count == 1 }
        try broker.restart()
        try waitUntil("reconnected") { log.connections == 2 }
        try waitUntil("subscribed again") { broker.subscriptions(to: "c/+/action") == 1 }
        try broker.publish("c/phone/action", #"{"uid":2}"#)
        try waitUntil("second message") { log.messages.count == 2 }
        #expect(log.messages.map(\.1) == [#"{"uid":1}"#, #"{"uid":2}"#])
        client.stop()
    }
}
