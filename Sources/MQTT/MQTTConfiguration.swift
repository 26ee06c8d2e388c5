/// How an `MQTTClient` connects.
public struct MQTTConfiguration: Sendable {
    public var endpoint: MQTTEndpoint
    /// The password for `endpoint.username`, read from a file by the caller.
    public var password: String?
    /// The CA certificate file that signs the broker's certificate (`mqtts://`); nil for the
    /// system's trusted CAs.
    public var caFile: String?
    public var clientID: String
    /// Seconds between keep-alives when nothing else is sent; also how long a connection
    /// attempt or an unanswered ping may take.
    public var keepAlive: Int32 = 60
    /// Published by the broker when the connection ends without a clean disconnect.
    public var will: MQTTMessage?
    /// Published (and flushed) by `finish` before the clean disconnect, e.g. the `offline`
    /// status that the will would have said.
    public var farewell: MQTTMessage?
    /// At most this many messages wait for the broker; past it the oldest not-retained message
    /// is dropped and counted.
    public var queueLimit = 1000
    /// Of those, at most this many are answers to commands (`MQTTMessage.isAnswer`); past it
    /// the oldest waiting answer is dropped, and a full queue drops answers before events:
    /// answers are what a command's sender caused, events what the phone did.
    public var answerLimit: Int { max(1, queueLimit / 10) }
    /// Reconnect delays: doubled from `minimumRetry` after each failed attempt up to `maximumRetry`.
    public var minimumRetry: Duration = .milliseconds(500)
    public var maximumRetry: Duration = .seconds(60)

    public init(endpoint: MQTTEndpoint, clientID: String) {
        self.endpoint = endpoint
        self.clientID = clientID
    }
}
