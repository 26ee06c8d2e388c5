import ANCS
public import ANCSRuntime
import ControlProtocol
public import JSON
public import EventLoop
public import MQTT

/// What `--mqtt` and its companions ask for (docs/mqtt.md).
public struct MQTTSettings: Sendable, Equatable {
    public var endpoint: MQTTEndpoint
    /// `--mqtt-password-file`: read when the output starts; never on the command line.
    public var passwordFile: String?
    /// `--mqtt-ca`: the CA certificate file for `mqtts://`.
    public var caFile: String?
    public var prefix = "ancsd"
    /// nil: no Home Assistant discovery (`--mqtt-discovery-prefix none`).
    public var discoveryPrefix: String? = "homeassistant"
    /// `--mqtt-actions`: take actions on `PREFIX/DEVICE/action` and media commands on
    /// `PREFIX/DEVICE/media/command`, and announce the player's buttons to Home Assistant.
    public var actions = false
    /// Messages that wait for the broker at most (the oldest events go first past it).
    public var queueLimit = 1000
    public var keepAlive: Int32 = 60

    public init(endpoint: MQTTEndpoint) {
        self.endpoint = endpoint
    }
}

/// The phones' notification counts, for the MQTT count sensor (the Daemon conforms): replays
/// that `--replays` holds back never reach an output, but the phone holds them all the same.
public protocol NotificationCounts: Sendable {
    /// How many notifications phone `device` (`AA:BB:…`) holds now; nil if it is not connected.
    func notificationCount(device: String) async -> Int?
}

/// The MQTT output (docs/mqtt.md): every event on `PREFIX/DEVICE/event` (QoS 1), each phone's
/// state, notification count and latest notification as retained topics, the retained states
/// of its other services (`PREFIX/DEVICE/media`), `PREFIX/status` online with `offline` as the
/// last will, Home Assistant discovery (the services' entities as their `ServiceOutput` lists
/// them), and with `--mqtt-actions` actions taken from `PREFIX/DEVICE/action` and media
/// commands from `PREFIX/DEVICE/media/command`.
///
/// Queue and policy: `send` only formats and hands the messages to the `MQTTClient`, whose
/// queue holds at most `queueLimit` messages (default 1000) waiting for the broker, in order,
/// through a broker that is down at the start or restarts; past the bound the oldest events are
/// dropped (counted and logged), while retained state replaces its own older value. The client
/// runs on the daemon's event loop (no thread of its own: a watch of its socket, writable only
/// while there is something to write, and one keep-alive timer); nothing on the loop waits
/// for the broker, so no other output ever waits for MQTT. The sink's own state is the loop's
/// too: the client's events come there, and calls from other threads go there
/// (`EventLoop.perform`).
public final class MQTTSink: OutputSink {
    public let name: String
    public let settings: MQTTSettings
    /// The loop the client and the sink's state live on (the daemon's).
    private let loop: EventLoop
    private let topics: MQTTTopics
    private let discovery: HomeAssistantDiscovery?
    private let client: MQTTClient
    private let logger: Logger

    private struct Phone {
        var name: String?
        var announced = false
        /// What the retained `sharing` topic says, nil before anything was published there.
        var sharing: Bool?
        /// The Home Assistant entities of its other services, by service type, as last sent.
        var services: [String: [ServiceOutput.Entity]] = [:]
        /// What was last published on each of their config topics ("" for an entity removed).
        var serviceConfigs: [String: String] = [:]
    }
    /// A class: reading a phone's entry takes one reference, not a copy of the whole.
    private final class State {
        var context: OutputContext?
        var phones: [String: Phone] = [:]
        var stopped = false
        /// The commands and counts being asked of the daemon: cancelled by `stop`.
        var tasks = OwnedTasks()
    }
    private let state: LoopBound<State>
    /// What a broker's messages make the sink say (retained commands, malformed topics): each
    /// kind said once, then counted per minute.
    private let brokerLog: RateLimitedLogs

    /// `password`: the content of the password file, read by the caller; `executor`: the loop
    /// the client runs on.
    /// Throws when libmosquitto cannot be loaded.
    public init(
        settings: MQTTSettings, password: String?, version: String, logger: Logger, clientID: String, executor: DaemonExecutor
    ) throws(MQTTLibraryError) {
        self.settings = settings
        self.logger = logger
        loop = executor
        state = LoopBound(State(), loop: executor)
        name = "MQTT \(settings.endpoint)"
        topics = MQTTTopics(prefix: settings.prefix)
        discovery = settings.discoveryPrefix.map { HomeAssistantDiscovery(topics: MQTTTopics(prefix: settings.prefix), discoveryPrefix: $0, version: version) }
        var configuration = MQTTConfiguration(endpoint: settings.endpoint, clientID: clientID)
        configuration.password = password
        configuration.caFile = settings.caFile
        configuration.keepAlive = settings.keepAlive
        configuration.queueLimit = settings.queueLimit
        configuration.will = MQTTMessage(topic: topics.status, text: "offline", retain: true)
        configuration.farewell = MQTTMessage(topic: topics.status, text: "offline", retain: true)
        brokerLog = RateLimitedLogs(logger: logger, loop: executor)
        // The client's handler, on the loop, reaches the sink once it exists (set before the
        // client can have an event: `start` connects it, later on the loop).
        let relay = LoopBound(EventRelay(), loop: executor)
        client = try MQTTClient(configuration: configuration, loop: executor) { relay.value.sink?.clientEvent($0) }
        relay.withValue { $0.sink = self }
    }

    /// Breaks the init-time cycle: the client's handler reaches the sink through it.
    private final class EventRelay {
        weak var sink: MQTTSink?
    }

    public func start(_ context: OutputContext) {
        loop.perform { self.startOnLoop(context) }
    }

    private func startOnLoop(_ context: OutputContext) {
        // A reload that keeps the MQTT settings hands this sink to the new router, which starts
        // it again: the connection (and the retained `online`) stays.
        let first = state.value.context == nil
        state.value.context = context
        guard first else { return }
        client.publish(MQTTMessage(topic: topics.status, text: "online", retain: true))
        if let discovery { client.subscribe(discovery.birthTopic) }
        if settings.actions {
            client.subscribe(topics.actionFilter)
            client.subscribe(topics.mediaCommandFilter)
        }
        logger.info("MQTT: publishing to \(settings.endpoint) under \(settings.prefix)/"
            + (settings.discoveryPrefix.map { ", Home Assistant discovery under \($0)/" } ?? "")
            + (settings.actions ? ", actions taken from \(topics.actionFilter) and \(topics.mediaCommandFilter)" : ""))
        client.start()
    }

    /// Publishes the retained `sharing` state when it differs from what was published last.
    private func publishSharing(_ allowed: Bool, device: String) {
        guard state.value.phones[device, default: Phone()].sharing != allowed else { return }
        state.value.phones[device, default: Phone()].sharing = allowed
        client.publish(MQTTMessage(topic: topics.sharing(device), text: allowed ? "on" : "off", retain: true))
    }

    /// Publishes the event: on the loop at once when called there (the daemon's events are),
    /// else holding it (`EventLoop.perform`).
    public func send(_ record: OutputRecord) {
        if loop.isCurrent {
            publish(record)
        } else {
            loop.perform { self.publish(record) }
        }
    }

    private func publish(_ record: OutputRecord) {
        let device = MQTTTopics.device(record.device)
        switch record.event {
        case .connected(let address, let name):
            announce(address: address, name: name, force: false)
            client.publish(MQTTMessage(topic: topics.state(device), text: "connected", retain: true))
            client.publish(MQTTMessage(topic: topics.event(device), payload: Array(record.jsonLineBytes.dropLast())))
            refreshCount(address: address, device: device, after: [.seconds(3), .seconds(15)])
        case .disconnected(let address, _):
            announce(address: address, name: nil, force: false)
            client.publish(MQTTMessage(topic: topics.state(device), text: "disconnected", retain: true))
            client.publish(MQTTMessage(topic: topics.event(device), payload: Array(record.jsonLineBytes.dropLast())))
        case .sharing(let address, let allowed):
            announce(address: address, name: nil, force: false)
            publishSharing(allowed, device: device)
            client.publish(MQTTMessage(topic: topics.event(device), payload: Array(record.jsonLineBytes.dropLast())))
        case .notification(let event, let address, _):
            announce(address: address, name: nil, force: false)
            // A notification whose attributes all came proves the phone shares: the retained
            // `sharing` topic (Home Assistant's sensor) says so before any episode of it off.
            if event.notification.attributesComplete { publishSharing(true, device: device) }
            client.publish(MQTTMessage(topic: topics.event(device), payload: Array(record.jsonLineBytes.dropLast())))
            if event.kind == .added {
                let json = record.json
                client.publish(MQTTMessage(topic: topics.latest(device), text: HomeAssistantDiscovery.latestState(json), retain: true))
                client.publish(MQTTMessage(topic: topics.latestAttributes(device), payload: Array(record.jsonLineBytes.dropLast()), retain: true))
                if discovery != nil {
                    client.publish(MQTTMessage(topic: topics.notification(device), text: HomeAssistantDiscovery.eventPayload(json).serialized))
                }
            }
            refreshCount(address: address, device: device, after: [])
        case .service(let output):
            announce(address: output.device, name: nil, force: false)
            announceEntities(of: output)
            for state in output.retained {
                client.publish(MQTTMessage(topic: "\(settings.prefix)/\(device)/\(state.topic)", text: state.payload, retain: true))
            }
            client.publish(MQTTMessage(topic: topics.event(device), text: record.jsonLine))
        }
    }

    public func flush(timeout: Duration) async -> Bool {
        let all = await withCheckedContinuation { continuation in
            client.finish(timeout: timeout) { continuation.resume(returning: $0) }
        }
        if !all { logger.warning("MQTT: some events were not delivered before stopping (the broker is unreachable)") }
        return all
    }

    public func report() async -> JSONObject {
        let counters = client.snapshot
        return [
            "connected": .bool(counters.connected), "connections": .int(counters.connections), "delivered": .int(counters.delivered),
            "queued": .int(counters.queued), "dropped": .int(counters.dropped), "dropped_answers": .int(counters.droppedAnswers),
        ]
    }

    /// Disconnects, publishing `offline`. The router calls it only when no router feeds the sink
    /// any more: a reload that keeps the MQTT settings keeps the sink and does not stop it.
    public func stop() {
        loop.perform { [self] in
            let first = !state.value.stopped && state.value.context != nil
            state.value.stopped = true
            state.value.tasks.cancelAll()
            if first { client.finish(timeout: .seconds(2)) { _ in } }
        }
    }

    /// Runs `work` in a task on the daemon's executor that the sink owns: `stop` cancels it if
    /// it still runs.
    private func spawn(on executor: DaemonExecutor, _ work: @escaping @Sendable () async -> Void) {
        state.value.tasks.add { id in
            Task(executorPreference: executor) { [self] in
                await work()
                loop.perform { self.state.value.tasks.finished(id) }
            }
        }
    }

    // MARK: Helpers

    /// Publishes the phone's discovery configs once (again when its name becomes known, or
    /// when `force`: Home Assistant restarted).
    private func announce(address: String, name: String?, force: Bool) {
        guard let discovery else { return }
        let device = MQTTTopics.device(address)
        var phone = state.value.phones[device] ?? Phone()
        let renamed = name != nil && name != phone.name
        if let name { phone.name = name }
        let shouldAnnounce = force || !phone.announced || renamed
        phone.announced = true
        state.value.phones[device] = phone
        guard shouldAnnounce else { return }
        for (topic, payload) in discovery.configs(address: address, name: phone.name) {
            client.publish(MQTTMessage(topic: topic, text: payload.serialized, retain: true))
        }
        publishServiceConfigs(address: address, force: force)
    }

    /// Keeps a service's Home Assistant entities and publishes what changed of their configs.
    private func announceEntities(of output: ServiceOutput) {
        guard discovery != nil else { return }
        let device = MQTTTopics.device(output.device)
        guard state.value.phones[device, default: Phone()].services[output.type] != output.entities else { return }
        state.value.phones[device, default: Phone()].services[output.type] = output.entities
        publishServiceConfigs(address: output.device, force: false)
    }

    /// Publishes the configs of the phone's service entities that differ from what was published
    /// last (all of them when `force`: Home Assistant restarted): an entity the service has now
    /// (a button only with `--mqtt-actions`) is announced, any other removed with an empty
    /// retained config, once per run even if nothing was announced (an earlier run may have).
    private func publishServiceConfigs(address: String, force: Bool) {
        guard let discovery else { return }
        let device = MQTTTopics.device(address)
        guard var phone = state.value.phones[device] else { return }
        var messages: [MQTTMessage] = []
        for (type, entities) in phone.services.sorted(by: { $0.key < $1.key }) {
            for entity in entities {
                let topic: String, payload: String
                if entity.present && (settings.actions || !entity.takesCommands) {
                    let config = discovery.serviceConfig(address: address, name: phone.name, type: type, entity: entity)
                    (topic, payload) = (config.topic, config.payload.serialized)
                } else {
                    (topic, payload) = (discovery.configTopic(address: address, type: type, entity: entity), "")
                }
                let last = phone.serviceConfigs[topic]
                guard last != payload || (force && !payload.isEmpty) else { continue }
                phone.serviceConfigs[topic] = payload
                messages.append(MQTTMessage(topic: topic, text: payload, retain: true))
            }
        }
        state.value.phones[device] = phone
        for message in messages { client.publish(message) }
    }

    /// Publishes the phone's notification count now and after each of `delays` (the replays a
    /// phone sends on connecting may be held back by `--replays` and reach no output).
    private func refreshCount(address: String, device: String, after delays: [Duration]) {
        guard let context = state.value.context, let counts = context.actions as? any NotificationCounts else { return }
        let client = self.client, topic = topics.count(device)
        let publish: @Sendable () -> Void = { [self] in
            spawn(on: context.executor) {
                guard let count = await counts.notificationCount(device: address) else { return }
                client.publish(MQTTMessage(topic: topic, text: String(count), retain: true))
            }
        }
        publish()
        for delay in delays { context.executor.after(delay, publish) }
    }

    private func clientEvent(_ event: MQTTClientEvent) {
        switch event {
        case .connected:
            logger.info("MQTT: connected to \(settings.endpoint)")
        case .disconnected(let reason, let retry):
            logger.warning("MQTT: \(settings.endpoint): \(reason); retrying in \(retry)")
        case .dropped(let count):
            logger.warning("MQTT: dropped the \(count) oldest events: \(settings.queueLimit) messages were waiting for the broker (unreachable, or slower than the events came)")
        case .answersDropped(let count):
            logger.warning("MQTT: dropped the \(count) oldest answers to commands: commands on \(settings.prefix)/+/media/command and "
                + "\(settings.prefix)/+/action came faster than the broker took their answers (no event was dropped for them)")
        case .message(let topic, let payload, let retained):
            if let discovery, topic == discovery.birthTopic {
                guard String(decoding: payload, as: UTF8.self) == "online" else { return }
                for address in state.value.phones.keys.compactMap(MQTTTopics.address) { announce(address: address, name: nil, force: true) }
            } else if settings.actions {
                guard !retained else {
                    brokerLog.log(.warning, "MQTT: ignored a retained message on \(topic): an action is taken only when it is sent",
                                  kind: "MQTT: ignored a retained message on a command topic")
                    return
                }
                let prefixLevels = settings.prefix.split(separator: "/", omittingEmptySubsequences: false).count
                let levels = topic.split(separator: "/", omittingEmptySubsequences: false)
                guard levels.count > prefixLevels else { return }
                let device = String(levels[prefixLevels])
                switch levels.dropFirst(prefixLevels + 1).joined(separator: "/") {
                case "action": action(device: device, payload: payload)
                case MQTTTopics.mediaCommand: mediaCommand(device: device, payload: payload)
                default: break
                }
            }
        }
    }

    /// Takes `{"uid": N, "action": "positive"|"negative"}` from `PREFIX/DEVICE/action`, and
    /// publishes the phone's answer on `PREFIX/DEVICE/action/result`.
    private func action(device: String, payload: [UInt8]) {
        let resultTopic = topics.actionResult(device)
        guard let address = MQTTTopics.address(device) else {
            return answer(resultTopic, Self.failure("bad_request", "\(device) is not a phone's address in lower case without colons"))
        }
        let request: JSONValue
        do {
            request = try JSONValue(parsing: payload)
        } catch {
            return answer(resultTopic, Self.failure("bad_request", "the action is not JSON: \(error)"))
        }
        let uidValue = request["uid"] ?? .null, actionValue = request["action"] ?? .null
        guard let uid = uidValue.intValue.flatMap(UInt32.init(exactly:)) else {
            return answer(resultTopic, Self.failure("bad_request", "\"uid\" must be a notification's uid"), uid: uidValue, action: actionValue)
        }
        guard let name = actionValue.stringValue, let actionID = ActionID.named(name) else {
            return answer(resultTopic, Self.failure("bad_request", "\"action\" must be \"positive\" or \"negative\""), uid: uidValue, action: actionValue)
        }
        guard let context = state.value.context else { return }
        // At debug: whoever may publish on the broker could otherwise flood the log.
        logger.debug("MQTT: \(name) action on \(address) notification \(uid)")
        spawn(on: context.executor) { [self] in
            let reply = await context.actions.performAction(actionID, uid: uid, device: address)
            self.answer(resultTopic, reply, uid: uidValue, action: actionValue)
        }
    }

    /// Takes a media command from `PREFIX/DEVICE/media/command`: its name (`play`, `toggle`, …) or
    /// `{"command": "play"}`, and publishes the phone's answer on `PREFIX/DEVICE/media/command/result`.
    private func mediaCommand(device: String, payload: [UInt8]) {
        let resultTopic = topics.mediaCommandResult(device)
        let name: String?
        switch try? JSONValue(parsing: payload) {
        case .object(let object)?: name = object["command"]?.stringValue
        case .string(let text)?: name = text
        case nil: name = Self.trimmed(String(decoding: payload, as: UTF8.self))
        default: name = nil
        }
        // The request's command in the answer; not a long text someone sent instead.
        let requested: JSONValue = name.map { $0.unicodeScalars.count <= 64 ? .string($0) : .null } ?? .null
        guard let address = MQTTTopics.address(device) else {
            return answerMedia(resultTopic, Self.failure("bad_request", "\(device) is not a phone's address in lower case without colons"), command: requested)
        }
        guard let name, let command = ControlMediaCommand(rawValue: name.lowercased()) else {
            let names = ControlMediaCommand.allCases.map(\.rawValue).joined(separator: ", ")
            return answerMedia(
                resultTopic, Self.failure("bad_request", "a media command is one of \(names), alone or as {\"command\": NAME}"), command: requested)
        }
        guard let context = state.value.context else { return }
        logger.debug("MQTT: \(command.rawValue) media command for \(address)")
        spawn(on: context.executor) { [self] in
            let reply = await context.actions.performMediaCommand(command, device: address)
            self.answerMedia(resultTopic, reply, command: .string(command.rawValue))
        }
    }

    /// Publishes a media command's answer: the command, then the control socket's reply.
    private func answerMedia(_ topic: String, _ reply: JSONObject, command: JSONValue) {
        var object: JSONObject = ["command": command]
        for (key, value) in reply { object.append(key, value) }
        client.publish(MQTTMessage(topic: topic, text: JSONValue.object(object).serialized, isAnswer: true))
    }

    /// `text` without white space at either end.
    private static func trimmed(_ text: String) -> String {
        String(text.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
    }

    /// Publishes an action's answer: the request's uid and action, then the control socket's reply.
    private func answer(_ topic: String, _ reply: JSONObject, uid: JSONValue = .null, action: JSONValue = .null) {
        var object: JSONObject = ["uid": uid, "action": action]
        for (key, value) in reply { object.append(key, value) }
        client.publish(MQTTMessage(topic: topic, text: JSONValue.object(object).serialized, isAnswer: true))
    }

    private static func failure(_ code: String, _ message: String) -> JSONObject {
        ["ok": false, "error": ["code": .string(code), "message": .string(message)]]
    }
}

extension Daemon: NotificationCounts {
    public func notificationCount(device: String) -> Int? {
        links.values.first { $0.device.address == device && $0.state == .running }?.session.notificationCount
    }
}
