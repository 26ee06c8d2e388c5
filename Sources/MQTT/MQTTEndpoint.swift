/// One MQTT message to publish.
public struct MQTTMessage: Sendable, Hashable {
    public var topic: String
    public var payload: [UInt8]
    /// 0 or 1 (2 works too, but ancsd never asks for it).
    public var qos: Int32
    /// Kept by the broker as the topic's last value for later subscribers.
    public var retain: Bool
    /// The answer to a command someone sent: it waits within `MQTTConfiguration.answerLimit`,
    /// so a flood of commands never evicts an event.
    public var isAnswer: Bool

    public init(topic: String, payload: [UInt8], qos: Int32 = 1, retain: Bool = false, isAnswer: Bool = false) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.isAnswer = isAnswer
    }

    public init(topic: String, text: String, qos: Int32 = 1, retain: Bool = false, isAnswer: Bool = false) {
        self.init(topic: topic, payload: Array(text.utf8), qos: qos, retain: retain, isAnswer: isAnswer)
    }
}

/// Where the broker is: `mqtt://[user@]host[:port]` or `mqtts://…` (TLS).
public struct MQTTEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int32
    public var tls: Bool
    public var username: String?

    public init(host: String, port: Int32, tls: Bool, username: String? = nil) {
        self.host = host
        self.port = port
        self.tls = tls
        self.username = username
    }

    /// Parses a broker URL. A password in the URL is refused: it would show in `ps` and in the
    /// configuration; it belongs in a password file.
    public init(url: String) throws(MQTTURLError) {
        let tls: Bool
        var rest: Substring
        if url.hasPrefix("mqtt://") {
            tls = false
            rest = url.dropFirst(7)
        } else if url.hasPrefix("mqtts://") {
            tls = true
            rest = url.dropFirst(8)
        } else {
            throw MQTTURLError("the broker URL must start with mqtt:// or mqtts://, not '\(url)'")
        }
        if rest.last == "/" { rest = rest.dropLast() }
        guard !rest.contains("/"), !rest.contains("?"), !rest.contains("#") else {
            throw MQTTURLError("the broker URL takes no path or query: '\(url)'")
        }
        var username: String?
        if let at = rest.lastIndex(of: "@") {
            let user = rest[..<at]
            guard !user.contains(":") else {
                throw MQTTURLError("put the password in a file (--mqtt-password-file), not in the URL")
            }
            guard !user.isEmpty else { throw MQTTURLError("empty user name in '\(url)'") }
            username = String(user)
            rest = rest[rest.index(after: at)...]
        }
        var host: Substring
        var portText: Substring?
        if rest.first == "[" {
            guard let close = rest.firstIndex(of: "]") else { throw MQTTURLError("unclosed '[' in '\(url)'") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.first == ":" else { throw MQTTURLError("unexpected text after ']' in '\(url)'") }
                portText = after.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { throw MQTTURLError("the broker URL names no host: '\(url)'") }
        guard host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-._:".contains($0)) }) else {
            throw MQTTURLError("'\(host)' is not a host name or address")
        }
        var port: Int32 = tls ? 8883 : 1883
        if let portText {
            guard let number = Int32(portText), (1...65535).contains(number) else {
                throw MQTTURLError("the port must be a number from 1 to 65535, not '\(portText)'")
            }
            port = number
        }
        self.init(host: String(host), port: port, tls: tls, username: username)
    }

    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return (tls ? "mqtts://" : "mqtt://") + (username.map { "\($0)@" } ?? "") + "\(shownHost):\(port)"
    }
}

/// A broker URL that cannot be used, with the reason.
public struct MQTTURLError: Error, CustomStringConvertible, Equatable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
