/// A received signal.
public struct Signal: Sendable {
    /// The sender's unique name (`org.freedesktop.DBus` for the bus itself).
    public let sender: String?
    /// The emitting object.
    public let path: ObjectPath
    /// The signal's interface.
    public let interface: InterfaceName
    /// The signal's name.
    public let member: MemberName
    /// The destination, for unicast signals.
    public let destination: String?
    /// The body's signature.
    public let signature: Signature
    /// The body.
    public let arguments: [DBusValue]

    init?(_ m: Message) {
        guard m.kind == .signal, let path = m.path, let interface = m.interface, let member = m.member else { return nil }
        sender = m.sender
        self.path = path
        self.interface = interface
        self.member = member
        destination = m.destination
        signature = m.signature
        arguments = m.arguments
    }

    /// The arguments, after checking the body has exactly the signature `expected`.
    /// - Throws: `DBusError.unexpectedSignature` otherwise.
    public func arguments(matching expected: Signature) throws(DBusError) -> [DBusValue] {
        guard signature == expected else {
            throw .unexpectedSignature(expected: expected.rawValue, actual: signature.rawValue)
        }
        return arguments
    }
}

/// Signal subscriptions: which subscriber gets which signal (the rules' own matching is
/// `MatchRule`'s), and the owners of the well-known names they name as sender.
extension ConnectionCore {
    enum SignalSink {
        case stream(AsyncStream<Signal>.Continuation)
        case callback(@Sendable (Signal) -> Void)
    }

    struct Subscription {
        let rule: MatchRule
        let sink: SignalSink
    }


    /// Ends every signal stream and drops every subscription (at shutdown).
    func endSubscriptions() {
        let subs = subscriptions
        subscriptions = [:]
        for (_, sub) in subs {
            if case .stream(let continuation) = sub.sink { continuation.finish() }
        }
    }

    func addSubscription(_ id: UInt64, _ subscription: Subscription) {
        subscriptions[id] = subscription
    }

    func removeSubscription(_ id: UInt64) -> Subscription? {
        subscriptions.removeValue(forKey: id)
    }

    /// Starts tracking a well-known name's owner; true when this is the first user.
    func retainOwnerTracking(_ name: String) -> Bool {
        if var entry = owners[name] {
            entry.count += 1
            owners[name] = entry
            return false
        }
        owners[name] = (1, nil)
        return true
    }

    /// Stops tracking; true when this was the last user.
    func releaseOwnerTracking(_ name: String) -> Bool {
        guard var entry = owners[name] else { return false }
        entry.count -= 1
        if entry.count <= 0 {
            owners[name] = nil
            return true
        }
        owners[name] = entry
        return false
    }

    func setOwner(_ name: String, _ owner: String?) {
        guard var entry = owners[name] else { return }
        entry.owner = owner
        owners[name] = entry
    }

    func deliverSignal(_ message: Message) {
        if message.sender == BusName.bus.rawValue, message.member?.rawValue == "NameOwnerChanged",
            message.signature.rawValue == "sss", let name = message.arguments[0].stringValue, owners[name] != nil
        {
            let newOwner = message.arguments[2].stringValue ?? ""
            setOwner(name, newOwner.isEmpty ? nil : newOwner)
        }
        guard !subscriptions.isEmpty, let signal = Signal(message) else { return }
        for id in subscriptions.keys.sorted() {
            guard let sub = subscriptions[id] else { continue }
            let resolved = sub.rule.sender.flatMap { owners[$0.rawValue]?.owner }
            guard sub.rule.matches(message, resolvedSender: resolved) else { continue }
            switch sub.sink {
            case .stream(let continuation): continuation.yield(signal)
            case .callback(let callback): callback(signal)
            }
        }
    }

}
