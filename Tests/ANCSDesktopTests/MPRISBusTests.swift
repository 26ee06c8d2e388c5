import ANCSControl
import ANCSDaemon
import ANCSDesktop
import ANCSRuntime
import DBus
import EventLoop
import Foundation
import JSON
import Synchronization
import Testing
import TestSupport

/// `ancsd desktop`'s MPRIS players, checked with the real `playerctl` on a private session bus,
/// the companion driven by a fake daemon (a `ControlServer` in this process) that sends `media`
/// events and answers `media` and `media_command`.
@Suite("MPRIS players on the bus", .serialized)
struct MPRISBusTests {
    static let phone = "AA:BB:CC:DD:EE:FF"
    static let other = "11:22:33:44:55:66"
    static let name: BusName = "org.mpris.MediaPlayer2.ancsd_aabbccddeeff"
    static let player = "ancsd_aabbccddeeff"

    /// The daemon's side: a player per phone, the commands it was sent.
    final class FakeDaemon: ControlHandler {
        struct State {
            var players: [ControlMedia] = []
            var subscriber: ControlServer.ClientID?
            var mediaRequests = 0
            var commands: [String] = []
            /// Commands the phone refuses, with the daemon's error.
            var refused: [String: ControlError] = [:]
        }

        let state = Mutex(State())
        let server = Mutex<ControlServer?>(nil)

        func reply(to request: ControlRequest, client: ControlServer.ClientID) async -> Result<ControlAnswer, ControlError> {
            switch request.command {
            case .subscribe:
                state.withLock { $0.subscriber = client }
                return .success(.subscribed)
            case .list:
                return .success(.list([ControlPhone(device: MPRISBusTests.phone, name: "Ada's iPhone", notifications: [])]))
            case .media:
                return .success(.media(state.withLock { $0.mediaRequests += 1; return $0.players }))
            case .mediaCommand(let device, let command):
                let refusal = state.withLock { state in
                    state.commands.append("\(device) \(command.rawValue)")
                    return state.refused[command.rawValue]
                }
                return refusal.map { .failure($0) } ?? .success(.sent)
            case .status, .get, .action:
                return .failure(ControlError(.failed, "not in this test"))
            }
        }

        func clientClosed(_ client: ControlServer.ClientID) async {
            state.withLock { if $0.subscriber == client { $0.subscriber = nil } }
        }

        /// Sends an event to the subscribed companion.
        func send(_ event: ControlEvent) throws {
            guard let client = state.withLock({ $0.subscriber }), let server = server.withLock({ $0 }) else {
                throw TestFailure("no subscriber for \(event.type)")
            }
            server.send(JSONValue.object(event.json).serialized, to: client)
        }

        var commands: [String] { state.withLock { $0.commands } }
    }

    /// A private bus, the fake daemon and a running companion.
    final class Setup: Sendable {
        let bus: PrivateBus
        let daemon: FakeDaemon
        let server: ControlServer
        let serverLoop: EventLoop
        let desktopLoop: EventLoop
        let companion: Task<Void, any Error>
        /// A connection of the test's own, to read properties and watch signals.
        let client: DBusConnection

        init(players: [ControlMedia], mpris: Bool = true) async throws {
            try UnitRun.needs("playerctl")
            let bus = try PrivateBus()
            let daemon = FakeDaemon()
            daemon.state.withLock { $0.players = players }
            let serverLoop = try EventLoop(name: "fake-ancsd")
            let path = NSTemporaryDirectory() + "mpris-control-\(UUID().uuidString)"
            let server = try ControlServer(path: path, handler: daemon, logger: Logger(threshold: .error, journald: false), loop: serverLoop)
            daemon.server.withLock { $0 = server }
            server.start()
            let desktopLoop = try EventLoop(name: "desktop")
            let options = DesktopCompanion.Options(controlPath: path, bus: .address(bus.address), mpris: mpris)
            let level: LogLevel = ProcessInfo.processInfo.environment["MPRIS_TEST_DEBUG"] != nil ? .debug : .error
            let companion = DesktopCompanion(options: options, logger: Logger(threshold: level, journald: false), executor: desktopLoop)
            (self.bus, self.daemon, self.server, self.serverLoop, self.desktopLoop) = (bus, daemon, server, serverLoop, desktopLoop)
            self.companion = Task(executorPreference: desktopLoop) { try await companion.run() }
            client = try await DBusConnection.connect(to: .address(bus.address))
            try await eventually("the companion subscribes") { daemon.state.withLock { $0.subscriber != nil } }
        }

        func stop() async {
            companion.cancel()
            _ = try? await companion.value
            server.stop()
            await client.close()
            bus.stop()
        }

        /// Runs playerctl on the private bus: its exit status and output, trimmed.
        func playerctl(_ arguments: String...) throws -> (status: Int32, text: String) {
            let (status, text) = try runTool("/usr/bin/playerctl", arguments, environment: environment)
            return (status, text.trimmingCharacters(in: .whitespacesAndNewlines))
        }

        var environment: [String: String] { ["DBUS_SESSION_BUS_ADDRESS": bus.address, "PATH": "/usr/bin:/bin", "HOME": NSTemporaryDirectory()] }

        /// The players `playerctl -l` lists.
        func players() throws -> [String] {
            try playerctl("-l").text.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("No players") }
        }

        func property(_ name: String, of interface: InterfaceName = MPRISModel.playerInterface, on bus: BusName = MPRISBusTests.name) async throws -> DBusValue {
            try await client.getProperty(destination: bus, path: MPRISModel.path, interface: interface, name: name)
        }
    }

    static func playing(
        _ device: String = phone, state: String = "playing", title: String = "Bohemian Rhapsody", volume: Double = 0.5,
        position: Double = 12.5, commands: [String] = ["play", "pause", "toggle", "previous", "volume-up", "volume-down"]
    ) -> ControlMedia {
        ControlMedia(
            device: device, player: "Music", state: state, rate: state == "playing" ? 1 : 0, elapsed: position, position: position,
            volume: volume, queueIndex: 3, queueCount: 12, shuffle: "off", repeat: "all", artist: "Queen", album: "A Night at the Opera",
            title: title, duration: 355, commands: commands)
    }

    @Test("the phone's player is on the bus from the start, and playerctl reads and drives it")
    func playerctlReadsAndDrives() async throws {
        try await withSetup(players: [Self.playing(), Self.playing(Self.other, state: "paused", title: "Other")]) { setup in
            try await eventually("both players are listed") { try setup.players().sorted() == ["ancsd_112233445566", Self.player] }

            #expect(try setup.playerctl("-p", Self.player, "status") == (0, "Playing"))
            #expect(try setup.playerctl("-p", "ancsd_112233445566", "status") == (0, "Paused"))
            #expect(try setup.playerctl("-p", Self.player, "metadata", "--format", "{{title}}|{{artist}}|{{album}}|{{mpris:length}}")
                == (0, "Bohemian Rhapsody|Queen|A Night at the Opera|355000000"))
            // The position moves on from the daemon's, while playing.
            let position = try #require(Double(try setup.playerctl("-p", Self.player, "position").text))
            #expect(position >= 12.5 && position < 60, "\(position)")
            #expect(try await setup.property("Identity", of: MPRISModel.rootInterface) == .string("iPhone (Ada's iPhone)"))
            #expect(try await setup.property("CanGoNext") == .bool(false), "next is not among the player's commands")
            #expect(try await setup.property("CanGoPrevious") == .bool(true))
            #expect(try await setup.property("CanSeek") == .bool(false))
            #expect(try await setup.property("CanControl") == .bool(true))

            // play-pause reaches the daemon as toggle, and returns once it answered.
            #expect(try setup.playerctl("-p", Self.player, "play-pause").status == 0)
            #expect(setup.daemon.commands == ["\(Self.phone) toggle"])
            // Stop is a pause; Seek does nothing (CanSeek is false).
            _ = try await setup.client.call(destination: Self.name, path: MPRISModel.path, interface: MPRISModel.playerInterface, member: "Stop")
            _ = try await setup.client.call(
                destination: Self.name, path: MPRISModel.path, interface: MPRISModel.playerInterface, member: "Seek", arguments: [.int64(5_000_000)])
            #expect(setup.daemon.commands == ["\(Self.phone) toggle", "\(Self.phone) pause"])

            // A command the phone refuses: the daemon's error, as an MPRIS error.
            setup.daemon.state.withLock { $0.refused["next"] = ControlError(.unsupportedCommand, "the player takes play, pause, toggle, previous now") }
            // (do/catch, not #require(throws:), which returns nothing under Swift 6.0's Testing)
            do {
                _ = try await setup.client.call(destination: Self.name, path: MPRISModel.path, interface: MPRISModel.playerInterface, member: "Next")
                Issue.record("Next was not refused")
            } catch let refusal as DBusError {
                #expect(refusal.name == "org.mpris.MediaPlayer2.ancsd.UnsupportedCommand" && refusal.message.contains("takes play, pause"), "\(refusal)")
            }

            // Setting the volume: steps of 1/16 toward it.
            #expect(try setup.playerctl("-p", Self.player, "volume", "0.75").status == 0)
            try await eventually("four volume-up steps") { setup.daemon.commands.filter { $0.hasSuffix("volume-up") }.count == 4 }
            try await Task.sleep(for: .milliseconds(200))
            #expect(setup.daemon.commands.filter { $0.contains("volume") }.count == 4, "no more than the steps")
        }
    }

    @Test("a change is announced: PropertiesChanged with what changed, playerctl --follow sees the new title")
    func changesAreAnnounced() async throws {
        try await withSetup(players: [Self.playing()]) { setup in
            try await eventually("the player is listed") { try setup.players() == [Self.player] }
            let trackID = try #require(try await setup.property("Metadata").stringKeyedDictionary?["mpris:trackid"])
            let changes = try await setup.client.signals(matching: .propertiesChanged(sender: Self.name, path: MPRISModel.path))
            let follower = try ChildProcess(
                URL(fileURLWithPath: "/usr/bin/playerctl"), ["-p", Self.player, "--follow", "metadata", "title"], environment: setup.environment)
            defer { follower.signal(SIGKILL) }
            try follower.waitForLine { $0 == "Bohemian Rhapsody" }

            try setup.daemon.send(.media(Self.playing(state: "paused", title: "You're My Best Friend", position: 0)))
            try follower.waitForLine { $0 == "You're My Best Friend" }
            let signal = try await withTimeout(10, "PropertiesChanged") { () async throws -> PropertiesChanged in
                for await signal in changes {
                    let change = try PropertiesChanged(signal)
                    if change.interface == MPRISModel.playerInterface.rawValue { return change }
                }
                throw TestFailure("the signals ended")
            }
            #expect(signal.changed["PlaybackStatus"] == .string("Paused"), "one signal for everything that changed")
            let metadata = try #require(signal.changed["Metadata"]?.stringKeyedDictionary)
            #expect(metadata["xesam:title"] == .string("You're My Best Friend"))
            #expect(metadata["mpris:trackid"] != nil && metadata["mpris:trackid"] != trackID, "a new track, a new track ID")
            #expect(signal.changed["Volume"] == nil && signal.changed["CanPlay"] == nil, "only what changed")
            #expect(try setup.playerctl("-p", Self.player, "status") == (0, "Paused"))
            // Moved on the phone: Seeked, with where it went.
            let seeks = try await setup.client.signals(
                matching: MatchRule(sender: Self.name, interface: MPRISModel.playerInterface, member: "Seeked", path: MPRISModel.path))
            try setup.daemon.send(.media(Self.playing(state: "paused", title: "You're My Best Friend", position: 90)))
            let seek = try #require(try await withTimeout(10, "Seeked") { () async -> Signal? in await seeks.first { _ in true } })
            #expect(try seek.arguments(matching: "x") == [.int64(90_000_000)])
            #expect(try setup.playerctl("-p", Self.player, "position") == (0, "90.000000"))
            // play-pause without toggle, paused: play.
            try setup.daemon.send(.media(Self.playing(state: "paused", title: "You're My Best Friend", position: 0, commands: ["play", "pause"])))
            try await eventually("CanGoPrevious follows the commands") { try await setup.property("CanGoPrevious") == .bool(false) }
            #expect(try setup.playerctl("-p", Self.player, "play-pause").status == 0)
            #expect(setup.daemon.commands == ["\(Self.phone) play"])
        }
    }

    /// Text from the phone that D-Bus cannot carry as it is never stalls the player: a NUL
    /// (ID3v2.4's separator of several values) in the first state, the track after invalid
    /// UTF-8 (as the daemon passes it on: repaired), a 64 KiB title, a state with nothing in it.
    /// Every property stays current, read back through the bus and with playerctl.
    @Test("NULs, repaired UTF-8 and a 64 KiB title: the player appears and every property stays current")
    func hostileStringsNeverStallThePlayer() async throws {
        var first = Self.playing(title: "Bohemian\0Rhapsody\0")
        first.artist = "Queen\0\0David Bowie"
        first.album = "\0"
        try await withSetup(players: [first]) { setup in
            try await eventually("the player appears with a first state that holds NULs") { try setup.players() == [Self.player] }
            #expect(try setup.playerctl("-p", Self.player, "metadata", "title") == (0, "Bohemian / Rhapsody"))
            let metadata = try #require(try await setup.property("Metadata").stringKeyedDictionary)
            #expect(metadata["xesam:artist"] == .stringArray(["Queen", "David Bowie"]), "each value an artist")
            #expect(metadata["xesam:album"] == .string(""))
            #expect(try setup.playerctl("-p", Self.player, "status") == (0, "Playing"))

            // Paused, with another track whose title was not UTF-8 and a new set of commands:
            // every property follows.
            var paused = Self.playing(state: "paused", title: String(decoding: [0x41, 0xFF, 0xC3, 0x42, 0x00, 0x43], as: UTF8.self), volume: 0.25)
            paused.commands = ["play", "next"]
            try setup.daemon.send(.media(paused))
            try await eventually("paused") { try setup.playerctl("-p", Self.player, "status") == (0, "Paused") }
            #expect(try setup.playerctl("-p", Self.player, "metadata", "title") == (0, "A\u{FFFD}\u{FFFD}B / C"))
            #expect(try await setup.property("CanGoNext") == .bool(true))
            #expect(try await setup.property("CanPause") == .bool(false))
            #expect(try await setup.property("Volume") == .double(0.25))

            // A 64 KiB title, with a NUL in it, playing again.
            let long = String(repeating: "x", count: 32 * 1024) + "\0" + String(repeating: "y", count: 32 * 1024)
            try setup.daemon.send(.media(Self.playing(title: long, volume: 0.75)))
            try await eventually("playing the long title") { try setup.playerctl("-p", Self.player, "status") == (0, "Playing") }
            let title = try setup.playerctl("-p", Self.player, "metadata", "title").text
            #expect(title.utf8.count == 64 * 1024 + 3 && title.hasPrefix("xxx") && title.contains(" / y"), "\(title.utf8.count) bytes")
            #expect(try await setup.property("Volume") == .double(0.75))

            // Nothing known at all.
            try setup.daemon.send(.media(ControlMedia(device: Self.phone)))
            try await eventually("stopped") { try setup.playerctl("-p", Self.player, "status") == (0, "Stopped") }
            #expect(try await setup.property("Metadata").stringKeyedDictionary == ["mpris:trackid": .objectPath(MPRISModel.noTrack)])
        }
    }

    @Test("the player leaves the bus when the phone disconnects or ancsd goes, and comes back with the phone")
    func followsThePhoneAndTheDaemon() async throws {
        try await withSetup(players: []) { setup in
            try await Task.sleep(for: .milliseconds(300))
            #expect(try setup.players().isEmpty, "no player before the phone says anything")
            try setup.daemon.send(.media(Self.playing()))
            try await eventually("the player appears with the phone's first state") { try setup.players() == [Self.player] }
            try setup.daemon.send(.disconnected(device: Self.phone, reason: "link lost"))
            try await eventually("the player goes with the phone") { try await setup.client.nameOwner(Self.name) == nil }
            #expect(try setup.players().isEmpty)
            try setup.daemon.send(.connected(device: Self.phone, name: "Ada's iPhone"))
            try setup.daemon.send(.media(Self.playing(title: "Back")))
            try await eventually("it comes back with the phone") { try setup.players() == [Self.player] }
            #expect(try setup.playerctl("-p", Self.player, "metadata", "title") == (0, "Back"))
            // ancsd goes away: so do the players.
            setup.server.stop()
            try await eventually("the player goes with the daemon") { try await setup.client.nameOwner(Self.name) == nil }
        }
    }

    @Test("--no-mpris: no player, no media request")
    func noMPRIS() async throws {
        try await withSetup(players: [Self.playing()], mpris: false) { setup in
            try setup.daemon.send(.media(Self.playing(title: "Again")))
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await setup.client.nameOwner(Self.name) == nil)
            #expect(setup.daemon.state.withLock { $0.mediaRequests } == 0)
        }
    }

    /// Runs `body` with a setup, stopped afterwards whatever happens.
    func withSetup(players: [ControlMedia], mpris: Bool = true, _ body: (Setup) async throws -> Void) async throws {
        let setup = try await Setup(players: players, mpris: mpris)
        do {
            try await body(setup)
        } catch {
            await setup.stop()
            throw error
        }
        await setup.stop()
    }
}
