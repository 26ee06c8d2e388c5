import AMS
import ANCSRuntime
import ControlProtocol
import JSON

/// How a phone's media state is written: the `media` event's JSON members (docs/output.md),
/// its text line, its `--exec` variables, its retained MQTT state and its Home Assistant
/// entities (docs/mqtt.md), all from one `ControlMedia`, the same value the control socket's
/// `media` command answers with.
enum MediaOutput {
    /// The state as the control protocol and the outputs carry it; `position` at `now`.
    static func control(_ state: MediaState, device: String, now: Duration) -> ControlMedia {
        ControlMedia(
            device: device, player: state.playerName, state: state.playbackState.map { $0.name ?? "unknown" },
            rate: state.playbackRate, elapsed: state.elapsedTime, position: state.position(at: now), volume: state.volume,
            queueIndex: state.queueIndex, queueCount: state.queueCount, shuffle: state.shuffleMode.map { $0.name ?? "unknown" },
            repeat: state.repeatMode.map { $0.name ?? "unknown" }, artist: state.artist, album: state.album, title: state.title,
            duration: state.duration, truncated: state.truncated.sorted().map(\.description),
            commands: state.supportedCommands.compactMap(\.name))
    }

    /// The output event.
    static func output(_ media: ControlMedia) -> ServiceOutput {
        var event: JSONObject = ["v": .int(EventFormatter.jsonVersion), "type": "media", "device": .string(media.device)]
        media.appendFields(to: &event)
        var fields = JSONObject()
        media.appendFields(to: &fields)
        return ServiceOutput(
            type: "media", device: media.device, fields: fields, text: text(media), label: "media \(media.state ?? "state unknown")",
            environment: ["ANCSD_MEDIA_STATE=\(media.state ?? "")"],
            retained: [.init(topic: MQTTTopics.mediaState, payload: JSONValue.object(event).serialized)],
            entities: entities(media))
    }

    /// Home Assistant's entities of the player: sensors of the title (with the whole state as
    /// attributes), artist, album and playback state, read by templates from the retained
    /// `PREFIX/DEVICE/media` JSON, and a button per remote command, present while the player
    /// supports it, that sends the command's name to `PREFIX/DEVICE/media/command`.
    static func entities(_ media: ControlMedia) -> [ServiceOutput.Entity] {
        func sensor(_ member: String, _ name: String, _ icon: String, attributes: Bool = false) -> ServiceOutput.Entity {
            // A value the phone has not given renders `None`: the sensor's state is unknown.
            // Home Assistant refuses a state over 255 characters; a title may be longer.
            var config: JSONObject = [
                "icon": .string(icon), "state_topic": .string(MQTTTopics.mediaState),
                "value_template": .string("{{ value_json.\(member)[:255] if value_json.\(member) is string else None }}"),
            ]
            if attributes { config.append("json_attributes_topic", .string(MQTTTopics.mediaState)) }
            return ServiceOutput.Entity(component: "sensor", object: member, name: name, config: config)
        }
        let sensors = [
            sensor("title", "Media title", "mdi:music-note", attributes: true), sensor("artist", "Media artist", "mdi:account-music"),
            sensor("album", "Media album", "mdi:album"), sensor("state", "Media state", "mdi:play-pause"),
        ]
        let supported = Set(media.commands)
        let buttons = ControlMediaCommand.allCases.map { command in
            let (name, icon) = buttonLabel(command)
            return ServiceOutput.Entity(
                component: "button", object: String(command.rawValue.map { $0 == "-" ? "_" : $0 }), name: name,
                config: ["icon": .string(icon), "command_topic": .string(MQTTTopics.mediaCommand), "payload_press": .string(command.rawValue)],
                takesCommands: true, present: supported.contains(command.rawValue))
        }
        return sensors + buttons
    }

    /// A command's button: its name and icon.
    static func buttonLabel(_ command: ControlMediaCommand) -> (name: String, icon: String) {
        switch command {
        case .play: ("Play", "mdi:play")
        case .pause: ("Pause", "mdi:pause")
        case .toggle: ("Play/pause", "mdi:play-pause")
        case .next: ("Next track", "mdi:skip-next")
        case .previous: ("Previous track", "mdi:skip-previous")
        case .volumeUp: ("Volume up", "mdi:volume-plus")
        case .volumeDown: ("Volume down", "mdi:volume-minus")
        case .repeat: ("Repeat mode", "mdi:repeat")
        case .shuffle: ("Shuffle mode", "mdi:shuffle-variant")
        case .skipForward: ("Skip forward", "mdi:fast-forward")
        case .skipBackward: ("Skip backward", "mdi:rewind")
        case .like: ("Like track", "mdi:thumb-up")
        case .dislike: ("Dislike track", "mdi:thumb-down")
        case .bookmark: ("Bookmark track", "mdi:bookmark")
        }
    }

    /// `playing  Music · Queen — Bohemian Rhapsody  1:23 / 5:55`.
    static func text(_ media: ControlMedia) -> String {
        var line = (media.state ?? "-").padding(to: 8)
        var what = media.player ?? "player"
        let heading = [media.artist, media.title].compactMap { $0 }.filter { !$0.isEmpty }.joined(separator: " — ")
        if !heading.isEmpty { what += " · " + heading }
        line += what
        if let position = media.position {
            line += "  " + MediaClock.text(position) + (media.duration.map { " / " + MediaClock.text($0) } ?? "")
        }
        return line
    }
}

/// A position or duration as a player shows it: `1:23`, `1:02:03`, as many hours as it takes
/// (the AMS session lets no number past `largestMediaNumber` through); `-:--` for no number.
public enum MediaClock {
    public static func text(_ seconds: Double) -> String {
        guard let seconds = mediaNumber(seconds) else { return "-:--" }
        let total = Int(max(0, seconds).rounded(.down))
        let (h, m, s) = (total / 3600, total / 60 % 60, total % 60)
        let two = { (n: Int) in n < 10 ? "0\(n)" : "\(n)" }
        return h > 0 ? "\(h):\(two(m)):\(two(s))" : "\(m):\(two(s))"
    }
}
