#if canImport(Glibc)
import Glibc
#endif
import ANCSControl
import ANCSRuntime
import DBus

/// The desktop's notification server (`org.freedesktop.Notifications`): the popups shown,
/// updated and closed for the phones' notifications, and the server's signals.
extension DesktopCompanion {
    /// Shows a notification, or updates the popup shown for it. Shows nothing new for one
    /// shown before under an earlier connection (found again by its content), one the daemon
    /// marks `seen_before`, or a listed or replayed one this companion popped up before.
    func show(_ notification: DesktopNotification, why: String) async {
        let key = Key(device: notification.device, uid: notification.uid)
        let content = notification.content
        logger.debug("\(why) \(key.device) #\(key.uid): \(content.appName) · \(content.summary): \(content.body)")
        if let id = popupOf[key], let popup = popups[id] {
            guard popup.content != content else { return }
            // Modified: news, whatever was shown before.
            if popup.members == [key], popup.stale.isEmpty, self.popup(showing: content) == nil {
                guard let newID = await notify(notification, replacing: id) else { return }
                move(id, to: newID, content: content)
                remember(notification)
                return
            }
            await detach(key)
            await present(notification)
            return
        }
        let candidates = popups.filter { $0.value.content == content && $0.value.stale.contains { $0.device == key.device } }
        if let (id, popup) = candidates.first(where: { $0.value.stale.contains(key) }) ?? candidates.first,
           let old = popup.stale.first(where: { $0 == key }) ?? popup.stale.first(where: { $0.device == key.device }) {
            // The same notification after the phone or the daemon came back (maybe under a new
            // UID): the popup stays as it is.
            logger.debug("\(why) \(key.device) #\(key.uid): found again (#\(old.uid) before), still shown")
            popups[id]?.stale.removeAll { $0 == old }
            popups[id]?.members.append(key)
            popupOf[key] = id
            return
        }
        guard !notification.seenBefore else {
            // Shown before (by this companion or while it was not running): no second pop-up.
            logger.debug("\(why) \(key.device) #\(key.uid): seen before, not shown again")
            return
        }
        if why == "listed" || notification.preExisting, record.contains(Fingerprint(notification).stableHash) {
            // This companion showed it already; the user saw it, or dismissed it.
            logger.debug("\(why) \(key.device) #\(key.uid): shown before by this companion, not shown again")
            return
        }
        await present(notification)
    }

    /// A new popup for a notification, or, when one shows the same, that popup for both.
    private func present(_ notification: DesktopNotification) async {
        let key = Key(device: notification.device, uid: notification.uid)
        if let id = popup(showing: notification.content) {
            popups[id]?.members.append(key)
            popupOf[key] = id
            remember(notification)
            // Shown again (with its sound, unless quiet): the same message came again.
            if !notification.content.quiet, let newID = await notify(notification, replacing: id) {
                move(id, to: newID, content: notification.content)
            }
            return
        }
        guard let id = await notify(notification, replacing: 0) else { return }
        if let earlier = popups[id] {
            // A server that reuses IDs: the earlier popup is gone.
            for member in earlier.members { popupOf[member] = nil }
        }
        popups[id] = Popup(content: notification.content, members: [key])
        popupOf[key] = id
        remember(notification)
    }

    /// The popup of current notifications that shows `content`, if any.
    private func popup(showing content: DesktopNotification.Content) -> UInt32? {
        popups.first { $0.value.content == content && !$0.value.members.isEmpty }?.key
    }

    /// The server answered a replacement with another ID: the popup moves.
    private func move(_ id: UInt32, to newID: UInt32, content: DesktopNotification.Content) {
        guard var popup = popups.removeValue(forKey: id) else { return }
        popup.content = content
        popups[newID] = popup
        for member in popup.members { popupOf[member] = newID }
    }

    private func remember(_ notification: DesktopNotification) {
        let failed = record.failure != nil
        record.insert(Fingerprint(notification).stableHash)
        if !failed, let failure = record.failure {
            logger.warning("\(failure); what was shown is remembered only while running")
        }
    }

    /// `Notify`; the server's ID, or nil (logged) if it failed.
    private func notify(_ notification: DesktopNotification, replacing: UInt32, again: Bool = false) async -> UInt32? {
        guard let bus, !Task.isCancelled else { return nil }
        let server = await serverTraits(bus)
        do {
            let reply = try await bus.call(
                destination: Self.server, path: Self.serverPath, interface: Self.serverInterface, member: "Notify",
                arguments: notification.notifyArguments(
                    replacesID: replacing, markup: server.markup, appName: server.appName,
                    origin: server.showsOrigin ? phoneNames[notification.device] : nil),
                expecting: "u", timeout: Self.callTimeout)
            if serverFailing {
                logger.info("the notification server answers again")
                serverFailing = false
            }
            return reply.first?.uint32Value
        } catch DBusError.remote(name: ServerTraits.tooSimilar, _) where !again {
            // KDE Plasma refuses a notification equal to the last it took, within 1 s of it.
            // A replacement of what it shows: that popup shows this content already. A new one
            // (the user closed the same content a moment ago): once more, after that second.
            if replacing != 0 { return replacing }
            logger.debug("the server refused \(notification.device) #\(notification.uid) as too like the last one; again in 1 s")
            await pause(ServerTraits.similarityWindow, on: executor)
            return await notify(notification, replacing: replacing, again: true)
        } catch {
            if !serverFailing && !Task.isCancelled {
                logger.warning("cannot show a notification: \(error)")
                serverFailing = true
            }
            self.server = nil  // the server may be another one next time
            return nil
        }
    }

    /// What the notification server does with what it is sent (asked once per server:
    /// `GetCapabilities` and `GetServerInformation`; docs/desktop.md has each server's table).
    struct ServerTraits {
        /// It renders body markup (`body-markup`): the body is escaped.
        var markup: Bool
        /// Where the phone app's name goes: GNOME Shell shows the desktop entry's name (48) or
        /// none (43), so it leads the summary; KDE Plasma shows `x-kde-display-appname`.
        var appName: DesktopNotification.AppNamePlacement
        /// It shows where a notification came from (`x-kde-origin-name`): the phone's name.
        var showsOrigin: Bool

        init(name: String, capabilities: [String]) {
            markup = capabilities.contains("body-markup")
            appName = capabilities.contains("x-kde-display-appname") ? .kdeHint : name == "gnome-shell" ? .summary : .argument
            showsOrigin = capabilities.contains("x-kde-origin-name")
        }

        /// The guess while the server has not said: escaping, nothing else.
        static let unknown = ServerTraits(name: "", capabilities: ["body-markup"])

        /// KDE Plasma's answer to a notification equal to the last it took, less than
        /// `similarityWindow` after it (libnotificationmanager's server_p.cpp).
        static let tooSimilar = "org.freedesktop.Notifications.Error.ExcessNotificationGeneration"
        static let similarityWindow: Duration = .milliseconds(1100)
    }

    /// The server's traits; `ServerTraits.unknown` while it does not answer.
    private func serverTraits(_ bus: DBusConnection) async -> ServerTraits {
        if let server { return server }
        do {
            let capabilities = try await bus.call(
                destination: Self.server, path: Self.serverPath, interface: Self.serverInterface,
                member: "GetCapabilities", expecting: "as", timeout: Self.callTimeout
            ).first?.stringArray ?? []
            let information = try await bus.call(
                destination: Self.server, path: Self.serverPath, interface: Self.serverInterface,
                member: "GetServerInformation", expecting: "ssss", timeout: Self.callTimeout)
            let name = information.first?.stringValue ?? ""
            let traits = ServerTraits(name: name, capabilities: capabilities)
            server = traits
            logger.debug("notification server \(name) \(information.dropFirst(2).first?.stringValue ?? ""), capabilities: \(capabilities.joined(separator: ", "))")
            return traits
        } catch {
            return .unknown
        }
    }

    /// The phone no longer has `key`: its popup closes unless it still shows another one.
    func close(_ key: Key) async {
        guard popupOf[key] != nil else { return }
        await detach(key)
    }

    /// Takes `key` off its popup, closing the popup when nothing is left behind it.
    private func detach(_ key: Key) async {
        guard let id = popupOf.removeValue(forKey: key) else { return }
        popups[id]?.members.removeAll { $0 == key }
        guard popups[id]?.isEmpty ?? false else { return }
        popups[id] = nil
        await closePopup(id)
    }

    func closePopup(_ id: UInt32) async {
        guard let bus else { return }
        do {
            _ = try await bus.call(
                destination: Self.server, path: Self.serverPath, interface: Self.serverInterface,
                member: "CloseNotification", arguments: [.uint32(id)], timeout: Self.callTimeout)
        } catch {
            logger.debug("CloseNotification(\(id)): \(error)")
        }
    }

    /// On the way out: close what we show, whose buttons nobody would answer any more, and
    /// take the players off the bus.
    func closeEverything() async {
        failMediaCommands("ancsd desktop is stopping")
        await removePlayers(because: "ancsd desktop is stopping")
        guard let bus, await bus.isConnected else { return }
        let ids = Array(popups.keys)
        popups = [:]
        popupOf = [:]
        for id in ids { await closePopup(id) }
        if !ids.isEmpty { logger.info("closed \(ids.count) notification(s)") }
    }

    func handle(signal: Signal) async {
        switch signal.member.rawValue {
        case "ActionInvoked":
            guard let arguments = try? signal.arguments(matching: "us"), let id = arguments[0].uint32Value,
                  let action = arguments[1].stringValue, let popup = popups[id]
            else { return }
            guard let chosen = ControlAction(rawValue: action) else {
                // A click on the popup itself ("default"): it goes away; the phone is not asked anything.
                if action == DesktopNotification.defaultAction {
                    logger.debug("popup \(id) clicked: closing it, nothing sent to the phone")
                    for member in popup.members { popupOf[member] = nil }
                    popups[id] = nil
                    await closePopup(id)
                }
                return
            }
            guard link != nil, let key = popup.members.last, let device = BluetoothAddressText(key.device) else {
                // Shown under an earlier session and not found again yet: its UID may name
                // another notification now.
                desktopLog.log(.warning, "the phone or ancsd is not back yet: the \(action) action on popup \(id) is lost",
                               kind: "the phone or ancsd is not back yet: an action on a popup is lost")
                return
            }
            logger.debug("\(action) action invoked on \(key.device) #\(key.uid)")
            send(.action(device: key.device, uid: key.uid, chosen), .action(device: device, uid: key.uid, action: chosen))
        case "NotificationClosed":
            guard let arguments = try? signal.arguments(matching: "uu"), let id = arguments[0].uint32Value,
                  let popup = popups.removeValue(forKey: id)
            else { return }
            // Dismissed or expired: forgotten, and (recorded) never popped up again.
            for member in popup.members where popupOf[member] == id { popupOf[member] = nil }
            let reasons: [UInt32: String] = [1: "expired", 2: "dismissed by the user", 3: "closed on request"]
            logger.debug("popup \(id) closed on the desktop: \(reasons[arguments[1].uint32Value ?? 0] ?? "no reason given")")
        default:
            break
        }
    }
}
