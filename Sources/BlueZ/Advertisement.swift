import ANCS
public import DBus

/// An `org.bluez.LEAdvertisement1` to export (BlueZ doc/advertising-api.txt): a peripheral that
/// solicits ANCS, so iOS offers to pair with it and reconnects to it once bonded.
///
/// Legacy advertising data holds 31 bytes: flags (3) + the 128-bit solicitation (18) +
/// appearance (4) leave 6, so BlueZ may shorten or drop a long `LocalName`.
public struct Advertisement: Sendable {
    /// The interface name.
    public static let interface: InterfaceName = "org.bluez.LEAdvertisement1"
    /// GAP appearance 0x0080, Generic Computer.
    public static let computerAppearance: UInt16 = 0x0080

    public var localName: String
    public var appearance: UInt16 = Advertisement.computerAppearance
    /// True while new phones may find us (the pairing window); false to be merely connectable.
    public var discoverable: Bool

    public init(localName: String, discoverable: Bool) {
        self.localName = localName
        self.discoverable = discoverable
    }

    /// The properties bluetoothd reads with GetAll.
    public var properties: [String: DBusValue] {
        [
            "Type": .string("peripheral"),
            "SolicitUUIDs": .stringArray([ANCSUUID.service.description.lowercased()]),
            "LocalName": .string(localName),
            "Appearance": .uint16(appearance),
            "Discoverable": .bool(discoverable),
        ]
    }

    /// The object to export; `Release` from bluetoothd calls `onRelease`, from anyone else it is refused.
    public func object(owner: BlueZOwner, onRelease: @escaping @Sendable () async -> Void) -> ExportedObject {
        ExportedObject(ExportedInterface(
            Self.interface,
            methods: [
                ExportedMethod("Release") { call in
                    try await owner.requireBlueZ(call)
                    await onRelease()
                    return []
                }
            ],
            properties: properties.sorted { $0.key < $1.key }.compactMap { key, value in
                MemberName(validating: key).map { ExportedProperty($0, value: value) }
            }))
    }
}

/// `org.bluez.LEAdvertisingManager1` calls on one adapter.
public struct AdvertisingManager: Sendable {
    public let connection: DBusConnection
    public let adapter: ObjectPath

    public init(connection: DBusConnection, adapter: ObjectPath) {
        self.connection = connection
        self.adapter = adapter
    }

    /// `RegisterAdvertisement(path, {})`; bluetoothd reads the properties before it answers.
    public func register(_ path: ObjectPath) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: adapter, interface: InterfaceName(BlueZ.advertisingManagerInterface),
            member: "RegisterAdvertisement", arguments: [.objectPath(path), .variantDictionary([:])],
            expecting: .empty, timeout: .seconds(10))
    }

    /// `UnregisterAdvertisement(path)`.
    public func unregister(_ path: ObjectPath) async throws {
        _ = try await connection.call(
            destination: BlueZ.service, path: adapter, interface: InterfaceName(BlueZ.advertisingManagerInterface),
            member: "UnregisterAdvertisement", arguments: [.objectPath(path)], expecting: .empty, timeout: .seconds(10))
    }
}

/// The adapter settings a pairing window changes, to put them back afterwards.
public struct AdapterVisibility: Sendable, Hashable {
    public var pairable: Bool
    public var discoverable: Bool
    public var pairableTimeout: UInt32
    public var discoverableTimeout: UInt32

    public init(pairable: Bool, discoverable: Bool, pairableTimeout: UInt32, discoverableTimeout: UInt32) {
        self.pairable = pairable
        self.discoverable = discoverable
        self.pairableTimeout = pairableTimeout
        self.discoverableTimeout = discoverableTimeout
    }

    /// Reads them from the adapter.
    public static func read(_ adapter: ObjectPath, on connection: DBusConnection) async throws -> AdapterVisibility {
        let p = try await connection.getAllProperties(
            destination: BlueZ.service, path: adapter, interface: InterfaceName(BlueZ.adapterInterface), timeout: .seconds(10))
        return AdapterVisibility(
            pairable: p["Pairable"]?.unwrapped.boolValue ?? false,
            discoverable: p["Discoverable"]?.unwrapped.boolValue ?? false,
            pairableTimeout: p["PairableTimeout"]?.unwrapped.uint32Value ?? 0,
            discoverableTimeout: p["DiscoverableTimeout"]?.unwrapped.uint32Value ?? 180)
    }

    /// Writes them, timeouts first (bluetoothd arms a timeout when the flag is set).
    public func apply(_ adapter: ObjectPath, on connection: DBusConnection) async throws {
        let interface = try InterfaceName(BlueZ.adapterInterface)
        for (name, value) in [
            ("PairableTimeout", DBusValue.uint32(pairableTimeout)), ("DiscoverableTimeout", .uint32(discoverableTimeout)),
            ("Pairable", .bool(pairable)), ("Discoverable", .bool(discoverable)),
        ] {
            try await connection.setProperty(
                destination: BlueZ.service, path: adapter, interface: interface, name: name, value: value, timeout: .seconds(10))
        }
    }
}
