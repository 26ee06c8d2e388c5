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
    // The `mqtt-*` keys (`Setting.all` sets them; `mqtt` puts them together).
    var mqttEndpoint: MQTTEndpoint?
    var mqttPasswordFile: String?
    var mqttCA: String?
    var mqttPrefix = "ancsd"
    var mqttDiscoveryPrefix: String? = "homeassistant"
    var mqttActions = false

    public init() {}

    /// The keys a configuration file may use (the long options without `--`), in `Setting.all`'s order.
    public static let keys = Setting.all.map(\.key)

    /// The keys that add to a list each time they are given; a command line that gives one
    /// replaces the configuration file's list.
    public static let listKeys = Set(Setting.all.filter(\.isList).map(\.key))

    /// Empties the list a list key adds to.
    public mutating func clear(_ key: String) {
        Setting.named[key]?.clear(&self)
    }

    /// Sets one key, as `Setting.all` says; a list key adds to its list (a comma-separated list
    /// is accepted too).
    public mutating func set(_ key: String, _ value: String) throws(SettingError) {
        guard let setting = Setting.named[key] else { throw SettingError("unknown setting '\(key)'") }
        try setting.apply(value, to: &self)
    }

    /// The settings whose values differ between `old` and `new`, in `Setting.all`'s order: what
    /// a reload from `old` to `new` changes.
    public static func changes(from old: RunSettings, to new: RunSettings) -> [Setting] {
        Setting.all.filter { $0.differs(old, new) }
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
