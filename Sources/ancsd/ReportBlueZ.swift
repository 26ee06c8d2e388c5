import AMS
import BlueZ
import Btsnoop
import BluetoothUUIDs
import DBus
import JSON

/// How `ancsd report` writes a name: never the name itself (the phone's name is usually its
/// owner's, the computer's the host's), only its length, the same in every member, so a
/// reader can still tell "no name" from "a name" and compare lengths.
enum ReportNames {
    static func placeholder(_ name: String) -> String { "<name: \(name.utf8.count) bytes>" }

    /// `text` with every name of `names` (the longest first) replaced by its placeholder.
    static func replace(_ names: [String], in text: String) -> String {
        var result = text
        for name in Set(names).sorted(by: { $0.utf8.count > $1.utf8.count }) where name.utf8.count >= 2 {
            result = result.replacingAll(name, with: placeholder(name))
        }
        return result
    }

    /// `bytes` with every occurrence of a name replaced by as many `x`s: for binary members
    /// (the capture), whose lengths must not change.
    static func mask(_ names: [String], in bytes: [UInt8]) -> (bytes: [UInt8], count: Int) {
        var result = bytes
        var count = 0
        for name in Set(names) where name.utf8.count >= 3 {
            let needle = Array(name.utf8)
            var index = 0
            while index + needle.count <= result.count {
                if result[index] == needle[0] && Array(result[index..<index + needle.count]) == needle {
                    for position in index..<index + needle.count { result[position] = BtsnoopScrubber.placeholder }
                    count += 1
                    index += needle.count
                } else {
                    index += 1
                }
            }
        }
        return (result, count)
    }
}

extension String {
    /// Every occurrence of `target` replaced (the standard library alone has no such call).
    func replacingAll(_ target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var result = ""
        var rest = Substring(self)
        while let range = rest.range(of: target) {
            result += rest[..<range.lowerBound]
            result += replacement
            rest = rest[range.upperBound...]
        }
        return result + rest
    }
}

extension Substring {
    func range(of target: String) -> Range<Index>? {
        let needle = Array(target.utf8)
        let utf8 = self.utf8
        var index = utf8.startIndex
        while index != utf8.endIndex {
            if utf8[index...].starts(with: needle) {
                let end = utf8.index(index, offsetBy: needle.count)
                return index..<end
            }
            index = utf8.index(after: index)
        }
        return nil
    }
}

/// The adapters' and the known phones' properties as bluetoothd shows them on D-Bus, without a
/// secret: an allowlist of `Adapter1` and `Device1` properties (no key is ever a D-Bus
/// property; nothing is read from /var/lib/bluetooth), names replaced (`ReportNames`), and each
/// phone's GATT services and characteristics (UUIDs, flags, handles; never a value).
enum ReportBlueZ {
    static let adapterProperties = [
        "Address", "AddressType", "Name", "Alias", "Class", "Powered", "PowerState", "Discoverable", "DiscoverableTimeout", "Pairable",
        "PairableTimeout", "Discovering", "UUIDs", "Modalias", "Roles", "ExperimentalFeatures", "Manufacturer", "Version",
    ]
    static let deviceProperties = [
        "Address", "AddressType", "Name", "Alias", "Class", "Appearance", "Icon", "Paired", "Bonded", "Trusted", "Blocked",
        "LegacyPairing", "CablePairing", "RSSI", "TxPower", "Connected", "ServicesResolved", "UUIDs", "Modalias", "Adapter",
        "WakeAllowed", "PreferredBearer",
    ]
    static let nameProperties: Set<String> = ["Name", "Alias"]

    /// What bluetoothd shows. `names` receives every name seen; `handles` the ANCS and AMS value
    /// handles of a connected phone, when bluetoothd tells them (GattCharacteristic1.Handle).
    static func collect(bus: BusAddress, names: inout [String], handles: inout ANCSHandles) async -> JSONValue {
        let connection: DBusConnection
        do {
            connection = try await DBusConnection.connect(to: bus, timeout: .seconds(5), activatesServices: false)
        } catch {
            return .object(["error": .string("the D-Bus bus cannot be reached: \(error)")])
        }
        defer { Task { await connection.close() } }
        let tree: BlueZObjectTree
        do {
            tree = BlueZObjectTree(try await connection.getManagedObjects(destination: BlueZ.service, timeout: .seconds(5)))
        } catch {
            return .object(["error": .string("bluetoothd does not answer (org.bluez GetManagedObjects): \(error)")])
        }
        var adapters: [JSONValue] = []
        for path in tree.adapters {
            adapters.append(properties(of: path, BlueZ.adapterInterface, adapterProperties, tree: tree, names: &names))
        }
        var devices: [JSONValue] = []
        var skipped = 0
        for device in tree.devices.sorted(by: { $0.path.rawValue < $1.path.rawValue }) {
            // Only the phones this computer knows: a device merely seen nearby is someone else's.
            guard device.isBonded || device.paired || device.trusted || device.connected else {
                skipped += 1
                continue
            }
            guard case .object(var object) = properties(of: device.path, BlueZ.deviceInterface, deviceProperties, tree: tree, names: &names)
            else { continue }
            object.append("gatt_services", gatt(of: device.path, tree: tree, handles: &handles, learn: device.connected))
            devices.append(.object(object))
        }
        return .object([
            "adapters": .array(adapters), "devices": .array(devices),
            "devices_left_out": .int(skipped),
            "note": .string("devices neither paired, bonded, trusted nor connected (seen nearby) are left out; names are replaced by their length"),
        ])
    }

    private static func properties(
        of path: ObjectPath, _ interface: String, _ allowed: [String], tree: BlueZObjectTree, names: inout [String]
    ) -> JSONValue {
        var object: JSONObject = ["path": .string(path.rawValue)]
        for name in allowed {
            guard let value = tree.property(path, interface, name) else { continue }
            if nameProperties.contains(name), let text = value.stringValue {
                names.append(text)
                object.append(name, .string(ReportNames.placeholder(text)))
            } else {
                object.append(name, json(value))
            }
        }
        return .object(object)
    }

    /// The characteristics whose value handles the capture's scrubber and `ancsd decode` need.
    private static var learnedHandles: [(BluetoothUUID?, WritableKeyPath<ANCSHandles, UInt16?>)] {
        [(ANCSUUID.notificationSource, \.notificationSource), (ANCSUUID.controlPoint, \.controlPoint),
         (ANCSUUID.dataSource, \.dataSource), (BluetoothUUID(AMSUUID.remoteCommand.rawValue), \.remoteCommand),
         (BluetoothUUID(AMSUUID.entityUpdate.rawValue), \.entityUpdate),
         (BluetoothUUID(AMSUUID.entityAttribute.rawValue), \.entityAttribute)]
    }

    /// The value handle of a characteristic whose `Handle` bluetoothd does not show (5.66's
    /// client side): its object is named after the declaration's handle ("…/char0021"), and the
    /// value attribute follows the declaration at once (Core Specification, Vol 3, Part G, 3.3).
    static func valueHandle(of path: ObjectPath) -> UInt16? {
        guard let last = path.rawValue.split(separator: "/").last, last.hasPrefix("char"), last.count == 8,
              let declaration = UInt16(last.dropFirst(4), radix: 16), declaration < .max else { return nil }
        return declaration + 1
    }

    /// The services under a device, their characteristics' UUIDs, flags and handles.
    private static func gatt(of device: ObjectPath, tree: BlueZObjectTree, handles: inout ANCSHandles, learn: Bool) -> JSONValue {
        let prefix = device.rawValue + "/"
        var services: [JSONValue] = []
        for (path, interfaces) in tree.objects.sorted(by: { $0.key.rawValue < $1.key.rawValue })
        where path.rawValue.hasPrefix(prefix) && interfaces["org.bluez.GattService1"] != nil {
            var characteristics: [JSONValue] = []
            for (child, childInterfaces) in tree.objects.sorted(by: { $0.key.rawValue < $1.key.rawValue })
            where child.rawValue.hasPrefix(path.rawValue + "/") && childInterfaces["org.bluez.GattCharacteristic1"] != nil {
                var object = JSONObject()
                let uuid = tree.property(child, "org.bluez.GattCharacteristic1", "UUID")?.stringValue
                for name in ["UUID", "Flags", "Handle", "Notifying", "NotifyAcquired", "WriteAcquired", "MTU"] {
                    if let value = tree.property(child, "org.bluez.GattCharacteristic1", name) { object.append(name, json(value)) }
                }
                characteristics.append(.object(object))
                let handle = tree.property(child, "org.bluez.GattCharacteristic1", "Handle")?.uint16Value ?? valueHandle(of: child)
                if learn, let uuid = uuid.flatMap(BluetoothUUID.init), let handle, handle != 0 {
                    for (known, field) in learnedHandles where known == uuid { handles[keyPath: field] = handle }
                }
            }
            var object = JSONObject()
            for name in ["UUID", "Primary", "Handle"] {
                if let value = tree.property(path, "org.bluez.GattService1", name) { object.append(name, json(value)) }
            }
            object.append("characteristics", .array(characteristics))
            services.append(.object(object))
        }
        return .array(services)
    }

    private static func dictionary(_ pairs: [(key: DBusValue, value: DBusValue)]) -> JSONValue {
        var object = JSONObject()
        for pair in pairs { object.append(pair.key.stringValue ?? json(pair.key).serialized, json(pair.value)) }
        return .object(object)
    }

    /// A D-Bus value as JSON: numbers, strings, arrays, dictionaries (string keys); bytes as hex.
    static func json(_ value: DBusValue) -> JSONValue {
        switch value {
        case .byte(let v): .int(Int(v))
        case .bool(let v): .bool(v)
        case .int16(let v): .int(Int(v))
        case .uint16(let v): .int(Int(v))
        case .int32(let v): .int(Int(v))
        case .uint32(let v): .int(Int(v))
        case .int64(let v): .int(Int(v))
        case .uint64(let v): .int(Int(clamping: v))
        case .double(let v): .double(v)
        case .string(let v): .string(v)
        case .objectPath(let v): .string(v.rawValue)
        case .signature(let v): .string(v.rawValue)
        case .unixFD: .string("<fd>")
        case .byteArray(let bytes): .string(bytes.map { hexByte($0) }.joined())
        case .array(_, let items): .array(items.map(json))
        case .dictionary(_, _, let pairs): dictionary(pairs)
        case .structure(let fields): .array(fields.map(json))
        case .variant(let inner): json(inner)
        }
    }
}
