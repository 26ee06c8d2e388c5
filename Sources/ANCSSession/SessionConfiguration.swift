public import ANCS

/// How a session asks for attributes and how long it waits; every queue and cache is bounded.
public struct SessionConfiguration: Hashable, Sendable {
    /// The max length asked for the Title.
    public var titleMaxLength: UInt16 = 128
    /// The max length asked for the Subtitle.
    public var subtitleMaxLength: UInt16 = 128
    /// The max length asked for the Message.
    public var messageMaxLength: UInt16 = 2048
    /// How long a Control Point request may go unanswered (no write result, or no data at all).
    public var requestTimeout: Duration = .seconds(5)
    /// After some of a response arrived, how long a silence ends it early: the phone may have
    /// omitted a requested tuple (seen in real captures) and would otherwise stall the session.
    public var quietPeriod: Duration = .milliseconds(400)
    /// The most notifications waiting for their attributes; past it the oldest backlog is
    /// emitted with what the Notification Source told.
    public var maxQueuedFetches = 4096
    /// The most notifications remembered (to report modifications and removals); past it the
    /// oldest is forgotten (shown first, with what is known, if it was not shown yet).
    public var maxKnownNotifications = 8192
    /// The most app display names remembered.
    public var maxCachedApps = 512
    /// The limits of the Data Source reassembler.
    public var dataSourceLimits = DataSourceLimits()
    /// Which notifications are kept; the session's `updateFilter` changes it later.
    public var filter = NotificationFilter()

    public init() {}
}
