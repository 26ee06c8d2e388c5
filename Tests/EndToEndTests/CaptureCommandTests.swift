import Btsnoop
import Foundation
import Testing

/// `ancsd capture` as a user runs it. This host's kernel has no Bluetooth (socket(AF_BLUETOOTH)
/// fails with EAFNOSUPPORT), which is the behaviour checked here; the capture loop itself is
/// tested with a socket pair in CaptureTests.
@Suite struct CaptureCommandTests {
    static let kernelHasBluetooth: Bool = {
        let fd = socket(AF_BLUETOOTH, Int32(SOCK_RAW.rawValue), 1)  // BTPROTO_HCI
        let code = errno
        if fd >= 0 { close(fd) }
        return fd >= 0 || code != EAFNOSUPPORT
    }()

    @Test(.enabled(if: !kernelHasBluetooth, "this kernel has Bluetooth"))
    func withoutBluetoothInTheKernelItSaysSoAndExitsOne() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("ancsd-capture-\(UUID().uuidString).btsnoop")
        for arguments in [["capture", "--output", url.path], ["capture", "--format", "capture", "--duration", "1"], ["capture"]] {
            let result = try AncsdProcess.run(arguments)
            #expect(result.status == 1, "\(arguments)")
            #expect(result.stderr.hasPrefix("ancsd: this kernel has no Bluetooth support (socket(AF_BLUETOOTH, SOCK_RAW, BTPROTO_HCI): "),
                    "\(result.stderr)")
            #expect(result.stderr.contains("Address family not supported by protocol"))
            #expect(result.stdout.isEmpty)
        }
        #expect(!FileManager.default.fileExists(atPath: url.path), "no file is created, none replaced, when the channel cannot be opened")
    }

    @Test(arguments: [
        (["--format", "pcap"], "--format must be btsnoop or capture, not 'pcap'"),
        (["--index", "wlan0"], "--index needs a controller such as hci0"),
        (["--duration", "0"], "--duration needs a number of seconds greater than 0"),
        (["--duration"], "--duration needs a value"),
        (["--count", "-3"], "--count needs a number of frames greater than 0"),
        (["--handles", "ns=0x10"], "--handles applies only to --format capture"),
        (["--format", "capture", "--handles", "ns=banana"], "--handles needs ns=H,cp=H,ds=H"),
        (["out.btsnoop"], "capture takes no file argument, got 'out.btsnoop' (use --output FILE)"),
        (["--frobnicate"], "unknown option --frobnicate"),
    ])
    func badFlagsExitTwo(arguments: [String], message: String) throws {
        let result = try AncsdProcess.run(["capture"] + arguments)
        #expect(result.status == 2)
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stderr.contains("Try 'ancsd capture --help'."))
    }

    @Test func usage() throws {
        let help = try AncsdProcess.run(["capture", "--help"])
        #expect(help.status == 0)
        #expect(help.stdout.hasPrefix("""
            Usage: ancsd capture [--output FILE|-] [--format btsnoop|capture] [--index hciN]
                                 [--duration SECONDS] [--count N] [--handles ns=H,cp=H,ds=H]
            """))
        #expect(help.stdout.contains("Exit status"))
        let top = try AncsdProcess.run(["--help"])
        #expect(top.stdout.contains("  capture   "))
    }
}
