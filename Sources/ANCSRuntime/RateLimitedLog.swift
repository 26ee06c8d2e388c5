public import EventLoop

/// The counting behind `RateLimitedLog`, without I/O or a clock of its own: the first
/// occurrence of a kind of line is said in full, the ones that follow within `interval` are
/// only counted, and when the interval is over the count is due as one summary line; while
/// they keep coming, one summary per interval. A pure value, so a test drives it with any
/// instants it likes.
///
/// A quiet interval closes the window: the next occurrence is said in full again. Nothing is
/// due (`deadline` nil) unless something was counted, so a caller arms a timer only then.
public struct LogRateLimit: Sendable, Equatable {
    /// How long a window lasts, and how often a summary may come.
    public let interval: Duration
    /// When the current window ends; nil when there is none (the next occurrence is said).
    private var windowEnd: ContinuousClock.Instant?
    /// Occurrences counted, not said, in the current window.
    public private(set) var counted = 0

    public init(interval: Duration = .seconds(60)) {
        self.interval = interval
    }

    /// What to do with an occurrence.
    public struct Verdict: Sendable, Equatable {
        /// A summary of this many counted occurrences is due first (the window ended unnoticed).
        public var summary: Int?
        /// Say this occurrence in full.
        public var say: Bool

        public init(summary: Int?, say: Bool) {
            self.summary = summary
            self.say = say
        }
    }

    /// An occurrence at `now`.
    public mutating func occurred(at now: ContinuousClock.Instant) -> Verdict {
        let summary = due(at: now)
        if let end = windowEnd, now < end {
            counted += 1
            return Verdict(summary: summary, say: false)
        }
        windowEnd = now + interval
        return Verdict(summary: summary, say: true)
    }

    /// When a summary is due: the end of a window in which something was counted.
    public var deadline: ContinuousClock.Instant? { counted > 0 ? windowEnd : nil }

    /// The count to report when the window has ended at `now` with occurrences counted; a new
    /// window starts then, so a flood that goes on is summarised once per interval. A window
    /// that ended with nothing counted closes.
    public mutating func due(at now: ContinuousClock.Instant) -> Int? {
        guard let end = windowEnd, now >= end else { return nil }
        guard counted > 0 else {
            windowEnd = nil
            return nil
        }
        let count = counted
        counted = 0
        windowEnd = now + interval
        return count
    }
}

/// A log line that a peer can trigger (a pairing request, a stranger's connection), said the
/// first time and then counted: "KIND: N more in the last 60 s", once per interval while they
/// keep coming. Any neighbour can repeat such an event as often as it likes; this keeps the
/// journal readable and its size bounded.
///
/// It belongs to one loop: call it there (the actors of `ancsd run` run on it). Its summary
/// timer is armed only while something is counted, so an idle daemon keeps no timer.
public final class RateLimitedLog: Sendable {
    /// What the summary line names: the fixed part of the message.
    public let kind: String
    public let level: LogLevel
    private let loop: EventLoop
    private let emit: @Sendable (LogLevel, String) -> Void
    private let state: LoopBound<State>

    private struct State {
        var limit: LogRateLimit
        var timer: LoopTimer?
        /// The deadline the timer is armed for, if any: an occurrence that leaves it as it is
        /// does not arm it again.
        var armedFor: ContinuousClock.Instant?
    }

    /// Lines of `kind` at `level`, through `logger`, on `loop`.
    public convenience init(_ kind: String, level: LogLevel = .warning, interval: Duration = .seconds(60), logger: Logger, loop: EventLoop) {
        self.init(kind, level: level, interval: interval, loop: loop) { logger.log($0, $1) }
    }

    /// Lines of `kind` at `level`, handed to `emit` (tests).
    public init(
        _ kind: String, level: LogLevel = .warning, interval: Duration = .seconds(60), loop: EventLoop,
        emit: @escaping @Sendable (LogLevel, String) -> Void
    ) {
        self.kind = kind
        self.level = level
        self.loop = loop
        self.emit = emit
        state = LoopBound(State(limit: LogRateLimit(interval: interval)), loop: loop)
    }

    /// One occurrence: `message` (which should start with `kind`) is said, or counted.
    public func callAsFunction(_ message: @autoclosure () -> String) {
        let verdict = state.value.limit.occurred(at: loop.now)
        if let summary = verdict.summary { emit(level, summaryLine(summary)) }
        if verdict.say { emit(level, message()) }
        armTimer()
    }

    private func summaryLine(_ count: Int) -> String {
        "\(kind): \(count) more in the last \(state.value.limit.interval.components.seconds) s"
    }

    /// The summary timer, for the deadline the counting has now (made on first use).
    private func armTimer() {
        guard let deadline = state.value.limit.deadline, deadline != state.value.armedFor else { return }
        let timer = state.value.timer ?? loop.makeTimer { [weak self] in self?.fire() }
        state.value.timer = timer
        state.value.armedFor = deadline
        timer.schedule(after: max(.zero, deadline - loop.now))
    }

    private func fire() {
        state.value.armedFor = nil
        if let count = state.value.limit.due(at: loop.now) { emit(level, summaryLine(count)) }
        armTimer()
    }
}

/// Peer-triggered log lines of many kinds, each kind rate-limited by a `RateLimitedLog` of its
/// own: what a phone's bytes, a broker's messages, a control client or a desktop program can
/// make ancsd say. The kind of a line is its fixed part (`kind(of:)`), so "no answer to
/// notification 12" and "no answer to notification 13" are one kind.
///
/// At most `maximumKinds` kinds are kept (a peer could otherwise make one per message); past
/// that, new kinds share one limit. Belongs to one loop, as `RateLimitedLog` does.
public final class RateLimitedLogs: Sendable {
    /// Kinds kept apart at most; the rest share one.
    public static let maximumKinds = 64

    private let interval: Duration
    private let loop: EventLoop
    private let emit: @Sendable (LogLevel, String) -> Void
    private let isEnabled: @Sendable (LogLevel) -> Bool
    private let limits: LoopBound<[Key: RateLimitedLog]>

    /// A kind of line at one level.
    private struct Key: Hashable {
        var level: LogLevel
        var kind: String
    }

    /// Lines through `logger`, on `loop`; a line below the logger's threshold costs nothing.
    public convenience init(interval: Duration = .seconds(60), logger: Logger, loop: EventLoop) {
        self.init(interval: interval, loop: loop, isEnabled: { logger.isEnabled($0) }) { logger.log($0, $1) }
    }

    /// Lines handed to `emit` (tests), those of the levels `isEnabled` accepts (all unless told).
    public init(
        interval: Duration = .seconds(60), loop: EventLoop, isEnabled: @escaping @Sendable (LogLevel) -> Bool = { _ in true },
        emit: @escaping @Sendable (LogLevel, String) -> Void
    ) {
        self.interval = interval
        self.loop = loop
        self.emit = emit
        self.isEnabled = isEnabled
        limits = LoopBound([:], loop: loop)
    }

    /// `message` at `level`: said, or counted with the others of its kind (`kind`, or the
    /// message's own fixed part). Debug lines are never limited: they are asked for. Below the
    /// threshold nothing is built or counted (a line the log would drop needs no summary), so a
    /// line on the hot path is free unless it is written.
    public func log(_ level: LogLevel, _ message: @autoclosure () -> String, kind: @autoclosure () -> String? = nil) {
        guard isEnabled(level) else { return }
        guard level > .debug else { return emit(level, message()) }
        var key = Key(level: level, kind: kind() ?? Self.kind(of: message()))
        if let limit = limits.value[key] { return limit(message()) }
        if limits.value.count >= Self.maximumKinds { key.kind = "other lines" }
        let limit = limits.value[key] ?? RateLimitedLog(key.kind, level: level, interval: interval, loop: loop, emit: emit)
        limits.value[key] = limit
        limit(message())
    }

    /// The fixed part of a message: up to its first ": " (what follows is usually an error's
    /// or a value's text), with every run of digits as "#".
    public static func kind(of message: String) -> String {
        var kind = ""
        var inNumber = false
        var previous: Character?
        for character in message {
            if previous == ":", character == " " {
                kind.removeLast()
                break
            }
            previous = character
            if character.isASCII, character.isNumber {
                if !inNumber { kind.append("#") }
                inNumber = true
            } else {
                kind.append(character)
                inNumber = false
            }
        }
        return kind
    }
}
