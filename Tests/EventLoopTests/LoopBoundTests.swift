import EventLoop
import Testing

@Suite struct LoopBoundTests {
    /// A value bound to a loop is read and changed on that loop, from any thread that sends work
    /// to it, and every change is seen by the next access there.
    @Test func theValueIsReachedThroughTheLoop() async throws {
        let loop = try EventLoop(name: "bound-test")
        defer { loop.shutdown() }
        let counter = LoopBound(0, loop: loop)
        for _ in 0..<100 { loop.execute { counter.value += 1 } }
        counter.withValue { $0 += 1 }
        let seen = await withCheckedContinuation { (continuation: CheckedContinuation<Int, Never>) in
            loop.execute { continuation.resume(returning: counter.value) }
        }
        #expect(seen == 101)
    }

    /// `withValue` from a thread that runs no loop holds the loop and runs at once.
    @Test func withValueFromAPlainThreadRunsBeforeItReturns() throws {
        let loop = try EventLoop(name: "bound-sync")
        defer { loop.shutdown() }
        let names = LoopBound([String](), loop: loop)
        names.withValue { $0.append("a") }
        names.withValue { $0.append("b") }
        nonisolated(unsafe) var seen: [String] = []
        loop.perform { seen = names.value }
        #expect(seen == ["a", "b"])
    }
}
