import ANCSDaemon
import Foundation
import Testing
import TestSupport

/// SIGHUP compares every key of `Setting.all` and applies a change as the table says: the key of
/// a setting only a start applies is refused, the others are reloaded, and the outputs are made
/// again exactly for the outputs' settings.
@Suite struct ReloadEveryKeyTests {
    @Test func aReloadSeesEachKeyWithTheKindTheTableSays() throws {
        let bus = try PrivateBus()
        let config = bus.directory + "/ancsd.conf"
        try "".write(toFile: config, atomically: true, encoding: .utf8)
        // The bus from the environment, not --bus: the command line would override `bus =`.
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
        environment["STATE_DIRECTORY"] = nil
        let ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"), ["run", "--config", config], environment: environment)
        try ancsd.waitForStandardError(containing: "bluetoothd is not running")
        var seen: [String: Int] = [:]
        func reload(_ text: String, expecting message: String) throws {
            try text.write(toFile: config, atomically: true, encoding: .utf8)
            ancsd.signal(SIGHUP)
            let count = (seen[message] ?? 0) + 1
            seen[message] = count
            try ancsd.waitForStandardError(containing: message, occurrences: count)
        }
        for setting in Setting.all {
            let sample = try #require(settingSamples[setting.key], "a sample for \(setting.key) in TestSupport/SettingSamples.swift")
            let line = "\(setting.key) = \(sample.replacingOccurrences(of: "DIR", with: bus.directory))\n"
            switch setting.reload {
            case .restart:
                try reload(line, expecting: "reload refused, nothing changed: \(setting.key) takes effect only when ancsd starts")
                try reload("", expecting: "reloaded the configuration (no change)")
            case .outputs:
                try reload(line, expecting: "reloaded the configuration (changed: \(setting.key); the outputs were made again)")
                try reload("", expecting: "reloaded the configuration (changed: \(setting.key); the outputs were made again)")
            case .live, .newSessions:
                try reload(line, expecting: "reloaded the configuration (changed: \(setting.key))")
                try reload("", expecting: "reloaded the configuration (changed: \(setting.key))")
            }
        }
        #expect(try ancsd.stop() == 0)
    }
}
