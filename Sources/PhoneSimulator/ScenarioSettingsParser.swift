/// A scenario's first line: the settings, and the phones it describes (docs/simulator.md).
extension ObjectReader {
    mutating func settings() throws(ScenarioError) -> ScenarioSettings {
        var s = ScenarioSettings()
        guard let name = try string("scenario") else {
            throw fail("the first line must hold the settings, starting with \"scenario\": NAME")
        }
        s.name = name
        if let policy = try string("ios") {
            guard let p = IOSPolicy(rawValue: policy) else { throw fail("\"ios\" must be \"strict\" or \"lenient\"") }
            s.ios = p
        }
        if let shape = try string("accessory") {
            guard let asked = AskedAccessory(rawValue: shape) else { throw fail("\"accessory\" must be \"keyboard\" or \"remote\"") }
            s.accessory = asked
        }
        if let t = try number("temporary_timeout", max: 600) { s.temporaryTimeout = t }
        if let mtu = try integer("mtu", min: 23, max: 517) { s.mtu = mtu }
        if let a = try bool("acquire_notify") { s.acquireNotify = a }
        if let r = try bool("renumber_on_connect") { s.renumberOnConnect = r }
        if let n = try integer("other_notify_clients", min: 0, max: 8) { s.otherNotifyClients = n }
        if let a = try bool("advertise_while_connected") { s.advertiseWhileConnected = a }
        if let a = try string("adapter_address") { s.adapterAddress = try address(a, key: "adapter_address") }
        if let n = try string("adapter_name") { s.adapterName = n }
        if let v = try bool("adapter_pairable") { s.adapterPairable = v }
        if let v = try bool("adapter_discoverable") { s.adapterDiscoverable = v }
        if let v = try integer("adapter_pairable_timeout", min: 0, max: Int(UInt32.max)) { s.adapterPairableTimeout = UInt32(v) }
        if let v = try integer("adapter_discoverable_timeout", min: 0, max: Int(UInt32.max)) { s.adapterDiscoverableTimeout = UInt32(v) }
        if let apps = value("apps") {
            guard let object = apps.objectValue else { throw fail("\"apps\" must be an object of app identifier → name") }
            s.apps = [:]
            for (id, name) in object {
                guard let name = name.stringValue else { throw fail("the name of app \"\(id)\" must be a string") }
                guard !id.isEmpty, !id.utf8.contains(0) else { throw fail("app identifier \"\(id)\" is empty or has a NUL") }
                s.apps[id] = name
            }
        }
        try mediaSettings(&s)
        if let devices = value("devices") {
            guard let list = devices.arrayValue, !list.isEmpty else { throw fail("\"devices\" must be a non-empty array") }
            s.devices = []
            for (index, entry) in list.enumerated() {
                guard let object = entry.objectValue else { throw fail("device \(index + 1) must be an object") }
                var reader = ObjectReader(object: object, line: line)
                s.devices.append(try reader.device(index: index, defaultMTU: s.mtu))
                do { try reader.finish() } catch { throw fail("device \(index + 1): \(error.message)") }
            }
            var seen = Set<String>()
            for d in s.devices where !seen.insert(d.address).inserted {
                throw fail("device address \(d.address) appears twice")
            }
        } else {
            s.devices = [DeviceSettings(address: "AA:BB:CC:DD:EE:FF", name: "iPhone", mtu: s.mtu)]
        }
        return s
    }

    mutating func device(index: Int, defaultMTU: Int) throws(ScenarioError) -> DeviceSettings {
        guard let a = try string("address") else { throw fail("device \(index + 1) needs an \"address\"") }
        var d = DeviceSettings(address: try address(a, key: "address"), name: try string("name") ?? "iPhone", mtu: defaultMTU)
        if let t = try string("address_type") {
            guard t == "public" || t == "random" else { throw fail("\"address_type\" must be \"public\" or \"random\"") }
            d.addressType = t
        }
        if let v = try bool("present"), !v {
            // A phone bluetoothd has never seen is neither connected, paired nor trusted.
            d.present = false
            d.connected = false
            d.paired = false
            d.bonded = false
            d.trusted = false
        }
        if let v = try bool("connected") { d.connected = v }
        if let v = try bool("paired") { d.paired = v }
        if let v = try bool("bonded") { d.bonded = v }
        if let v = try bool("trusted") { d.trusted = v }
        if let m = try integer("mtu", min: 23, max: 517) { d.mtu = m }
        if let policy = try string("ios") {
            guard let p = IOSPolicy(rawValue: policy) else { throw fail("\"ios\" must be \"strict\" or \"lenient\"") }
            d.ios = p
        }
        if !d.present, d.connected || d.paired || d.bonded {
            throw fail("a phone that is not \"present\" cannot be connected, paired or bonded")
        }
        return d
    }

    func address(_ text: String, key: String) throws(ScenarioError) -> String {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6, parts.allSatisfy({ $0.utf8.count == 2 && $0.utf8.allSatisfy { hexDigit($0) } }) else {
            throw fail("\"\(key)\" must look like AA:BB:CC:DD:EE:FF, not \"\(text)\"")
        }
        return text.uppercasedASCII
    }
}

private func hexDigit(_ c: UInt8) -> Bool {
    (0x30...0x39).contains(c) || (0x41...0x46).contains(c) || (0x61...0x66).contains(c)
}
