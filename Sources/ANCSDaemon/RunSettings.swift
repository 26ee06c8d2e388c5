#if canImport(Glibc)
public import Glibc
#endif
public import ANCSSession
import BlueZ
import MQTT

/// Everything `ancsd run` can be told, from `/etc/ancsd/ancsd.conf` and the command line.
///
/// The configuration file takes the long options' names as keys (`format = json`,
/// `device = AA:BB:CC:DD:EE:FF`, …); the command line overrides it.
public struct RunSettings: Sendable {
    public var options = DaemonOptions()
    /// nil: text on a terminal, JSON otherwise.
    public var format: OutputFormat?
    public var fifoPath: String?
    public var fifoMode: mode_t = 0o600
    public var logLevel = LogLevel.info
    /// Where the control socket listens (docs/control.md); nil for no socket.
    public var controlPath: String?
    /// The group that may use the control socket (mode 0660); nil for the daemon's own.
    public var controlGroup: String?
    /// The shell command run for each event (`ExecSink`); nil for none.
    public var execCommand: String?
    /// How long a command may run before it is killed.
    public var execTimeout: Duration = .seconds(10)
    /// The MQTT output (`--mqtt` and the `mqtt-*` keys); nil for none.
    public var mqtt: MQTTSettings? {
        guard let endpoint = mqttEndpoint else { return nil }
        var settings = MQTTSettings(endpoint: endpoint)
        settings.passwordFile = mqttPasswordFile
        settings.caFile = mqttCA
        settings.prefix = mqttPrefix
        settings.discoveryPrefix = mqttDiscoveryPrefix
        settings.actions = mqttActions
        return settings
    }
    private var mqttEndpoint: MQTTEndpoint?
    private var mqttPasswordFile: String?
    private var mqttCA: String?
    private var mqttPrefix = "ancsd"
    private var mqttDiscoveryPrefix: String? = "homeassistant"
    private var mqttActions = false

    public init() {}

    /// The keys a configuration file may use (the long options without `--`).
    public static let keys = [
        "format", "fifo", "fifo-mode", "device", "adapter", "bus", "log-level", "acquire-notify", "advertise", "accessory", "record", "record-redact",
        "control", "control-group", "only-app", "ignore-app", "ignore-category", "replays", "state-dir", "exec", "exec-timeout",
        "alive-check", "resubscribe-after",
        "mqtt", "mqtt-password-file", "mqtt-ca", "mqtt-prefix", "mqtt-discovery-prefix", "mqtt-actions",
    ]

    /// The keys that add to a list each time they are given; a command line that gives one
    /// replaces the configuration file's list.
    public static let listKeys: Set<String> = ["device", "only-app", "ignore-app", "ignore-category"]

    /// Empties the list a list key adds to.
    public mutating func clear(_ key: String) {
        switch key {
        case "device": options.devices = []
        case "only-app": options.session.filter.onlyApps = []
        case "ignore-app": options.session.filter.ignoredApps = []
        case "ignore-category": options.session.filter.ignoredCategories = []
        default: break
        }
    }

    /// Sets one key. `device` adds to the list (a comma-separated list is accepted too).
    public mutating func set(_ key: String, _ value: String) throws(SettingError) {
        switch key {
        case "format":
            guard let format = OutputFormat(rawValue: value) else { throw SettingError("format must be text or json, not '\(value)'") }
            self.format = format
        case "fifo":
            guard !value.isEmpty else { throw SettingError("fifo needs a path") }
            fifoPath = value
        case "fifo-mode":
            guard let mode = mode_t(value, radix: 8), mode <= 0o777 else {
                throw SettingError("fifo-mode must be octal permissions such as 0600, not '\(value)'")
            }
            fifoMode = mode
        case "device":
            for item in value.split(separator: ",") {
                let text = item.trimmingCharacters(in: " \t")
                guard let address = normalizedAddress(text) else {
                    throw SettingError("device needs a Bluetooth address such as AA:BB:CC:DD:EE:FF, not '\(text)'")
                }
                options.devices.insert(address)
            }
        case "adapter":
            guard value.hasPrefix("hci"), let number = Int(value.dropFirst(3)), number >= 0 else {
                throw SettingError("adapter needs an adapter name such as hci0, not '\(value)'")
            }
            options.adapter = value
        case "bus":
            guard !value.isEmpty else { throw SettingError("bus needs a D-Bus address") }
            options.bus = .address(value)
        case "log-level":
            guard let level = LogLevel(name: value) else {
                throw SettingError("log-level must be debug, info, warning or error, not '\(value)'")
            }
            logLevel = level
        case "acquire-notify":
            switch value.lowercased() {
            case "yes", "true", "on", "1": options.preferAcquireNotify = true
            case "no", "false", "off", "0": options.preferAcquireNotify = false
            default: throw SettingError("acquire-notify must be yes or no, not '\(value)'")
            }
        case "advertise":
            switch value.lowercased() {
            case "yes", "true", "on", "1": options.advertise = true
            case "no", "false", "off", "0": options.advertise = false
            default: throw SettingError("advertise must be yes or no, not '\(value)'")
            }
        case "accessory":
            guard let kind = AccessoryKind(rawValue: value.lowercased()) else {
                throw SettingError("accessory must be hid or none, not '\(value)'")
            }
            options.accessory = kind
        case "record":
            guard !value.isEmpty else { throw SettingError("record needs a directory") }
            options.recording.directory = value
        case "record-redact":
            switch value.lowercased() {
            case "yes", "true", "on", "1": options.recording.redact = true
            case "no", "false", "off", "0": options.recording.redact = false
            default: throw SettingError("record-redact must be yes or no, not '\(value)'")
            }
        case "control":
            guard !value.isEmpty else { throw SettingError("control needs a socket path") }
            controlPath = value
        case "control-group":
            guard !value.isEmpty else { throw SettingError("control-group needs a group name") }
            controlGroup = value
        case "only-app", "ignore-app":
            for item in value.split(separator: ",") {
                let text = item.trimmingCharacters(in: " \t")
                guard let pattern = AppPattern(text) else {
                    throw SettingError("\(key) needs a bundle identifier, '*' standing for any characters (com.apple.*), not '\(text)'")
                }
                if key == "only-app" {
                    if !options.session.filter.onlyApps.contains(pattern) { options.session.filter.onlyApps.append(pattern) }
                } else if !options.session.filter.ignoredApps.contains(pattern) {
                    options.session.filter.ignoredApps.append(pattern)
                }
            }
        case "ignore-category":
            for item in value.split(separator: ",") {
                let text = item.trimmingCharacters(in: " \t")
                guard let rule = CategoryRule(text) else {
                    throw SettingError("ignore-category needs one of \(CategoryRule.names.joined(separator: ", ")), not '\(text)'")
                }
                if !options.session.filter.ignoredCategories.contains(rule) { options.session.filter.ignoredCategories.append(rule) }
            }
        case "replays":
            guard let policy = ReplayPolicy(rawValue: value) else { throw SettingError("replays must be all, unseen or none, not '\(value)'") }
            options.replays = policy
        case "exec":
            guard !value.isEmpty else { throw SettingError("exec needs a command") }
            execCommand = value
        case "exec-timeout":
            // Plain decimal only: Double() would also take "0x10", "1e3", "inf".
            guard value.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }), value.filter({ $0 == "." }).count <= 1,
                  let seconds = Double(value), seconds.isFinite, seconds > 0, seconds <= 86_400 else {
                throw SettingError("exec-timeout needs a number of seconds above 0 and at most 86400, such as 10 or 0.5, not '\(value)'")
            }
            execTimeout = .milliseconds(max(1, Int((seconds * 1000).rounded())))
        case "alive-check", "resubscribe-after":
            guard let seconds = Int(value), seconds >= 0, seconds <= 604_800 else {
                throw SettingError("\(key) needs a whole number of seconds from 0 (off) to 604800, such as \(key == "alive-check" ? 900 : 21600), not '\(value)'")
            }
            let duration: Duration? = seconds == 0 ? nil : .seconds(seconds)
            if key == "alive-check" { options.session.aliveCheckInterval = duration } else { options.session.resubscribeAfter = duration }
        case "state-dir":
            guard value.hasPrefix("/") else { throw SettingError("state-dir needs an absolute directory path, not '\(value)'") }
            options.stateDirectory = value
        case "mqtt":
            do {
                mqttEndpoint = try MQTTEndpoint(url: value)
            } catch {
                throw SettingError("mqtt: \(error.description)")
            }
        case "mqtt-password-file", "mqtt-ca":
            guard value.hasPrefix("/") else { throw SettingError("\(key) needs an absolute file path, not '\(value)'") }
            if key == "mqtt-ca" { mqttCA = value } else { mqttPasswordFile = value }
        case "mqtt-prefix":
            guard MQTTTopics.isValidPrefix(value) else {
                throw SettingError("mqtt-prefix needs topic levels without '+', '#' or empty levels (such as ancsd or home/ancsd), not '\(value)'")
            }
            mqttPrefix = value
        case "mqtt-discovery-prefix":
            if value == "none" {
                mqttDiscoveryPrefix = nil
            } else {
                guard MQTTTopics.isValidPrefix(value) else {
                    throw SettingError("mqtt-discovery-prefix needs a topic prefix such as homeassistant, or none, not '\(value)'")
                }
                mqttDiscoveryPrefix = value
            }
        case "mqtt-actions":
            switch value.lowercased() {
            case "yes", "true", "on", "1": mqttActions = true
            case "no", "false", "off", "0": mqttActions = false
            default: throw SettingError("mqtt-actions must be yes or no, not '\(value)'")
            }
        default:
            throw SettingError("unknown setting '\(key)'")
        }
    }

    /// Applies a configuration file's text; errors name the line.
    public mutating func apply(configuration text: String, path: String) throws(SettingError) {
        var firstLine: [String: Int] = [:]
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingCharacters(in: " \t\r")
            guard !line.isEmpty, !line.hasPrefix("#") else { continue }
            guard let equals = line.firstIndex(of: "=") else {
                throw SettingError("\(path):\(index + 1): expected 'key = value', found '\(line)'")
            }
            let key = line[..<equals].trimmingCharacters(in: " \t")
            var value = line[line.index(after: equals)...].trimmingCharacters(in: " \t")
            if value.count >= 2, value.first == "\"", value.last == "\"" { value = String(value.dropFirst().dropLast()) }
            // A setting given twice is a mistake (which one was meant?), except the list keys,
            // which add to their list each time.
            if !Self.listKeys.contains(key), Self.keys.contains(key) {
                if let first = firstLine[key] {
                    throw SettingError("\(path):\(index + 1): '\(key)' is set again (first on line \(first)); give it once")
                }
                firstLine[key] = index + 1
            }
            do {
                try set(key, value)
            } catch {
                throw SettingError("\(path):\(index + 1): \(error.description)")
            }
        }
    }
}

/// A setting that cannot be used, with a message for the person who wrote it.
public struct SettingError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension StringProtocol {
    func trimmingCharacters(in set: String) -> String {
        var slice = Substring(self)
        while let first = slice.first, set.contains(first) { slice.removeFirst() }
        while let last = slice.last, set.contains(last) { slice.removeLast() }
        return String(slice)
    }
}
