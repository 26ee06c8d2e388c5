import Glibc
import Testing

/// A month in a minute (issue 37): the pure machines (`LinkMachine`, `ANCSSession` with its
/// `ReplayGate`, `MediaSession`) wired as the daemon wires them (`DaemonModel`), against a
/// strict iPhone (`MonthPhone`) behind a modelled bluetoothd (`MonthBluetoothd`), for 30 days
/// on a virtual clock drawn from one seed (`MonthWorld`), judged by `MonthOracle`.
///
/// `ANCSD_MONTH_SEED=<n>` replays a month; `ANCSD_MONTH_SEED=random` draws a new one. The test
/// prints the seed, how to replay it, a report of the month and the tables at the end of day 1
/// and day 30.
@Suite("A month in a minute")
struct PhoneMonthTests {
    static let defaultSeed: UInt64 = 20_270_301
    static let days = 30

    static var seed: UInt64 {
        guard let raw = getenv("ANCSD_MONTH_SEED") else { return defaultSeed }
        let text = String(cString: raw)
        if text == "random" { return UInt64.random(in: 1...UInt64(UInt32.max)) }
        return UInt64(text) ?? defaultSeed
    }

    @Test func aMonthOfOnePhone() {
        let seed = Self.seed
        print("month: seed \(seed) (replay: ANCSD_MONTH_SEED=\(seed) swift test --filter PhoneMonthTests)")
        let began = ContinuousClock.now
        let world = MonthWorld(seed: seed)
        world.oracle.tracedFailure = getenv("ANCSD_MONTH_TRACE").flatMap { Int(String(cString: $0)) } ?? 0
        world.run(days: Self.days)
        let wall = ContinuousClock.now - began
        let oracle = world.oracle
        print(MonthReport(world: world, wall: wall).text)
        if !oracle.tracedEvents.isEmpty {
            print("month: the events before violation \(oracle.tracedFailure):\n" + oracle.tracedEvents.joined(separator: "\n"))
        }

        #expect(oracle.failureTotal == 0, """
            \(oracle.failureTotal) violation(s) (ANCSD_MONTH_TRACE=n prints the events before the nth); the first:
            \(oracle.failures.joined(separator: "\n"))
            """)
        // Enough happened for the month to mean something.
        #expect(oracle.created > 250 * Self.days && oracle.connections > 8 * Self.days && oracle.checkpointsJudged > 100 * Self.days)
        #expect(oracle.aliveChecks > 0 && oracle.renewals.values.reduce(0, +) > 0 && oracle.mediaJudged > 0, "seed \(seed)")
        // Every media command asked for was answered once; the phone performed only those sent.
        #expect(oracle.commandsAsked == oracle.commandsOK + oracle.commandsFailed, "seed \(seed)")
        #expect(world.phone.commandsReceived.count <= oracle.commandsOK, "seed \(seed)")
        // No state grows with days: day 30's tables against day 1's, at the same moment (23:59:50,
        // the phone at home and cleared at 23:30, the link idle).
        if let first = world.tables[0], let last = world.tables[Self.days - 1] {
            for ((name, day1), (_, day30)) in zip(first, last) {
                let bound = MonthReport.bound(of: name, day1: day1, in: last)
                #expect(day30 <= bound, "seed \(seed): \(name) is \(day30) at the end of day \(Self.days), above \(bound) (day 1: \(day1))")
            }
        } else {
            Issue.record("seed \(seed): the tables were not measured at the end of day 1 and day \(Self.days)")
        }
        #expect(wall < .seconds(60), "the month took \(wall)")
    }
}
