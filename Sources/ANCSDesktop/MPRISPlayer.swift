import ANCSControl
import ANCSRuntime
import DBus
import EventLoop

/// One phone's player on the session bus, as MPRIS wants it: a bus connection of its own (the
/// object is at `/org/mpris/MediaPlayer2` under each player's name, so two phones need two
/// connections), owning `org.mpris.MediaPlayer2.ancsd_<address>`, with the object's two
/// interfaces made from an `MPRISModel`.
///
/// Everything runs on the desktop's loop: the connection's, the method handlers', the state's
/// (`LoopBound`). The object's handlers hold the state and the `send` closure, never the player,
/// so closing the connection lets everything go.
final class MPRISPlayer: Sendable {
    /// Sends a remote command to the phone through the daemon and waits for the answer: nil
    /// when the phone took it, else the daemon's refusal.
    typealias Send = @Sendable (ControlMediaCommand) async -> ControlError?

    /// The prefix of the D-Bus errors a refused command replies with (`…UnsupportedCommand`,
    /// `…NotAvailable`, `…NoSuchDevice`, `…Failed`).
    static let errorPrefix = "org.mpris.MediaPlayer2.ancsd."

    let device: String
    let busName: BusName
    private let connection: DBusConnection
    private let logger: Logger
    private let state: LoopBound<State>

    private struct State {
        var model: MPRISModel
        /// What the bus holds of each interface's properties, to announce only what changed.
        var exported: [String: [String: DBusValue]] = [:]
        /// Volume steps still to send (negative: down), and whether a task is sending them.
        var volumeSteps = 0
        var volumeSending = false
        var stopped = false
        /// A property was refused by the bus: said once per player at warning level, after
        /// that at debug (a phone that keeps sending the same bad value does not flood the log).
        var refusalLogged = false
    }

    private init(device: String, busName: BusName, connection: DBusConnection, logger: Logger, state: LoopBound<State>) {
        self.device = device
        self.busName = busName
        self.connection = connection
        self.logger = logger
        self.state = state
    }

    /// Connects to `bus`, exports the object and asks for the name (queued behind another owner,
    /// such as a second `ancsd desktop` of the same user, until that one lets it go).
    ///
    /// The object is exported with the properties of a player that has said nothing (values
    /// the bus always takes), then given the phone's first state property by property
    /// (`publish`), before the name is asked for: a first state the bus refuses part of still
    /// makes a player, with the rest of its properties current.
    static func start(
        device: String, busName: BusName, model: MPRISModel, bus: BusAddress, loop: EventLoop, logger: Logger, send: @escaping Send,
        isolation: isolated (any Actor)? = #isolation
    ) async throws -> MPRISPlayer {
        let connection = try await DBusConnection.connect(to: bus, loop: loop)
        let blank = MPRISModel(media: ControlMedia(device: model.media.device), at: model.receivedAt)
        var initial = State(model: model)
        initial.exported = [
            MPRISModel.rootInterface.rawValue: Dictionary(uniqueKeysWithValues: blank.rootProperties.map { ($0.name, $0.value) }),
            MPRISModel.playerInterface.rawValue: Dictionary(uniqueKeysWithValues: blank.playerProperties.map { ($0.name, $0.value) }),
        ]
        let state = LoopBound(initial, loop: loop)
        let player = MPRISPlayer(device: device, busName: busName, connection: connection, logger: logger, state: state)
        do {
            try await connection.export(
                object(model: blank, state: state, loop: loop, logger: logger, device: device, send: send), at: MPRISModel.path)
            await player.publish()
            switch try await connection.requestName(busName) {
            case .primaryOwner, .alreadyOwner:
                break
            case .inQueue, .exists:
                logger.warning("another program owns \(busName): \(device)'s player waits for the name")
            }
        } catch {
            await connection.close()
            throw error
        }
        return player
    }

    /// Takes the phone's new state: announces what changed (one `PropertiesChanged` per
    /// interface), and `Seeked` when the position jumped.
    func update(_ media: ControlMedia, at now: ContinuousClock.Instant, isolation: isolated (any Actor)? = #isolation) async {
        let change = state.value.model.update(media, at: now)
        await publish()
        if let position = change.seeked {
            do {
                try await connection.emitSignal(
                    path: MPRISModel.path, interface: MPRISModel.playerInterface, member: "Seeked", arguments: [.int64(position)])
            } catch {
                logger.debug("\(busName): cannot emit Seeked: \(error)")
            }
        }
    }

    /// The phone's Bluetooth name is known (or changed): `Identity` says it.
    func rename(_ name: String?, isolation: isolated (any Actor)? = #isolation) async {
        guard state.value.model.phoneName != name else { return }
        state.value.model.phoneName = name
        await publish()
    }

    /// Releases the name and closes the connection.
    func stop(isolation: isolated (any Actor)? = #isolation) async {
        state.value.stopped = true
        state.value.volumeSteps = 0
        _ = try? await connection.releaseName(busName)
        await connection.close()
    }

    /// Sets the properties whose values differ from what the bus has: all of an interface's at
    /// once (one `PropertiesChanged`). Should the bus refuse that, each is set on its own, and
    /// one it refuses gets its fallback (`MPRISModel.fallback`), so a bad value never keeps the
    /// others stale (`PlaybackStatus` saying Playing after a pause because a title was refused).
    private func publish(isolation: isolated (any Actor)? = #isolation) async {
        let model = state.value.model
        for (interface, properties) in [(MPRISModel.rootInterface, model.rootProperties), (MPRISModel.playerInterface, model.playerProperties)] {
            let old = state.value.exported[interface.rawValue] ?? [:]
            let changed = properties.filter { old[$0.name] != $0.value }
            guard !changed.isEmpty, !state.value.stopped else { continue }
            do {
                try await connection.setExportedProperties(path: MPRISModel.path, interface: interface, values: changed)
                for (name, value) in changed { state.value.exported[interface.rawValue, default: [:]][name] = value }
            } catch {
                for property in changed { await publish(property, of: interface) }
            }
        }
    }

    /// Sets one property, or its fallback if the bus refuses its value.
    private func publish(_ property: (name: String, value: DBusValue), of interface: InterfaceName, isolation: isolated (any Actor)? = #isolation) async {
        do {
            try await connection.setExportedProperties(path: MPRISModel.path, interface: interface, values: [property])
        } catch {
            noteRefusal(property.name, error)
            if let fallback = state.value.model.fallback(for: property.name, of: property.value) {
                _ = try? await connection.setExportedProperties(path: MPRISModel.path, interface: interface, values: [(property.name, fallback)])
            }
        }
        // Recorded either way: the same refused value is not tried again, a new one is.
        state.value.exported[interface.rawValue, default: [:]][property.name] = property.value
    }

    /// A property the bus refused: a warning the first time for this player, then debug lines.
    /// The error names the rule broken, never the value (the track is the user's content).
    private func noteRefusal(_ property: String, _ error: any Error) {
        if state.value.refusalLogged {
            logger.debug("\(busName): the bus refused \(property) again: \(error)")
        } else {
            state.value.refusalLogged = true
            logger.warning("\(busName): the bus refused \(property) (\(error)); it shows a fallback, the other properties are current")
        }
    }

    // MARK: The object

    private static func object(
        model: MPRISModel, state: LoopBound<State>, loop: EventLoop, logger: Logger, device: String, send: @escaping Send
    ) -> ExportedObject {
        let root = ExportedInterface(
            MPRISModel.rootInterface,
            methods: [
                // CanRaise and CanQuit are false: MPRIS asks that these do nothing.
                .immediate("Raise") { _ in [] },
                .immediate("Quit") { _ in [] },
            ],
            properties: model.rootProperties.map { ExportedProperty(MemberName(stringLiteral: $0.name), value: $0.value) })

        var methods = MPRISModel.Method.allCases.map { method in
            ExportedMethod(MemberName(stringLiteral: method.rawValue)) { _ in
                try await perform(method, state: state, logger: logger, device: device, send: send)
                return []
            }
        }
        methods += [
            // CanSeek is false (AMS skips only by its own interval): MPRIS asks that these do nothing.
            .immediate("Seek", input: "x", inputNames: ["Offset"]) { _ in [] },
            .immediate("SetPosition", input: "ox", inputNames: ["TrackId", "Position"]) { _ in [] },
            .immediate("OpenUri", input: "s", inputNames: ["Uri"]) { _ in
                throw DBusError.remote(name: "org.freedesktop.DBus.Error.NotSupported", message: "an iPhone's player cannot open a URI from here")
            },
        ]
        var properties: [ExportedProperty] = []
        for (name, value) in model.playerProperties {
            let member = MemberName(stringLiteral: name)
            if name == "Volume" {
                properties.append(ExportedProperty(member, value: value, access: .readWrite) { newValue, _ in
                    try setVolume(newValue, state: state, loop: loop, logger: logger, device: device, send: send)
                })
            } else if name == "CanControl" {
                properties.append(ExportedProperty(member, value: value, changeSignal: .none))
            } else {
                properties.append(ExportedProperty(member, value: value))
            }
        }
        // Read when asked: MPRIS clients compute nothing and expect no signal for it.
        properties.append(.computed("Position", value: .int64(0)) {
            .int64(state.value.model.positionMicroseconds(at: loop.now))
        })
        let player = ExportedInterface(
            MPRISModel.playerInterface, methods: methods, properties: properties,
            signals: [ExportedSignal("Seeked", signature: "x", argumentNames: ["Position"])])
        return ExportedObject(root, player)
    }

    /// A method that reaches the phone: its command, sent and answered.
    private static func perform(
        _ method: MPRISModel.Method, state: LoopBound<State>, logger: Logger, device: String, send: Send
    ) async throws {
        guard let command = state.value.model.command(for: method) else {
            logger.debug("MPRIS \(method.rawValue) on \(device): nothing to do in this state")
            return
        }
        logger.debug("MPRIS \(method.rawValue) on \(device): sending \(command.rawValue)")
        if let refusal = await send(command) {
            logger.debug("MPRIS \(method.rawValue) on \(device): ancsd refused \(command.rawValue): \(refusal)")  // the companion says it
            throw DBusError.remote(name: errorName(refusal.code), message: refusal.message)
        }
    }

    /// The D-Bus error for the daemon's refusal: `org.mpris.MediaPlayer2.ancsd.UnsupportedCommand`, ….
    static func errorName(_ code: ControlErrorCode) -> String {
        let words = code.rawValue.split(separator: "_").map { $0.prefix(1).uppercased() + $0.dropFirst() }
        return errorPrefix + words.joined()
    }

    /// `Volume` set by a client: AMS has no volume to set, only steps up and down, so the
    /// difference becomes that many steps (1/16 each), sent one after another; a newer setting
    /// replaces the steps not sent yet. Refused when the player takes no volume steps or the
    /// phone has not said its volume.
    private static func setVolume(
        _ value: DBusValue, state: LoopBound<State>, loop: EventLoop, logger: Logger, device: String, send: @escaping Send
    ) throws {
        guard let target = value.doubleValue, target.isFinite else {
            throw DBusError.invalidArgument("Volume is a number from 0 to 1")
        }
        let model = state.value.model
        guard model.canStepVolume else {
            throw DBusError.remote(name: errorName(.unsupportedCommand), message: "the phone's player takes no volume steps now")
        }
        guard model.media.volume != nil else {
            throw DBusError.remote(name: errorName(.notAvailable), message: "the phone has not said its volume")
        }
        let steps = model.volumeSteps(to: target)
        state.value.volumeSteps = steps
        // The bus stores the value asked for; the phone's next state says where it went.
        state.value.exported[MPRISModel.playerInterface.rawValue, default: [:]]["Volume"] = value
        logger.debug("MPRIS Volume on \(device): \(steps) step(s) toward \(target)")
        guard steps != 0, !state.value.volumeSending else { return }
        state.value.volumeSending = true
        Task(executorPreference: loop) {
            while !state.value.stopped, state.value.volumeSteps != 0 {
                let up = state.value.volumeSteps > 0
                state.value.volumeSteps += up ? -1 : 1
                if let refusal = await send(up ? .volumeUp : .volumeDown) {
                    logger.debug("MPRIS Volume on \(device): ancsd refused a step: \(refusal)")  // the companion says it
                    state.value.volumeSteps = 0
                }
            }
            state.value.volumeSending = false
        }
    }
}
