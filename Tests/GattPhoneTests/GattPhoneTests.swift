import ANCS
import Foundation
@testable import GattPhone
import PhoneSimulator
import TestSupport
import Synchronization
import Testing

/// The parts of the iPhone on real BlueZ that can be checked without a kernel Bluetooth stack;
/// the rest is proven by `make system-test`, which runs it against bluetoothd in a VM.
@Suite struct GattPhoneTests {
    @Test(arguments: [(23, 18), (48, 43), (185, 180), (517, 512), (600, 512), (5, 1)])
    func valuesFitAMultipleHandleValueNotification(mtu: Int, size: Int) {
        #expect(GattPhone.valueSize(mtu: mtu) == size)
    }

    @Test func aResponseIsCutIntoValuesThatJoinBackToIt() {
        let response = (0..<1530).map { UInt8(truncatingIfNeeded: $0 * 7) }
        for size in [1, 43, 180, 512, 2000] {
            let fragments = DataSourceEncoder.fragments(of: response, valueSize: size)
            #expect(fragments.flatMap { $0 } == response)
            #expect(fragments.dropLast().allSatisfy { $0.count == size })
            #expect(fragments.count == (response.count + size - 1) / size)
        }
        #expect(DataSourceEncoder.fragments(of: [], valueSize: 20).isEmpty)
        #expect(DataSourceEncoder.fragments(of: [1, 2, 3], valueSize: 0) == [[1], [2], [3]])
    }

    /// A phone with a link up and one notification held, and how many replays it has reported.
    private static func connectedPhoneHoldingOne() throws -> (GattPhone, () -> Int) {
        final class Reports: Sendable { let events = Mutex<[String]>([]) }
        let reports = Reports()
        let phone = try GattPhone(
            .init(adapter: "hci1", peer: "AA:BB:CC:DD:EE:FF", bus: .system, settings: ScenarioSettings()),
            report: { object in reports.events.withLock { $0.append(object["event"]?.stringValue ?? "") } })
        phone.state.withLock { s in
            s.connected = true
            _ = s.model.add(NotificationSpec(uid: 1, attributes: [.title: "Held"]))
        }
        return (phone, { reports.events.withLock { $0.filter { $0 == "consumer_subscribed" }.count } })
    }

    /// iOS replays what it holds at every subscription to the Notification Source, also when a
    /// consumer restarted on a link that stayed up unsubscribes and subscribes again.
    @Test func aResubscriptionOnTheSameLinkIsReplayedToo() throws {
        let (phone, replays) = try Self.connectedPhoneHoldingOne()
        phone.notifyChanged(.notificationSource, true)
        #expect(replays() == 1)
        phone.notifyChanged(.dataSource, true)
        phone.notifyChanged(.notificationSource, true)
        #expect(replays() == 1, "a repeated subscription without an unsubscription is not replayed")
        phone.notifyChanged(.notificationSource, false)
        phone.notifyChanged(.notificationSource, true)
        #expect(replays() == 2, "the consumer subscribed again: replayed")
    }

    /// The system test's watchdog step, as it failed: the consumer is killed, its bluetoothd
    /// writes the CCC off (StopNotify) but shows NotifyAcquired a moment longer; a replay on that
    /// stale view went to nobody, and the new consumer's StartNotify then found the phone
    /// "subscribed" and got nothing.
    @Test func aStaleConsumerSideViewAfterStopNotifyDoesNotEatTheReplay() throws {
        let (phone, replays) = try Self.connectedPhoneHoldingOne()
        phone.notifyChanged(.notificationSource, true)
        #expect(replays() == 1)
        phone.notifyChanged(.notificationSource, false)
        phone.subscriptionSeen(fromConsumerSide: true)
        #expect(replays() == 1, "seen from the consumer's side after StopNotify: not replayed yet")
        phone.notifyChanged(.notificationSource, true)
        #expect(replays() == 2, "StartNotify from the new consumer: replayed to it")
        // A new link starts with no CCC write seen: the consumer's side is believed again.
        phone.linkChanged(connected: false)
        phone.linkChanged(connected: true)
        phone.subscriptionSeen(fromConsumerSide: true)
        #expect(replays() == 3, "a reconnect whose CCC BlueZ restored silently is replayed")
    }

    @Test func refusalsBecomeTheDBusErrorsBlueZTranslates() {
        #expect(GattPhone.dbusError(for: .writeNotPermitted) == ("org.bluez.Error.NotPermitted", "0x03"))
        for code in [ATTErrorCode.unknownCommand, .invalidCommand, .invalidParameter, .actionFailed] {
            #expect(GattPhone.dbusError(for: code) == ("org.bluez.Error.Failed", "0x80"))
        }
    }

    @Test func stepsParsedOneLineAtATimeMatchAWholeScenario() throws {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("scenarios/demo.jsonl"), encoding: .utf8)
        let whole = try Scenario(parsing: text)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let settings = try ScenarioSettings(parsingLine: lines[0])
        #expect(settings == whole.settings)
        var steps: [ScenarioStep] = []
        for (index, line) in lines.enumerated().dropFirst() where !Scenario.isBlankOrComment(Substring(line)) {
            steps.append(try ScenarioStep(parsingLine: line, number: index + 1, settings: settings))
        }
        #expect(steps == whole.steps)
    }

    @Test func aBadLineNamesItsNumber() {
        #expect(throws: ScenarioError(line: 7, "a step needs \"do\"")) {
            try ScenarioStep(parsingLine: #"{"uid": 1}"#, number: 7, settings: ScenarioSettings())
        }
        #expect(throws: ScenarioError.self) { try ScenarioSettings(parsingLine: "[1, 2]", number: 1) }
        #expect(Scenario.isBlankOrComment("  # note"))
        #expect(Scenario.isBlankOrComment("// note"))
        #expect(!Scenario.isBlankOrComment(#"{"do":"end"}"#))
    }

    /// The executable's command line and input errors, which need no bus.
    @Test(arguments: [
        ([String](), "", "--adapter and --peer are required"),
        (["--adapter", "hci1"], "", "--adapter and --peer are required"),
        (["--adapter", "hci1", "--peer", "00:AA:01:00:00:00", "--frobnicate"], "", "unknown argument --frobnicate"),
        (["--adapter", "hci1", "--peer", "00:AA:01:00:00:00"], "", "ended before the scenario's settings line"),
        (["--adapter", "hci1", "--peer", "00:AA:01:00:00:00"], "not json\n", "line 1: not valid JSON"),
    ])
    func badInputExitsTwoWithAReason(arguments: [String], input: String, message: String) throws {
        let process = Process()
        process.executableURL = builtProductsDirectory.appendingPathComponent("ancs-gatt-phone")
        process.arguments = arguments
        let stdin = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = FileHandle.nullDevice
        process.standardError = stderr
        try process.run()
        stdin.fileHandleForWriting.write(Data(input.utf8))
        try stdin.fileHandleForWriting.close()
        let errors = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 2)
        #expect(errors.contains(message), "\(errors)")
    }
}
