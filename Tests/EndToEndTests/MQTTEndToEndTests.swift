import Foundation
import JSON
import Testing
import TestSupport

private let ada = "AA:BB:CC:DD:EE:01"
private let device = "aabbccddee01"

/// `topic payload` lines of a mosquitto_sub, split.
private func messages(_ subscriber: ChildProcess) -> [(topic: String, payload: String)] {
    subscriber.lines.map(\.text).compactMap { line in
        guard let space = line.firstIndex(of: " ") else { return (line, "") }
        return (String(line[..<space]), String(line[line.index(after: space)...]))
    }
}

private func payloads(_ subscriber: ChildProcess, _ topic: String) -> [String] {
    messages(subscriber).filter { $0.topic == topic }.map(\.payload)
}

/// `ancsd run --mqtt` on the simulated phone with a real mosquitto broker.
@Suite(.serialized) struct MQTTEndToEndTests {
    static let scenario = """
        {"scenario":"mqtt","devices":[{"address":"\(ada)","name":"Ada's iPhone"}],"apps":{"com.apple.MobileSMS":"Messages","com.apple.mobilephone":"Phone"}}
        {"do":"wait_subscribed","timeout":30}
        {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Grace","message":"Tea at five? 🫖 <b>&amp;</b>","flags":["positive_action","negative_action"],"positive_action":"Reply","negative_action":"Clear"}
        {"do":"add","uid":2,"category":"incoming_call","app":"com.apple.mobilephone","title":"Charles","message":"Incoming Call","flags":["positive_action","negative_action"],"positive_action":"Answer","negative_action":"Decline"}
        {"do":"add","uid":3,"category":"email","app":"com.apple.MobileSMS","title":"No actions","message":"x"}
        {"do":"sleep","seconds":60}
        {"do":"end"}
        """

    @Test("events, retained state, counts, latest, discovery, the event entity and actions; offline on SIGTERM")
    func everything() throws {
        let broker = try MosquittoBroker()
        let all = try broker.subscriber(["#"])
        defer { all.signal(SIGKILL) }
        let control = NSTemporaryDirectory() + "ancsd-control-\(UUID().uuidString.prefix(8))"
        let run = try DaemonRun(
            text: Self.scenario, ancsdArguments: ["--mqtt", "mqtt://127.0.0.1:\(broker.port)", "--mqtt-actions", "--control", control])
        try run.ancsd.waitForLine { $0.contains(#""title":"No actions""#) }
        let eventTopic = "ancsd/\(device)/event"
        try waitUntil("4 events on \(eventTopic): \(messages(all))") { payloads(all, eventTopic).count >= 4 }

        // `ancsd status` shows the connection and what was delivered.
        let status = try AncsdProcess.run(["status", "--control", control])
        #expect(status.status == 0 && status.stdout.contains("  MQTT mqtt://127.0.0.1:\(broker.port): connected yes, connections 1, delivered "), "\(status.stdout)")
        let report = try JSONValue(parsing: AncsdProcess.run(["status", "--json", "--control", control]).stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let mqtt = try #require(report["outputs"]?.arrayValue?.first { $0["name"]?.stringValue?.hasPrefix("MQTT") == true })
        #expect(mqtt["connected"] == true && (mqtt["delivered"]?.intValue ?? 0) >= 8 && mqtt["dropped"] == 0, "\(mqtt)")
        let doctor = try AncsdProcess.run(["--bus", run.bus.address, "doctor", "--control", control, "--fifo", "/nonexistent"])
        #expect(doctor.stdout.contains("ok   ancsd is connected to MQTT mqtt://127.0.0.1:\(broker.port)"), "\(doctor.stdout)")

        // Every event exactly as --format json prints it, in order.
        let printed = run.ancsd.lines.map(\.text).filter { $0.hasPrefix("{") }
        #expect(payloads(all, eventTopic) == Array(printed.prefix(4)))
        #expect(payloads(all, eventTopic).compactMap { try? JSONValue(parsing: $0)["type"]?.stringValue } == ["connected", "added", "added", "added"])

        // Retained state, as a later subscriber (Home Assistant after a restart) sees it.
        #expect(try broker.retained("ancsd/status") == ["ancsd/status online"])
        #expect(try broker.retained("ancsd/\(device)/state") == ["ancsd/\(device)/state connected"])
        try waitUntil("count 3") { try broker.retained("ancsd/\(device)/count") == ["ancsd/\(device)/count 3"] }
        #expect(try broker.retained("ancsd/\(device)/latest") == ["ancsd/\(device)/latest Messages: No actions"])
        let attributes = try #require(try broker.retained("ancsd/\(device)/latest/attributes").first)
        #expect(attributes == "ancsd/\(device)/latest/attributes " + printed[3])

        // Home Assistant discovery: retained, accepted by the schema, pointing at topics that carry messages.
        let configs = try broker.retained("homeassistant/#", count: 5).compactMap { line -> (topic: String, payload: JSONValue)? in
            guard let space = line.firstIndex(of: " ") else { return nil }
            return (String(line[..<space]), try JSONValue(parsing: String(line[line.index(after: space)...])))
        }
        #expect(configs.count == 5)
        #expect(Set(configs.map(\.topic)) == [
            "homeassistant/binary_sensor/ancsd_\(device)/connected/config", "homeassistant/sensor/ancsd_\(device)/notifications/config",
            "homeassistant/binary_sensor/ancsd_\(device)/sharing/config",
            "homeassistant/sensor/ancsd_\(device)/latest/config", "homeassistant/event/ancsd_\(device)/notification/config",
        ])
        let published = Set(messages(all).map(\.topic))
        #expect(HomeAssistantSchema.problems(configs, published: published) == [])
        #expect(configs.first?.payload["device"]?["name"] == "Ada's iPhone")

        // The event entity: one event per added notification, its category as event type.
        let fired = payloads(all, "ancsd/\(device)/notification").compactMap { try? JSONValue(parsing: $0) }
        #expect(fired.map { $0["event_type"]?.stringValue } == ["social", "incoming_call", "email"])
        #expect(fired.first?["message"] == "Tea at five? 🫖 <b>&amp;</b>")

        // Actions: the phone performs a negative action and removes the notification.
        try broker.publish("ancsd/\(device)/action", #"{"uid": 1, "action": "negative"}"#)
        let resultTopic = "ancsd/\(device)/action/result"
        try waitUntil("a result") { payloads(all, resultTopic).count == 1 }
        #expect(payloads(all, resultTopic).first == #"{"uid":1,"action":"negative","ok":true,"result":"performed"}"#)
        try run.ancsd.waitForLine { $0.contains(#""type":"removed""#) && $0.contains(#""uid":1,"#) }
        try waitUntil("count 2") { try broker.retained("ancsd/\(device)/count") == ["ancsd/\(device)/count 2"] }
        // Bad requests get an answer, and change nothing.
        for request in [#"{"uid": 99, "action": "positive"}"#, #"{"uid": 3, "action": "positive"}"#, #"{"uid": 2, "action": "up"}"#, "not json"] {
            try broker.publish("ancsd/\(device)/action", request)
        }
        try waitUntil("four more results: \(payloads(all, resultTopic))") { payloads(all, resultTopic).count == 5 }
        let codes = payloads(all, resultTopic).dropFirst().compactMap { try? JSONValue(parsing: $0)["error"]?["code"]?.stringValue }
        #expect(codes == ["no_such_notification", "not_available", "bad_request", "bad_request"])
        try broker.publish("ancsd/001122334455/action", #"{"uid": 1, "action": "negative"}"#)
        try waitUntil("an answer for a phone that is not there") { payloads(all, "ancsd/001122334455/action/result").count == 1 }
        #expect(payloads(all, "ancsd/001122334455/action/result").first?.contains("no_such_device") == true)
        // SIGTERM: a clean disconnect, status offline.
        #expect(try run.ancsd.stop() == 0)
        #expect(try broker.retained("ancsd/status") == ["ancsd/status offline"])
        #expect(payloads(all, resultTopic).count == 5)
    }

    @Test("libmosquitto, and libssl and libcrypto behind it, are loaded only for an MQTT output")
    func libmosquittoOnlyWhenUsed() throws {
        func libraries(_ run: DaemonRun) throws -> Set<String> {
            let maps = try String(contentsOfFile: "/proc/\(run.ancsd.pid)/maps", encoding: .utf8)
            return Set(maps.split(separator: "\n").compactMap { $0.split(separator: "/").last.map(String.init) }
                .filter { $0.hasPrefix("libmosquitto") || $0.hasPrefix("libssl") || $0.hasPrefix("libcrypto") }
                .map { String($0.prefix { $0 != "." }) })
        }
        do {
            let plain = try DaemonRun(text: Self.scenario)
            try plain.ancsd.waitForLine { $0.contains(#""title":"No actions""#) }
            #expect(try libraries(plain) == [])
        }
        let broker = try MosquittoBroker()
        let mqtt = try DaemonRun(text: Self.scenario, ancsdArguments: ["--mqtt", "mqtt://127.0.0.1:\(broker.port)"])
        try mqtt.ancsd.waitForLine { $0.contains(#""title":"No actions""#) }
        #expect(try libraries(mqtt) == ["libmosquitto", "libssl", "libcrypto"])
    }

    @Test("TLS and a password file; a broker that is down at the start; the last will when ancsd is killed")
    func tlsPasswordOutageAndWill() throws {
        let broker = try MosquittoBroker(security: .init(users: ["phone-bridge": "correct horse"], tls: true))
        broker.stop()
        let passwordFile = broker.directory + "/ancsd-password"
        try "correct horse\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        #expect(chmod(passwordFile, 0o644) == 0)  // every user may read it: warned about
        let run = try DaemonRun(text: Self.scenario, ancsdArguments: [
            "--mqtt", "mqtts://phone-bridge@127.0.0.1:\(broker.port)", "--mqtt-ca", broker.caFile,
            "--mqtt-password-file", passwordFile, "--mqtt-discovery-prefix", "none",
        ])
        try run.ancsd.waitForLine { $0.contains(#""title":"No actions""#) }
        // Two failed attempts (the next comes 2 s later): time for the subscriber to be there first.
        try waitUntil("two failed attempts: \(run.ancsd.standardError)") { run.ancsd.standardError.components(separatedBy: "retrying in").count > 2 }
        try broker.start()
        let tlsArguments = ["--cafile", broker.caFile, "-u", "phone-bridge", "-P", "correct horse"]
        let all = try ChildProcess(URL(fileURLWithPath: "/usr/bin/mosquitto_sub"),
                                   ["-h", "127.0.0.1", "-p", String(broker.port)] + tlsArguments + ["-v", "-q", "1", "-t", "#"])
        defer { all.signal(SIGKILL) }
        let eventTopic = "ancsd/\(device)/event"
        try waitUntil("4 events after the broker came: \(messages(all)) \(run.ancsd.standardError.suffix(2000))") {
            payloads(all, eventTopic).count >= 4
        }
        let printed = run.ancsd.lines.map(\.text).filter { $0.hasPrefix("{") }
        #expect(payloads(all, eventTopic) == Array(printed.prefix(4)), "in order, none lost")
        #expect(try broker.retained("ancsd/status", extra: tlsArguments, host: "127.0.0.1") == ["ancsd/status online"])
        #expect(!messages(all).contains { $0.topic.hasPrefix("homeassistant/") }, "discovery off")
        #expect(!run.ancsd.standardError.contains("correct horse"))
        let fix = "warning: the MQTT password file \(passwordFile) can be read by every user (mode 644): chmod 600 \(passwordFile)"
        #expect(run.ancsd.standardError.components(separatedBy: fix).count == 2, "warned once, with the fix: \(run.ancsd.standardError)")
        #expect(!run.ancsd.standardError.contains("unencrypted"), "mqtts://: no word of plain text")

        // Killed: the broker publishes the will.
        run.ancsd.signal(SIGKILL)
        _ = try run.ancsd.wait()
        try waitUntil("offline") { try broker.retained("ancsd/status", extra: tlsArguments, host: "127.0.0.1") == ["ancsd/status offline"] }
    }

    /// libmosquitto's non-blocking connect tries a name's first address only; ancsd tries each
    /// address family once before it waits.
    @Test("a broker name with IPv6 and IPv4 addresses reaches a broker that listens on IPv4 only, at once")
    func dualStackName() throws {
        let broker = try MosquittoBroker()  // on 127.0.0.1 only: the name's first address, ::1, refuses
        let hosts = broker.directory + "/hosts"
        try "127.0.0.1 localhost\n::1 broker.test\n127.0.0.1 broker.test\n".write(toFile: hosts, atomically: true, encoding: .utf8)
        // ancsd reads that hosts file, in a mount namespace of its own.
        let unshare = getuid() == 0 ? ["/usr/bin/unshare", "--mount"] : ["/usr/bin/unshare", "--map-root-user", "--mount"]
        let launcher = unshare + ["/bin/sh", "-c", #"mount --bind "$0" /etc/hosts && exec "$@""#, hosts]
        // The premise: there, the name's first address is ::1, then comes 127.0.0.1.
        let resolved = try runTool(launcher[0], Array(launcher.dropFirst()) + ["/usr/bin/getent", "ahosts", "broker.test"])
        let addresses = resolved.text.split(separator: "\n").compactMap { $0.split(separator: " ").first.map(String.init) }
        try #require(resolved.status == 0 && addresses.first == "::1" && addresses.contains("127.0.0.1"), "\(resolved.text)")
        let all = try broker.subscriber(["ancsd/#"])
        defer { all.signal(SIGKILL) }
        let control = broker.directory + "/control"
        let run = try DaemonRun(
            text: Self.scenario,
            ancsdArguments: ["--mqtt", "mqtt://broker.test:\(broker.port)", "--mqtt-discovery-prefix", "none", "--control", control],
            launcher: launcher)
        try run.ancsd.waitForLine { $0.contains(#""title":"No actions""#) }
        let eventTopic = "ancsd/\(device)/event"
        try waitUntil("4 events: \(run.ancsd.standardError.suffix(2000))") { payloads(all, eventTopic).count >= 4 }
        #expect(run.ancsd.standardError.contains("MQTT: connected to mqtt://broker.test:\(broker.port)"))
        #expect(!run.ancsd.standardError.contains("retrying in"), "IPv4 was tried at once: \(run.ancsd.standardError.suffix(2000))")
        // The broker goes: each attempt tries IPv4 (which worked) first, then IPv6, then waits.
        broker.stop()
        try waitUntil("both families refused: \(run.ancsd.standardError.suffix(2000))") {
            run.ancsd.standardError.contains("(IPv4); Connection refused (IPv6); retrying in")
        }
        // `ancsd doctor` says so, and fails.
        let doctor = try AncsdProcess.run(["--bus", run.bus.address, "doctor", "--control", control, "--fifo", "/nonexistent"])
        #expect(doctor.status == 1 && doctor.stdout.contains("FAIL ancsd is not connected to MQTT mqtt://broker.test:\(broker.port) ("), "\(doctor.stdout)")
        #expect(doctor.stdout.contains("→ check that the broker runs"))
        #expect(try run.ancsd.stop() == 0)
    }

    static let floodScenario = """
        {"scenario":"mqtt-flood","devices":[{"address":"\(ada)","name":"Ada's iPhone"}],"ams":true,"media":{"player":"Music","title":"Clair de lune","artist":"Claude Debussy","album":"Suite bergamasque","duration":300,"state":"playing","volume":0.5,"commands":["play","pause","toggle","next","previous"]}}
        {"do":"wait_subscribed","timeout":30}
        {"do":"wait_state","media_commands_received":1,"timeout":60}
        {"after":0.2,"do":"media_track","title":"Pavane","artist":"Gabriel Fauré","album":"Masques et bergamasques","duration":390}
        {"do":"sleep","seconds":60}
        {"do":"end"}
        """

    /// 10,000 `play` lines from `mosquitto_pub -l`: the phone gets at most the rate limit's
    /// share, every answer says sent or busy, the track change that comes during the flood
    /// reaches the event topic, and the log gets a handful of lines (each command is at debug).
    @Test("a flood of 10,000 media commands: the phone gets at most 10 a second, no event is lost, the log stays short")
    func commandFlood() throws {
        let broker = try MosquittoBroker()
        // The events and the answers each to a subscriber of their own: mosquitto queues at
        // most 1,000 QoS 1 messages for a subscriber and drops what comes past them, so one that
        // also took the 10,000 commands (or their answers) could lose an event ancsd delivered.
        let all = try broker.subscriber(["ancsd/\(device)/event"])
        defer { all.signal(SIGKILL) }
        let answered = try broker.subscriber(["ancsd/\(device)/media/command/result"])
        defer { answered.signal(SIGKILL) }
        let run = try DaemonRun(text: Self.floodScenario, ancsdArguments: ["--mqtt", "mqtt://127.0.0.1:\(broker.port)", "--mqtt-actions"])
        let eventTopic = "ancsd/\(device)/event"
        func media(_ title: String) -> Bool {
            payloads(all, eventTopic).contains { (try? JSONValue(parsing: $0))?["title"]?.stringValue == title }
        }
        try waitUntil("the first media event: \(messages(all).suffix(5))") { media("Clair de lune") }
        let logBefore = run.ancsd.standardError.split(separator: "\n").filter { !$0.hasPrefix("ancsd: debug:") }.count
        let commands = NSTemporaryDirectory() + "ancsd-flood-\(UUID().uuidString.prefix(8))"
        try String(repeating: "play\n", count: 10_000).write(toFile: commands, atomically: false, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: commands) }
        let began = ContinuousClock.now
        let sent = try runTool("/bin/sh", ["-c", "mosquitto_pub -h 127.0.0.1 -p \(broker.port) -q 1 -t ancsd/\(device)/media/command -l < \(commands)"])
        #expect(sent.status == 0, "\(sent.text)")
        // The track change comes in the flood's seconds: the phone changes it 0.2 s after the
        // first command reached it, while ancsd still answers the flood (2 to 3 s here).
        try waitUntil("the new track on \(eventTopic):\nphone: \(run.phone.standardError.suffix(1500))\nancsd printed: "
                    + "\(run.ancsd.lines.map(\.text).filter { $0.contains("media") }.suffix(3))\non MQTT: \(payloads(all, eventTopic).suffix(3))"
                    + "\nancsd: \(run.ancsd.standardError.split(separator: "\n").filter { !$0.contains("MQTT: play") }.suffix(20).joined(separator: "\n"))") {
            media("Pavane")
        }
        let answers = "ancsd/\(device)/media/command/result"
        try waitUntil("the answers settled", timeout: .seconds(60)) {
            let count = payloads(answered, answers).count
            Thread.sleep(forTimeInterval: 1)
            return count == payloads(answered, answers).count && count > 0
        }
        let seconds = Double((ContinuousClock.now - began).components.seconds) + 1
        let performed = run.phone.standardError.components(separatedBy: "AMS Remote Command play (0) performed").count - 1
        #expect(performed >= 1 && Double(performed) <= 10 + 10 * seconds, "the phone got \(performed) commands in \(seconds) s")
        // Every event ancsd printed reached the event topic, in order.
        let printed = run.ancsd.lines.map(\.text).filter { $0.hasPrefix("{") }
        #expect(payloads(all, eventTopic) == printed, "\(payloads(all, eventTopic).count) on MQTT, \(printed.count) printed")
        let codes = payloads(answered, answers).map { (try? JSONValue(parsing: $0)) ?? .null }.map {
            $0["ok"] == true ? "sent" : ($0["error"]?["code"]?.stringValue ?? "?")
        }
        #expect(Set(codes).isSubset(of: ["sent", "busy"]) && codes.contains("busy"), "\(Set(codes))")
        let logAfter = run.ancsd.standardError.split(separator: "\n").filter { !$0.hasPrefix("ancsd: debug:") }
        #expect(logAfter.count - logBefore <= 10, "the log grew by \(logAfter.count - logBefore) lines:\n\(logAfter.suffix(20).joined(separator: "\n"))")
        print("MQTT flood: \(performed) commands reached the phone in \(Int(seconds)) s, \(codes.count) answers "
              + "(\(codes.filter { $0 == "busy" }.count) busy), \(logAfter.count - logBefore) log lines above debug")
    }

    /// Whoever may publish on the broker can leave retained commands on many topics: each is
    /// ignored, and the log says so once.
    @Test("100 retained commands on 100 topics: ignored, said once")
    func retainedCommandFlood() throws {
        let broker = try MosquittoBroker()
        for i in 0..<100 {
            let sent = try runTool("/usr/bin/mosquitto_pub", ["-h", "127.0.0.1", "-p", String(broker.port), "-r", "-q", "1",
                                                             "-t", "ancsd/aabbccdd\(String(format: "%04x", i))/media/command", "-m", "play"])
            #expect(sent.status == 0, "\(sent.text)")
        }
        let run = try DaemonRun(text: Self.scenario, ancsdArguments: ["--mqtt", "mqtt://127.0.0.1:\(broker.port)", "--mqtt-actions"])
        try run.ancsd.waitForStandardError(containing: "MQTT: connected to")
        try run.ancsd.waitForStandardError(containing: "MQTT: ignored a retained message")
        // A command sent now comes after the retained ones: once it is answered, all 100 were handled.
        let answers = try broker.subscriber(["ancsd/aabbccddffff/media/command/result"])
        defer { answers.signal(SIGKILL) }
        try broker.publish("ancsd/aabbccddffff/media/command", "nope")
        try waitUntil("the live command answered") { answers.lines.contains { $0.text.contains("bad_request") } }
        let said = run.ancsd.standardError.split(separator: "\n").filter { $0.contains("ignored a retained message") }
        #expect(said.count == 1, "\(said.count) lines: \(said.prefix(3))")
    }

    @Test("bad MQTT settings stop ancsd at the start with a clear error")
    func badSettings() throws {
        let password = try AncsdProcess.run(["run", "--mqtt", "mqtt://me:secret@host"])
        #expect(password.status == 2 && password.stderr.contains("--mqtt-password-file"))
        let missing = try AncsdProcess.run(["run", "--mqtt", "mqtt://me@127.0.0.1", "--mqtt-password-file", "/nonexistent/pw", "--config", "/dev/null"])
        #expect(missing.status != 0 && missing.stderr.contains("cannot read the MQTT password file /nonexistent/pw"))
        let prefix = try AncsdProcess.run(["run", "--mqtt", "mqtt://h", "--mqtt-prefix", "a/#"])
        #expect(prefix.status == 2 && prefix.stderr.contains("mqtt-prefix"))

        // A password file without a user in the URL: on the command line, and as the
        // configuration file's key. (No bus: should it start, it stops at once.)
        let directory = NSTemporaryDirectory() + "ancsd-mqtt-settings-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let passwordFile = directory + "/password"
        try "correct horse\n".write(toFile: passwordFile, atomically: false, encoding: .utf8)
        #expect(chmod(passwordFile, 0o600) == 0)
        let noBus = ["--bus", "unix:path=\(directory)/no-bus"]
        let noUser = try AncsdProcess.run(
            noBus + ["run", "--mqtt", "mqtt://127.0.0.1", "--mqtt-password-file", passwordFile, "--config", "/dev/null"])
        #expect(noUser.status == 2 && noUser.stderr.contains("--mqtt-password-file \(passwordFile) needs a user in the --mqtt URL"),
                "\(noUser.status) \(noUser.stderr)")
        let configuration = directory + "/ancsd.conf"
        try "mqtt = mqtt://127.0.0.1\nmqtt-password-file = \(passwordFile)\n".write(toFile: configuration, atomically: false, encoding: .utf8)
        let noUserInFile = try AncsdProcess.run(noBus + ["run", "--config", configuration])
        #expect(noUserInFile.status == 2 && noUserInFile.stderr.contains("needs a user"), "\(noUserInFile.status) \(noUserInFile.stderr)")
    }

    /// A password over plain mqtt:// to another machine is warned about once; to the loopback,
    /// or with a file only ancsd may read, nothing is said.
    @Test("a password in the clear to another host, and a password file others may read, are warned about once")
    func credentialWarnings() throws {
        let directory = NSTemporaryDirectory() + "ancsd-mqtt-warnings-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let passwordFile = directory + "/password"
        try "correct horse\n".write(toFile: passwordFile, atomically: false, encoding: .utf8)
        #expect(chmod(passwordFile, 0o640) == 0)
        // No bus: ancsd starts its outputs, says what it has to say, and stops (status 1).
        let noBus = ["--bus", "unix:path=\(directory)/no-bus"]
        let remote = try AncsdProcess.run(
            noBus + ["run", "--mqtt", "mqtt://ancsd@192.0.2.1", "--mqtt-password-file", passwordFile, "--config", "/dev/null", "--format", "json"])
        #expect(remote.status == 1, "\(remote.stderr)")
        #expect(remote.stderr.components(separatedBy: "the MQTT password goes to 192.0.2.1 unencrypted (mqtt://)").count == 2, "\(remote.stderr)")
        #expect(remote.stderr.components(separatedBy: "can be read by its group (mode 640): chmod 600 \(passwordFile)").count == 2)
        #expect(!remote.stderr.contains("correct horse"))
        #expect(chmod(passwordFile, 0o600) == 0)
        let local = try AncsdProcess.run(
            noBus + ["run", "--mqtt", "mqtt://ancsd@127.0.0.1", "--mqtt-password-file", passwordFile, "--config", "/dev/null", "--format", "json"])
        #expect(local.status == 1 && !local.stderr.contains("warning: the MQTT password"), "\(local.stderr)")
    }
}
