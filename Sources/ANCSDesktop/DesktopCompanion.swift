#if canImport(Glibc)
import Glibc
#endif
import ANCSControl
public import ANCSRuntime
public import DBus
import Dispatch
import JSON

/// `ancsd desktop`: shows the phones' notifications as desktop notifications.
///
/// A client of the daemon's control socket (docs/control.md) and of the session bus's
/// `org.freedesktop.Notifications`. It `subscribe`s to the daemon's events and `list`s what the
/// phones have now; each notification becomes one desktop notification (`Notify`), replaced
/// in place when modified and closed when removed or when its phone disconnects. The action
/// buttons a user clicks (`ActionInvoked`) go back to the phone as `action` requests. When the
/// daemon goes away it reconnects, backing off from 0.5 s to 10 s, and reconciles what it
/// shows with the new `list`: nothing is shown twice, nothing stale is left.
///
/// Everything runs on the executor's one serial queue (the D-Bus connection's too); no task
/// runs on Swift's global executor.
public actor DesktopCompanion {
    public struct Options: Sendable {
        /// The daemon's control socket.
        public var controlPath: String
        /// Where the notification server is: the session bus by default.
        public var bus: BusAddress

        public init(controlPath: String = DesktopCompanion.defaultControlPath, bus: BusAddress = .session) {
            self.controlPath = controlPath
            self.bus = bus
        }
    }

    /// Where `ancsd run` listens under systemd.
    public static let defaultControlPath = ControlSocket.defaultPath
    /// The first and the longest wait before connecting to the daemon again.
    static let firstRetry: Duration = .milliseconds(500)
    static let longestRetry: Duration = .seconds(10)

    static let server: BusName = "org.freedesktop.Notifications"
    static let serverPath: ObjectPath = "/org/freedesktop/Notifications"
    static let serverInterface: InterfaceName = "org.freedesktop.Notifications"
    static let callTimeout: Duration = .seconds(10)

    private struct Key: Hashable {
        var device: String
        var uid: UInt32
    }

    /// A notification on the desktop: its server ID, what it shows, and whether it belongs to
    /// an earlier connection to the daemon and still has to be found in the new `list`.
    private struct Shown {
        var id: UInt32
        var content: DesktopNotification.Content
        var stale = false
    }

    private enum Request {
        case subscribe
        case list
        case action(Key, String)
    }

    private let options: Options
    private let logger: Logger
    private let executor: DaemonExecutor
    private var bus: DBusConnection?
    private var link: ControlLink?
    private var shown: [Key: Shown] = [:]
    private var keys: [UInt32: Key] = [:]
    private var pending: [Int: Request] = [:]
    private var nextRequest = 0
    /// Whether the server takes body markup (`GetCapabilities`), once known.
    private var markup: Bool?
    private var serverFailing = false

    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    public init(options: Options, logger: Logger, executor: DaemonExecutor) {
        self.options = options
        self.logger = logger
        self.executor = executor
    }

    /// Runs until cancelled (then closes the notifications it shows) or until the bus goes away.
    /// - Throws: when the bus cannot be reached or goes away.
    public func run() async throws {
        let bus = try await DBusConnection.connect(to: options.bus, queue: executor.queue)
        self.bus = bus
        let signals: AsyncStream<Signal>
        do {
            signals = try await bus.signals(
                matching: MatchRule(sender: Self.server, interface: Self.serverInterface, path: Self.serverPath))
        } catch {
            await bus.close()
            throw error
        }
        logger.info("showing notifications through \(Self.server) on the bus as \(bus.uniqueName)")
        var failure: (any Error)?
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await signal in signals { await self.handle(signal: signal) }
                    if !Task.isCancelled { throw DesktopError("the D-Bus bus went away") }
                }
                group.addTask { await self.controlLoop() }
                _ = try await group.next()
                group.cancelAll()
            }
        } catch {
            failure = error
        }
        // Cleaning up must not be cancelled with the caller: a task of its own.
        await Task(executorPreference: executor) { await self.closeEverything() }.value
        await bus.close()
        self.bus = nil
        if let failure { throw failure }
    }

    // MARK: The daemon's socket

    /// Connects to the daemon and follows it; when it goes, connects again with backoff.
    private func controlLoop() async {
        var delay = Self.firstRetry
        var failures = 0
        while !Task.isCancelled {
            switch ControlLink.connect(path: options.controlPath, queue: executor.queue) {
            case .failure(let error):
                failures += 1
                if failures == 1 {
                    let hint = error.description.contains("ermission") ? " (is this user in the socket's group?)" : ""
                    logger.warning("cannot connect to ancsd at \(options.controlPath): \(error)\(hint); retrying")
                } else {
                    logger.debug("cannot connect to ancsd at \(options.controlPath): \(error); retrying in \(delay)")
                }
            case .success(let link):
                logger.info("connected to ancsd at \(options.controlPath)")
                failures = 0
                let subscribed = await session(link)
                if Task.isCancelled { return }
                logger.warning("ancsd closed the control connection; reconnecting")
                if subscribed { delay = Self.firstRetry }
            }
            await pause(delay)
            delay = min(delay * 2, Self.longestRetry)
        }
    }

    /// One connection: subscribe, list, then every event and reply until it closes. True if
    /// the daemon confirmed the subscription.
    private func session(_ link: ControlLink) async -> Bool {
        self.link = link
        pending = [:]
        for key in Array(shown.keys) { shown[key]?.stale = true }
        send(.subscribe, ["cmd": "subscribe"])
        send(.list, ["cmd": "list"])
        var subscribed = false
        for await line in link.lines {
            guard let object = (try? JSONValue(parsing: line))?.objectValue else {
                logger.warning("ancsd sent a line that is not a JSON object; ignored")
                continue
            }
            if object["ok"] != nil {
                if await handle(reply: object) { subscribed = true }
            } else {
                await handle(event: object)
            }
        }
        link.close()
        self.link = nil
        pending = [:]
        return subscribed
    }

    /// Sends a request with a fresh `id`, remembering what it was for.
    private func send(_ request: Request, _ fields: JSONObject) {
        guard let link else { return }
        nextRequest += 1
        pending[nextRequest] = request
        var object: JSONObject = ["id": .int(nextRequest)]
        for (key, value) in fields { object.append(key, value) }
        if !link.send(object) { logger.warning("cannot write to ancsd's control socket") }
    }

    /// A reply; true if it confirms the subscription.
    private func handle(reply object: JSONObject) async -> Bool {
        guard let id = object["id"]?.intValue, let request = pending.removeValue(forKey: id) else { return false }
        let ok = object["ok"]?.boolValue == true
        let error = object["error"].map { "\($0["code"]?.stringValue ?? "?"): \($0["message"]?.stringValue ?? "")" } ?? "no reason given"
        switch request {
        case .subscribe:
            if ok { return true }
            logger.error("ancsd refused the subscription: \(error)")
        case .list:
            if ok {
                var count = 0
                for device in object["devices"]?.arrayValue ?? [] {
                    for entry in device["notifications"]?.arrayValue ?? [] {
                        guard let entry = entry.objectValue, let notification = DesktopNotification(entry) else { continue }
                        count += 1
                        await show(notification, why: "listed")
                    }
                }
                logger.info("ancsd has \(count) notification(s)")
            } else {
                logger.warning("ancsd refused to list the notifications: \(error)")
            }
            // What an earlier connection showed and the daemon no longer has goes away.
            for (key, entry) in shown where entry.stale { await close(key) }
        case .action(let key, let action):
            if ok {
                logger.info("\(action) action on \(key.device) #\(key.uid): \(object["result"]?.stringValue ?? "performed")")
            } else {
                logger.warning("\(action) action on \(key.device) #\(key.uid) failed: \(error)")
            }
        }
        return false
    }

    private func handle(event object: JSONObject) async {
        guard let type = object["type"]?.stringValue, let device = object["device"]?.stringValue else { return }
        switch type {
        case "added", "modified":
            guard let notification = DesktopNotification(object) else { return }
            await show(notification, why: type)
        case "removed":
            guard let uid = object["uid"]?.intValue.flatMap(UInt32.init(exactly:)) else { return }
            logger.debug("removed \(device) #\(uid)")
            await close(Key(device: device, uid: uid))
        case "connected":
            logger.info("\(device) connected")
        case "disconnected":
            let gone = shown.keys.filter { $0.device == device }
            logger.info("\(device) disconnected; closing its \(gone.count) notification(s)")
            for key in gone { await close(key) }
        default:
            break
        }
    }

    // MARK: The notification server

    /// Shows a notification, or replaces the one shown for its UID; shows nothing new for one
    /// already shown the same (under this UID, or under an earlier connection's).
    private func show(_ notification: DesktopNotification, why: String) async {
        let key = Key(device: notification.device, uid: notification.uid)
        let content = notification.content
        logger.debug("\(why) \(key.device) #\(key.uid): \(content.appName) · \(content.summary): \(content.body)")
        if let existing = shown[key] {
            shown[key]?.stale = false
            guard existing.content != content else { return }
            guard let id = await notify(notification, replacing: existing.id) else { return }
            record(key, id: id, content: content)
            return
        }
        if let (old, entry) = shown.first(where: { $0.value.stale && $0.key.device == key.device && $0.value.content == content }) {
            // The same notification under a new UID (the phone's new session): keep showing it.
            shown[old] = nil
            shown[key] = Shown(id: entry.id, content: content)
            keys[entry.id] = key
            return
        }
        guard !notification.seenBefore else {
            // Shown before (by this companion or while it was not running): no second pop-up.
            logger.debug("\(why) \(key.device) #\(key.uid): seen before, not shown again")
            return
        }
        guard let id = await notify(notification, replacing: 0) else { return }
        record(key, id: id, content: content)
    }

    private func record(_ key: Key, id: UInt32, content: DesktopNotification.Content) {
        if let old = shown[key]?.id, old != id, keys[old] == key { keys[old] = nil }
        shown[key] = Shown(id: id, content: content)
        keys[id] = key
    }

    /// `Notify`; the server's ID, or nil (logged) if it failed.
    private func notify(_ notification: DesktopNotification, replacing: UInt32) async -> UInt32? {
        guard let bus, !Task.isCancelled else { return nil }
        let markup = await serverTakesMarkup(bus)
        do {
            let reply = try await bus.call(
                destination: Self.server, path: Self.serverPath, interface: Self.serverInterface, member: "Notify",
                arguments: notification.notifyArguments(replacesID: replacing, markup: markup), expecting: "u",
                timeout: Self.callTimeout)
            if serverFailing {
                logger.info("the notification server answers again")
                serverFailing = false
            }
            return reply.first?.uint32Value
        } catch {
            if !serverFailing && !Task.isCancelled {
                logger.warning("cannot show a notification: \(error)")
                serverFailing = true
            }
            self.markup = nil  // the server may be another one next time
            return nil
        }
    }

    /// Whether the server renders body markup; escaping is the safe guess while unknown.
    private func serverTakesMarkup(_ bus: DBusConnection) async -> Bool {
        if let markup { return markup }
        do {
            let capabilities = try await bus.call(
                destination: Self.server, path: Self.serverPath, interface: Self.serverInterface,
                member: "GetCapabilities", expecting: "as", timeout: Self.callTimeout
            ).first?.stringArray ?? []
            let takesMarkup = capabilities.contains("body-markup")
            markup = takesMarkup
            logger.debug("notification server capabilities: \(capabilities.joined(separator: ", "))")
            return takesMarkup
        } catch {
            return true
        }
    }

    /// Closes the notification shown for `key`, if any.
    private func close(_ key: Key) async {
        guard let entry = shown.removeValue(forKey: key) else { return }
        if keys[entry.id] == key { keys[entry.id] = nil }
        guard let bus else { return }
        do {
            _ = try await bus.call(
                destination: Self.server, path: Self.serverPath, interface: Self.serverInterface,
                member: "CloseNotification", arguments: [.uint32(entry.id)], timeout: Self.callTimeout)
        } catch {
            logger.debug("CloseNotification(\(entry.id)): \(error)")
        }
    }

    /// On the way out: close what we show, whose buttons nobody would answer any more.
    private func closeEverything() async {
        guard let bus, await bus.isConnected else { return }
        let count = shown.count
        for key in Array(shown.keys) { await close(key) }
        if count > 0 { logger.info("closed \(count) notification(s)") }
    }

    private func handle(signal: Signal) async {
        switch signal.member.rawValue {
        case "ActionInvoked":
            guard let arguments = try? signal.arguments(matching: "us"), let id = arguments[0].uint32Value,
                  let action = arguments[1].stringValue, let key = keys[id]
            else { return }
            // "default" is a click on the notification itself: the phone has nothing for it.
            guard action == "positive" || action == "negative" else { return }
            guard link != nil, shown[key]?.stale == false else {
                // Stale: shown under an earlier connection and not yet found in the new list,
                // so its UID may name another notification now.
                logger.warning("not connected to ancsd: the \(action) action on \(key.device) #\(key.uid) is lost")
                return
            }
            logger.debug("\(action) action invoked on \(key.device) #\(key.uid)")
            send(.action(key, action), [
                "cmd": "action", "device": .string(key.device), "uid": .int(Int(key.uid)), "action": .string(action),
            ])
        case "NotificationClosed":
            guard let arguments = try? signal.arguments(matching: "uu"), let id = arguments[0].uint32Value,
                  let key = keys.removeValue(forKey: id)
            else { return }
            if shown[key]?.id == id { shown[key] = nil }
        default:
            break
        }
    }

    // MARK: Waiting

    /// Waits `duration` (less if the task is cancelled), with a timer on the executor's queue.
    private func pause(_ duration: Duration) async {
        let state = PauseState()
        let queue = executor.queue
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                queue.async { state.arm(continuation, after: duration, queue: queue) }
            }
        } onCancel: {
            queue.async { state.fire() }
        }
    }
}

/// A pause's timer and continuation; touched only on the executor's queue.
private final class PauseState: @unchecked Sendable {
    private var continuation: CheckedContinuation<Void, Never>?
    private var timer: (any DispatchSourceTimer)?
    private var fired = false

    func arm(_ continuation: CheckedContinuation<Void, Never>, after duration: Duration, queue: DispatchQueue) {
        guard !fired else { return continuation.resume() }
        self.continuation = continuation
        let (seconds, attoseconds) = duration.components
        let nanoseconds = Int(clamping: seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.setEventHandler { [self] in fire() }
        timer.schedule(deadline: .now() + .nanoseconds(nanoseconds), leeway: .milliseconds(50))
        timer.resume()
        self.timer = timer
    }

    func fire() {
        fired = true
        timer?.cancel()
        timer = nil
        continuation?.resume()
        continuation = nil
    }
}

/// A failure of `ancsd desktop`, as text.
public struct DesktopError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
