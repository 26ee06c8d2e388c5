import ANCSRuntime
import EventLoop
import Synchronization
import Testing

/// Peer-triggered log lines: the first said, the rest counted, one summary per interval.
@Suite struct RateLimitedLogTests {
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int(seconds * 1000)) }

    @Test func theFirstIsSaidTheRestCountedAndSummarisedOnce() {
        var limit = LogRateLimit(interval: .seconds(60))
        #expect(limit.occurred(at: at(0)) == .init(summary: nil, say: true))
        #expect(limit.deadline == nil, "one line: no timer")
        for t in stride(from: 1.0, through: 59, by: 1) {
            #expect(limit.occurred(at: at(t)).say == false)
        }
        #expect(limit.counted == 59)
        #expect(limit.deadline == at(60))
        #expect(limit.due(at: at(59.9)) == nil, "not before the interval is over")
        #expect(limit.due(at: at(60)) == 59)
        #expect(limit.deadline == nil, "nothing counted since")
        // The flood goes on: counted in the new window, summarised a minute later.
        #expect(limit.occurred(at: at(61)).say == false)
        #expect(limit.due(at: at(120)) == 1)
    }

    @Test func aQuietIntervalMakesTheNextOneSaidAgain() {
        var limit = LogRateLimit(interval: .seconds(60))
        #expect(limit.occurred(at: at(0)).say)
        #expect(limit.due(at: at(60)) == nil, "nothing to summarise")
        #expect(limit.occurred(at: at(61)).say)
        // Long after the last window, with no timer run: said again.
        #expect(limit.occurred(at: at(500)).say)
    }

    @Test func aSummaryThatWasNotCollectedComesWithTheNextOccurrence() {
        var limit = LogRateLimit(interval: .seconds(60))
        _ = limit.occurred(at: at(0))
        _ = limit.occurred(at: at(1))
        _ = limit.occurred(at: at(2))
        // No timer ran at 60 s: the next occurrence brings the summary and is counted in a new window.
        #expect(limit.occurred(at: at(90)) == .init(summary: 2, say: false))
        #expect(limit.deadline == at(150))
    }

    /// The loop-bound log on a virtual clock: a flood of 1,000 lines in 10 s writes three.
    @Test func aFloodWritesTheFirstLineAndOneSummaryPerMinute() async throws {
        let loop = try EventLoop(name: "rate-limit", clock: .virtual)
        defer { loop.shutdown() }
        let lines = Mutex<[String]>([])
        let log = RateLimitedLog("refused a pairing request", interval: .seconds(60), loop: loop) { _, line in
            lines.withLock { $0.append(line) }
        }
        for i in 0..<1000 {
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                loop.execute {
                    log("refused a pairing request from 40:00:00:00:00:\(i % 10)")
                    done.resume()
                }
            }
            await loop.advance(by: .milliseconds(10))
        }
        #expect(lines.withLock { $0 } == ["refused a pairing request from 40:00:00:00:00:0"])
        await loop.advance(by: .seconds(50))
        #expect(lines.withLock { $0.last } == "refused a pairing request: 999 more in the last 60 s")
        #expect(lines.withLock { $0.count } == 2)
        // Nothing more came: no further line, and an hour later the next one is said in full.
        await loop.advance(by: .seconds(3600))
        #expect(lines.withLock { $0.count } == 2)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            loop.execute {
                log("refused a pairing request from 40:00:00:00:00:07")
                done.resume()
            }
        }
        #expect(lines.withLock { $0.last } == "refused a pairing request from 40:00:00:00:00:07")
    }
}
