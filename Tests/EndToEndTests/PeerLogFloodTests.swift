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

    /// A phone that sends malformed values on every characteristic it notifies (the simulator's
    /// `garbage`: about 1,000 a second for 3 s, round robin over the Notification Source, the
    /// Data Source and AMS's Entity Update) while 100 notifications arrive and the track
    /// changes: every value is dropped, nothing else is disturbed, and the log stays short.
    /// Over AcquireNotify sockets (an empty value there was taken for the link's end) and over
    /// signals (repeated short values there were taken for a second subscriber's copies).
    @Test(arguments: [true, false]) func aPhonesGarbageIsDroppedAndNothingElseIsDisturbed(acquire: Bool) throws {
        let scenario = """
            {"scenario":"peer-garbage","acquire_notify":\(acquire),"ams":true,"apps":{"com.apple.MobileSMS":"Messages"},"devices":[{"address":"AA:BB:CC:DD:EE:01","name":"Ada's iPhone"}]}
            {"do":"wait_subscribed","timeout":30}
            {"do":"sleep","seconds":1}
            {"do":"garbage","seconds":3,"rate":1000}
            {"do":"burst","count":50,"start_uid":100,"rate":50}
            {"do":"media_track","title":"Pavane","artist":"Gabriel Fauré","album":"Pavane, Op. 50","duration":390}
            {"do":"media_play"}
            {"do":"burst","count":50,"start_uid":150,"rate":50}
            {"do":"sleep","seconds":2}
            {"do":"end"}
            """
        let run = try DaemonRun(text: scenario)
        let events = try run.finish()
        let phoneLog = run.phone.standardError

        // The noise was sent, on all three characteristics.
        let ended = try #require(phoneLog.split(separator: "\n").first { $0.contains("garbage done after") }, "\(phoneLog)")
        for characteristic in ["Notification Source", "Data Source", "Entity Update"] {
            let count = ended.components(separatedBy: " on the \(characteristic)").first?.split(separator: " ").last.flatMap { Int($0) }
            #expect((count ?? 0) > 300, "\(characteristic): \(ended)")
        }

        // Every notification shown once, whole; none removed, none shown again.
        let added = events.of("added")
        #expect(added.compactMap { $0["uid"]?.intValue }.sorted() == Array(100..<200), "\(added.count) added")
        let whole = added.filter {
            $0["complete"] == true && $0["app_id"] == "com.apple.MobileSMS" && $0["app_name"] == "Messages"
                && $0["title"]?.stringValue?.hasPrefix("Burst ") == true && $0["message"]?.stringValue?.isEmpty == false
        }
        #expect(whole.count == 100, "incomplete: \(added.filter { $0["complete"] != true }.prefix(3))")
        #expect(events.of("removed").isEmpty && events.of("modified").isEmpty)
        #expect(events.of("connected").count == 1, "the link was never lost")
        #expect(!run.ancsd.standardError.contains("delivers every notification"), "no second subscriber was made up")

        // The player's track change and play came through, and nothing made up.
        let media = events.of("media")
        #expect(media.contains { $0["title"] == "Pavane" && $0["artist"] == "Gabriel Fauré" && $0["album"] == "Pavane, Op. 50" })
        let last = try #require(media.last)
        #expect(last["title"] == "Pavane" && last["state"] == "playing" && last["duration"]?.doubleValue == 390, "\(last)")
        #expect(media.allSatisfy { ["Clair de lune", "Pavane"].contains($0["title"]?.stringValue ?? "") }, "\(media)")

        let lines = linesAboveDebug(run.ancsd.standardError)
        #expect(lines.count < 40, "\(lines.count) lines:\n\(lines.joined(separator: "\n"))")
    }
}
