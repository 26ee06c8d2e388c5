import ANCSRuntime
import EventLoop
import Synchronization
import Testing

/// Peer-triggered lines of many kinds: each kind said once, then counted; the kinds bounded.
@Suite struct RateLimitedLogsTests {
    @Test func aKindIsTheFixedPartOfALine() {
        #expect(RateLimitedLogs.kind(of: "ignored a Notification Source value: 3 bytes, not 8") == "ignored a Notification Source value")
        #expect(RateLimitedLogs.kind(of: "no answer from the phone to notification 12 attributes within 5 s")
            == "no answer from the phone to notification # attributes within # s")
        #expect(RateLimitedLogs.kind(of: "the phone refused entity 2 with ATT error 0x0e")
            == "the phone refused entity # with ATT error #x#e")
    }

    /// Runs `body` on `loop` and waits for it.
    private func onLoop(_ loop: EventLoop, _ body: @escaping @Sendable () -> Void) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            loop.execute {
                body()
                done.resume()
            }
        }
    }

    /// A phone's flood of two kinds of malformed values, 1,000 each, and a debug line per value:
    /// one line of each kind, one summary of each a minute later; every debug line said.
    @Test func aFloodOfTwoKindsWritesTwoLinesAndTwoSummaries() async throws {
        let loop = try EventLoop(name: "rate-limits", clock: .virtual)
        defer { loop.shutdown() }
        let lines = Mutex<[(LogLevel, String)]>([])
        let log = RateLimitedLogs(interval: .seconds(60), loop: loop) { level, line in lines.withLock { $0.append((level, line)) } }
        for i in 0..<1000 {
            await onLoop(loop) {
                log.log(.warning, "AA: ignored a Notification Source value: \(i % 7) bytes", kind: "AA: ignored a Notification Source value")
                log.log(.warning, "AA: ignored an Entity Update value: attribute \(i)", kind: "AA: ignored an Entity Update value")
                log.log(.debug, "AA: value \(i)")
            }
            await loop.advance(by: .milliseconds(10))
        }
        let said = lines.withLock { $0 }.filter { $0.0 == .warning }.map(\.1)
        #expect(said == ["AA: ignored a Notification Source value: 0 bytes", "AA: ignored an Entity Update value: attribute 0"])
        #expect(lines.withLock { $0 }.filter { $0.0 == .debug }.count == 1000, "debug lines are asked for: never limited")
        await loop.advance(by: .seconds(60))
        let summaries = lines.withLock { $0 }.filter { $0.0 == .warning }.map(\.1).dropFirst(2)
        #expect(Set(summaries) == ["AA: ignored a Notification Source value: 999 more in the last 60 s",
                                   "AA: ignored an Entity Update value: 999 more in the last 60 s"])
    }

    /// Lines below the logger's threshold (the info line per notification at --log-level
    /// warning) are neither built nor counted: no line, no summary, no timer; those at or above
    /// it are rate-limited as before.
    @Test func linesBelowTheThresholdAreNeitherBuiltNorCounted() async throws {
        let loop = try EventLoop(name: "rate-limits-threshold", clock: .virtual)
        defer { loop.shutdown() }
        let lines = Mutex<[String]>([])
        let built = Mutex(0)
        let log = RateLimitedLogs(interval: .seconds(60), loop: loop, isEnabled: { $0 >= .warning }) { _, line in
            lines.withLock { $0.append(line) }
        }
        @Sendable func line(_ text: String) -> String {
            built.withLock { $0 += 1 }
            return text
        }
        await onLoop(loop) {
            for i in 0..<100 {
                log.log(.info, line("AA: notification \(i) added"), kind: line("AA: notification # added"))
                log.log(.debug, line("AA: value \(i)"))
            }
            log.log(.warning, line("AA: ignored a value: 1"), kind: "AA: ignored a value")
            log.log(.warning, line("AA: ignored a value: 2"), kind: "AA: ignored a value")
        }
        #expect(built.withLock { $0 } == 1, "only the warning that is said is built")
        await loop.advance(by: .seconds(60))
        #expect(lines.withLock { $0 } == ["AA: ignored a value: 1", "AA: ignored a value: 1 more in the last 60 s"])
    }

    /// A peer that makes a new kind per message (a new topic, a new uid each time) fills the
    /// table's places, then shares one limit: the lines stay bounded.
    @Test func kindsPastTheBoundShareOneLimit() async throws {
        let loop = try EventLoop(name: "rate-limits-kinds", clock: .virtual)
        defer { loop.shutdown() }
        let count = Mutex(0)
        let log = RateLimitedLogs(interval: .seconds(60), loop: loop) { _, _ in count.withLock { $0 += 1 } }
        await onLoop(loop) {
            for i in 0..<10_000 { log.log(.warning, "MQTT: ignored a retained message on topic \(i)", kind: "topic \(i)") }
        }
        #expect(count.withLock { $0 } == RateLimitedLogs.maximumKinds + 1, "one line per kind kept, one for all the others")
    }
}
