import Foundation
import Tar
import Testing

@Suite("TarWriter")
struct TarWriterTests {
    @Test("tar lists and extracts what was written, long names included")
    func extracts() throws {
        var tar = TarWriter()
        let long = "ancsd-report-host-20260101T000000Z/" + String(repeating: "d", count: 90) + ".txt"
        try tar.add(name: "report/versions.txt", contents: Array("ancsd 1.0\n".utf8), modified: 1_780_000_000)
        try tar.add(name: long, contents: Array(repeating: 0x41, count: 1_000), modified: 1_780_000_000)
        try tar.add(name: "report/empty.json", contents: [], modified: 0)
        let bytes = tar.finish()
        #expect(bytes.count % 512 == 0)
        #expect(tar.members.map(\.size) == [10, 1_000, 0])

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tar-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let archive = directory.appendingPathComponent("a.tar")
        try Data(bytes).write(to: archive)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/tar")
        process.arguments = ["-xf", archive.path, "-C", directory.path]
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        process.waitUntilExit()
        let complaint = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0 && complaint.isEmpty, "tar: \(complaint)")
        #expect(try String(contentsOf: directory.appendingPathComponent("report/versions.txt"), encoding: .utf8) == "ancsd 1.0\n")
        #expect(try Data(contentsOf: directory.appendingPathComponent(long)).count == 1_000)
    }

    @Test("a name that cannot fit is refused with the name")
    func tooLong() {
        var tar = TarWriter()
        #expect(throws: TarError.self) { try tar.add(name: String(repeating: "x", count: 120), contents: [], modified: 0) }
    }
}
