import ANCS
import BlueZ
import DBus
import Dispatch
import Glibc
import JSON
import SystemCalls

/// The strict phone's side of the link (`PhonePolicy.strict`): what iOS does towards an
/// accessory, on a real bluetoothd.
extension GattPhone {
    /// One step of the strict phone: scan and list, connect once when the user taps a listed
    /// accessory, wait for the accessory or the phone's HID host to pair, register ANCS once
    /// bonded, then leave reconnecting to bluetoothd (its HID host auto-connects to a bonded
    /// accessory that advertises connectable) and watch what the HID host made of it.
    func strictTick(_ connection: DBusConnection, tree: BlueZObjectTree, status: (String, JSONObject) -> Void) async throws {
        let peer = accessory(in: tree)
        guard let peer, peer.isBonded else {
            linkChanged(connected: peer?.connected ?? false)
            try await strictFirstMeeting(connection, tree: tree, peer: peer, status: status)
            return
        }
        if state.withLock({ $0.discovering }) {
            state.withLock { $0.discovering = false }
            try? await call(connection, adapterPath, BlueZ.adapterInterface, "StopDiscovery")
        }
        try await registerANCSOnceBonded(connection, tree: tree)
        linkChanged(connected: peer.connected)
        guard peer.connected else {
            if state.withLock({ $0.userConnect }) {
                state.withLock { $0.userConnect = false }
                status("connecting", [:])
                do {
                    try await call(connection, peer.path, BlueZ.deviceInterface, "Connect", timeout: .seconds(20))
                } catch {
                    status("connect_failed", ["message": .string("\(error)")])
                }
                return
            }
            guard state.withLock({ $0.reconnect }) else { return status("staying_away", [:]) }
            // The phone's bluetoothd reconnects by itself (its HID host's auto-connect); where
            // it does not, the phone does as iOS does.
            try await strictReturn(connection, tree: tree, peer: peer, status: status)
            return
        }
        state.withLock { $0.userConnect = false; $0.awaySince = nil }
        guard peer.servicesResolved else {
            if state.withLock({ $0.resolvedOnLink }) {
                // Resolved before, unresolved now, connected throughout: a new link.
                linkChanged(connected: false)
                linkChanged(connected: true)
            }
            return status("resolving", [:])
        }
        state.withLock { $0.resolvedOnLink = true }
        status("connected_bonded", [:])
        watchHIDHost()
        if consumerSubscribed(tree) { subscriptionSeen(fromConsumerSide: true) }
        amsConsumerSeen(tree)
    }

    /// Once the accessory is bonded, radio on or off: reports the bond (once) and registers the
    /// ANCS application, which is in an iPhone's database all along from then on. Registered while
    /// the link is up, bluetoothd adds it and indicates Service Changed to the accessory, whose
    /// bluetoothd then discovers it.
    func registerANCSOnceBonded(_ connection: DBusConnection, tree: BlueZObjectTree) async throws {
        guard let peer = accessory(in: tree), peer.isBonded else { return }
        if !state.withLock({ $0.bondReported }) {
            state.withLock { $0.bondReported = true }
            event("paired", ["address": .string(peer.address),
                             "address_type": .string(tree.property(peer.path, BlueZ.deviceInterface, "AddressType")?.stringValue ?? "?")])
        }
        guard !state.withLock({ $0.applicationRegistered }) else { return }
        try await registerApplication(connection)
        state.withLock { $0.applicationRegistered = true }
        event("application_registered")
    }

    /// How long the phone leaves reconnecting to its bluetoothd before it looks for the
    /// accessory itself.
    static let autoConnectGrace = Duration.seconds(15)

    /// The bonded accessory is away. iOS reconnects to a bonded HID accessory whenever it
    /// advertises connectable, after a link loss as after its own Bluetooth restarts. The
    /// stand-in's bluetoothd does so through its HID host's auto-connect, except where it does
    /// not re-arm it: BlueZ 5.82 restarted with the bond (docs/field-evidence.md). So after
    /// `autoConnectGrace` with its radio on, the phone asks for the connection itself, which
    /// completes only once the accessory advertises connectable (as the auto-connect does, the
    /// HID UUID is not checked there), and asks again after each failed attempt.
    private func strictReturn(
        _ connection: DBusConnection, tree: BlueZObjectTree, peer: BlueZDevice, status: (String, JSONObject) -> Void
    ) async throws {
        let now = ContinuousClock.now
        // Away counts only while the phone's radio is on.
        guard tree.property(adapterPath, BlueZ.adapterInterface, "Powered")?.boolValue == true else {
            state.withLock { $0.awaySince = nil }
            return status("waiting_for_accessory", [:])
        }
        let since = state.withLock { s -> ContinuousClock.Instant in
            if s.awaySince == nil { s.awaySince = now }
            return s.awaySince ?? now
        }
        guard now - since >= Self.autoConnectGrace, now >= state.withLock({ $0.connectNotBefore }) else {
            return status("waiting_for_accessory", [:])
        }
        event("reconnecting", ["why": .string("its bluetoothd did not reconnect within \(Self.autoConnectGrace)")])
        do {
            try await call(connection, peer.path, BlueZ.deviceInterface, "Connect", timeout: .seconds(20))
        } catch {
            state.withLock { $0.connectNotBefore = .now + Self.settle }
            status("connect_failed", ["message": .string("\(error)")])
        }
    }

    private func strictFirstMeeting(
        _ connection: DBusConnection, tree: BlueZObjectTree, peer: BlueZDevice?, status: (String, JSONObject) -> Void
    ) async throws {
        if let peer, peer.connected {
            // Tapped and connected: iOS waits for the accessory to demand pairing (an encrypted
            // attribute its HID host reads, or a security request); it never asks itself.
            return status(peer.servicesResolved ? "connected_unbonded" : "resolving", [:])
        }
        if !state.withLock({ $0.discovering }) {
            try await call(connection, adapterPath, BlueZ.adapterInterface, "SetDiscoveryFilter",
                           [.variantDictionary(["Transport": .string("le")])])
            try await call(connection, adapterPath, BlueZ.adapterInterface, "StartDiscovery")
            state.withLock { $0.discovering = true; $0.tapped = false }
        }
        guard let peer else { return status("scanning", [:]) }
        // bluetoothd makes a device object from discovery only for a discoverable advertisement.
        let listing = AdvertisementListing(
            uuids: tree.property(peer.path, BlueZ.deviceInterface, "UUIDs")?.unwrapped.stringArray ?? [],
            advertisingData: tree.property(peer.path, BlueZ.deviceInterface, "AdvertisingData"))
        if state.withLock({ s in defer { s.listing = listing }; return s.listing != listing }) {
            let types = (tree.property(peer.path, BlueZ.deviceInterface, "AdvertisingData")?.unwrapped.dictionaryValue ?? [])
                .compactMap { entry -> JSONValue? in
                    guard case .byte(let type) = entry.key.unwrapped else { return nil }
                    return .int(Int(type))
                }
            event("advertisement", [
                "listed": .bool(listing.listed), "hid": .bool(listing.hid), "solicitation": .string(listing.solicitation.rawValue),
                "uuids": .array((tree.property(peer.path, BlueZ.deviceInterface, "UUIDs")?.unwrapped.stringArray ?? []).map { .string($0) }),
                "advertising_data_types": .array(types),
            ])
        }
        guard listing.listed else { return status("not_listed", [:]) }
        guard !state.withLock({ $0.tapped }), ContinuousClock.now >= state.withLock({ $0.connectNotBefore }) else { return }
        // The user taps the accessory in Settings > Bluetooth: one connection.
        state.withLock { $0.tapped = true; $0.discovering = false }
        try? await call(connection, adapterPath, BlueZ.adapterInterface, "StopDiscovery")
        status("connecting", [:])
        do {
            try await call(connection, peer.path, BlueZ.deviceInterface, "Connect", timeout: .seconds(20))
        } catch {
            state.withLock { $0.tapped = false; $0.connectNotBefore = .now + Self.settle }
            status("connect_failed", ["message": .string("\(error)")])
        }
    }

    // MARK: The phone's HID host

    /// Finds the input device the phone's bluetoothd made for the accessory (its HID host
    /// creates it through /dev/uhid after reading the Report Map; the hidraw node's `uevent`
    /// names the accessory in `HID_UNIQ`), reports the Report Map it read, and counts the
    /// input reports the accessory sends from then on (each read of /dev/hidrawN is one).
    func watchHIDHost() {
        for node in Self.directory("/sys/class/hidraw") where node.hasPrefix("hidraw") {
            guard !state.withLock({ $0.hidrawWatched.contains(node) }) else { continue }
            let uevent = String(decoding: Self.contents(of: "/sys/class/hidraw/\(node)/device/uevent") ?? [], as: UTF8.self)
            let unique = uevent.split(separator: "\n").first { $0.hasPrefix("HID_UNIQ=") }.map { String($0.dropFirst(9)) }
            guard unique?.uppercased() == configuration.peer else { continue }
            guard let map = Self.contents(of: "/sys/class/hidraw/\(node)/device/report_descriptor") else { continue }
            guard let device = try? FileDescriptor.open("/dev/\(node)", O_RDONLY | O_CLOEXEC) else { continue }
            let fd = device.release()  // the reader below owns it
            state.withLock { _ = $0.hidrawWatched.insert(node) }
            var fields: JSONObject = ["node": .string(node), "bytes": .int(map.count), "hex": .string(hex(map))]
            if let check = ReportMapCheck(map, asked: configuration.settings.accessory) {
                fields.append("keyboard", .bool(check.keyboard))
                fields.append("asked", .string(configuration.settings.accessory.rawValue))
                fields.append("accessory_flagged", .bool(check.flagged))
                fields.append("applications", .array(check.applications.map { .string($0) }))
            } else {
                fields.append("unreadable", .bool(true))
            }
            event("report_map", fields)
            DispatchQueue(label: "ancs-gatt-phone.\(node)").async { [self] in
                let device = FileDescriptor(adopting: fd)
                var buffer = [UInt8](repeating: 0, count: 512)
                while true {
                    guard let n = try? buffer.withUnsafeMutableBytes({ try device.read(into: $0) }), n > 0 else { break }
                    let count = state.withLock { s -> Int in s.inputReports += 1; return s.inputReports }
                    event("input_report", ["node": .string(node), "hex": .string(hex(Array(buffer[0..<n]))), "count": .int(count)])
                }
                try? device.close()
                state.withLock { _ = $0.hidrawWatched.remove(node) }
                event("hid_device_gone", ["node": .string(node)])
                // The HID host lets the device go with the link: if it is back already, the
                // next look sees it up again, a new session.
                linkChanged(connected: false)
            }
        }
    }

    static func directory(_ path: String) -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// A whole file; what was read before an error; nil when it cannot be opened.
    static func contents(of path: String) -> [UInt8]? {
        guard let file = try? FileDescriptor.open(path, O_RDONLY | O_CLOEXEC) else { return nil }
        return (try? file.readToEnd()) ?? []
    }
}
