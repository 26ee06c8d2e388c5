import AMS
import GattSession
import BlueZ
public import ControlProtocol
public import JSON

/// The phone's player through the control socket and the outputs that take commands.
extension Daemon {
    /// The players of the running links that speak AMS (`device`: one phone's), by address.
    func mediaPlayers(device: String?) -> [ControlMedia] {
        links.values.filter { $0.state == .running && (device == nil || $0.device.address == device) }
            .sorted { $0.device.address < $1.device.address }
            .compactMap { link in link.media.map { $0.handler.control(device: link.device.address, now: link.now) } }
    }

    /// Sends a remote command to the phone's player.
    func mediaCommand(_ command: ControlMediaCommand, on link: PhoneLink) async -> Result<ControlAnswer, ControlError> {
        guard let media = link.media else {
            return .failure(ControlError(.notAvailable, "\(link.device.address) offers no media player (Apple Media Service) now"))
        }
        guard let remote = RemoteCommand(name: command.rawValue) else {
            return .failure(ControlError(.badRequest, "unknown media command \(command.rawValue)"))
        }
        // The same command waiting already: this request joins it (no second write).
        let actions: [GattSessionAction<MediaEvent>]?
        if media.handler.isWaiting(remote) {
            actions = nil
        } else {
            switch media.handler.send(remote, now: link.now) {
            case .success(let sent): actions = sent
            case .failure(let refusal): return .failure(refusal)
            }
        }
        return await withCheckedContinuation { waiter in
            // Found again from the link: Swift 6.0 takes a captured local for one sent off the actor.
            guard let media = link.media else {
                return waiter.resume(returning: .failure(ControlError(.notAvailable, "\(link.device.address) offers no media player now")))
            }
            if let actions {
                media.handler.start(remote, actions, waiter: waiter, ServiceContext(service: media.service, link: link), daemon: self)
            } else if !media.handler.join(remote, waiter: waiter) {
                waiter.resume(returning: .failure(ControlError(.failed, "the command was not sent: the phone's player went away")))
            }
        }
    }

    /// The `media_command` path, for outputs that take commands (MQTT, `PhoneActions`): its reply.
    public func performMediaCommand(_ command: ControlMediaCommand, device: String) async -> JSONObject {
        guard let address = normalizedAddress(device) else {
            return ControlReply(id: nil, .failure(ControlError(.badRequest, "\"device\" must be a Bluetooth address such as AA:BB:CC:DD:EE:FF"))).json
        }
        guard let link = links.values.first(where: { $0.device.address == address && $0.state == .running }) else {
            return ControlReply(id: nil, .failure(Self.noSuchDevice(address))).json
        }
        return ControlReply(id: nil, await mediaCommand(command, on: link)).json
    }
}

extension PhoneLink {
    /// The link's AMS service and its handler, while the phone offers it and it is subscribed.
    var media: (service: ServiceLink, handler: MediaHandler)? {
        for service in services {
            if let handler = service.handler as? MediaHandler, service.ready { return (service, handler) }
        }
        return nil
    }
}
