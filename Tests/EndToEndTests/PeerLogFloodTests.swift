import Foundation
import JSON
import Testing
import TestSupport

/// Log lines a peer can trigger, flooded end to end: each kind is said once, then counted
/// (`RateLimitedLogs`), whoever sends it.
@Suite(.serialized) struct PeerLogFloodTests {
    /// The lines above debug that ancsd wrote (the runs log at debug, which is never limited).
    private func linesAboveDebug(_ text: String) -> [Substring] {
        text.split(separator: "\n").filter { !$0.hasPrefix("ancsd: debug:") }
    }

    /// A phone that refuses 300 attribute requests in a row (ATT 0x0E) while sending 300
    /// notifications: 300 refusals and 300 "added" lines at the default levels on today's main;
    /// now each kind once.
    @Test func aPhonesFloodOfRefusalsAndNotificationsIsSaidOncePerKind() throws {
        let scenario = """
            {"scenario":"peer-log-phone","devices":[{"address":"AA:BB:CC:DD:EE:01","name":"Ada's iPhone"}]}
            {"do":"wait_subscribed","timeout":30}
            {"do":"cp_error","code":14,"count":300}
            {"do":"burst","count":300,"start_uid":100,"rate":0}
            {"do":"sleep","seconds":1}
            {"do":"heal"}
            {"do":"end"}
            """
        let run = try DaemonRun(text: scenario)
        let events = try run.finish()
        #expect(events.filter { $0["type"] == "added" }.count == 300, "every notification shown")
        let lines = linesAboveDebug(run.ancsd.standardError)
        let refusals = lines.filter { $0.contains("did not answer") || $0.contains("ATT error") }
        let added = lines.filter { $0.contains(": notification ") && $0.contains(" added (") }
        #expect(refusals.count <= 2, "refusals: \(refusals.prefix(5))")
        #expect(added.count == 1, "added lines: \(added.prefix(5))")
        #expect(lines.count < 30, "\(lines.count) lines:\n\(lines.joined(separator: "\n"))")
    }
}
