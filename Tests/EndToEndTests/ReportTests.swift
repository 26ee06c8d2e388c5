import Foundation
import JSON
import Testing
import Btsnoop
import TestSupport

/// `ancsd report` against `ancsd run` on the simulated phone: what the archive holds, and that
/// nothing planted in the run (a title, an app's name, the phone's name) is in it.
@Suite(.serialized)
struct ReportTests {
    static let device = "AA:BB:CC:DD:EE:35"
    static let phoneName = "Zelda Quixote’s iPhone"
    static let title = "Planted title 7f3a: meet at the harbour"
    static let appName = "Planted Messenger 9c2e"
    static let scenario = """
        {"scenario":"report","devices":[{"address":"\(device)","name":"\(phoneName)"}],"apps":{"org.example.planted":"\(appName)"}}
        {"do":"wait_subscribed","timeout":30}
        {"do":"add","uid":1,"category":"social","app":"org.example.planted","title":"\(title)","message":"Planted message body"}
        {"do":"sleep","seconds":60}
        {"do":"end"}
        """

    /// Every occurrence of `needle` in `bytes`, with `grep -a`.
    private func grepFinds(_ needle: String, in file: URL) throws -> Bool {
        let result = try AncsdProcess.command("/bin/grep", ["-a", "-c", "-F", needle, file.path])
        return result.status == 0
    }

    @Test func archiveHoldsTheStateAndNoContentOrName() throws {
        let socketPath = NSTemporaryDirectory() + "ancsd-control-\(UUID().uuidString.prefix(8))"
        let run = try DaemonRun(text: Self.scenario, ancsdArguments: ["--control", socketPath])
        try run.ancsd.waitForLine { $0.contains(Self.title) }  // the daemon has shown it

        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("report-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let archive = directory.appendingPathComponent("report.tar.gz")
        let result = try AncsdProcess.run([
            "--bus", run.bus.address, "report", "--output", archive.path, "--control", socketPath, "--fifo", directory.path + "/no-fifo",
            "--capture", "1",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        // It prints its members with their sizes and what it left out.
        for member in ["README.txt", "versions.json", "controller.json", "bluez.json", "doctor.json", "status.json", "journal.txt"] {
            #expect(result.stdout.contains(member) && result.stdout.range(of: #"\#(member) +\d+ bytes"#, options: .regularExpression) != nil,
                    "\(member) not listed: \(result.stdout)")
        }
        #expect(result.stdout.contains("<name: N bytes>"))
        var info = stat()
        #expect(stat(archive.path, &info) == 0 && info.st_mode & 0o777 == 0o600)

        let extract = try AncsdProcess.command("/bin/tar", ["-xzf", archive.path, "-C", directory.path])
        #expect(extract.status == 0, "\(extract.stderr)")
        let top = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix("ancsd-report-") }
        let root = directory.appendingPathComponent(try #require(top.first))
        let members = try FileManager.default.contentsOfDirectory(atPath: root.path).sorted()
        #expect(members == ["README.txt", "bluez.json", "capture-error.txt", "controller.json", "doctor.json", "journal.txt", "status.json",
                            "versions.json"])

        // Nothing planted, anywhere: the archive as written and every member.
        for needle in [Self.title, "meet at the harbour", Self.appName, Self.phoneName, "Zelda", "Planted message body"] {
            #expect(try !grepFinds(needle, in: archive), "\(needle) in the .tar.gz")
            for member in members {
                #expect(try !grepFinds(needle, in: root.appendingPathComponent(member)), "\(needle) in \(member)")
            }
        }

        // The state is there: the phone by its address, its name by its length; the daemon's status.
        let bluez = try JSONValue(parsing: Array(try Data(contentsOf: root.appendingPathComponent("bluez.json"))))
        let phone = try #require(bluez["devices"]?.arrayValue?.first { $0["Address"]?.stringValue == Self.device })
        #expect(phone["Name"]?.stringValue == "<name: \(Self.phoneName.utf8.count) bytes>")
        #expect(phone["Paired"] == true && phone["Connected"] == true)
        #expect(phone["gatt_services"]?.arrayValue?.isEmpty == false)
        let status = try JSONValue(parsing: Array(try Data(contentsOf: root.appendingPathComponent("status.json"))))
        #expect(status["ok"] == true && status["devices"]?.arrayValue?.first?["device"]?.stringValue == Self.device)
        #expect(status["devices"]?.arrayValue?.first?["name"]?.stringValue == "<name: \(Self.phoneName.utf8.count) bytes>")
        let doctor = try JSONValue(parsing: Array(try Data(contentsOf: root.appendingPathComponent("doctor.json"))))
        #expect(doctor["checks"]?.arrayValue?.contains { $0["what"]?.stringValue == "bluetoothd is running" && $0["ok"] == true } == true)
        // No Bluetooth in this kernel: the controller and the capture say why.
        let controller = try String(contentsOf: root.appendingPathComponent("controller.json"), encoding: .utf8)
        #expect(controller.contains("no controller information"), "\(controller)")
        let capture = try String(contentsOf: root.appendingPathComponent("capture-error.txt"), encoding: .utf8)
        #expect(capture.contains("no capture"), "\(capture)")
        let versions = try JSONValue(parsing: Array(try Data(contentsOf: root.appendingPathComponent("versions.json"))))
        #expect(versions["ancsd"]?.stringValue?.isEmpty == false && versions["kernel"]?["release"] != nil)
    }

    @Test func daemonNotRunning() throws {
        let bus = try PrivateBus()
        defer { bus.stop() }
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("report-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let result = try AncsdProcess.run(["--bus", bus.address, "report", "--output", "-", "--control", directory.path + "/none"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("status.json"))  // the list goes to standard error when the archive goes to standard output
        let archive = directory.appendingPathComponent("r.tar.gz")
        try Data(result.stdout.utf8).write(to: archive)
        let listing = try AncsdProcess.command("/bin/tar", ["-tzf", archive.path])
        // Standard output went through a String: check the listing only when it survived intact.
        if listing.status == 0 { #expect(listing.stdout.contains("status.json")) }
    }

    @Test func help() throws {
        let result = try AncsdProcess.run(["report", "--help"])
        #expect(result.status == 0 && result.stdout.contains("--capture SECONDS") && result.stdout.contains("<name: N bytes>"))
        let wrong = try AncsdProcess.run(["report", "--capture", "0"])
        #expect(wrong.status == 2 && wrong.stderr.contains("--capture needs"))
    }
}

/// A scrubbed capture still reads as the exchange it was: `ancsd decode` gives the same records
/// (kinds, handles, UIDs, attribute IDs and lengths), only the values are x's; btmon and tshark
/// read it too, when installed.
@Suite struct ScrubbedDecodeTests {
    @Test func decodeReadsTheScrubbedExchange() throws {
        let title = Array("Planted decode title 4b1d".utf8)
        var b = SnoopBuilder(.monitor)
        b.newIndex(controller: 0)
        b.connect(handle: 0x40)
        // By Find Information: btmon 5.66 crashes on a Read By Type discovery (BtsnoopDecodeTests).
        b.discovery(handle: 0x40, ns: 0x10, cp: 0x13, ds: 0x16, useFindInformation: true)
        b.notify(handle: 0x40, attribute: 0x10, [0x00, 0x18, 0x04, 0x01, 0x07, 0x00, 0x00, 0x00])
        b.write(handle: 0x40, attribute: 0x13, [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, 0x40, 0x00])
        b.writeResponse(handle: 0x40)
        let response: [UInt8] = [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, UInt8(title.count), 0x00] + title
        b.notify(handle: 0x40, attribute: 0x16, Array(response.prefix(12)))
        b.notify(handle: 0x40, attribute: 0x16, Array(response.dropFirst(12)))
        b.disconnect(handle: 0x40)
        let (scrubbed, _) = try BtsnoopScrubber.scrub(file: b.bytes)
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("scrub-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let original = directory.appendingPathComponent("original.btsnoop"), clean = directory.appendingPathComponent("scrubbed.btsnoop")
        try Data(b.bytes).write(to: original)
        try Data(scrubbed).write(to: clean)
        let before = try AncsdProcess.run(["decode", original.path]), after = try AncsdProcess.run(["decode", clean.path])
        #expect(before.status == 0 && after.status == 0, "\(after.stderr)")
        #expect(before.lines.count == after.lines.count && before.lines.count >= 5)
        #expect(!after.stdout.contains("Planted") && before.stdout.contains("Planted"))
        // Line by line, the same record with the title's bytes replaced by as many x's.
        let expected = before.stdout.replacingOccurrences(of: String(decoding: title, as: UTF8.self), with: String(repeating: "x", count: title.count))
            .replacingOccurrences(of: title.map { String(format: "%02x", $0) }.joined(), with: String(repeating: "78", count: title.count))
        #expect(after.stdout == expected)
        for tool in [["/usr/bin/btmon", "--no-pager", "-r"], ["/usr/bin/tshark", "-r"]] where FileManager.default.isExecutableFile(atPath: tool[0]) {
            let read = try AncsdProcess.command(tool[0], Array(tool.dropFirst()) + [clean.path])
            #expect(read.status == 0 && !read.stdout.contains("Planted"), "\(tool[0]): \(read.stderr)")
        }
    }
}
