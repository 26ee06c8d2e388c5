@testable import ancsd
import Btsnoop
import Testing

@Suite struct CaptureOptionsTests {
    @Test func options() throws {
        let options = try #require(try CaptureCommand.parse([
            "-o", "out.jsonl", "--format=capture", "--index", "hci2", "--duration", "1.5", "--count", "7", "--handles", "ns=0x10,cp=0x13,ds=0x16",
        ]))
        #expect(options.output == "out.jsonl" && options.format == .capture && options.index == 2 && options.duration == 1.5 && options.count == 7)
        #expect(options.handles == ANCSHandles(notificationSource: 0x10, controlPoint: 0x13, dataSource: 0x16))
        #expect(try CaptureCommand.parse(["--index", "3"])?.index == 3)
        #expect(try CaptureCommand.parse(["--help"]) == nil)
        let defaults = try #require(try CaptureCommand.parse([]))
        #expect(defaults.output == "-" && defaults.format == .btsnoop && defaults.index == nil && defaults.duration == nil && defaults.count == nil)
        for (arguments, message) in [
            (["--format", "pcap"], "--format must be btsnoop or capture, not 'pcap'"),
            (["--index", "wlan0"], "--index needs a controller such as hci0, not 'wlan0'"),
            (["--index", "hci65535"], "--index needs a controller such as hci0"),
            (["--duration", "-1"], "--duration needs a number of seconds greater than 0"),
            (["--duration", "nan"], "--duration needs a number of seconds greater than 0"),
            (["--count", "0"], "--count needs a number of frames greater than 0"),
            (["--handles", "ns=0x10"], "--handles applies only to --format capture"),
            (["--format", "capture", "--handles", "ns=0x10,eu=0x20"], "rc, eu and ea apply only to ancsd decode"),
            (["--output"], "--output needs a value"),
            (["file.btsnoop"], "capture takes no file argument"),
            (["--frobnicate"], "unknown option --frobnicate"),
        ] {
            #expect(throws: UsageError.self, "\(arguments)") { try CaptureCommand.parse(arguments) }
            do {
                _ = try CaptureCommand.parse(arguments)
            } catch {
                #expect(error.description.contains(message), "\(error)")
            }
        }
    }
}
