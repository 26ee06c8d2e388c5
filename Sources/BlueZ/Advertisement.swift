import BluetoothUUIDs
public import DBus

/// An `org.bluez.LEAdvertisement1` to export (BlueZ doc/advertising-api.txt): a peripheral that
/// solicits ANCS and, with a HID accessory (`AccessoryKind.keyboard` or `.remote`), lists the
/// HID service, so iOS offers to pair with it and reconnects to it once bonded.
///
/// The properties: `Type` "peripheral", `ServiceUUIDs` [HID 0x1812] (with an accessory only),
/// `SolicitUUIDs` [ANCS], `LocalName`, `Appearance` and `Discoverable`. The appearance is the
/// accessory's (`Accessory.Shape.appearance`): 0x03C1 Keyboard for the keyboard, 0x0180
/// Generic Remote Control for the remote, so that it says what the report map is; without an
/// accessory, 0x0080 Generic Computer, as before.
///
/// How bluetoothd 5.66 lays it out (`legacyLayout`; src/shared/ad.c `bt_ad_generate`,
/// src/advertising.c): the legacy ADV_IND carries, in this order, the 16-bit service UUIDs,
/// the 128-bit solicitation, the appearance and last the flags (bluetoothd keeps the flags among
/// its "data" entries, which come after everything else). `LocalName` always goes to the scan
/// response: bluetoothd puts a name into the advertising data only for a secondary PHY
/// (extended advertising, which phones without extended scanning never see), and its `Data`
/// property refuses the name AD types (0x08, 0x09) and the flags (0x01). The pairing window
/// ("iPhone" stands for any name), 29 of 31 bytes:
/// ```
/// ADV_IND   03 03 12 18                                    16-bit service UUIDs: HID 0x1812
///           11 15 d0 00 2d 12 1e 4b 0f a4 99 4e ce b5 31 f4 05 79   128-bit solicitation: ANCS
///           03 19 c1 03                                    appearance 0x03C1 Keyboard (the remote: 03 19 80 01,
///                                                          0x0180 Generic Remote Control)
///           02 01 06                                       flags: LE General Discoverable, no BR/EDR
/// SCAN_RSP  07 09 69 50 68 6f 6e 65                        complete local name "iPhone"
/// ```
/// With `--accessory none` the first four bytes go and the appearance is 03 19 80 00.
/// `ancsd run` (connectable, not discoverable): the same without the flags, 26 bytes. With
/// `Discoverable` the flags are LE General Discoverable, plus "BR/EDR not supported" whenever
/// the adapter itself is not discoverable or has no BR/EDR, so a pairing window that leaves
/// the adapter's Discoverable off advertises 0x06 on LE-only and dual-mode controllers alike.
/// (Where the adapter itself is discoverable, the kernel adds flags of its own to a
/// non-discoverable advertisement: 3 bytes more, still within 31.) Staying within 31 bytes
/// matters beyond fitting: from BlueZ 5.7x on, advertising data longer than a legacy PDU makes
/// bluetoothd switch to extended advertising, which older phones never see.
public struct Advertisement: Sendable {
    /// The interface name.
    public static let interface: InterfaceName = "org.bluez.LEAdvertisement1"
    /// GAP appearance 0x0080, Generic Computer.
    public static let computerAppearance: UInt16 = 0x0080
    /// The name used when nothing better is known.
    public static let fallbackName = "ancsd"

    public var localName: String
    public var appearance: UInt16
    /// True while new phones may find us (the pairing window); false to be merely connectable.
    public var discoverable: Bool
    /// What the phone is shown besides the solicitation.
    public var accessory: AccessoryKind

    public init(localName: String, discoverable: Bool, accessory: AccessoryKind = .keyboard) {
        self.localName = Self.fitted(localName)
        self.discoverable = discoverable
        self.accessory = accessory
        appearance = accessory.shape?.appearance ?? Self.computerAppearance
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
        return fitted.isEmpty ? fallbackName : fitted
    }

    /// The name to advertise when none is given: the adapter's alias, unless it says nothing
    /// (`isMeaningless`: empty, bluetoothd's default "BlueZ 5.66", what an adapter is called
    /// where no host name reached bluetoothd), then the host name unless it says nothing
    /// ("(none)", "localhost"), then "ancsd". The user must recognise it in the phone's list.
    public static func recognisableName(alias: String, hostName: String) -> String {
        for candidate in [alias, hostName] where !isMeaningless(candidate) {
            return fitted(candidate)
        }
        return fallbackName
    }

    /// True for a name that tells the user nothing: empty, "(none)" (the kernel's host name
    /// before anything set one), "localhost", "localhost.localdomain", or bluetoothd's default
    /// alias "BlueZ X.Y".
    public static func isMeaningless(_ name: String) -> Bool {
        let name = name.trimmingSpaces()
        let lower = name.lowercased()
        if name.isEmpty || lower == "(none)" || lower == "localhost" || lower == "localhost.localdomain" { return true }
        let version = name.dropFirst(6)
        return name.hasPrefix("BlueZ ") && !version.isEmpty && version.allSatisfy { $0.isNumber || $0 == "." }
    }

    /// The service UUIDs advertised: the HID service with an accessory, none without.
    public var serviceUUIDs: [String] {
        accessory.shape == nil ? [] : [Accessory.hidServiceUUID]
    }

    /// The properties bluetoothd reads with GetAll.
    public var properties: [String: DBusValue] {
        var properties: [String: DBusValue] = [
            "Type": .string("peripheral"),
            "SolicitUUIDs": .stringArray([ANCSUUID.service.description.lowercased()]),
            "LocalName": .string(localName),
            "Appearance": .uint16(appearance),
            "Discoverable": .bool(discoverable),
        ]
        if !serviceUUIDs.isEmpty { properties["ServiceUUIDs"] = .stringArray(serviceUUIDs) }
        return properties
    }

    /// The bytes bluetoothd 5.66 hands the kernel for this advertisement on a legacy PDU: the
    /// advertising data and the scan response, laid out as `bt_ad_generate` does (service
    /// UUIDs 16/32/128-bit, solicit UUIDs 16/32/128-bit, manufacturer data, service data, name,
    /// appearance, then the data entries — which hold the flags), with the name moved to the
    /// scan response. `adapterDiscoverable` and `adapterHasBREDR` decide the flags byte as
    /// src/advertising.c `set_flags` does.
    public func legacyLayout(adapterDiscoverable: Bool = false, adapterHasBREDR: Bool = true) -> (advertising: [UInt8], scanResponse: [UInt8]) {
        var data: [UInt8] = []
        let short = serviceUUIDs.compactMap(Self.shortUUID)
        if !short.isEmpty {  // 0x03 Complete List of 16-bit Service UUIDs
            data += [UInt8(1 + 2 * short.count), 0x03] + short.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
        }
        let solicit = ANCSUUID.service.littleEndianBytes  // 0x15 List of 128-bit Solicitation UUIDs
        data += [UInt8(1 + solicit.count), 0x15] + solicit
        data += [3, 0x19, UInt8(appearance & 0xFF), UInt8(appearance >> 8)]  // 0x19 Appearance
        if discoverable {
            var flags: UInt8 = 0x02  // LE General Discoverable
            if !adapterHasBREDR || !adapterDiscoverable { flags |= 0x04 }  // BR/EDR Not Supported
            data += [2, 0x01, flags]
        }
        let name = Array(localName.utf8.prefix(Self.maxNameBytes))
        let type: UInt8 = localName.utf8.count > Self.maxNameBytes ? 0x08 : 0x09  // shortened : complete
        return (data, [UInt8(1 + name.count), type] + name)
    }

    /// 0x1812 for `00001812-0000-1000-8000-00805f9b34fb` (the Bluetooth base UUID, which
    /// bluetoothd advertises in 16-bit form); nil for any other UUID.
    static func shortUUID(_ text: String) -> UInt16? {
        let lower = text.lowercased()
        guard lower.count == 36, lower.hasPrefix("0000"), lower.hasSuffix("-0000-1000-8000-00805f9b34fb") else { return nil }
        return UInt16(lower.dropFirst(4).prefix(4), radix: 16)
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
