import ANCS
import DBus

/// Everything the simulator knows, behind `PhoneSimulator.state`.
struct SimState {
    var devices: [DeviceState]
    /// The live bus connection (nil while "bluetoothd" is down).
    var connection: DBusConnection?
    var stopped = false
    /// Numbers the `garbage` noise sources started (`NoiseRun.id`).
    var noiseRuns: UInt64 = 0
    /// Agents registered by clients, in registration order.
    var agents: [AgentRegistration] = []
    /// Agents that asked to be the default, the current default last (bluetoothd keeps such a
    /// queue: when the default goes, the one before it is the default again).
    var defaultAgents: [AgentRegistration] = []
    /// Advertisements registered by clients, with the properties read from them.
    var advertisements: [AdvertisementRegistration] = []
    /// GATT applications registered by clients (GattManager1), with the objects read from them.
    var applications: [ApplicationRegistration] = []

    /// The agent bluetoothd asks about an incoming pairing: the default, else the first registered.
    var pairingAgent: AgentRegistration? { defaultAgents.last ?? agents.first }

    /// Forgets a client's agent: it stops being a default too.
    mutating func removeAgent(_ agent: AgentRegistration) {
        agents.removeAll { $0 == agent }
        defaultAgents.removeAll { $0 == agent }
    }

    init(devices: [DeviceState]) {
        self.devices = devices
    }
}

/// An `org.bluez.Agent1` a client registered.
struct AgentRegistration: Hashable, Sendable {
    let sender: String
    let path: ObjectPath
    let capability: String
}

/// An `org.bluez.LEAdvertisement1` a client registered.
struct AdvertisementRegistration: Sendable {
    let sender: String
    let path: ObjectPath
    let properties: [String: DBusValue]

    var discoverable: Bool { properties["Discoverable"]?.unwrapped.boolValue ?? false }
}

/// An `org.bluez.GattManager1` application a client registered: what its GetManagedObjects
/// answered at registration (path → interface → property).
struct ApplicationRegistration: Sendable {
    let sender: String
    let root: ObjectPath
    let objects: [ObjectPath: [String: [String: DBusValue]]]
}

/// Who is subscribed to one notify characteristic.
struct Subscription {
    /// Clients that called StartNotify (by unique name).
    var clients: Set<String> = []
    /// The socket handed out by AcquireNotify.
    var acquired: NotifySocket?

    /// True when notifications are enabled on the phone (its CCCD is written).
    var isActive: Bool { !clients.isEmpty || acquired != nil }

    /// The names of the sessions that `other_notify_clients` gives other programs.
    static let otherProgram = ":other-program-"

    /// True when a client other than the simulated other programs is subscribed.
    var hasOwnClient: Bool { acquired?.isOpen == true || clients.contains { !$0.hasPrefix(Self.otherProgram) } }
}

/// Object paths of one phone.
struct DevicePaths {
    let device: ObjectPath
    /// The ANCS service.
    let service: ObjectPath
    let notificationSource: ObjectPath
    let controlPoint: ObjectPath
    let dataSource: ObjectPath
    /// The Apple Media Service, after ANCS's handles.
    let amsService: ObjectPath
    let remoteCommand: ObjectPath
    let entityUpdate: ObjectPath
    let entityAttribute: ObjectPath

    init(_ settings: DeviceSettings) { self.init(address: settings.address) }

    /// The paths of a device object for `address` (`dev_AA_BB_…`).
    init(address: String) {
        let device = BlueZ.adapterPath.rawValue + "/dev_" + address.replacingAll(":", with: "_")
        self.device = ObjectPath(validating: device) ?? "/org/bluez/hci0/dev_invalid"
        service = ObjectPath(validating: device + "/service0010") ?? "/org/bluez/hci0/dev_invalid/service0010"
        amsService = ObjectPath(validating: device + "/service0019") ?? "/org/bluez/hci0/dev_invalid/service0019"
        func path(_ c: PhoneCharacteristic) -> ObjectPath {
            let service = c.isAMS ? "/service0019/" : "/service0010/"
            return ObjectPath(validating: device + service + c.rawValue) ?? "/org/bluez/hci0/dev_invalid/char"
        }
        notificationSource = path(.notificationSource)
        controlPoint = path(.controlPoint)
        dataSource = path(.dataSource)
        remoteCommand = path(.remoteCommand)
        entityUpdate = path(.entityUpdate)
        entityAttribute = path(.entityAttribute)
    }

    func characteristic(_ c: PhoneCharacteristic) -> ObjectPath {
        switch c {
        case .notificationSource: notificationSource
        case .controlPoint: controlPoint
        case .dataSource: dataSource
        case .remoteCommand: remoteCommand
        case .entityUpdate: entityUpdate
        case .entityAttribute: entityAttribute
        }
    }

    /// The service `c` belongs to.
    func service(of c: PhoneCharacteristic) -> ObjectPath { c.isAMS ? amsService : service }
}

/// One phone: its ANCS model, its link, and the misbehaviour switched on.
struct DeviceState {
    let settings: DeviceSettings
    /// Where bluetoothd shows the phone now: under its identity address (`settings.address`)
    /// once bonded, under a resolvable private address before (strict).
    var paths: DevicePaths
    /// The Device1 Address and AddressType bluetoothd shows now.
    var address: String
    var addressType: String
    /// Strict: the temporary (RPA) device object has carried a connection already; the next
    /// connection comes under a fresh address.
    var addressUsed = false
    /// A `pair` step has the phone connected and waits for the accessory to demand pairing.
    var awaitingTrigger = false
    /// A pairing (RequestConfirmation) is under way.
    var pairing = false
    /// The accessory sent a security request (Device1.Pair()) that the phone has not acted on.
    var securityRequested = false
    /// How the last pairing the phone went through ended (Pair() callers wait for it).
    var pairingResult: (attempt: UInt64, outcome: PairingOutcome)?
    /// Counts pairings, so a Pair() caller knows which result is its own.
    var pairingAttempt: UInt64 = 0
    /// Device1.Pair() calls received (security requests), whatever they were answered.
    var securityRequests = 0
    /// When the link last came up (for the security request's delay in the log).
    var connectedAt: ContinuousClock.Instant?
    /// A stranger's passkey-entry pairing (`stranger_pair`) is under way.
    var strangerPairing = false
    /// What the phone saw of the accessory's HID service after bonding.
    var hid = HIDObservation()
    var model: PhoneModel
    var connected: Bool
    /// The link is down but `Connected` still reads true: bluetoothd says so a moment after it
    /// closed the sockets and set `ServicesResolved` false (`linkDownGap`).
    var connectedFalsePending = false
    /// bluetoothd knows the phone (its Device1 is exported).
    var present: Bool
    var paired: Bool
    var bonded: Bool
    var trusted: Bool
    /// The phone's ANCS service is in bluetoothd's tree (from the start, or once bonded).
    var ancsExported: Bool
    /// Changes at every disconnect and connect; queued values of an old session are dropped.
    var session: UInt64 = 0
    var notificationSource = Subscription()
    var dataSource = Subscription()
    /// AMS's notifying characteristics.
    var remoteCommand = Subscription()
    var entityUpdate = Subscription()
    /// The phone's Apple Media Service (nil unless the scenario's `ams` is true).
    var media: MediaState?

    /// The phone's AMS service is in bluetoothd's tree: it comes and goes with ANCS (iOS shows
    /// both only to a bonded accessory), and while the phone offers it.
    var amsExported: Bool { ancsExported && media?.offered ?? false }
    /// Delay before each Data Source response.
    var slowDelay: Double = 0
    /// Send half of the next response, then drop the link.
    var midResponseDisconnect = false
    /// How many more attribute requests are acknowledged but never answered on the Data Source.
    var silentRequests = 0
    /// The next Control Point write drops the link before it is answered.
    var disconnectOnWrite = false
    /// How many more StartNotify/AcquireNotify calls fail with "Notify acquired".
    var refusedSubscriptions = 0
    /// `stale_sockets`: the next link loss keeps the ANCS sockets registered, closed.
    var staleSocketsOnDrop = false
    /// What the phone stopped doing without telling (`silent_drop`, `sharing_off`, …).
    var silence = Silence()
    /// The `garbage` noise source sending now (`Garbage.swift`); a link loss does not end it.
    var noise: NoiseRun?

    init(settings: DeviceSettings, apps: [String: String], policy: IOSPolicy = .lenient) {
        self.settings = settings
        if policy == .strict, !settings.bonded {
            // Before bonding iOS shows only a resolvable private address.
            address = DeviceState.resolvablePrivateAddress()
            addressType = "random"
        } else {
            address = settings.address
            addressType = settings.addressType
        }
        paths = DevicePaths(address: address)
        model = PhoneModel(apps: apps)
        connected = settings.connected
        present = settings.present
        paired = settings.paired
        bonded = settings.bonded
        trusted = settings.trusted
        // iOS shows ANCS only to a bonded accessory.
        ancsExported = settings.present && (policy == .lenient || settings.bonded)
    }

    /// A fresh resolvable private address: the two top bits 01 (first byte 0x40…0x7F).
    static func resolvablePrivateAddress() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<6).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes[0] = 0x40 | (bytes[0] & 0x3F)
        return bytes.map { b in String(BlueZError.hex(b).dropFirst(2)).uppercasedASCII }.joined(separator: ":")
    }

    /// Who is subscribed to `c` (nobody, for a characteristic that does not notify).
    func subscription(_ c: PhoneCharacteristic) -> Subscription {
        switch c {
        case .notificationSource: notificationSource
        case .dataSource: dataSource
        case .remoteCommand: remoteCommand
        case .entityUpdate: entityUpdate
        case .controlPoint, .entityAttribute: Subscription()
        }
    }

    /// Changes who is subscribed to `c` (a characteristic that does not notify keeps nobody).
    mutating func modifySubscription<T>(_ c: PhoneCharacteristic, _ body: (inout Subscription) -> T) -> T {
        switch c {
        case .notificationSource: return body(&notificationSource)
        case .dataSource: return body(&dataSource)
        case .remoteCommand: return body(&remoteCommand)
        case .entityUpdate: return body(&entityUpdate)
        case .controlPoint, .entityAttribute:
            var nobody = Subscription()
            return body(&nobody)
        }
    }

    mutating func newSession(renumber: Bool) {
        session &+= 1
        model.newSession(renumber: renumber)
    }

    /// Ends every subscription, closing acquired sockets; returns the property changes.
    @discardableResult
    mutating func dropSubscriptions() -> [PropertyChange] {
        var kept: [PhoneCharacteristic] = []
        if staleSocketsOnDrop {
            staleSocketsOnDrop = false
            // Closed for the client (HUP), yet still registered until a StopNotify.
            kept = [.notificationSource, .dataSource].filter { subscription($0).acquired != nil }
            for c in kept { subscription(c).acquired?.close() }
        }
        let changes = endSubscriptions(PhoneCharacteristic.notifying.filter { !kept.contains($0) })
        // A new link is a new ANCS session: the phone sends again.
        silence.linkLost()
        midResponseDisconnect = false
        return changes
    }

    /// Ends the subscriptions of `characteristics`, closing acquired sockets; returns the
    /// property changes. The Entity Update's going takes the AMS registrations with it.
    mutating func endSubscriptions(_ characteristics: [PhoneCharacteristic]) -> [PropertyChange] {
        var changes: [PropertyChange] = []
        for c in characteristics {
            let path = paths.characteristic(c)
            modifySubscription(c) { sub in
                if let socket = sub.acquired {
                    socket.close()
                    changes.append(PropertyChange(path, BlueZ.gattCharacteristic1, "NotifyAcquired", .bool(false)))
                }
                if !sub.clients.isEmpty {
                    changes.append(PropertyChange(path, BlueZ.gattCharacteristic1, "Notifying", .bool(false)))
                }
                sub = Subscription()
            }
        }
        if characteristics.contains(.entityUpdate) { media?.forgetRegistrations() }
        return changes
    }

    /// Gives `count` other programs StartNotify sessions on the Notification Source and Data
    /// Source, as bluetoothctl's "notify on" would; returns the property changes.
    mutating func addOtherPrograms(_ count: Int) -> [PropertyChange] {
        guard count > 0 else { return [] }
        var changes: [PropertyChange] = []
        for c in [PhoneCharacteristic.notificationSource, .dataSource] {
            let path = paths.characteristic(c)
            modifySubscription(c) { sub in
                if sub.clients.isEmpty { changes.append(PropertyChange(path, BlueZ.gattCharacteristic1, "Notifying", .bool(true))) }
                for i in 1...count { sub.clients.insert(Subscription.otherProgram + String(i)) }
            }
        }
        return changes
    }

    /// Releases the acquired socket of `c`, if any.
    mutating func releaseAcquired(_ c: PhoneCharacteristic) -> [PropertyChange] {
        let path = paths.characteristic(c)
        return modifySubscription(c) { sub in
            guard let socket = sub.acquired else { return [] }
            socket.close()
            sub.acquired = nil
            return [PropertyChange(path, BlueZ.gattCharacteristic1, "NotifyAcquired", .bool(false))]
        }
    }

    /// Ends the StartNotify session and acquired socket that `client` holds on `c`.
    mutating func endSession(of client: String, _ c: PhoneCharacteristic) -> [PropertyChange] {
        var changes: [PropertyChange] = []
        if subscription(c).acquired?.sender == client { changes += releaseAcquired(c) }
        let path = paths.characteristic(c)
        modifySubscription(c) { sub in
            if sub.clients.remove(client) != nil, sub.clients.isEmpty {
                changes.append(PropertyChange(path, BlueZ.gattCharacteristic1, "Notifying", .bool(false)))
            }
        }
        return changes
    }
}

/// What a strict phone saw of the accessory's HID service once bonded.
struct HIDObservation {
    /// The Report Map it read (nil: not read, or no Report Map).
    var reportMap: [UInt8]?
    /// The Report Map has a Generic Desktop Keyboard (0x06) usage.
    var keyboard = false
    /// It has one although the scenario asked for the remote.
    var flagged = false
    /// The Report characteristic the phone subscribed to (StartNotify on the application).
    var report: (sender: String, path: ObjectPath)?
    /// Input reports received: PropertiesChanged of the Report's Value.
    var inputReports = 0
    /// "sender path" of the Report characteristics whose signals the simulator's current bus
    /// connection listens to (cleared at a bluetoothd restart).
    var watched: Set<String> = []
}
