import Foundation
import Testing
@testable import ANCSDesktop

/// What `ancsd desktop` showed, kept in a file across its restarts.
struct ShownRecordTests {
    private func temporaryFile() throws -> String {
        var template = Array((NSTemporaryDirectory() + "ancsd-shown-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw CocoaError(.fileWriteUnknown) }
        return String(cString: made) + "/desktop-shown"
    }

    @Test func aRestartedRecordRemembersWhatWasShown() throws {
        let path = try temporaryFile()
        let first = ShownRecord(path: path)
        let a = ShownRecord.fingerprint(["AA:BB", "Messages", "Ada", "Tea?", "20261205T101010"])
        let b = ShownRecord.fingerprint(["AA:BB", "Messages", "Ada", "Tea!", "20261205T101010"])
        first.insert(a)
        #expect(first.contains(a) && !first.contains(b))
        let second = ShownRecord(path: path)
        #expect(second.contains(a) && !second.contains(b) && second.failure == nil)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600 && (attributes[.size] as? Int) == 8)
    }

    @Test func fingerprintsAreTheSameInEveryRunAndSeparateTheFields() {
        // FNV-1a of "a", US, "b", US: fixed, unlike Swift's seeded hashValue.
        #expect(ShownRecord.fingerprint(["a", "b"]) == ShownRecord.fingerprint(["a", "b"]))
        #expect(ShownRecord.fingerprint(["ab", ""]) != ShownRecord.fingerprint(["a", "b"]))
        #expect(ShownRecord.fingerprint([]) == 0xcbf2_9ce4_8422_2325)
    }

    @Test func theFileKeepsTheNewestAndStaysBounded() throws {
        let path = try temporaryFile()
        let record = ShownRecord(path: path, capacity: 4)
        for value in UInt64(1)...9 { record.insert(value) }
        // Eight records fill the file to twice the capacity; the ninth rewrites it with the newest four.
        let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int
        #expect(size == 4 * 8)
        let reread = ShownRecord(path: path, capacity: 4)
        #expect((1...5).allSatisfy { !reread.contains($0) } && (6...9).allSatisfy { reread.contains($0) })
    }

    @Test func anUnwritableFileLeavesTheRecordInMemory() {
        let record = ShownRecord(path: "/nonexistent/dir/desktop-shown")
        record.insert(7)
        #expect(record.contains(7))
        #expect(record.failure?.contains("cannot write /nonexistent/dir/desktop-shown") == true)
    }

    @Test func aFileThatIsNotOursIsReplaced() throws {
        let path = try temporaryFile()
        try Data(repeating: 0xAB, count: 2 * 4 * 8 + 100).write(to: URL(fileURLWithPath: path))
        let record = ShownRecord(path: path, capacity: 4)
        #expect(record.failure == nil)
        record.insert(1)
        #expect(ShownRecord(path: path, capacity: 4).contains(1))
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int == 8)
    }
}
