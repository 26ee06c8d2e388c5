import ANCSDaemon
import Foundation
import Testing
import TestSupport

/// `Setting.all`, the one table of `ancsd run`'s settings: parsing, `--help` and the reload
/// comparison come from it.
@Suite struct SettingsTableTests {
    @Test func keysAreUniqueAndFlagsStandForAValueThatIsNotTheDefault() throws {
        #expect(Set(RunSettings.keys).count == Setting.all.count)
        #expect(Set(Setting.all.map(\.usage)).count == Setting.all.count)
        for setting in Setting.all {
            guard let flag = setting.flag else { continue }
            var settings = RunSettings()
            try settings.set(setting.key, flag.value)
            #expect(setting.differs(RunSettings(), settings), "\(flag.option) changes nothing")
        }
    }

    /// What SIGHUP compares: a change of any key of the table is seen, and only that key.
    @Test func aReloadComparesEveryKey() throws {
        #expect(Set(settingSamples.keys) == Set(RunSettings.keys), "a sample value for each key (TestSupport/SettingSamples.swift)")
        #expect(RunSettings.changes(from: RunSettings(), to: RunSettings()).isEmpty)
        for setting in Setting.all {
            let sample = try #require(settingSamples[setting.key]).replacingOccurrences(of: "DIR", with: "/tmp")
            var changed = RunSettings()
            try changed.set(setting.key, sample)
            #expect(RunSettings.changes(from: RunSettings(), to: changed).map(\.key) == [setting.key])
            #expect(RunSettings.changes(from: changed, to: RunSettings()).map(\.key) == [setting.key])
            if setting.isList {
                changed.clear(setting.key)
                #expect(RunSettings.changes(from: RunSettings(), to: changed).isEmpty, "clear(\(setting.key)) empties the list")
            }
        }
    }

    /// The messages of the table's parsers are the ones `set` gave before it (the end-to-end
    /// tests and the man page quote some).
    @Test(arguments: [
        ("fifo", "", "fifo needs a path"),
        ("bus", "", "bus needs a D-Bus address"),
        ("record", "", "record needs a directory"),
        ("control", "", "control needs a socket path"),
        ("control-group", "", "control-group needs a group name"),
        ("exec", "", "exec needs a command"),
        ("advertise", "maybe", "advertise must be yes or no, not 'maybe'"),
        ("record-redact", "maybe", "record-redact must be yes or no, not 'maybe'"),
        ("mqtt-actions", "maybe", "mqtt-actions must be yes or no, not 'maybe'"),
        ("log-level", "loud", "log-level must be debug, info, warning or error, not 'loud'"),
        ("fifo-mode", "0999", "fifo-mode must be octal permissions such as 0600, not '0999'"),
        ("device", "AA:BB:CC:DD:EE:01, nope", "device needs a Bluetooth address such as AA:BB:CC:DD:EE:FF, not 'nope'"),
        ("alive-check", "-1", "alive-check needs a whole number of seconds from 0 (off) to 604800, such as 900, not '-1'"),
        ("resubscribe-after", "604801", "resubscribe-after needs a whole number of seconds from 0 (off) to 604800, such as 21600, not '604801'"),
        ("ignore-app", "a b", "ignore-app needs a bundle identifier, '*' standing for any characters (com.apple.*), not 'a b'"),
        ("mqtt", "http://broker", "mqtt: "),
        ("mqtt-password-file", "pw", "mqtt-password-file needs an absolute file path, not 'pw'"),
        ("mqtt-ca", "ca.crt", "mqtt-ca needs an absolute file path, not 'ca.crt'"),
        ("mqtt-prefix", "a/#", "mqtt-prefix needs topic levels without '+', '#' or empty levels (such as ancsd or home/ancsd), not 'a/#'"),
        ("mqtt-discovery-prefix", "a//b", "mqtt-discovery-prefix needs a topic prefix such as homeassistant, or none, not 'a//b'"),
        ("exec-timeout", "0", "exec-timeout needs a number of seconds above 0 and at most 86400, such as 10 or 0.5, not '0'"),
        ("adapter", "hci-1", "adapter needs an adapter name such as hci0, not 'hci-1'"),
    ])
    func messages(key: String, value: String, message: String) {
        var settings = RunSettings()
        do {
            try settings.set(key, value)
            Issue.record("accepted \(key) = \(value)")
        } catch {
            #expect(error.description.hasPrefix(message), "\(error)")
            if !message.hasSuffix(": ") { #expect(error.description == message) }
        }
    }

    @Test func valuesReachTheirFields() throws {
        var settings = RunSettings()
        for (key, value) in [("mqtt", "mqtt://me@broker.lan"), ("mqtt-prefix", "home/ancsd"), ("mqtt-discovery-prefix", "none"), ("mqtt-actions", "on")] {
            try settings.set(key, value)
        }
        let mqtt = try #require(settings.mqtt)
        #expect(mqtt.prefix == "home/ancsd" && mqtt.discoveryPrefix == nil && mqtt.actions)
        try settings.set("alive-check", "0")
        try settings.set("resubscribe-after", "60")
        try settings.set("exec-timeout", "0.5")
        #expect(settings.options.session.aliveCheckInterval == nil && settings.options.session.resubscribeAfter == .seconds(60))
        #expect(settings.execTimeout == .milliseconds(500))
        try settings.set("device", "aa:bb:cc:dd:ee:01,AA:BB:CC:DD:EE:01")
        #expect(settings.options.devices == ["AA:BB:CC:DD:EE:01"])
    }

    /// `ancsd run --help`'s options: one entry per setting, in the table's order, within 90
    /// columns, a flag naming the key and value it stands for.
    @Test func help() {
        let help = Setting.optionsHelp
        #expect(help.split(separator: "\n").allSatisfy { $0.count <= 90 })
        var position = help.startIndex
        for setting in Setting.all {
            let found = help.range(of: "  \(setting.usage) ", range: position..<help.endIndex)
                ?? help.range(of: "  \(setting.usage)\n", range: position..<help.endIndex)
            #expect(found != nil, "\(setting.usage) in order")
            position = found?.upperBound ?? position
        }
        #expect(help.contains("--no-advertise       do not register an LE advertisement"))
        let unwrapped = help.replacingOccurrences(of: "\n" + String(repeating: " ", count: 23), with: " ")
        #expect(unwrapped.contains("another agent owns pairing (config: advertise = no)"))
        #expect(help.contains("--ignore-category NAME\n                       never show notifications of this category"))
        #expect(Setting.reloadHelp.replacingOccurrences(of: "\n", with: " ").contains("bus, advertise, control, control-group and state-dir take effect only when ancsd starts"))
    }
}
