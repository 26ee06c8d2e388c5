import ANCSControl
import ANCSDaemon
import ANCSRuntime
import EventLoop
import JSON

/// `ancsd media`: what the phone's player says, and its remote commands (Apple Media Service).
enum MediaCommand {
    static let help = """
    Usage: ancsd media [DEVICE] [COMMAND] [--json] [--control PATH]

    Without COMMAND, shows what each connected phone's player says (DEVICE: one phone's): the
    app, the state, the track, the position, the volume, the queue and the commands it takes
    now. With COMMAND, sends it to the player of DEVICE (which may be left out while one phone
    is connected): play, pause, toggle, next, previous, volume-up, volume-down, repeat, shuffle,
    skip-forward, skip-backward, like, dislike, bookmark. A command the player does not take now
    is refused with those it does. Exit status 0 when the phone acknowledged the command, 1 when
    it was refused or failed, 2 for a mistake on the command line.
    --control PATH names the daemon's control socket (default /run/ancsd/control).
    """

    static func run(_ arguments: [String], loop: EventLoop) async -> Int32 {
        let options: ClientCommands.Options
        var device: BluetoothAddressText?
        var command: ControlMediaCommand?
        do {
            guard let parsed = try ClientCommands.parse(arguments, command: "media", allowJSON: true, allowDevice: false) else {
                print(help)
                return 0
            }
            var rest = parsed.positional[...]
            if let first = rest.first, let address = BluetoothAddressText(first) {
                device = address
                rest = rest.dropFirst()
            }
            if let word = rest.first {
                guard let chosen = ControlMediaCommand(rawValue: word.lowercased()) else {
                    let names = ControlMediaCommand.allCases.map(\.rawValue).joined(separator: ", ")
                    throw UsageError("'\(word)' is neither a Bluetooth address nor a media command (\(names))")
                }
                command = chosen
                rest = rest.dropFirst()
            }
            guard rest.isEmpty else { throw UsageError("media takes at most DEVICE and COMMAND") }
            if command != nil, parsed.json { throw UsageError("--json applies to showing the players, not to a command") }
            options = parsed
        } catch { return usageFailure(error, command: "media") }
        do throws(ControlClientError) {
            guard let command else {
                let answer = try await ControlClient.request(.media(device: device), path: options.control, timeout: .seconds(15), loop: loop)
                guard case .media(let players) = answer else { return 1 }
                if options.json {
                    print(JSONValue.object(ControlReply(id: nil, .success(answer)).json).serialized)
                } else {
                    if players.isEmpty { print("no phone's player is known (no phone connected, or none offers Apple Media Service)") }
                    for player in players { print(describe(player)) }
                }
                return 0
            }
            let target: BluetoothAddressText
            if let device {
                target = device
            } else {
                guard case .media(let players) = try await ControlClient.request(.media(device: nil), path: options.control, timeout: .seconds(15), loop: loop)
                else { return 1 }
                guard players.count == 1, let only = BluetoothAddressText(players[0].device) else {
                    logError(players.isEmpty
                        ? "no phone's player is known to send \(command.rawValue) to"
                        : "\(players.count) phones have a player: name one (ancsd media DEVICE \(command.rawValue))")
                    return 1
                }
                target = only
            }
            _ = try await ControlClient.request(
                .mediaCommand(device: target, command: command), path: options.control, timeout: .seconds(40), loop: loop)
            print("\(target): the phone took the \(command.rawValue) command")
            return 0
        } catch {
            logError(ClientCommands.describe(error, path: options.control))
            return 1
        }
    }

    /// A player as a few readable lines; every text the phone sent is sanitized.
    static func describe(_ m: ControlMedia) -> String {
        let clean = { (text: String?) in text.map(TerminalText.sanitize) }
        var lines = ["\(m.device): \(clean(m.player) ?? "player") \(m.state ?? "(state unknown)")"]
        let track = [clean(m.artist), clean(m.album), clean(m.title)].compactMap { $0 }.filter { !$0.isEmpty }
        if !track.isEmpty { lines.append("  track: " + track.joined(separator: " — ")) }
        if let position = m.position {
            lines.append("  position: " + MediaClock.text(position) + (m.duration.map { " / " + MediaClock.text($0) } ?? ""))
        }
        if let volume = m.volume { lines.append("  volume: \(Int((volume * 100).rounded()))%") }
        if m.queueIndex != nil || m.queueCount != nil || m.shuffle != nil || m.repeat != nil {
            let place = m.queueIndex.map { index in "\(index + 1)" + (m.queueCount.map { " of \($0)" } ?? "") } ?? "-"
            lines.append("  queue: \(place), shuffle \(m.shuffle ?? "-"), repeat \(m.repeat ?? "-")")
        }
        if !m.truncated.isEmpty { lines.append("  cut short by the phone: " + m.truncated.joined(separator: ", ")) }
        lines.append("  commands: " + (m.commands.isEmpty ? "none now" : m.commands.joined(separator: ", ")))
        return lines.joined(separator: "\n")
    }
}
