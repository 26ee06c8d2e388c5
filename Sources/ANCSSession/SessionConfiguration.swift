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
    /// How often a subscribed session checks that the phone still answers (`--alive-check`): a
    /// GetNotificationAttributes for UID 0xFFFFFFFF, which no notification has, sent behind every
    /// other request and answered ATT 0xA2 by a live phone. No answer within `requestTimeout`:
    /// the session asks its owner to subscribe again (`.resubscribe`). Nil: no check.
    public var aliveCheckInterval: Duration? = .seconds(900)
    /// While the phone refuses Control Point writes (notification sharing off), the check runs
    /// at least this often, so that sharing turned back on is noticed soon.
    public var sharingOffCheckInterval: Duration = .seconds(60)
    /// After this long without any Notification Source value, the session asks its owner to
    /// subscribe again whatever the alive check says (`--resubscribe-after`); again after each
    /// such period. Nil: never.
    public var resubscribeAfter: Duration? = .seconds(21600)
    /// Which notifications are kept; the session's `updateFilter` changes it later.
    public var filter = NotificationFilter()

    public init() {}
}
