import ANCSDaemon
import ANCSSession
import BlueZ
import DBus
import Foundation
import Testing
import TestSupport

@Suite struct RunSettingsTests {
    @Test func filtersReplaysAndStateDirectory() throws {
        var settings = RunSettings()
        try settings.apply(configuration: """
            only-app = com.apple.*
            only-app = com.whatsapp.WhatsApp, com.apple.*
            ignore-app = com.apple.news*
            ignore-category = news, health_and_fitness
            ignore-category = reserved
            replays = all
            state-dir = /var/lib/ancsd
            """, path: "ancsd.conf")
        let filter = settings.options.session.filter
        #expect(filter.onlyApps.map(\.text) == ["com.apple.*", "com.whatsapp.WhatsApp"])
        #expect(filter.ignoredApps.map(\.text) == ["com.apple.news*"])
        #expect(filter.ignoredCategories.map(\.name) == ["news", "health_and_fitness", "reserved"])
        #expect(settings.options.replays == .all)
        #expect(settings.options.stateDirectory == "/var/lib/ancsd")
        #expect(RunSettings().options.replays == .unseen, "the default")
        settings.clear("only-app")
        #expect(settings.options.session.filter.onlyApps.isEmpty)
    }

    @Test(arguments: [
        ("ignore-category = sms", "ignore-category needs one of other, incoming_call"),
        ("only-app = com apple", "only-app needs a bundle identifier"),
        ("replays = some", "replays must be all, unseen or none"),
        ("state-dir = state", "state-dir needs an absolute directory path"),
    ])
    func rejectsBadFilters(line: String, message: String) {
        var settings = RunSettings()
        #expect(throws: SettingError.self) { try settings.apply(configuration: line, path: "c") }
        do { try settings.apply(configuration: line, path: "c") } catch { #expect(error.description.contains(message), "\(error)") }
    }

    /// `accessory =`: the keyboard (the shape seen listed by iOS 26) unless told otherwise;
    /// `hid`, the remote's name before there were two shapes, still means the remote.
    @Test func accessory() throws {
        #expect(RunSettings().options.accessory == .keyboard, "the default")
        var settings = RunSettings()
        try settings.apply(configuration: "accessory = none\n", path: "ancsd.conf")
        #expect(settings.options.accessory == .disabled)
        try settings.set("accessory", "remote")
        #expect(settings.options.accessory == .remote)
        try settings.set("accessory", "Keyboard")
        #expect(settings.options.accessory == .keyboard)
        try settings.set("accessory", "HID")
        #expect(settings.options.accessory == .remote, "hid is the remote's alias")
        #expect(RunSettings.keys.contains("accessory"), "--accessory is a run option too")
    }

    @Test func readsAConfigurationFile() throws {
        var settings = RunSettings()
        try settings.apply(configuration: """
            # ancsd.conf
            format = json
            fifo = "/run/ancsd/events"
            fifo-mode = 0660

            device = aa:bb:cc:dd:ee:01, AA-BB-CC-DD-EE-02
            device = AA:BB:CC:DD:EE:03
            adapter = hci1
            bus = unix:path=/tmp/bus
            log-level = debug
            acquire-notify = no
            """, path: "ancsd.conf")
        #expect(settings.format == .json)
        #expect(settings.fifoPath == "/run/ancsd/events")
        #expect(settings.fifoMode == 0o660)
        #expect(settings.options.devices == ["AA:BB:CC:DD:EE:01", "AA:BB:CC:DD:EE:02", "AA:BB:CC:DD:EE:03"])
        #expect(settings.options.adapter == "hci1")
        #expect(settings.options.bus == .address("unix:path=/tmp/bus"))
        #expect(settings.logLevel == .debug)
        #expect(!settings.options.preferAcquireNotify)
    }

    @Test(arguments: [
        ("format = yaml", "ancsd.conf:2: format must be text or json, not 'yaml'"),
        ("just words", "ancsd.conf:2: expected 'key = value', found 'just words'"),
        ("colour = blue", "ancsd.conf:2: unknown setting 'colour'"),
        ("fifo-mode = 999", "ancsd.conf:2: fifo-mode must be octal permissions"),
        ("device = AA:BB", "ancsd.conf:2: device needs a Bluetooth address"),
        ("adapter = eth0", "ancsd.conf:2: adapter needs an adapter name"),
        ("acquire-notify = maybe", "ancsd.conf:2: acquire-notify must be yes or no"),
        ("log-level = loud", "ancsd.conf:2: log-level must be"),
        ("accessory = mouse", "ancsd.conf:2: accessory must be keyboard, remote or none, not 'mouse'"),
        // Issue 27: accepted silently before.
        ("exec-timeout = 0x10", "ancsd.conf:2: exec-timeout needs a number of seconds"),
        ("exec-timeout = 1e3", "ancsd.conf:2: exec-timeout needs a number of seconds"),
        ("exec-timeout = inf", "ancsd.conf:2: exec-timeout needs a number of seconds"),
        ("format = json\nformat = text", "ancsd.conf:3: 'format' is set again (first on line 2); give it once"),
    ])
    func errorsNameTheLine(line: String, message: String) {
        // (A list key may be given again: it adds to its list, as readsAConfigurationFile shows.)
        var settings = RunSettings()
        do {
            try settings.apply(configuration: "# first line\n\(line)\n", path: "ancsd.conf")
            Issue.record("accepted \(line)")
        } catch {
            #expect(error.description.hasPrefix(message), "\(error)")
        }
    }
}

@Suite struct SystemdNotifierTests {
    @Test func inactiveWithoutASocket() {
        let notifier = SystemdNotifier(environment: { _ in nil })
        #expect(!notifier.isActive && notifier.watchdogInterval == nil)
        #expect(!notifier.send("READY=1"))
    }

    @Test func sendsDatagrams() throws {
        let directory = NSTemporaryDirectory()
        let listener = try DatagramListener(directory: directory)
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": listener.path, "WATCHDOG_USEC": "2000000"].get)
        #expect(notifier.isActive)
        #expect(notifier.watchdogInterval == .seconds(2))
        notifier.ready(status: "1 phone connected, 3 notifications")
        #expect(listener.receive(timeout: .seconds(2)) == "READY=1\nSTATUS=1 phone connected, 3 notifications")
        notifier.watchdog()
        #expect(listener.receive(timeout: .seconds(2)) == "WATCHDOG=1")
        notifier.reloading()
        #expect(listener.receive(timeout: .seconds(2))?.hasPrefix("RELOADING=1\nMONOTONIC_USEC=") == true)
        notifier.stopping()
        #expect(listener.receive(timeout: .seconds(2)) == "STOPPING=1")
    }

    @Test func watchdogOnlyForThisProcess() {
        let other = SystemdNotifier(environment: ["NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "100", "WATCHDOG_PID": "1"].get)
        #expect(other.watchdogInterval == nil)
        let mine = SystemdNotifier(environment: ["NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "100", "WATCHDOG_PID": String(getpid())].get)
        #expect(mine.watchdogInterval == .microseconds(100))
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "relative"].get).isActive == false)
    }
}

private extension Dictionary where Key == String, Value == String {
    func get(_ key: String) -> String? { self[key] }
}

@Suite struct RecordSettingsTests {
    @Test func recordKeys() throws {
        var settings = RunSettings()
        #expect(settings.options.recording.directory == nil && !settings.options.recording.redact)
        try settings.apply(configuration: "record = /var/lib/ancsd/captures\nrecord-redact = yes\n", path: "ancsd.conf")
        #expect(settings.options.recording.directory == "/var/lib/ancsd/captures")
        #expect(settings.options.recording.redact)
        #expect(throws: SettingError.self) { try settings.set("record-redact", "maybe") }
        #expect(throws: SettingError.self) { try settings.set("record", "") }
        #expect(RunSettings.keys.contains("record") && RunSettings.keys.contains("record-redact"))
    }
}
