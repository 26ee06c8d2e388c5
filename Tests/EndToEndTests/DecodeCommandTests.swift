import Foundation
import JSON
import Testing

/// `ancsd decode` as a user runs it: the built binary, real files, exit statuses.
@Suite struct DecodeCommandTests {
    static let captureFiles: [String] = ((try? FileManager.default.contentsOfDirectory(atPath: AncsdProcess.captures.path)) ?? [])
        .filter { $0.hasSuffix(".jsonl") }.sorted()

    @Test(arguments: captureFiles)
    func decodesEveryRealCapture(name: String) throws {
        let result = try AncsdProcess.run(["decode", AncsdProcess.captures.appendingPathComponent(name).path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty)
        let objects = try result.lines.map { try JSONValue(parsing: $0) }
        #expect(!objects.isEmpty)
        #expect(objects.allSatisfy { $0["error"] == nil })
        if name.hasPrefix("real-ns") {
            #expect(objects == [[
                "char": "ns", "event": "added", "event_id": 0, "uid": 67, "flags": ["silent"], "flags_raw": 1,
                "category": "other", "category_id": 0, "category_count": 1,
            ]])
        } else {
            #expect(objects.first?["char"] == "cp")
            #expect(objects.last?["char"] == "ds")
            let complete = objects.last?["complete"]?.boolValue
            #expect(complete == !(name.contains("omitted") || name.contains("placeholder") || name.contains("ends-after")))
        }
    }

    @Test func theAllEightAttributesCapture() throws {
        let result = try AncsdProcess.run(["decode", AncsdProcess.captures.appendingPathComponent("real-ds-ringly-sms-uid0x14-all-eight-attributes.jsonl").path])
        let response = try JSONValue(parsing: try #require(result.lines.last))
        let attributes = try #require(response["attributes"]?.arrayValue)
        #expect(attributes.map { $0["name"]?.stringValue ?? "" } == [
            "app_identifier", "title", "subtitle", "message", "message_size", "date", "positive_action_label", "negative_action_label",
        ])
        #expect(attributes[1]["value"] == "Nate Stedman")
        #expect(attributes[4]["message_size"] == 14)
        #expect(attributes[5]["date"] == "2015-10-28T12:00:21")
        #expect(response["truncated"] == false)
    }

    @Test func readsStandardInput() throws {
        let text = #"{"char":"ns","hex":"0218060201020304"}"# + "\n"
        for arguments in [["decode"], ["decode", "-"]] {
            let result = try AncsdProcess.run(arguments, stdin: Data(text.utf8))
            #expect(result.status == 0)
            #expect(result.lines.count == 1 && result.lines[0].contains(#""event":"removed""#))
        }
    }

    @Test func protocolErrorsExitOne() throws {
        let file = try temporaryFile("""
            {"format":"ancs-capture/1"}
            {"char":"ns","hex":"001806"}
            {"char":"ns","hex":"0018060201020304"}
            """)
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try AncsdProcess.run(["decode", file.path])
        #expect(result.status == 1)
        #expect(result.lines.count == 2, "decoding goes on after a protocol error")
        #expect(result.lines[0] == #"{"char":"ns","error":"wrong_length","detail":"a Notification Source value is 8 bytes, this one has 3","line":2}"#)
    }

    @Test func aMalformedFileStopsNamingTheLineAndKeepsWhatCameBefore() throws {
        let file = try temporaryFile("""
            {"char":"cp","hex":"000100000001280005"}
            {"char":"ds","hex":"00010000000102004869"}
            {"char":"ds","hex":"05 0f"}
            {"char":"ns","hex":"0018060201020304"}
            """)
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try AncsdProcess.run(["decode", file.path])
        #expect(result.status == 2)
        #expect(result.stderr.contains("line 3: bad hex"), "\(result.stderr)")
        #expect(result.lines.count == 2, "the request, and the response open when the file broke off")
        #expect(result.lines.last?.contains(#""complete":false"#) == true)
    }

    @Test(arguments: [
        ("{\"char\":\"ds\",\"hex\":\"00\"}\nnot json\n", "line 2: not valid JSON"),
        ("{\"char\":\"zz\",\"hex\":\"00\"}\n", "line 1: unknown char \"zz\""),
        ("{\"format\":\"pcap\"}\n", "line 1: unsupported format"),
    ])
    func malformedFilesExitTwo(text: String, message: String) throws {
        let file = try temporaryFile(text)
        defer { try? FileManager.default.removeItem(at: file) }
        let result = try AncsdProcess.run(["decode", file.path])
        #expect(result.status == 2)
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }

    @Test func binaryGarbageIsAFormatError() throws {
        let result = try AncsdProcess.run(["decode"], stdin: Data([0xFF, 0xFE, 0x00, 0x7B, 0x0A]))
        #expect(result.status == 2)
        #expect(result.stderr.contains("standard input: line 1"))
    }

    @Test func unreadableInputs() throws {
        let missing = try AncsdProcess.run(["decode", "/nonexistent/capture.jsonl"])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("cannot open /nonexistent/capture.jsonl: No such file or directory"))
        let directory = try AncsdProcess.run(["decode", "/tmp"])
        #expect(directory.status == 2)
        #expect(directory.stderr.contains("it is a directory"))
    }

    /// Issue 27: an empty file exited 0 without a word (a capture that never started, the
    /// wrong file); it is said, with status 1, from a file as from standard input.
    @Test func emptyInputIsSaid() throws {
        let result = try AncsdProcess.run(["decode"], stdin: Data())
        #expect(result.status == 1 && result.stdout.isEmpty && result.stderr.contains("empty: no records to decode"), "\(result.stderr)")
        let path = NSTemporaryDirectory() + "ancsd-empty-\(UUID().uuidString).jsonl"
        #expect(FileManager.default.createFile(atPath: path, contents: Data()))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = try AncsdProcess.run(["decode", path])
        #expect(file.status == 1 && file.stderr.contains("empty: no records to decode"), "\(file.stderr)")
    }

    @Test func usage() throws {
        let help = try AncsdProcess.run(["decode", "--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("Usage: ancsd decode [--handles ns=H,cp=H,ds=H,rc=H,eu=H,ea=H] [--to-capture] [FILE|-]"))
        #expect(help.stdout.contains("Exit status"))
        let unknown = try AncsdProcess.run(["decode", "--frobnicate"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("unknown option --frobnicate"))
        #expect(unknown.stderr.contains("Try 'ancsd decode --help'"))
        let two = try AncsdProcess.run(["decode", "a", "b"])
        #expect(two.status == 2)
        let top = try AncsdProcess.run(["--help"])
        #expect(top.status == 0 && top.stdout.contains("decode") && top.stdout.contains("replay"))
        let none = try AncsdProcess.run([])
        #expect(none.status == 2 && none.stderr.contains("Usage: ancsd"))
        let bogus = try AncsdProcess.run(["bogus"])
        #expect(bogus.status == 2 && bogus.stderr.contains("unknown command 'bogus'"))
        let version = try AncsdProcess.run(["--version"])
        #expect(version.status == 0 && version.stdout.hasPrefix("ancsd "))
    }
}
