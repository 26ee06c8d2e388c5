import ANCS
public import DBus

/// An `org.bluez.LEAdvertisement1` to export (BlueZ doc/advertising-api.txt): a peripheral that
/// solicits ANCS, so iOS offers to pair with it and reconnects to it once bonded.
///
/// How bluetoothd 5.66 lays it out (src/advertising.c, src/shared/ad.c; checked on the real stack
/// by `make system-test`, docs/system-test.md): the primary (legacy ADV_IND) PDU carries the flags
/// (3 bytes, only when `discoverable`), the 128-bit ANCS solicitation (18) and the appearance (4):
/// 25 of 31 bytes. `LocalName` always goes to the scan response: bluetoothd puts a name into the
/// advertising data only for a secondary PHY (extended advertising, which phones without
/// extended scanning never see), and its `Data` property refuses the name AD types (0x08, 0x09)
/// and the flags (0x01). With `discoverable` the flags are LE General Discoverable, plus
/// "BR/EDR not supported" whenever the adapter itself is not discoverable or has no BR/EDR, so
/// a pairing window that leaves the adapter's Discoverable off advertises 0x06 on LE-only and
/// dual-mode controllers alike.
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
        self.localName = Self.fitted(localName)
        self.discoverable = discoverable
    }

    /// The most bytes of a name that fit in a legacy PDU beside nothing else (31 − 2 for the
    /// AD header): bluetoothd cuts a longer name there itself, possibly inside a UTF-8 sequence.
    public static let maxNameBytes = 29

    /// `name` without surrounding spaces, cut at a character boundary to `maxNameBytes`;
    /// "ancsd" if nothing is left.
    public static func fitted(_ name: String) -> String {
        var fitted = ""
        var bytes = 0
        for character in name.trimmingSpaces() {
            let size = character.utf8.count
            guard bytes + size <= maxNameBytes else { break }
            fitted.append(character)
            bytes += size
        }
        fitted = fitted.trimmingSpaces()
        return fitted.isEmpty ? "ancsd" : fitted
    }

    /// The name to advertise when none is given: the adapter's alias, unless it is empty or
    /// bluetoothd's default ("BlueZ 5.66", what an adapter is called where no host name reached
    /// bluetoothd), then the host name. The user must recognise it in the phone's list.
    public static func recognisableName(alias: String, hostName: String) -> String {
        let alias = alias.trimmingSpaces()
        let isDefault = alias.hasPrefix("BlueZ ") && alias.dropFirst(6).allSatisfy { $0.isNumber || $0 == "." }
        if !alias.isEmpty && !isDefault { return fitted(alias) }
        return fitted(hostName.isEmpty ? alias : hostName)
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

/// The adapter settings a pairing window changes, to put them back afterwards: Pairable and its
/// timeout, nothing else.
///
/// Discoverable is left alone: an LE phone finds us by the advertisement's own flags, and
/// bluetoothd 5.66 turns the adapter's Discoverable off by turning Connectable off
/// (`set_discoverable` with kernel connection control), so writing back Discoverable=false
/// would leave the adapter not connectable although it was before.
public struct AdapterVisibility: Sendable, Hashable {
    public var pairable: Bool
    public var pairableTimeout: UInt32

    public init(pairable: Bool, pairableTimeout: UInt32) {
        self.pairable = pairable
        self.pairableTimeout = pairableTimeout
    }

    /// Reads them from the adapter.
    public static func read(_ adapter: ObjectPath, on connection: DBusConnection) async throws -> AdapterVisibility {
        let p = try await connection.getAllProperties(
            destination: BlueZ.service, path: adapter, interface: InterfaceName(BlueZ.adapterInterface), timeout: .seconds(10))
        return AdapterVisibility(
            pairable: p["Pairable"]?.unwrapped.boolValue ?? false,
            pairableTimeout: p["PairableTimeout"]?.unwrapped.uint32Value ?? 0)
    }

    /// Writes them, the timeout first (bluetoothd arms it when Pairable is set).
    public func apply(_ adapter: ObjectPath, on connection: DBusConnection) async throws {
        let interface = try InterfaceName(BlueZ.adapterInterface)
        for (name, value) in [("PairableTimeout", DBusValue.uint32(pairableTimeout)), ("Pairable", .bool(pairable))] {
            try await connection.setProperty(
                destination: BlueZ.service, path: adapter, interface: interface, name: name, value: value, timeout: .seconds(10))
        }
    }
}

extension StringProtocol {
    fileprivate func trimmingSpaces() -> String {
        var slice = Substring(self)
        while let first = slice.first, first.isWhitespace { slice.removeFirst() }
        while let last = slice.last, last.isWhitespace { slice.removeLast() }
        return String(slice)
    }
}
