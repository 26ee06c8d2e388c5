import Foundation
import Testing
import TestSupport

private let ada = "AA:BB:CC:DD:EE:01"

/// `ancsd pair` against the simulated bluetoothd: the simulator's scenario waits for the pairing
/// window to open and then for the adapter to be as it was with nothing left registered
/// (`wait_state`), so its exit status says whether ancsd cleaned up.
final class PairRun {
    let bus: PrivateBus
    let phone: ChildProcess
    let ancsd: ChildProcess
    let terminal: PseudoTerminal?

    init(scenario: String, arguments: [String], terminal: Bool = false, environment: [String: String] = [:]) throws {
        bus = try PrivateBus()
        phone = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancs-phone-sim"),
            ["--bus", bus.address, "--scenario", repositoryRoot.appendingPathComponent("scenarios/\(scenario).jsonl").path])
        try phone.waitForStandardError(containing: "owns org.bluez")
        self.terminal = terminal ? try PseudoTerminal() : nil
        ancsd = try ChildProcess(
            builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "pair"] + arguments,
            environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { $1 },
            standardInput: self.terminal?.child)
    }

    var output: String { ancsd.lines.map(\.text).joined(separator: "\n") }

    /// Both exit statuses, ancsd's first.
    func finish(timeout: Duration = .seconds(60)) throws -> (ancsd: Int32, phone: Int32) {
        let a = try ancsd.wait(timeout: timeout)
        let p = try phone.wait(timeout: timeout)
        return (a, p)
    }

    deinit {
        _ = try? ancsd.stop(timeout: .seconds(5))
        _ = try? phone.stop(timeout: .seconds(5))
        bus.stop()
    }
}

/// The environment of `ancsd pair` with a shorter wait (`seconds`) before the security request
/// than the 5 s it takes otherwise (`ANCSD_SECURITY_REQUEST_DELAY`, read for the tests only).
func shortSecurityRequestDelay(_ seconds: Double) -> [String: String] {
    ProcessInfo.processInfo.environment.merging(["ANCSD_SECURITY_REQUEST_DELAY": "\(seconds)"]) { $1 }
}

/// A pseudo-terminal, so ancsd sees an interactive standard input the test can type on.
final class PseudoTerminal {
    let master: Int32
    let child: FileHandle

    // Glibc's module does not export the XSI pseudo-terminal functions: look them up.
    private typealias IntFunction = @convention(c) (Int32) -> Int32
    private typealias NameFunction = @convention(c) (Int32, UnsafeMutablePointer<CChar>, Int) -> Int32

    private static func function<T>(_ name: String, as type: T.Type) throws -> T {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { throw TestFailure("no \(name)") }
        return unsafeBitCast(symbol, to: type)
    }

    init() throws {
        master = open("/dev/ptmx", O_RDWR | O_NOCTTY)
        let grant = try Self.function("grantpt", as: IntFunction.self)
        let unlock = try Self.function("unlockpt", as: IntFunction.self)
        let name = try Self.function("ptsname_r", as: NameFunction.self)
        var buffer = [CChar](repeating: 0, count: 128)
        guard master >= 0, grant(master) == 0, unlock(master) == 0, name(master, &buffer, buffer.count) == 0 else {
            throw TestFailure("no pseudo-terminal")
        }
        let path = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let slave = open(path, O_RDWR | O_NOCTTY)
        guard slave >= 0 else { throw TestFailure("cannot open \(path)") }
        child = FileHandle(fileDescriptor: slave, closeOnDealloc: true)
    }

    func type(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
    }

    deinit { close(master) }
}

@Suite(.serialized) struct PairTests {
    @Test func pairsWithYes() throws {
        let run = try PairRun(scenario: "pair", arguments: ["--yes", "--timeout", "30"])
        let (status, phone) = try run.finish()
        #expect(status == 0, "\(run.output)\n\(run.ancsd.standardError)")
        #expect(phone == 0, "\(run.phone.standardError)")
        #expect(run.output.contains("passkey 482913"))
        #expect(run.output.contains("Paired with Ada's iPhone (\(ada)) and marked it trusted"))
        #expect(run.output.contains("\"Allow\"") && run.output.contains("Share System Notifications"))
        #expect(run.ancsd.standardError.contains("warning: --yes"), "accepting blindly is logged loudly")
        // Unregistered by ancsd itself, not dropped by bluetoothd when it left the bus.
        #expect(run.phone.standardError.contains("UnregisterAdvertisement /org/ancsd/pair/advertisement0"))
        #expect(run.phone.standardError.contains("UnregisterAgent /org/ancsd/pair/agent"))
        #expect(run.phone.standardError.contains("RegisterAgent /org/ancsd/pair/agent (DisplayYesNo)"))
        #expect(run.phone.standardError.contains("RequestDefaultAgent /org/ancsd/pair/agent"))
        #expect(run.phone.standardError.contains("Discoverable=true") && run.phone.standardError.contains("Type=\"peripheral\""))
        #expect(run.phone.standardError.contains("SolicitUUIDs=[\"7905f431-b5ce-4e99-a40f-4b1e122d00d0\"]"))
        #expect(run.phone.standardError.contains("rogue client refused everywhere"), "a caller that is not bluetoothd is refused")
        // Only Pairable and its timeout are set (and put back): Discoverable, its timeout and the
        // alias stay as they were (bluetoothd 5.66 turns Connectable off with Discoverable).
        let sets = run.phone.standardError.split(separator: "\n").filter { $0.contains("adapter: ") && $0.contains(" = ") }
        #expect(sets.count == 4 && sets.allSatisfy { $0.contains("adapter: Pairable") }, "\(sets)")
    }

    @Test func pairsWhenTheUserTypesYes() throws {
        let run = try PairRun(scenario: "pair", arguments: ["--timeout", "30"], terminal: true)
        try run.ancsd.waitForLine(timeout: .seconds(30)) { $0.contains("Pairing request from Ada's iPhone") }
        run.terminal?.type("y\n")
        let (status, phone) = try run.finish()
        #expect(status == 0, "\(run.output)\n\(run.ancsd.standardError)")
        #expect(phone == 0, "\(run.phone.standardError)")
        #expect(run.output.contains("Does the iPhone show 482913?"))
        #expect(!run.ancsd.standardError.contains("warning"), "\(run.ancsd.standardError)")
    }

    @Test func refusedWhenTheUserTypesNo() throws {
        let run = try PairRun(scenario: "pair-refused", arguments: ["--timeout", "30"], terminal: true)
        try run.ancsd.waitForLine(timeout: .seconds(30)) { $0.contains("Pairing request from Ada's iPhone") }
        run.terminal?.type("n\n")
        let (status, phone) = try run.finish()
        #expect(status == 4, "\(run.output)\n\(run.ancsd.standardError)")
        #expect(phone == 0, "the phone was refused and the adapter restored:\n\(run.phone.standardError)")
        #expect(run.ancsd.standardError.contains("the passkey was not confirmed"))
        #expect(run.phone.standardError.contains("pairing refused by the agent: org.bluez.Error.Rejected"))
    }

    @Test func refusedWithoutATerminal() throws {
        let run = try PairRun(scenario: "pair-refused", arguments: ["--timeout", "30"])
        let (status, phone) = try run.finish()
        #expect(status == 4, "\(run.output)\n\(run.ancsd.standardError)")
        #expect(phone == 0, "\(run.phone.standardError)")
        #expect(run.ancsd.standardError.contains("standard input is not a terminal"))
        #expect(run.ancsd.standardError.contains("--yes"))
    }

    @Test func timeoutRestoresTheAdapter() throws {
        let run = try PairRun(scenario: "pair-window-closes", arguments: ["--timeout", "2"])
        let (status, phone) = try run.finish()
        #expect(status == 3, "\(run.ancsd.standardError)")
        #expect(phone == 0, "Pairable/Discoverable and timeouts back, nothing registered:\n\(run.phone.standardError)")
        #expect(run.ancsd.standardError.contains("no iPhone paired within 2 s"))
        #expect(run.phone.standardError.contains("UnregisterAgent /org/ancsd/pair/agent"))
    }

    /// What to look for on the phone, for the shape in use; and when no phone has connected
    /// 45 s into the window (0.5 s here: ANCSD_PAIR_HINT_AFTER), the other shape to try.
    @Test(arguments: [("keyboard", "listed as a keyboard", "remote"), ("remote", "listed as a remote", "keyboard")])
    func namesTheOtherShapeWhenNoPhoneConnects(shape: String, listing: String, other: String) throws {
        let run = try PairRun(
            scenario: "pair-window-closes", arguments: ["--timeout", "3", "--accessory", shape],
            environment: ["ANCSD_PAIR_HINT_AFTER": "0.5"])
        let (status, phone) = try run.finish()
        #expect(status == 3, "\(run.ancsd.standardError)")
        #expect(phone == 0, "\(run.phone.standardError)")
        #expect(run.output.contains(listing), "\(run.output)")
        #expect(run.output.contains("No phone has connected in 0.5 s"), "\(run.output)")
        #expect(run.output.contains("try the other shape: ancsd pair --accessory \(other)"), "\(run.output)")
    }

    /// A phone that connects within the window hears nothing of the other shape.
    @Test func noHintOnceAPhoneConnected() throws {
        let run = try PairRun(scenario: "pair", arguments: ["--yes", "--timeout", "30"], environment: ["ANCSD_PAIR_HINT_AFTER": "1"])
        let (status, phone) = try run.finish()
        #expect(status == 0, "\(run.output)\n\(run.ancsd.standardError)")
        #expect(phone == 0, "\(run.phone.standardError)")
        #expect(!run.output.contains("No phone has connected"), "\(run.output)")
    }

    @Test(arguments: [SIGINT, SIGTERM])
    func aSignalRestoresTheAdapter(signal: Int32) throws {
        let run = try PairRun(scenario: "pair-window-closes", arguments: ["--timeout", "60"])
        try run.ancsd.waitForLine(timeout: .seconds(30)) { $0.contains("Pairing window open") }
        // Interrupt only once the phone has seen the window open (line 3 of the scenario):
        // signalling on the first sign of it raced the simulator's check of that state.
        try run.phone.waitForStandardError(containing: "line 3: state reached")
        run.ancsd.signal(signal)
        let (status, phone) = try run.finish()
        #expect(status == 128 + signal, "\(run.ancsd.standardError)")
        #expect(phone == 0, "\(run.phone.standardError)")
        #expect(run.phone.standardError.contains("UnregisterAdvertisement /org/ancsd/pair/advertisement0"))
        #expect(run.phone.standardError.contains("UnregisterAgent /org/ancsd/pair/agent"))
        #expect(run.phone.standardError.contains("adapter: Pairable = false"))
    }

    @Test func withoutBluetoothd() throws {
        let bus = try PrivateBus()
        let ancsd = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", bus.address, "pair", "--yes"])
        #expect(try ancsd.wait() == 1)
        #expect(ancsd.standardError.contains("bluetoothd is not running"))
    }

    @Test func helpAndBadArguments() throws {
        let help = try AncsdProcess.run(["pair", "--help"])
        #expect(help.status == 0)
        for text in ["--yes", "--timeout S", "--adapter hciN", "--name NAME", "Exit status", "130"] {
            #expect(help.stdout.contains(text), "\(text)")
        }
        #expect(try AncsdProcess.run(["--help"]).stdout.contains("pair "))
        #expect(try AncsdProcess.run(["run", "--help"]).stdout.contains("--no-advertise"))
        for bad in [["--timeout", "0"], ["--timeout", "x"], ["--adapter", "usb0"], ["--frobnicate"], ["extra"]] {
            let result = try AncsdProcess.run(["pair"] + bad)
            #expect(result.status == 2, "\(bad)")
            #expect(result.stderr.contains("Try 'ancsd pair --help'"))
        }
    }
}

/// What `ancsd run` keeps registered for phones to come back.
@Suite(.serialized) struct PresenceTests {
    @Test func advertisementAndAgentStayRegistered() throws {
        let run = try DaemonRun(scenario: "run-presence", ancsdArguments: ["--replays", "all"])
        let events = try run.finish()
        let sessions = events.sessions(of: ada)
        #expect(sessions.count == 2)
        #expect(sessions.last?.titles("added") == ["Before", "After"])
        let log = run.ancsd.standardError
        #expect(log.contains("registered pairing agent /org/ancsd/run/agent"))
        #expect(log.contains("refused a pairing request from AA:BB:CC:DD:EE:66"), "the stranger is refused")
        #expect(log.contains("bluetoothd released the advertisement; registering it again"))
        // At start, after Release, after the bluetoothd restart.
        #expect(log.components(separatedBy: "registered LE advertisement").count - 1 == 3, "\(log)")
        #expect(log.components(separatedBy: "registered pairing agent").count - 1 == 2, "\(log)")
        // The HID accessory goes with the advertisement: at start and again on the restarted
        // bluetoothd, which knows nothing of the old registration (after Release it may still
        // be registered: AlreadyExists, logged at debug).
        #expect(log.components(separatedBy: "registered the HID accessory /org/ancsd/accessory on hci0").count - 1 >= 2, "\(log)")
        #expect(run.phone.standardError.contains("Discoverable=false"), "connectable, not discoverable")
        #expect(!events.contains { $0["device"]?.stringValue == "AA:BB:CC:DD:EE:66" })
    }

    @Test func noAdvertiseRegistersNothing() throws {
        let scenario = """
            {"scenario":"no-advertise","devices":[{"address":"\(ada)","name":"Ada's iPhone"}]}
            {"do":"wait_subscribed","timeout":30}
            {"after":0.5,"do":"wait_state","agents":0,"advertisements":0,"timeout":0.1}
            {"do":"add","uid":1,"category":"social","app":"a","title":"Still works","message":"x"}
            {"after":0.5,"do":"end"}
            """
        let run = try DaemonRun(text: scenario, ancsdArguments: ["--no-advertise"])
        let events = try run.finish()
        #expect(events.titles("added") == ["Still works"])
        #expect(!run.ancsd.standardError.contains("registered"))
        #expect(!run.phone.standardError.contains("RegisterAgent") && !run.phone.standardError.contains("RegisterAdvertisement"))
    }

    @Test func advertiseNoInTheConfigurationFile() throws {
        let config = try temporaryFile("advertise = no\n", suffix: ".conf")
        defer { try? FileManager.default.removeItem(at: config) }
        let scenario = """
            {"scenario":"no-advertise-config","devices":[{"address":"\(ada)","name":"Ada's iPhone"}]}
            {"do":"wait_subscribed","timeout":30}
            {"after":0.5,"do":"wait_state","agents":0,"advertisements":0,"timeout":0.1}
            {"do":"end"}
            """
        let run = try DaemonRun(text: scenario, ancsdArguments: ["--config", config.path])
        _ = try run.finish()
        #expect(!run.phone.standardError.contains("RegisterAdvertisement"))
        let bad = try AncsdProcess.run(["run", "--config", "/dev/null", "--advertise", "maybe"])
        #expect(bad.status == 2 && bad.stderr.contains("advertise must be yes or no"))
    }
}

/// The package starts `ancsd run` on machines with no phone yet: until one is paired it must
/// change nothing (no advertisement, no pairing agent that would replace the desktop's), and once
/// `ancsd pair` has paired one, the running daemon takes it over by itself.
@Suite(.serialized) struct WaitingForAPhoneTests {
    @Test func registersNothingUntilAPhoneIsPairedThenServesIt() throws {
        let scenario = """
            {"scenario":"waiting","adapter_pairable":false,"adapter_discoverable":false,"devices":[{"address":"\(ada)","name":"Ada's iPhone","present":false}],"apps":{"com.apple.MobileSMS":"Messages"}}
            {"after":1,"do":"wait_state","agents":0,"advertisements":0,"timeout":0.1}
            {"do":"appear"}
            {"after":0.5,"do":"wait_state","agents":0,"advertisements":0,"timeout":0.1}
            {"do":"wait_state","discoverable_advertisements":1,"agents":1,"pairable":true,"timeout":30}
            {"after":0.2,"do":"pair","passkey":482913,"expect":"paired"}
            {"do":"wait_state","advertisements":1,"discoverable_advertisements":0,"agents":1,"default_agent":true,"timeout":30}
            {"do":"wait_subscribed","timeout":30}
            {"do":"add","uid":1,"category":"social","app":"com.apple.MobileSMS","title":"Hello","message":"First"}
            {"after":1,"do":"end"}
            """
        let notify = try DatagramListener(directory: NSTemporaryDirectory())
        let run = try DaemonRun(text: scenario, environment: ["NOTIFY_SOCKET": notify.path])
        let ready = try notify.receive(until: "STATUS=waiting for a paired iPhone (ancsd pair)", timeout: .seconds(20))
        #expect(!ready.isEmpty)
        try run.ancsd.waitForStandardError(containing: "no paired iPhone yet: no advertisement and no pairing agent")
        try run.phone.waitForStandardError(containing: "appeared")
        // The phone has found nothing registered while it was there unpaired (line 4).
        try run.phone.waitForStandardError(containing: "line 4: state reached")
        let pair = try ChildProcess(builtProductsDirectory.appendingPathComponent("ancsd"), ["--bus", run.bus.address, "pair", "--yes"])
        #expect(try pair.wait(timeout: .seconds(60)) == 0, "\(pair.standardError)")
        let events = try run.finish()
        #expect(events.titles("added") == ["Hello"])
        // Paired from a resolvable private address (a dev_4x… object), known by its identity.
        #expect(events.of("added").allSatisfy { $0["device"]?.stringValue == ada }, "\(events.map(\.serialized))")
        #expect(run.ancsd.standardError.contains("registered pairing agent /org/ancsd/run/agent"))
        _ = try notify.receive(until: "STATUS=1 phone connected, 1 notification", timeout: .seconds(5))
    }
}
