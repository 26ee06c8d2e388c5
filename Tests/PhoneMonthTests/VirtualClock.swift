import TestSupport

/// The month's draws from TestSupport's `SplitMix64`, so that one seed gives one month.
extension SplitMix64 {
    /// True with probability `p`.
    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &self) < p }

    /// A duration between `low` and `high`, to the microsecond.
    mutating func duration(_ low: Duration, _ high: Duration) -> Duration {
        let a = low / .microseconds(1), b = high / .microseconds(1)
        return .microseconds(Int64(Double.random(in: a...max(a, b), using: &self)))
    }

    /// An exponentially distributed wait with this mean (the gaps of a Poisson process).
    mutating func exponential(mean: Duration) -> Duration {
        let u = Double.random(in: 0..<1, using: &self)
        return .microseconds(Int64(-Double(mean / .microseconds(1)) * log1p(-u)))
    }

    /// One of `items`; they must not be empty.
    mutating func pick<T>(_ items: [T]) -> T { items[Int.random(in: 0..<items.count, using: &self)] }
}

/// The natural logarithm of 1 + x (x > -1), by a series: the standard library has no `log`, and
/// the month needs it only for exponential waits.
private func log1p(_ x: Double) -> Double {
    // ln(1 + x) = 2 artanh(x / (2 + x)), a series that converges for every x > -1.
    let y = x / (2 + x), y2 = y * y
    var term = y, sum = 0.0, k = 1.0
    while abs(term / k) > 1e-17 {
        sum += term / k
        term *= y2
        k += 2
    }
    return 2 * sum
}

/// The month's one clock: a queue of things to do, each at its time, run in time order (and in
/// the order they were scheduled at one time). Nothing else keeps time.
final class VirtualClock {
    private struct Entry {
        var at: Duration
        var order: UInt64
        var body: () -> Void
    }

    private(set) var now = Duration.zero
    private var heap: [Entry] = []
    private var scheduled: UInt64 = 0
    /// How many things have run.
    private(set) var ran = 0

    /// Runs `body` at `time` (at once if it has passed: never before what is already due now).
    func at(_ time: Duration, _ body: @escaping () -> Void) {
        scheduled += 1
        heap.append(Entry(at: max(time, now), order: scheduled, body: body))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.before(heap[child], heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    func after(_ delay: Duration, _ body: @escaping () -> Void) { at(now + delay, body) }

    /// Runs everything due until `end`, then stands at `end`.
    func run(until end: Duration) {
        while let first = heap.first, first.at <= end {
            let entry = popFirst()
            now = entry.at
            ran += 1
            entry.body()
        }
        now = max(now, end)
    }

    /// How many things wait.
    var pending: Int { heap.count }

    private static func before(_ a: Entry, _ b: Entry) -> Bool { a.at < b.at || (a.at == b.at && a.order < b.order) }

    private func popFirst() -> Entry {
        let first = heap[0]
        let last = heap.removeLast()
        guard !heap.isEmpty else { return first }
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < heap.count, Self.before(heap[left], heap[smallest]) { smallest = left }
            if right < heap.count, Self.before(heap[right], heap[smallest]) { smallest = right }
            if smallest == parent { break }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
        return first
    }
}

extension Duration {
    static func minutes(_ m: Int64) -> Duration { .seconds(m * 60) }
    static func hours(_ h: Int64) -> Duration { .seconds(h * 3600) }
    static let day = Duration.seconds(86_400)

    /// Seconds, as a `Double`.
    var seconds: Double {
        let (whole, atto) = components
        return Double(whole) + Double(atto) / 1e18
    }

    /// "day 3 14:05:09.120", for messages about the month.
    var monthTime: String {
        let total = Int64(seconds * 1000)
        let ms = total % 1000, s = total / 1000
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let msText = ms < 10 ? "00\(ms)" : ms < 100 ? "0\(ms)" : "\(ms)"
        return "day \(s / 86_400 + 1) \(two(s % 86_400 / 3600)):\(two(s % 3600 / 60)):\(two(s % 60)).\(msText)"
    }
}
