import ANCS
@testable import ANCSDaemon
import ANCSSession
import Foundation
import Testing

private func note(_ title: String, message: String = "Tea at five?", uid: UInt32 = 1, preExisting: Bool = false) -> PhoneNotification {
    var n = PhoneNotification(uid: uid, flags: preExisting ? [.preExisting] : [], category: .social, categoryCount: 1)
    n.appIdentifier = "com.apple.MobileSMS"
    n.title = title
    n.subtitle = ""
    n.message = message
    n.date = .valid(ANCSDate(year: 2026, month: 11, day: 30, hour: 10, minute: 15, second: 0))
    n.attributesComplete = true
    return n
}

private func temporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "ancsd-seen-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

private let ada = "AA:BB:CC:DD:EE:01"

@Suite struct FingerprintTests {
    /// The fingerprint as first defined (it is stored on disk, so it must never change): FNV-1a
    /// over each field's UTF-8 made into an array, the date as its `iso8601` text.
    private static func reference(_ n: PhoneNotification) -> UInt64? {
        guard n.attributesComplete else { return nil }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func mix(_ byte: UInt8) {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let date: String? = switch n.date {
        case .valid(let date)?: date.iso8601
        case .empty?: ""
        case .malformed(let text)?: "!" + text
        case nil: nil
        }
        for field in [n.appIdentifier, n.title, n.subtitle, n.message, date] {
            guard let field else {
                mix(0xFF)
                continue
            }
            let bytes = Array(field.utf8)
            for shift in stride(from: 0, to: 32, by: 8) { mix(UInt8(truncatingIfNeeded: bytes.count >> shift)) }
            for byte in bytes { mix(byte) }
        }
        return hash
    }

    @Test func matchesTheReferenceOnVariedNotifications() {
        let notifications = VariedEvents.notifications
        for n in notifications {
            #expect(NotificationFingerprint(n)?.value == Self.reference(n))
        }
        #expect(notifications.contains { !$0.attributesComplete } && notifications.contains { $0.attributesComplete })
    }

    @Test func knownValuesStayTheSame() throws {
        // Fixed values: files written by earlier versions hold them.
        let a = try #require(NotificationFingerprint(note("Ada")))
        #expect(a.hex == "89d3303836b698f8")
    }

    @Test func coversAppTitleSubtitleMessageAndDateOnly() throws {
        let a = try #require(NotificationFingerprint(note("Ada", uid: 1)))
        #expect(NotificationFingerprint(note("Ada", uid: 99, preExisting: true)) == a, "the UID and flags change every session")
        #expect(NotificationFingerprint(note("Ada", message: "Tea at six?")) != a)
        var other = note("Ada")
        other.subtitle = "x"
        #expect(NotificationFingerprint(other) != a)
        other = note("Ada")
        other.date = .empty
        #expect(NotificationFingerprint(other) != a)
        // Field boundaries count: "ab" + "" differs from "a" + "b".
        var split1 = note("ab", message: ""), split2 = note("a", message: "")
        split1.subtitle = ""
        split2.subtitle = "b"
        #expect(NotificationFingerprint(split1) != NotificationFingerprint(split2))
        var incomplete = note("Ada")
        incomplete.attributesComplete = false
        #expect(NotificationFingerprint(incomplete) == nil, "unknown fields would make different notifications equal")
    }

    @Test func hexRoundTrips() throws {
        let a = try #require(NotificationFingerprint(note("Ada")))
        #expect(a.hex.utf8.count == 16)
        #expect(NotificationFingerprint(hex: Array(a.hex.utf8)) == a)
        #expect(NotificationFingerprint(hex: Array("0123456789ABCDEF".utf8)) == nil)
        #expect(NotificationFingerprint(hex: Array("0123456789abcde".utf8)) == nil)
    }
}

@Suite struct SeenStoreTests {
    @Test func keptInMemoryWithoutADirectory() throws {
        let store = SeenStore(directory: nil)
        let a = try #require(NotificationFingerprint(note("Ada")))
        #expect(!store.contains(a, device: ada))
        store.record(a, device: ada)
        #expect(store.contains(a, device: ada))
        #expect(!store.contains(a, device: "AA:BB:CC:DD:EE:02"), "per phone")
    }

    @Test func lookUpRecordsOnlyWhenAsked() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = SeenStore(directory: directory)
        let a = try #require(NotificationFingerprint(note("Ada"))), b = try #require(NotificationFingerprint(note("Grace")))
        var answers: [Bool] = []
        #expect(!store.lookUp(a, device: ada) { answers.append($0); return false })
        #expect(!store.contains(a, device: ada), "not recorded when the answer is false")
        #expect(!store.lookUp(a, device: ada) { answers.append($0); return true })
        #expect(store.lookUp(a, device: ada) { answers.append($0); return true })
        #expect(!store.lookUp(b, device: ada) { _ in false })
        #expect(answers == [false, false, true])
        // Recorded twice, on disk too (a seen-again line keeps it recent), b never.
        let text = try String(contentsOfFile: directory + "/AA_BB_CC_DD_EE_01.seen", encoding: .utf8)
        #expect(text == "ancsd-seen/1\n\(a.hex)\n\(a.hex)\n")
        #expect(SeenStore(directory: directory).contains(a, device: ada))
    }

    @Test func survivesARestart() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let a = try #require(NotificationFingerprint(note("Ada"))), b = try #require(NotificationFingerprint(note("Grace")))
        do {
            let store = SeenStore(directory: directory)
            store.record(a, device: ada)
            store.record(b, device: ada)
        }
        let text = try String(contentsOfFile: directory + "/AA_BB_CC_DD_EE_01.seen", encoding: .utf8)
        #expect(text == "ancsd-seen/1\n\(a.hex)\n\(b.hex)\n")
        let again = SeenStore(directory: directory)
        #expect(again.contains(a, device: ada) && again.contains(b, device: ada))
    }

    @Test func aHalfWrittenLineIsNeverData() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let a = try #require(NotificationFingerprint(note("Ada"))), b = try #require(NotificationFingerprint(note("Grace")))
        let c = try #require(NotificationFingerprint(note("Alan")))
        let path = directory + "/AA_BB_CC_DD_EE_01.seen"
        // A crash in the middle of appending b: its line has no newline (and is short).
        try "ancsd-seen/1\n\(a.hex)\n\(b.hex.prefix(9))".write(toFile: path, atomically: true, encoding: .utf8)
        let store = SeenStore(directory: directory)
        #expect(store.contains(a, device: ada))
        #expect(!store.contains(b, device: ada))
        #expect(store.count(device: ada) == 1)
        store.record(c, device: ada)
        // The torn line was dropped when the file was read, so c has a line of its own.
        let reread = SeenStore(directory: directory)
        #expect(reread.contains(a, device: ada) && reread.contains(c, device: ada) && reread.count(device: ada) == 2)
        // A file that is not ours is started again rather than misread.
        try "something else\n\(a.hex)\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(!SeenStore(directory: directory).contains(a, device: ada))
    }

    /// Issue 27: a FIFO planted as a phone's `.seen` file hung the daemon in `open` (control
    /// socket dead, SIGTERM ignored); the `.seen.tmp` rewrite followed a planted symbolic link
    /// and overwrote its target.
    @Test func plantedFilesAreNeitherWaitedOnNorWrittenThrough() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let a = try #require(NotificationFingerprint(note("Ada")))
        #expect(mkfifo(directory + "/AA_BB_CC_DD_EE_01.seen", 0o600) == 0)
        let done = DispatchSemaphore(value: 0)
        let store = SeenStore(directory: directory)
        /// Handed to one other thread, and read here only after it signalled.
        final class Box: @unchecked Sendable { let store: SeenStore; init(_ store: SeenStore) { self.store = store } }
        let box = Box(store)
        Thread.detachNewThread {
            _ = box.store.contains(a, device: ada)
            box.store.record(a, device: ada)
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 5) == .success, "a FIFO in place of the state file blocked the store")
        #expect(store.contains(a, device: ada), "kept in memory")

        let victim = directory + "/victim"
        try "precious\n".write(toFile: victim, atomically: true, encoding: .utf8)
        let path = directory + "/AA_BB_CC_DD_EE_02.seen"
        try "ancsd-seen/1\n\(a.hex)\ntorn".write(toFile: path, atomically: true, encoding: .utf8)  // read means rewrite
        #expect(symlink(victim, path + ".tmp") == 0)
        #expect(SeenStore(directory: directory).contains(a, device: "AA:BB:CC:DD:EE:02"))
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "precious\n", "the rewrite wrote through a planted link")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "ancsd-seen/1\n\(a.hex)\n")
    }

    /// The bound holds under 100,000 distinct notifications: the set keeps the 4,096 most
    /// recent in memory and the file never grows past 2 × 4,096 lines.
    @Test func theBoundHoldsUnder100000Notifications() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/AA_BB_CC_DD_EE_01.seen"
        let store = SeenStore(directory: directory)
        let bound = 13 + 2 * SeenStore.defaultCapacity * 17
        var largest = 0
        var recent: [NotificationFingerprint] = []
        for i in 0..<100_000 {
            let fingerprint = NotificationFingerprint(value: UInt64(i) &* 0x9E37_79B9_7F4A_7C15)
            store.record(fingerprint, device: ada)
            if i % 997 == 0 || i >= 100_000 - 4096 {
                let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
                largest = max(largest, size)
            }
            if i >= 100_000 - SeenStore.defaultCapacity { recent.append(fingerprint) }
        }
        #expect(store.count(device: ada) == SeenStore.defaultCapacity)
        #expect(largest <= bound, "largest file \(largest) bytes, bound \(bound)")
        #expect(bound == 139_277)
        let reread = SeenStore(directory: directory)
        #expect(reread.count(device: ada) == SeenStore.defaultCapacity)
        #expect(recent.allSatisfy { reread.contains($0, device: ada) }, "the most recent are the ones kept")
        #expect(!reread.contains(NotificationFingerprint(value: 0), device: ada), "the oldest are gone")
    }

    /// Once full, the set's memory stays as it is: new notifications and ones seen again, for
    /// many rebuilds of its queue, never grow or shrink its storage past the bound.
    @Test func aFullSetKeepsItsMemory() throws {
        let capacity = 64
        var set = SeenSet(capacity: capacity)
        var generator = SystemRandomNumberGenerator()
        var room: Int?
        var changes = 0
        for value in 0..<UInt64(20_000) {
            // Half new, half one of the recent ones again (stale entries in the queue).
            let recent = value - UInt64.random(in: 0...min(value, UInt64(capacity - 1)), using: &generator)
            set.insert(NotificationFingerprint(value: value % 2 == 0 ? value : recent))
            if let room, set.orderCapacity != room { changes += 1 }
            if set.count == capacity, room == nil { room = set.orderCapacity }
        }
        let reserved = try #require(room)
        #expect(changes == 0, "the queue's room changed \(changes) times after the set filled")
        #expect(reserved >= SeenSet.orderBound(capacity: capacity))
        #expect(set.count == capacity)
    }

    @Test func seeingAgainKeepsANotificationRecent() {
        var set = SeenSet(capacity: 3)
        let (a, b, c, d) = (NotificationFingerprint(value: 1), NotificationFingerprint(value: 2), NotificationFingerprint(value: 3), NotificationFingerprint(value: 4))
        set.insert(a)
        set.insert(b)
        set.insert(c)
        set.insert(a)  // replayed again: the most recent now
        set.insert(d)
        #expect(set.contains(a) && !set.contains(b) && set.contains(c) && set.contains(d))
        for i in 0..<1000 { set.insert(i % 2 == 0 ? a : c) }
        #expect(set.count == 3 && set.oldestFirst.count == 3)
    }
}

@Suite struct ReplayGateTests {
    private func event(_ kind: NotificationEvent.Kind, _ title: String, uid: UInt32, preExisting: Bool) -> NotificationEvent {
        NotificationEvent(kind: kind, notification: note(title, uid: uid, preExisting: preExisting))
    }

    @Test func unseenHoldsBackOnlyWhatWasShown() throws {
        var gate = ReplayGate(policy: .unseen)
        #expect(gate.admit(event(.added, "Old", uid: 1, preExisting: true), known: true) == nil)
        let freshAdmitted = gate.admit(event(.added, "Offline", uid: 2, preExisting: true), known: false)
        let fresh = try #require(freshAdmitted)
        #expect(fresh.seenBefore == false && fresh.event.kind == .added)
        let liveAdmitted = gate.admit(event(.added, "Live", uid: 3, preExisting: false), known: true)
        let live = try #require(liveAdmitted)
        #expect(live.seenBefore == false, "only replays are seen before")
        #expect(gate.seenBefore == [1: true, 2: false, 3: false])
        // A held-back one whose content changes appears, as added; its removal then too.
        #expect(gate.admit(event(.modified, "Old", uid: 1, preExisting: false), known: true) == nil)
        let changedAdmitted = gate.admit(event(.modified, "Old, edited", uid: 1, preExisting: false), known: false)
        let changed = try #require(changedAdmitted)
        #expect(changed.event.kind == .added && changed.seenBefore == false)
        #expect(gate.admit(event(.removed, "Old, edited", uid: 1, preExisting: false), known: false)?.event.kind == .removed)
        // The removal of one held back is held back too.
        #expect(gate.admit(event(.added, "Old 2", uid: 4, preExisting: true), known: true) == nil)
        #expect(gate.admit(event(.removed, "Old 2", uid: 4, preExisting: true), known: false) == nil)
    }

    @Test func allPrintsEverythingMarked() throws {
        var gate = ReplayGate(policy: .all)
        #expect(gate.admit(event(.added, "Old", uid: 1, preExisting: true), known: true)?.seenBefore == true)
        #expect(gate.admit(event(.removed, "Old", uid: 1, preExisting: true), known: false)?.seenBefore == true)
        #expect(gate.admit(event(.added, "New", uid: 2, preExisting: true), known: false)?.seenBefore == false)
    }

    @Test func noneHoldsBackEveryReplay() {
        var gate = ReplayGate(policy: .none)
        #expect(gate.admit(event(.added, "Offline", uid: 1, preExisting: true), known: false) == nil)
        #expect(gate.admit(event(.added, "Live", uid: 2, preExisting: false), known: false) != nil)
    }
}
