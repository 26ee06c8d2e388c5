import ANCS
import BlueZ
public import DBus
public import JSON
public import PhoneSimulator
import Synchronization

/// An iPhone on a real BlueZ stack: the ANCS Notification Provider as a GATT application on one
/// adapter, acting as an iPhone does towards an accessory (`PhonePolicy`). Strict, the default:
/// it connects (the central role, as iOS takes) only to an accessory whose advertisement iOS
/// would list, lets its own bluetoothd's HID host pair and reconnect, registers ANCS once
/// bonded, and reports what its HID host made of the accessory (report map, input reports).
/// Lenient: it pairs once services are resolved and reconnects itself. Either way it
/// re-registers after bluetoothd restarts, replays its notifications when the Notification
/// Source is subscribed, and answers Control Point writes through `PhoneModel` with Data
/// Source responses cut to the link's MTU. With the scenario's `ams`, it serves the Apple Media
/// Service beside ANCS in the same application (`AMSApplication`, `Media.swift`): the
/// simulator's `MediaPlayer`, its bytes written here.
///
/// Everything it sees and does is reported as JSON Lines through `report` (`{"event": ...}`),
/// so a test can follow it. Scenario steps (docs/simulator.md) drive its notifications.
public final class GattPhone: Sendable {
    /// How the phone is set up.
    public struct Configuration: Sendable {
        /// The adapter that plays the phone, such as `hci1`.
        public var adapter: String
        /// The accessory's address (the adapter ancsd runs on).
        public var peer: String
        public var bus: BusAddress
        public var settings: ScenarioSettings
        public var policy: PhonePolicy

        public init(adapter: String, peer: String, bus: BusAddress, settings: ScenarioSettings, policy: PhonePolicy = .strict) {
            self.adapter = adapter
            self.peer = peer
            self.bus = bus
            self.settings = settings
            self.policy = policy
        }
    }

    struct State: Sendable {
        var model: PhoneModel
        /// Whether the consumer subscribed to the Notification Source in this connection.
        var subscribed = false
        /// bluetoothd called StopNotify on our Notification Source in this connection (the
        /// consumer wrote its CCC off) and has not called StartNotify since: only that call
        /// means the consumer is back, whatever the accessory's side of the bus still shows.
        var unsubscribedByCCC = false
        /// The ATT MTU bluetoothd last reported with a Control Point write.
        var mtu = 23
        /// The bluetoothd (unique name) our application and agent are registered with.
        var registeredWith: String?
        var connected = false
        var pairAttempted = false
        var reconnect = true
        /// No connection attempt before this: a phone does not reconnect within milliseconds of
        /// bluetoothd starting, its radio coming on or an attempt failing, and bluetoothd needs
        /// the time to load its bonds.
        var connectNotBefore = ContinuousClock.now
        var discovering = false
        /// Strict: the ANCS application is registered with `registeredWith` (only once bonded).
        var applicationRegistered = false
        /// Strict: the accessory was listed and the user tapped it (one Connect()).
        var tapped = false
        /// Strict: the bond was reported (`paired`).
        var bondReported = false
        /// Strict: a `connect` step after a `disconnect`: the user taps the accessory once.
        var userConnect = false
        /// Strict: the last listing reported, so each change is reported once.
        var listing: AdvertisementListing?
        /// A `silent_drop` in force.
        var silentDrop = SilentDropState()
        /// hidraw nodes whose input reports are being counted.
        var hidrawWatched: Set<String> = []
        /// The accessory's services were resolved on the current link: seeing them unresolved
        /// while connected means the link went down and up between two looks.
        var resolvedOnLink = false
        var inputReports = 0
        /// Strict: since when the bonded accessory has been away (nil while connected).
        var awaySince: ContinuousClock.Instant?
        /// The Apple Media Service (nil unless the scenario's `ams` is true).
        var media: GattPhoneMedia?
    }

    let configuration: Configuration
    let report: @Sendable (JSONObject) -> Void
    let state: Mutex<State>
    let adapterPath: ObjectPath
    static let agentPath: ObjectPath = "/org/ancsd/phone/agent"
    /// Values to notify, in order: (characteristic, value). One queue for ANCS and AMS, so that
    /// every value keeps `notificationSpacing` from the one before it.
    let outbox: AsyncStream<(NotifyingCharacteristic, [UInt8])>
    let outboxInput: AsyncStream<(NotifyingCharacteristic, [UInt8])>.Continuation

    public init(_ configuration: Configuration, report: @escaping @Sendable (JSONObject) -> Void) throws {
        guard let path = ObjectPath(validating: "/org/bluez/\(configuration.adapter)") else {
            throw DBusError.invalidArgument("\(configuration.adapter) is not an adapter name")
        }
        self.configuration = configuration
        self.report = report
        adapterPath = path
        var initial = State(model: PhoneModel(apps: configuration.settings.apps))
        if configuration.settings.ams { initial.media = GattPhoneMedia(configuration.settings.media, now: .now) }
        state = Mutex(initial)
        (outbox, outboxInput) = AsyncStream.makeStream()
    }

    func event(_ name: String, _ fields: JSONObject = [:]) {
        var object: JSONObject = ["event": .string(name)]
        for (key, value) in fields { object.append(key, value) }
        report(object)
    }

    // MARK: Running

    /// Connects to the bus, exports the application and the agent, then keeps the phone
    /// registered and connected until the task is cancelled.
    public func run(steps: AsyncStream<ScenarioStep>) async throws {
        let connection = try await DBusConnection.connect(to: configuration.bus)
        let owner = try await BlueZOwner.track(on: connection)
        try await connection.export(PairingAgent(owner: owner) { [self] request in
            // The phone's user taps "Pair" on every request.
            event("agent", ["request": .string("\(request)")])
            switch request {
            case .requestPasskey: return .passkey(0)
            case .requestPinCode: return .pinCode("0000")
            default: return .accepted
            }
        }.object, at: Self.agentPath)
        try await ANCSApplication.export(on: connection, owner: owner, handlers: ANCSApplicationHandlers(
            write: { [self] value, options in try await controlPointWrite(value, options: options) },
            notify: { [self] role, enabled in notifyChanged(role, enabled) }))
        if configuration.settings.ams {
            try await AMSApplication.export(
                on: connection, owner: owner, roles: amsRoles,
                handlers: AMSApplicationHandlers(
                    write: { [self] role, value, options in try amsWrite(role, value, options: options) },
                    read: { [self] offset, options in try entityAttributeRead(offset: offset, options: options) },
                    notify: { [self] role, enabled in amsNotifyChanged(role, enabled) }))
        }
        // The link's ups and downs as bluetoothd signals them: a bonded phone's bluetoothd
        // reconnects within milliseconds, between two looks of `maintain`, and each new link
        // is a new ANCS session. (bluetoothd may send only the last value of a quick bounce;
        // `strictTick` and the HID host watch catch those.)
        let peerPath = adapterPath.rawValue + "/dev_" + configuration.peer.split(separator: ":").joined(separator: "_")
        _ = try await connection.subscribe(to: .propertiesChanged(pathNamespace: adapterPath, interface: "org.bluez.Device1")) {
            [self] signal in
            guard signal.path.rawValue == peerPath, signal.arguments.count > 1 else { return }
            for entry in signal.arguments[1].dictionaryValue ?? [] where entry.key.stringValue == "Connected" {
                if let connected = entry.value.unwrapped.boolValue { linkChanged(connected: connected) }
            }
        }
        event("ready", ["adapter": .string(configuration.adapter), "peer": .string(configuration.peer)])
        await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await self.deliver(on: connection) }
            group.addTask { await self.maintain(connection, owner: owner) }
            group.addTask {
                for await step in steps { await self.perform(step, connection) }
                self.event("end")
            }
            _ = try? await group.next()
            group.cancelAll()
        }
        outboxInput.finish()
        await owner.stop()
        await connection.close()
    }

    /// Sends queued values as `PropertiesChanged` of `Value`, one at a time and in order.
    ///
    /// bluetoothd 5.66 gathers the notifications it sends within 10 ms into one Multiple Handle
    /// Value Notification, and its buffer arithmetic (src/shared/gatt-server.c, fixed in later
    /// releases) overflows when a value fills the PDU: the earlier values are lost. An iPhone
    /// sends fragments back to back; on BlueZ the phone leaves 40 ms between values so that
    /// each one leaves in a PDU of its own.
    private func deliver(on connection: DBusConnection) async {
        for await (characteristic, value) in outbox {
            // A silent drop: subscribed, yet nothing is sent.
            if case .ancs(let role) = characteristic, state.withLock({ $0.silentDrop.dropped.contains(role) }) { continue }
            do {
                try await connection.setExportedProperty(
                    path: characteristic.path, interface: ANCSApplication.characteristicInterface, name: "Value",
                    value: .byteArray(value))
            } catch {
                event("error", ["message": .string("notify \(characteristic.name): \(error)")])
            }
            try? await Task.sleep(for: Self.notificationSpacing)
        }
    }

    static let notificationSpacing: Duration = .milliseconds(40)
}

/// A characteristic whose values the phone notifies: ANCS's or AMS's.
enum NotifyingCharacteristic: Hashable, Sendable {
    case ancs(ANCSCharacteristicRole)
    case ams(AMSCharacteristicRole)

    var path: ObjectPath {
        switch self {
        case .ancs(let role): role.path
        case .ams(let role): role.path
        }
    }

    var name: String {
        switch self {
        case .ancs(let role): role.rawValue
        case .ams(let role): role.rawValue
        }
    }
}
