import Foundation

// Waiting for a condition rather than for a set time (a fixed sleep hopes it is long enough, and
// is too long whenever it is). A check comes soon after the condition turns true (every 2 ms at
// first, then less often, at most every 50 ms: a condition that runs a program is not run
// hundreds of times a second), and the failure names what was awaited.

/// Waits until `condition` holds, blocking this thread between checks; fails with a
/// `TestFailure` naming `what` after `timeout`.
public func waitUntil(_ what: @autoclosure () -> String, timeout: Duration = .seconds(30), _ condition: () throws -> Bool) throws {
    let deadline = ContinuousClock.now + timeout
    var pause = Pause()
    while !(try condition()) {
        guard ContinuousClock.now < deadline else { throw TestFailure("timed out after \(timeout) waiting for \(what())") }
        Thread.sleep(forTimeInterval: pause.next())
    }
}

/// Waits until `condition` holds, suspending between checks (no thread is held: an in-process
/// simulator or companion may need one meanwhile); fails with a `TestFailure` naming `what`
/// after `timeout`.
public func eventually(
    _ what: @autoclosure () -> String, timeout: Duration = .seconds(30), _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    var pause = Pause()
    while !(try await condition()) {
        guard ContinuousClock.now < deadline else { throw TestFailure("timed out after \(timeout) waiting for \(what())") }
        try await Task.sleep(for: .seconds(pause.next()))
    }
}

/// The pauses between checks, in seconds: 2 ms, doubling to 50 ms.
private struct Pause {
    private var seconds = 0.002

    mutating func next() -> Double {
        defer { seconds = min(seconds * 2, 0.05) }
        return seconds
    }
}
