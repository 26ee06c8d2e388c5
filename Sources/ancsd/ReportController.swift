#if canImport(Glibc)
import Glibc
#endif
import CBluetooth
import JSON

/// The controllers as the kernel knows them, for `ancsd report`: the management interface's
/// Read Controller Information (address, Bluetooth version, manufacturer, settings; it needs no
/// privilege), and, on a raw HCI socket, Read Local Version Information (LMP version and
/// subversion) and the LMP and LE feature masks (these the kernel may refuse without
/// CAP_NET_RAW). Each failure is told in the result, never thrown: a report goes on without.
enum ReportController {
    /// `{"controllers": [...]}`, or `{"error": …}` saying why none could be read. `names`
    /// receives the controllers' names (replaced in the result).
    static func collect(names: inout [String]) -> JSONValue {
        let management: ManagementSocket
        do {
            management = try ManagementSocket()
        } catch {
            return .object(["error": .string(error.description)])
        }
        defer { close(management.fd) }
        guard let list = management.command(0x0003, index: 0xFFFF, []) else {
            return .object(["error": .string("the kernel's management interface did not answer Read Controller Index List")])
        }
        guard list.status == 0, list.parameters.count >= 2 else {
            return .object(["error": .string("Read Controller Index List failed: status \(list.status)")])
        }
        let count = Int(list.parameters[0]) | Int(list.parameters[1]) << 8
        var controllers: [JSONValue] = []
        for entry in 0..<count where 2 + entry * 2 + 1 < list.parameters.count {
            let index = UInt16(list.parameters[2 + entry * 2]) | UInt16(list.parameters[3 + entry * 2]) << 8
            controllers.append(controller(index, management: management, names: &names))
        }
        var object: JSONObject = ["controllers": .array(controllers)]
        if controllers.isEmpty { object.append("note", .string("the kernel knows no Bluetooth controller (no adapter, or its driver is not loaded: rfkill list; dmesg | grep -i bluetooth)")) }
        return .object(object)
    }

    private static func controller(_ index: UInt16, management: ManagementSocket, names: inout [String]) -> JSONValue {
        var object: JSONObject = ["index": .string("hci\(index)")]
        if let info = management.command(0x0004, index: index, []), info.status == 0, info.parameters.count >= 280 {
            let p = info.parameters
            object.append("address", .string(p[0..<6].reversed().map { hexByte($0) }.joined(separator: ":")))
            object.append("bluetooth_version", .string(versionName(p[6])))
            let manufacturer = Int(p[7]) | Int(p[8]) << 8
            object.append("manufacturer", .object(["id": .int(manufacturer), "name": .string(manufacturerName(manufacturer))]))
            let supported = UInt32(p[9]) | UInt32(p[10]) << 8 | UInt32(p[11]) << 16 | UInt32(p[12]) << 24
            let current = UInt32(p[13]) | UInt32(p[14]) << 8 | UInt32(p[15]) << 16 | UInt32(p[16]) << 24
            object.append("supported_settings", .array(settings(supported).map(JSONValue.string)))
            object.append("current_settings", .array(settings(current).map(JSONValue.string)))
            object.append("class", .string("0x" + p[17..<20].reversed().map { hexByte($0) }.joined()))
            let name = String(decoding: p[20..<269].prefix { $0 != 0 }, as: UTF8.self)
            if !name.isEmpty { names.append(name) }
            object.append("name", .string(ReportNames.placeholder(name)))
        } else {
            object.append("info_error", .string("Read Controller Information gave no answer for hci\(index)"))
        }
        object.append("hci", rawInformation(index))
        return .object(object)
    }

    /// Read Local Version Information, Read Local Supported Features, LE Read Local Supported
    /// Features on a raw socket bound to the controller.
    private static func rawInformation(_ index: UInt16) -> JSONValue {
        let fd = socket(CBT_AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), CBT_BTPROTO_HCI)
        guard fd >= 0 else { return .object(["error": .string("socket: \(String(cString: strerror(errno)))")]) }
        defer { close(fd) }
        var address = sockaddr_hci(hci_family: sa_family_t(CBT_AF_BLUETOOTH), hci_dev: index, hci_channel: CBT_HCI_CHANNEL_RAW)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_hci>.size)) }
        }
        guard bound == 0 else { return .object(["error": .string("bind(HCI_CHANNEL_RAW): \(String(cString: strerror(errno)))")]) }
        guard cbt_filter_command_events(fd) == 0 else { return .object(["error": .string("HCI_FILTER: \(String(cString: strerror(errno)))")]) }
        var object = JSONObject()
        switch hciCommand(fd, opcode: 0x1001) {
        case .success(let r) where r.count >= 9 && r[0] == 0:
            object.append("hci_version", .string(versionName(r[1])))
            object.append("hci_revision", .int(Int(r[2]) | Int(r[3]) << 8))
            object.append("lmp_version", .string(versionName(r[4])))
            object.append("lmp_subversion", .int(Int(r[7]) | Int(r[8]) << 8))
        case .success(let r):
            object.append("version_error", .string("Read Local Version Information: status \(r.first ?? 0xFF)"))
        case .failure(let error):
            object.append("version_error", .string("Read Local Version Information: \(error.description)"))
        }
        for (key, opcode) in [("lmp_features", UInt16(0x1003)), ("le_features", 0x2003)] {
            switch hciCommand(fd, opcode: opcode) {
            case .success(let r) where r.count >= 9 && r[0] == 0: object.append(key, .string(r[1..<9].map { hexByte($0) }.joined(separator: " ")))
            case .success(let r): object.append(key + "_error", .string("status \(r.first ?? 0xFF)"))
            case .failure(let error): object.append(key + "_error", .string(error.description))
            }
        }
        return .object(object)
    }

    /// Sends an HCI command without parameters and gives its Command Complete's return parameters.
    private static func hciCommand(_ fd: Int32, opcode: UInt16) -> Result<[UInt8], ReportError> {
        let packet: [UInt8] = [0x01, UInt8(opcode & 0xFF), UInt8(opcode >> 8), 0x00]
        guard write(fd, packet, packet.count) == packet.count else {
            let code = errno
            return .failure(ReportError(code == EPERM ? "the kernel refused the command (needs root or CAP_NET_RAW)" : String(cString: strerror(code))))
        }
        var buffer = [UInt8](repeating: 0, count: 260)
        for _ in 0..<8 {
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 2_000) > 0 else { return .failure(ReportError("no answer within 2 s")) }
            let count = read(fd, &buffer, buffer.count)
            guard count >= 3 else { continue }
            // H4 event: 0x04, code, length; Command Complete: count, opcode, return parameters.
            if buffer[0] == 0x04, buffer[1] == 0x0E, count >= 6, UInt16(buffer[4]) | UInt16(buffer[5]) << 8 == opcode {
                return .success(Array(buffer[6..<count]))
            }
            if buffer[0] == 0x04, buffer[1] == 0x0F, count >= 7, UInt16(buffer[5]) | UInt16(buffer[6]) << 8 == opcode, buffer[3] != 0 {
                return .failure(ReportError("Command Status \(buffer[3])"))
            }
        }
        return .failure(ReportError("no Command Complete"))
    }

    /// The Bluetooth Core version an HCI or LMP version number stands for.
    static func versionName(_ value: UInt8) -> String {
        let names = ["1.0b", "1.1", "1.2", "2.0", "2.1", "3.0", "4.0", "4.1", "4.2", "5.0", "5.1", "5.2", "5.3", "5.4", "6.0"]
        return Int(value) < names.count ? "\(names[Int(value)]) (\(value))" : "unknown (\(value))"
    }

    /// A few company identifiers (Bluetooth SIG's assigned numbers) of common controllers.
    static func manufacturerName(_ id: Int) -> String {
        let names: [Int: String] = [
            2: "Intel", 10: "Qualcomm (CSR)", 13: "Texas Instruments", 15: "Broadcom", 29: "Qualcomm", 70: "MediaTek", 93: "Realtek",
            305: "Cypress", 1521: "Linux Foundation (virtual)", 2047: "none (virtual controller)",
        ]
        return names[id] ?? "see the Bluetooth SIG's company identifiers"
    }

    /// The management interface's setting bits by name.
    static func settings(_ bits: UInt32) -> [String] {
        let names = [
            "powered", "connectable", "fast-connectable", "discoverable", "bondable", "link-security", "ssp", "br/edr", "hs", "le",
            "advertising", "secure-conn", "debug-keys", "privacy", "configuration", "static-addr", "phy-configuration",
            "wide-band-speech", "cis-central", "cis-peripheral", "iso-broadcaster", "sync-receiver",
        ]
        return (0..<32).filter { bits & (1 << UInt32($0)) != 0 }.map { $0 < names.count ? names[$0] : "bit \($0)" }
    }
}

/// The kernel's Bluetooth management channel (BlueZ doc/mgmt-api.txt), as bluetoothd and
/// btmgmt use it: commands and their replies on one socket.
private struct ManagementSocket {
    let fd: Int32

    init() throws(ReportError) {
        let made = socket(CBT_AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), CBT_BTPROTO_HCI)
        guard made >= 0 else {
            let code = errno
            if code == EAFNOSUPPORT || code == EPROTONOSUPPORT {
                throw ReportError("no controller information: this kernel has no Bluetooth support (socket(AF_BLUETOOTH): \(String(cString: strerror(code))))")
            }
            throw ReportError("no controller information: socket(AF_BLUETOOTH): \(String(cString: strerror(code)))")
        }
        var address = sockaddr_hci(hci_family: sa_family_t(CBT_AF_BLUETOOTH), hci_dev: CBT_HCI_DEV_NONE, hci_channel: CBT_HCI_CHANNEL_CONTROL)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(made, $0, socklen_t(MemoryLayout<sockaddr_hci>.size)) }
        }
        guard bound == 0 else {
            let code = errno
            close(made)
            throw ReportError("no controller information: bind(HCI_CHANNEL_CONTROL): \(String(cString: strerror(code)))"
                + (code == EPERM || code == EACCES ? " (no permission)" : ""))
        }
        fd = made
    }

    /// Sends a command; its Command Complete or Command Status (status and return
    /// parameters), or nil when none came within 2 s.
    func command(_ opcode: UInt16, index: UInt16, _ parameters: [UInt8]) -> (status: UInt8, parameters: [UInt8])? {
        let header: [UInt8] = [UInt8(opcode & 0xFF), UInt8(opcode >> 8), UInt8(index & 0xFF), UInt8(index >> 8),
                               UInt8(parameters.count & 0xFF), UInt8(parameters.count >> 8)]
        let packet = header + parameters
        guard write(fd, packet, packet.count) == packet.count else { return nil }
        var buffer = [UInt8](repeating: 0, count: 1024)
        for _ in 0..<32 {
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, 2_000) > 0 else { return nil }
            let count = read(fd, &buffer, buffer.count)
            guard count >= 9 else { continue }
            let event = UInt16(buffer[0]) | UInt16(buffer[1]) << 8
            let replyTo = UInt16(buffer[6]) | UInt16(buffer[7]) << 8
            guard (event == 0x0001 || event == 0x0002), replyTo == opcode else { continue }  // other events pass by
            return (buffer[8], Array(buffer[9..<count]))
        }
        return nil
    }
}

func hexByte(_ byte: UInt8) -> String {
    let digits = Array("0123456789ABCDEF")
    return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
}
