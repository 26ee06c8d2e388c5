import ANCS
import DBus

/// Everything the simulator knows, behind `PhoneSimulator.state`.
struct SimState {
    var devices: [DeviceState]
    /// The live bus connection (nil while "bluetoothd" is down).
    var connection: DBusConnection?
    var stopped = false
    /// Agents and advertisements registered by clients: "agent:SENDER:PATH", "adv:SENDER:PATH".
    var registrations: Set<String> = []

    init(devices: [DeviceState]) {
        self.devices = devices
    }
}

/// Who is subscribed to one notify characteristic.
struct Subscription {
    /// Clients that called StartNotify (by unique name).
    var clients: Set<String> = []
    /// The socket handed out by AcquireNotify.
    var acquired: NotifySocket?

    /// True when notifications are enabled on the phone (its CCCD is written).
    var isActive: Bool { !clients.isEmpty || acquired != nil }
}

/// Object paths of one phone.
struct DevicePaths {
    let device: ObjectPath
    let service: ObjectPath
    let notificationSource: ObjectPath
    let controlPoint: ObjectPath
    let dataSource: ObjectPath

    init(_ settings: DeviceSettings) {
        let device = BlueZ.adapterPath.rawValue + "/" + settings.pathElement
        self.device = ObjectPath(validating: device) ?? "/org/bluez/hci0/dev_invalid"
        service = ObjectPath(validating: device + "/service0010") ?? "/org/bluez/hci0/dev_invalid/service0010"
        func path(_ c: ANCSCharacteristic) -> ObjectPath {
            ObjectPath(validating: device + "/service0010/" + c.rawValue) ?? "/org/bluez/hci0/dev_invalid/char"
        }
        notificationSource = path(.notificationSource)
        controlPoint = path(.controlPoint)
        dataSource = path(.dataSource)
    }

    func characteristic(_ c: ANCSCharacteristic) -> ObjectPath {
        switch c {
        case .notificationSource: notificationSource
        case .controlPoint: controlPoint
        case .dataSource: dataSource
        }
    }
}

/// One phone: its ANCS model, its link, and the misbehaviour switched on.
struct DeviceState {
    let settings: DeviceSettings
    let paths: DevicePaths
    var model: PhoneModel
    var connected: Bool
    /// Changes at every disconnect and connect; queued values of an old session are dropped.
    var session: UInt64 = 0
    var notificationSource = Subscription()
    var dataSource = Subscription()
    /// Delay before each Data Source response.
    var slowDelay: Double = 0
    /// Send half of the next response, then drop the link.
    var midResponseDisconnect = false

    init(settings: DeviceSettings, apps: [String: String]) {
        self.settings = settings
        paths = DevicePaths(settings)
        model = PhoneModel(apps: apps)
        connected = settings.connected
    }

    func subscription(_ c: ANCSCharacteristic) -> Subscription {
        c == .dataSource ? dataSource : notificationSource
    }

    mutating func modifySubscription<T>(_ c: ANCSCharacteristic, _ body: (inout Subscription) -> T) -> T {
        c == .dataSource ? body(&dataSource) : body(&notificationSource)
    }

    mutating func newSession(renumber: Bool) {
        session &+= 1
        model.newSession(renumber: renumber)
    }

    /// Ends every subscription, closing acquired sockets; returns the property changes.
    @discardableResult
    mutating func dropSubscriptions() -> [PropertyChange] {
        var changes: [PropertyChange] = []
        for c in [ANCSCharacteristic.notificationSource, .dataSource] {
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
        midResponseDisconnect = false
        return changes
    }

    /// Releases the acquired socket of `c`, if any.
    mutating func releaseAcquired(_ c: ANCSCharacteristic) -> [PropertyChange] {
        let path = paths.characteristic(c)
        return modifySubscription(c) { sub in
            guard let socket = sub.acquired else { return [] }
            socket.close()
            sub.acquired = nil
            return [PropertyChange(path, BlueZ.gattCharacteristic1, "NotifyAcquired", .bool(false))]
        }
    }

    /// Ends the StartNotify session and acquired socket that `client` holds on `c`.
    mutating func endSession(of client: String, _ c: ANCSCharacteristic) -> [PropertyChange] {
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
