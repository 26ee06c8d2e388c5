import AMS
import ANCSRuntime
import ControlProtocol
import JSON

/// How a phone's media state is written: the `media` event's JSON members (docs/output.md),
/// its text line, its `--exec` variables and its retained MQTT state, all from one
/// `ControlMedia`, the same value the control socket's `media` command answers with.
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
            retained: [.init(topic: "media", payload: JSONValue.object(event).serialized)])
    }

    /// `playing  Music · Queen — Bohemian Rhapsody  1:23 / 5:55`.
    static func text(_ media: ControlMedia) -> String {
        var line = (media.state ?? "-").padding(to: 8)
        var what = media.player ?? "player"
        let heading = [media.artist, media.title].compactMap { $0 }.filter { !$0.isEmpty }.joined(separator: " — ")
        if !heading.isEmpty { what += " · " + heading }
        line += what
        if let position = media.position {
            line += "  " + clock(position) + (media.duration.map { " / " + clock($0) } ?? "")
        }
        return line
    }

    /// `1:23`, `1:02:03`.
    static func clock(_ seconds: Double) -> String {
        let total = Int(max(0, min(seconds, 359_999)).rounded(.down))
        let (h, m, s) = (total / 3600, total / 60 % 60, total % 60)
        let two = { (n: Int) in n < 10 ? "0\(n)" : "\(n)" }
        return h > 0 ? "\(h):\(two(m)):\(two(s))" : "\(m):\(two(s))"
    }
}
