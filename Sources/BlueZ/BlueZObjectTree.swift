public import BluetoothUUIDs
public import DBus

/// A bonded-or-not Bluetooth device as BlueZ describes it (`org.bluez.Device1`).
public struct BlueZDevice: Hashable, Sendable {
    public var path: ObjectPath
    /// `AA:BB:CC:DD:EE:FF`, upper case.
    public var address: String
    public var name: String?
    /// The adapter's object path, e.g. `/org/bluez/hci0`.
    public var adapter: ObjectPath?
    public var paired: Bool
    /// BlueZ ≥ 5.69 reports bonding separately; nil where the property does not exist.
    public var bonded: Bool?
    public var trusted: Bool
    public var connected: Bool
    public var servicesResolved: Bool
    /// True if the device's `UUIDs` include the ANCS service: BlueZ has seen ANCS on it, and it
    /// keeps a bonded device's services while the device is away, so this is a paired iPhone.
    public var offersANCS = false

    /// True if the device is bonded: `Bonded` where BlueZ has it, else `Paired`.
    public var isBonded: Bool { bonded ?? paired }

    /// The adapter's name, e.g. `hci0`.
    public var adapterName: String? {
        adapter.flatMap { $0.rawValue.split(separator: "/").last.map(String.init) }
    }
}

/// The three ANCS characteristics of a device, by object path.
public struct ANCSCharacteristics: Hashable, Sendable {
    public var service: ObjectPath
    public var notificationSource: ObjectPath
    public var controlPoint: ObjectPath
    public var dataSource: ObjectPath
}

/// A mirror of bluetoothd's object tree, kept current from GetManagedObjects, InterfacesAdded,
/// InterfacesRemoved and PropertiesChanged. Pure data: no I/O.
public struct BlueZObjectTree: Sendable {
    public typealias Interfaces = [String: [String: DBusValue]]

    /// Every object with its interfaces and their properties.
    public private(set) var objects: [ObjectPath: Interfaces] = [:]

    public init(_ objects: [ObjectPath: Interfaces] = [:]) {
        self.objects = objects
    }

    /// Applies `InterfacesAdded`.
    public mutating func add(_ path: ObjectPath, _ interfaces: Interfaces) {
        objects[path, default: [:]].merge(interfaces) { _, new in new }
    }

    /// Applies `InterfacesRemoved`; an object without interfaces left is gone.
    public mutating func remove(_ path: ObjectPath, _ interfaces: [String]) {
        guard var existing = objects[path] else { return }
        for name in interfaces { existing.removeValue(forKey: name) }
        objects[path] = existing.isEmpty ? nil : existing
    }

    /// Applies `PropertiesChanged`; changes for unknown objects or interfaces are ignored.
    public mutating func change(_ path: ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String]) {
        guard objects[path]?[interface] != nil else { return }
        for (name, value) in changed { objects[path]?[interface]?[name] = value }
        for name in invalidated { objects[path]?[interface]?.removeValue(forKey: name) }
    }

    /// Forgets everything (bluetoothd went away).
    public mutating func clear() { objects = [:] }

    /// A property's value, variants unwrapped.
    public func property(_ path: ObjectPath, _ interface: String, _ name: String) -> DBusValue? {
        objects[path]?[interface]?[name]?.unwrapped
    }

    /// The device at `path`, if there is one with a valid address.
    public func device(at path: ObjectPath) -> BlueZDevice? {
        guard let properties = objects[path]?[BlueZ.deviceInterface],
              let address = properties["Address"]?.unwrapped.stringValue.flatMap(normalizedAddress)
        else { return nil }
        func flag(_ name: String) -> Bool { properties[name]?.unwrapped.boolValue ?? false }
        return BlueZDevice(
            path: path, address: address,
            name: (properties["Alias"] ?? properties["Name"])?.unwrapped.stringValue,
            adapter: properties["Adapter"]?.unwrapped.objectPathValue,
            paired: flag("Paired"), bonded: properties["Bonded"]?.unwrapped.boolValue, trusted: flag("Trusted"),
            connected: flag("Connected"), servicesResolved: flag("ServicesResolved"),
            offersANCS: (properties["UUIDs"]?.unwrapped.stringArray ?? []).contains { BluetoothUUID($0) == ANCSUUID.service })
    }

    /// Every device, sorted by path.
    public var devices: [BlueZDevice] {
        objects.keys.sorted().compactMap { device(at: $0) }
    }

    /// The adapters' object paths, sorted.
    public var adapters: [ObjectPath] {
        objects.filter { $0.value[BlueZ.adapterInterface] != nil }.keys.sorted()
    }

    /// The ANCS characteristics under a device, if it exposes all three.
    public func ancsCharacteristics(of device: ObjectPath) -> ANCSCharacteristics? {
        for service in gattServices(ANCSUUID.service, of: device) {
            let found = service.characteristics
            if let ns = found[ANCSUUID.notificationSource], let cp = found[ANCSUUID.controlPoint],
               let ds = found[ANCSUUID.dataSource] {
                return ANCSCharacteristics(service: service.path, notificationSource: ns, controlPoint: cp, dataSource: ds)
            }
        }
        return nil
    }

    /// Every instance of the GATT service `uuid` under a device, in path order, each with the
    /// characteristics BlueZ has resolved under it (any of them may be missing).
    public func gattServices(_ uuid: BluetoothUUID, of device: ObjectPath) -> [GattServiceObjects] {
        let services = objects.compactMap { path, interfaces -> ObjectPath? in
            guard let service = interfaces[BlueZ.gattServiceInterface],
                  service["Device"]?.unwrapped.objectPathValue == device,
                  service["UUID"]?.unwrapped.stringValue.flatMap(BluetoothUUID.init) == uuid
            else { return nil }
            return path
        }
        return services.sorted().map { service in
            var found: [BluetoothUUID: ObjectPath] = [:]
            for (path, interfaces) in objects {
                guard let characteristic = interfaces[BlueZ.gattCharacteristicInterface],
                      characteristic["Service"]?.unwrapped.objectPathValue == service,
                      let uuid = characteristic["UUID"]?.unwrapped.stringValue.flatMap(BluetoothUUID.init)
                else { continue }
                // Two characteristics of one UUID in one service: the first by path, always.
                if let existing = found[uuid], existing < path { continue }
                found[uuid] = path
            }
            return GattServiceObjects(path: service, characteristics: found)
        }
    }
}

/// One GATT service of a device as BlueZ exposes it: its object and its characteristics'.
public struct GattServiceObjects: Hashable, Sendable {
    public var path: ObjectPath
    public var characteristics: [BluetoothUUID: ObjectPath]

    public init(path: ObjectPath, characteristics: [BluetoothUUID: ObjectPath]) {
        self.path = path
        self.characteristics = characteristics
    }
}

/// `aa:bb:cc:dd:ee:ff` or `AA-BB-…` as `AA:BB:CC:DD:EE:FF`; nil if it is not a Bluetooth address.
public func normalizedAddress(_ text: String) -> String? {
    let parts = text.split(separator: ":", omittingEmptySubsequences: false).flatMap { $0.split(separator: "-", omittingEmptySubsequences: false) }
    guard parts.count == 6, parts.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isHexDigit) }) else { return nil }
    return parts.map { $0.uppercased() }.joined(separator: ":")
}

/// `AA:BB:CC:DD:EE:FF` from a BlueZ device path, else the path.
public func deviceLabel(_ path: ObjectPath) -> String {
    guard let last = path.rawValue.split(separator: "/").last, last.hasPrefix("dev_") else { return path.rawValue }
    return last.dropFirst(4).split(separator: "_").joined(separator: ":")
}
