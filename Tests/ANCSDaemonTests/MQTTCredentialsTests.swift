import Foundation
@testable import ANCSDaemon
import MQTT
import Testing

/// The MQTT password as a careful user expects (docs/mqtt.md, "Password").
@Suite struct MQTTCredentialsTests {
    @Test func aPasswordFileNeedsAUserInTheURL() throws {
        var settings = MQTTSettings(endpoint: try MQTTEndpoint(url: "mqtt://broker.lan"))
        settings.passwordFile = "/etc/ancsd/mqtt-password"
        do {
            try MQTTCredentials.check(settings)
            Issue.record("a password file without a user was taken")
        } catch {
            #expect(error.description.contains("--mqtt-password-file /etc/ancsd/mqtt-password needs a user"), "\(error)")
            #expect(error.description.contains("mqtt://USER@broker.lan"))
        }
        settings.endpoint = try MQTTEndpoint(url: "mqtt://ancsd@broker.lan")
        try MQTTCredentials.check(settings)
        settings = MQTTSettings(endpoint: try MQTTEndpoint(url: "mqtt://broker.lan"))
        try MQTTCredentials.check(settings)  // anonymous
        // The configuration file's key alone, with the command line's URL: the same error.
        var run = RunSettings()
        try run.set("mqtt", "mqtt://127.0.0.1")
        try run.set("mqtt-password-file", "/etc/ancsd/mqtt-password")
        #expect(throws: SettingError.self) { try MQTTCredentials.check(try #require(run.mqtt)) }
    }

    @Test func aPasswordFileOthersMayReadIsWarnedAboutWithTheFix() throws {
        let path = NSTemporaryDirectory() + "ancsd-mqtt-password-\(UUID().uuidString)"
        try "correct horse\nsecond line\n".write(toFile: path, atomically: false, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        func read(mode: mode_t) throws -> (String, String?) {
            #expect(chmod(path, mode) == 0)
            let read = try MQTTCredentials.readPassword(path)
            return (read.password, read.warning)
        }
        #expect(try read(mode: 0o600) == ("correct horse", nil))
        #expect(try read(mode: 0o400) == ("correct horse", nil))
        let everyone = try read(mode: 0o644)
        #expect(everyone.0 == "correct horse")
        #expect(everyone.1 == "the MQTT password file \(path) can be read by every user (mode 644): chmod 600 \(path)")
        #expect(try read(mode: 0o640).1 == "the MQTT password file \(path) can be read by its group (mode 640): chmod 600 \(path)")
        // The documented layout: root's, group ancsd, 0640, read through the group. Fine; with
        // others allowed too, the fix keeps the group.
        #expect(MQTTCredentials.permissionWarning("/etc/ancsd/mqtt-password", mode: 0o100640, owner: 0, user: 105) == nil)
        #expect(MQTTCredentials.permissionWarning("/etc/ancsd/mqtt-password", mode: 0o100644, owner: 0, user: 105)
            == "the MQTT password file /etc/ancsd/mqtt-password can be read by every user (mode 644): chmod o-r /etc/ancsd/mqtt-password")
    }

    @Test func aPasswordOverPlainMQTTToAnotherHostIsWarnedAbout() throws {
        func warning(_ url: String, password: Bool = true) throws -> String? {
            MQTTCredentials.plainTextWarning(try MQTTEndpoint(url: url), hasPassword: password)
        }
        #expect(try warning("mqtt://ancsd@broker.lan")?.contains("goes to broker.lan unencrypted (mqtt://)") == true)
        #expect(try warning("mqtt://ancsd@192.168.1.10:1883") != nil)
        #expect(try warning("mqtt://ancsd@[2001:db8::1]") != nil)
        #expect(try warning("mqtt://ancsd@128.0.0.1") != nil)
        for local in ["mqtt://ancsd@localhost", "mqtt://ancsd@LOCALHOST", "mqtt://ancsd@127.0.0.1", "mqtt://ancsd@127.1.2.3:1884",
                      "mqtt://ancsd@[::1]", "mqtt://ancsd@[::ffff:127.0.0.1]", "mqtt://ancsd@broker.localhost"] {
            #expect(try warning(local) == nil, "\(local)")
        }
        #expect(try warning("mqtts://ancsd@broker.lan") == nil, "TLS")
        #expect(try warning("mqtt://ancsd@broker.lan", password: false) == nil, "no password")
        #expect(try warning("mqtt://broker.lan", password: false) == nil, "anonymous")
    }
}
