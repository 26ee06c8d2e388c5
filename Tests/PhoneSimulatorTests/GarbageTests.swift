import ANCS
import DBus
import Foundation
import JSON
import PhoneSimulator
import Synchronization
import Testing
import TestSupport

/// The simulator's log lines, kept.
private final class LogLines: Sendable {
    private let lines = Mutex<[String]>([])
    var log: @Sendable (String) -> Void { { [self] line in lines.withLock { $0.append(line) } } }
    var all: [String] { lines.withLock { $0 } }
    func first(containing text: String) -> String? { all.first { $0.contains(text) } }
    func count(containing text: String) -> Int { all.filter { $0.contains(text) }.count }
}

/// The `garbage` step, in-process: what it sends, where a Data Source value may land, and how
/// the noise ends.
extension IntegrationTests {
    static let entityUpdate: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0019/char001d"

    /// True for a Notification Source value no client can take for an event.
    static func malformedNotificationSource(_ value: [UInt8]) -> Bool {
        value.count != NotificationSourceEvent.size || value[0] >= 3
    }

    /// True for an Entity Update value that changes no player: too short for the header, an
    /// undefined entity, or an undefined attribute of a defined one.
    static func malformedEntityUpdate(_ value: [UInt8]) -> Bool {
        value.count < 3 || value[0] >= 3 || value[1] >= 4
    }

    @Test("garbage: malformed values only, a Data Source one only between whole responses, none in the logs; seconds 0 and stop end it")
    func garbage() async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let directory = NSTemporaryDirectory() + "garbage-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let events = try #require(Timeline(path: directory + "/events.jsonl"))
        let timeline = try #require(Timeline(path: directory + "/timeline.jsonl"))
        var settings = Self.settings
        settings.ams = true
        let logs = LogLines()
        let simulator = PhoneSimulator(
            settings: settings, bus: .address(bus.address), timeline: timeline, events: events, log: logs.log)
        try await withTimeout(30, "the test") {
            try await simulator.start()
            try await simulator.execute(.add(Self.sms))
            let client = try await DBusConnection.connect(to: .address(bus.address))
            let collector = Collector()
            _ = try await client.subscribe(to: .propertiesChanged(sender: "org.bluez", pathNamespace: Self.device), handler: collector.handler)
            for path in [Self.ds, Self.ns, Self.entityUpdate] { _ = try await Self.call(client, path, "StartNotify") }
            _ = try await collector.waitForValues(1, at: Self.ns)  // the replay

            // 3,000 values in 1 s, while 20 responses of 5 fragments each (MTU 23) are sent.
            let clock = ContinuousClock()
            let began = clock.now
            try await simulator.execute(.garbage(seconds: 1, rate: 3000, seed: 7))
            #expect(clock.now - began < .milliseconds(200), "the step returns at once")
            for _ in 0..<20 {
                try await Self.write(client, try Self.request.encoded())
                try await Task.sleep(for: .milliseconds(25))
            }
            try await eventually("the noise's end", timeout: .seconds(5)) { logs.first(containing: "garbage done after") != nil }
            let done = try #require(logs.first(containing: "garbage done after"))
            #expect(done.hasSuffix(
                "1000 on the Notification Source, 1000 on the Data Source, 1000 on the Entity Update, 0 not sent (nothing subscribed)"), "\(done)")
            #expect(logs.count(containing: "garbage for 1.0 s at 3000/s") == 1)
            let response = try #require(DataSourceEncoder.response(to: Self.request, notificationAttributes: Self.smsWire))
            let fragments = DataSourceEncoder.fragments(of: response, mtu: 23)
            #expect(fragments.count > 2)
            _ = try await collector.waitForValues(1 + 1000, at: Self.ns)
            _ = try await collector.waitForValues(1000 + 20 * fragments.count, at: Self.ds)
            _ = try await collector.waitForValues(1000, at: Self.entityUpdate)

            // The Notification Source: the replay, then noise only.
            let ns = collector.values(at: Self.ns)
            #expect(ns.count == 1001 && !Self.malformedNotificationSource(ns[0]))
            #expect(ns.dropFirst().allSatisfy(Self.malformedNotificationSource))
            #expect(ns.contains { $0.count == 0 } && ns.contains { $0.count == 8 }, "both kinds")
            // The Data Source: each response whole, in a row; between them values no answer starts with.
            let ds = collector.values(at: Self.ds)
            var index = 0
            var responses = 0
            var noise = 0
            while index < ds.count {
                if ds.count - index >= fragments.count, Array(ds[index..<(index + fragments.count)]) == fragments {
                    responses += 1
                    index += fragments.count
                    continue
                }
                let value = ds[index]
                #expect((1...20).contains(value.count) && value[0] >= 2, "value \(index): \(value)")
                noise += 1
                index += 1
            }
            #expect(responses == 20 && noise == 1000)
            let entityUpdates = collector.values(at: Self.entityUpdate)
            #expect(entityUpdates.count == 1000 && entityUpdates.allSatisfy(Self.malformedEntityUpdate))

            // The same seed makes the same noise.
            collector.clear()
            try await simulator.execute(.garbage(seconds: 0.1, rate: 3000, seed: 7))
            _ = try await collector.waitForValues(100, at: Self.ns)
            #expect(collector.values(at: Self.ns).prefix(100).elementsEqual(ns.dropFirst().prefix(100)))

            // `seconds` 0 stops the noise; nothing comes after.
            try await eventually("the second noise's end") { logs.count(containing: "garbage done after") == 2 }
            let quiet = collector.values(at: Self.ns).count
            try await simulator.execute(.garbage(seconds: 60, rate: 1000, seed: 8))
            try await eventually("the noise coming") { collector.values(at: Self.ns).count > quiet }
            try await simulator.execute(.garbage(seconds: 0, rate: 1000, seed: 9))
            #expect(logs.count(containing: "garbage stopped after") == 1, "its end is logged before the step returns")
            try await Task.sleep(for: .milliseconds(100))
            let after = collector.values(at: Self.ns).count
            try await Task.sleep(for: .milliseconds(200))
            #expect(collector.values(at: Self.ns).count == after)
            try await simulator.execute(.garbage(seconds: 0, rate: 1000, seed: 10))
            #expect(logs.count(containing: "no garbage to stop") == 1)

            // A link loss does not end the noise: nothing is sent while nobody is subscribed.
            try await simulator.execute(.garbage(seconds: 60, rate: 1000, seed: 11))
            try await simulator.execute(.disconnect)
            try await Task.sleep(for: .milliseconds(100))
            // The simulator's stop ends it.
            await client.close()
            await simulator.stop()
        }
        let stopped = try #require(logs.all.last { $0.contains("garbage stopped after") })
        #expect(stopped.contains("not sent (nothing subscribed)") && !stopped.contains(" 0 not sent"), "\(stopped)")
        // No value of the noise is in the timeline or the events log.
        timeline.close()
        events.close()
        let timelineLines = try String(contentsOfFile: directory + "/timeline.jsonl", encoding: .utf8).split(separator: "\n")
        #expect(timelineLines.count == 1, "the replay's: \(timelineLines)")
        let records = try String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8).split(separator: "\n")
            .compactMap { try JSONValue(parsing: String($0)).objectValue }
        #expect(records.filter { $0["kind"] == "ns" }.count == 1)
        #expect(!records.contains { $0["kind"] == "media_update" || $0["kind"] == "media_commands" })
    }
}
