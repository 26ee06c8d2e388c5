import ANCSControl
import DBus
import EventLoop

/// A `media_command` waiting for the daemon's answer, and the timer that gives up on it.
struct MediaWaiter {
    var continuation: CheckedContinuation<ControlError?, Never>
    var timer: LoopTimer
}

/// The phones' players as MPRIS players (docs/desktop.md, "Music"): one `MPRISPlayer` per phone
/// whose player the daemon reports, from its first `media` state (the `media` request after
/// connecting, or an event) to its `disconnected`, or to the end of the connection to ancsd.
extension DesktopCompanion {
    /// How long an MPRIS method waits for the daemon to answer its command (a client's own
    /// D-Bus timeout is usually 25 s).
    static let mediaCommandTimeout: Duration = .seconds(30)

    /// The players the daemon listed when this connection began: each is shown, and any other
    /// is gone.
    func showPlayers(_ states: [ControlMedia]) async {
        let listed = Set(states.map(\.device))
        for device in players.keys where !listed.contains(device) {
            await removePlayer(device, because: "ancsd no longer lists it")
        }
        for media in states { await showPlayer(media) }
    }

    /// A phone's player says something new: its MPRIS player changes, or appears.
    func showPlayer(_ media: ControlMedia) async {
        guard options.mpris else { return }
        let device = media.device
        logger.debug("\(device) media: \(media.state ?? "no state") \(media.player ?? "-") · \(media.artist ?? "-") — \(media.title ?? "-")")
        if let player = players[device] {
            await player.update(media, at: executor.now)
            return
        }
        guard let name = MPRISModel.busName(device: device) else {
            return logger.debug("media state of \(device), which is no Bluetooth address: no MPRIS player")
        }
        let model = MPRISModel(media: media, phoneName: phoneNames[device], at: executor.now)
        let player: MPRISPlayer
        do {
            player = try await MPRISPlayer.start(
                device: device, busName: name, model: model, bus: options.bus, loop: executor, logger: logger
            ) { [weak self] command in
                guard let self else { return ControlError(.failed, "ancsd desktop is stopping") }
                let refusal = await self.sendMediaCommand(command, device: device)
                if let refusal {
                    // Any program on the session bus can call the player's methods as often as it likes.
                    self.desktopLog.log(.info, "MPRIS on \(device): ancsd refused \(command.rawValue): \(refusal)",
                                        kind: "MPRIS on \(device): ancsd refused \(command.rawValue) (\(refusal.code.rawValue))")
                }
                return refusal
            }
        } catch {
            if !mprisFailing { logger.warning("cannot put \(device)'s player on the bus as \(name): \(error)") }
            mprisFailing = true
            return
        }
        mprisFailing = false
        if let earlier = players[device] {
            // Made meanwhile by another state (not while events come one at a time; kept safe).
            await player.stop()
            await earlier.update(media, at: executor.now)
            return
        }
        players[device] = player
        logger.info("\(device)'s player is on the bus as \(name)")
    }

    /// The phone (or the daemon) went: its MPRIS player leaves the bus.
    func removePlayer(_ device: String, because reason: String) async {
        guard let player = players.removeValue(forKey: device) else { return }
        await player.stop()
        logger.info("\(device)'s player left the bus (\(reason))")
    }

    func removePlayers(because reason: String) async {
        for device in Array(players.keys) { await removePlayer(device, because: reason) }
    }

    /// A phone's Bluetooth name, from `list` or `connected`: its player's `Identity` says it.
    func learnName(_ name: String?, of device: String) async {
        guard let name, !name.isEmpty, phoneNames[device] != name else { return }
        phoneNames[device] = name
        await players[device]?.rename(name)
    }

    /// Sends `media_command` and waits for the answer: nil when the phone took the command,
    /// else why not (the daemon's error, or that it did not answer).
    func sendMediaCommand(_ command: ControlMediaCommand, device: String) async -> ControlError? {
        guard let address = BluetoothAddressText(device) else {
            return ControlError(.noSuchDevice, "\(device) is no Bluetooth address")
        }
        guard link != nil, let id = send(.mediaCommand(device: device, command), .mediaCommand(device: address, command: command)) else {
            return ControlError(.failed, "ancsd desktop is not connected to ancsd")
        }
        return await withCheckedContinuation { (continuation: CheckedContinuation<ControlError?, Never>) in
            let timer = executor.makeTimer { [weak self] in
                self?.assumeIsolated { companion in
                    companion.finishMediaCommand(id, ControlError(.failed, "ancsd did not answer within \(Self.mediaCommandTimeout)"))
                }
            }
            timer.schedule(after: Self.mediaCommandTimeout)
            mediaWaiters[id] = MediaWaiter(continuation: continuation, timer: timer)
        }
    }

    /// The answer to the `media_command` of request `id` came (nil: sent), or never will.
    func finishMediaCommand(_ id: Int, _ error: ControlError?) {
        guard let waiter = mediaWaiters.removeValue(forKey: id) else { return }
        waiter.timer.cancel()
        pending[id] = nil
        waiter.continuation.resume(returning: error)
    }

    /// Every command still waiting fails: the connection to ancsd is gone.
    func failMediaCommands(_ reason: String) {
        for id in Array(mediaWaiters.keys) { finishMediaCommand(id, ControlError(.failed, reason)) }
    }
}
