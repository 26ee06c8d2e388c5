/// The month's report (printed by the test) and the bounds day 30's tables are held to.
struct MonthReport {
    let world: MonthWorld
    let wall: Duration

    /// The most a table may hold at the end of day 30: what it held at the end of day 1 (the
    /// same moment of the same kind of night), or its own bound where it fills up over days by
    /// design (the seen store keeps the last 4,096 contents shown), or its structural bound where
    /// which characteristics were acquired and which apps spoke varies from one night to another
    /// (four notifying characteristics, twelve apps, eleven AMS attributes).
    static func bound(of table: String, day1: Int, in day30: [(name: String, count: Int)]) -> Int {
        func count(_ name: String) -> Int { day30.first { $0.name == name }?.count ?? 0 }
        let structural: [String: Int] = [
            "daemon: seen": 4096,
            "link machine: acquired before": 4, "daemon: readers": 4, "bluetoothd: sockets": 4, "bluetoothd: subscriptions": 4,
            "ANCS session: app names": MonthPhone.apps.count, "ANCS session: apps asked": MonthPhone.apps.count,
            "AMS session: generations": 11,
            // The orders of a session keep at most twice their sets plus 64 (removals are compacted).
            "ANCS session: notification order": 2 * count("ANCS session: notifications") + 64,
            "ANCS session: filtered order": 2 * count("ANCS session: filtered") + 64,
            // The harness's own queue: the next hours' timers and the last 10 s's call timeouts.
            "clock: things waiting": 2 * day1 + 32,
        ]
        return max(day1, structural[table] ?? day1)
    }

    var text: String {
        let o = world.oracle, b = world.bluetoothd
        func list(_ counts: [String: Int]) -> String { counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ") }
        var lines = [
            "month: seed \(world.seed), \(PhoneMonthTests.days) days, \(world.clock.ran) things on the virtual clock, wall time \(wall)",
            "notifications: \(o.created) created, \(o.modifications) modifications, \(o.removals) removals",
            "shown: \(o.shownAdded) added, \(o.shownModified) modified, \(o.shownRemoved) removed, "
                + "\(o.shownIncomplete) without attributes; \(o.heldBackCount) held back (replays of what was shown)",
            "links: \(o.connections) connections, \(o.disconnections) disconnections; \(o.walkAways) walk-aways, "
                + "\(o.flaps) at the edge of range, \(o.bluetoothdRestarts) bluetoothd restarts, \(b.attTimeouts) ATT timeouts, "
                + "\(b.acquireRefused) AcquireNotify refused",
            "silent drops: \(o.silentDrops) (\(o.silentDropsFound) found: renewed, or the link ended by the alive check's "
                + "unanswered write; the rest ended by a walk-away); sharing off: \(o.sharingEpisodes) episodes while connected, "
                + "\(o.sharingNoticed) noticed",
            "recovery, longest: " + o.longestRecovery.sorted { $0.key < $1.key }.map { "\($0.key) \(Int($0.value.seconds)) s" }.joined(separator: ", "),
            "renewals: " + list(o.renewals),
            "alive checks: \(o.aliveChecks) (\(o.aliveChecksUnanswered) unanswered)",
            "removals waiting for traffic after an empty replay: \(o.removalsAwaitingTraffic) found at checkpoints, "
                + "the longest wait from the renewal \(Int(o.longestEmptyReplay.seconds)) s",
            "calls: " + list(o.callOutcomes),
            "media: AMS withdrawn and offered again \(o.mediaWithdrawals) times, \(o.trackChanges) track changes, "
                + "\(o.mediaStates) states shown; commands: \(o.commandsAsked) asked, \(o.commandsOK) sent, "
                + "\(o.commandsFailed) failed, \(o.commandsRefused) with no player",
            "checkpoints: \(o.checkpoints), \(o.checkpointsJudged) judged (healthy and quiet), \(o.mediaJudged) of the player; "
                + "\(o.warnings) warnings, \(o.errors) errors logged; \(o.copiesDropped) signalled copies dropped",
            "violations: \(o.failureTotal)",
            "tables at the end of day 1 and day \(PhoneMonthTests.days) (bound):",
        ]
        let first = world.tables[0] ?? [], last = world.tables[PhoneMonthTests.days - 1] ?? []
        for ((name, day1), (_, day30)) in zip(first, last) {
            lines.append("  \(name): \(day1) → \(day30) (\(Self.bound(of: name, day1: day1, in: last)))")
        }
        return lines.joined(separator: "\n")
    }
}
