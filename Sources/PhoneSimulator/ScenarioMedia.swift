import JSON

/// The Apple Media Service's part of a scenario: the settings `ams`, `media` and
/// `ams_characteristics`, and the `media_*` steps (docs/simulator.md).
extension ObjectReader {
    mutating func mediaSettings(_ s: inout ScenarioSettings) throws(ScenarioError) {
        if let ams = try bool("ams") { s.ams = ams }
        if let media = value("media") {
            guard s.ams else { throw fail("\"media\" needs \"ams\": true") }
            guard let object = media.objectValue else { throw fail("\"media\" must be an object") }
            var reader = ObjectReader(object: object, line: line)
            s.media = try reader.player()
            do { try reader.finish() } catch { throw fail("media: \(error.message)") }
        }
        if let list = value("ams_characteristics") {
            guard s.ams else { throw fail("\"ams_characteristics\" needs \"ams\": true") }
            let names = PhoneCharacteristic.ams.map(\.name)
            guard let items = list.arrayValue, !items.isEmpty else {
                throw fail("\"ams_characteristics\" must be a non-empty array of " + names.joined(separator: ", "))
            }
            var chosen: Set<PhoneCharacteristic> = []
            for item in items {
                guard let name = item.stringValue, let c = PhoneCharacteristic.ams.first(where: { $0.name == name }) else {
                    throw fail("unknown AMS characteristic \(item.serialized); use " + names.joined(separator: ", "))
                }
                guard chosen.insert(c).inserted else { throw fail("AMS characteristic \"\(name)\" appears twice") }
            }
            s.amsCharacteristics = PhoneCharacteristic.ams.filter(chosen.contains)
        }
    }

    /// The `media` object: the player a phone starts with.
    private mutating func player() throws(ScenarioError) -> MediaSettings {
        var m = MediaSettings()
        if let name = try string("player") { m.player = name }
        var first = try track()
        // Without any track key the default track stays.
        if ["title", "artist", "album", "duration"].allSatisfy({ object[$0] == nil }) { first = m.tracks[0] }
        m.tracks = [first]
        if let queue = value("queue") {
            guard let items = queue.arrayValue else { throw fail("\"queue\" must be an array of tracks") }
            for (index, item) in items.enumerated() {
                guard let object = item.objectValue else { throw fail("queue track \(index + 1) must be an object") }
                var reader = ObjectReader(object: object, line: line)
                m.tracks.append(try reader.track())
                do { try reader.finish() } catch { throw fail("queue track \(index + 1): \(error.message)") }
            }
        }
        if let state = try string("state") {
            guard state == "playing" || state == "paused" else { throw fail("\"state\" must be \"playing\" or \"paused\"") }
            m.playing = state == "playing"
        }
        if let elapsed = try number("elapsed") { m.elapsed = elapsed }
        if let volume = try number("volume", max: 1) { m.volume = volume }
        if let commands = try commands() { m.commands = commands }
        return m
    }

    /// A track's `title`, `artist`, `album` (empty when left out) and `duration` (seconds, 0).
    private mutating func track() throws(ScenarioError) -> MediaTrack {
        MediaTrack(
            title: try string("title") ?? "", artist: try string("artist") ?? "", album: try string("album") ?? "",
            duration: try number("duration") ?? 0)
    }

    /// `commands`: Remote Command names.
    private mutating func commands() throws(ScenarioError) -> [MediaCommand]? {
        guard let v = value("commands") else { return nil }
        let names = MediaCommand.allCases.map(\.name).joined(separator: ", ")
        guard let items = v.arrayValue else { throw fail("\"commands\" must be an array of command names (\(names))") }
        var out: [MediaCommand] = []
        for item in items {
            guard let name = item.stringValue, let command = MediaCommand(name: name) else {
                throw fail("unknown command \(item.serialized); use \(names)")
            }
            if !out.contains(command) { out.append(command) }
        }
        return out
    }

    /// A `media_*` step.
    mutating func mediaStep(_ kind: String, settings: ScenarioSettings) throws(ScenarioError) -> MediaStep {
        guard settings.ams else { throw fail("\"\(kind)\" needs \"ams\": true in the settings") }
        switch kind {
        case "media_track": return .track(try track())
        case "media_play": return .play
        case "media_pause": return .pause
        case "media_volume":
            guard let v = try number("value", max: 1) else { throw fail("\"value\" (0…1) is required") }
            return .volume(v)
        case "media_commands":
            guard let list = try commands() else { throw fail("\"commands\" is required (an empty list: none)") }
            return .commands(list)
        default:
            guard let present = try bool("present") else { throw fail("\"present\" (true or false) is required") }
            return .service(present: present)
        }
    }
}
