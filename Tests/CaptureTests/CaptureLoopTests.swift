@testable import ancsd
@testable import CaptureTools
import Btsnoop
import Foundation
import JSON
import Testing
import TestSupport

/// The capture loop with a socket pair in place of the monitor channel. Serialized: the
/// SIGINT/SIGTERM handler is the process's.
@Suite(.serialized) struct CaptureLoopTests {
    @Test func writesEveryFrameUntilCountAndCountsWhatWasNotAFrame() throws {
        let (_, sent) = try session()
        let monitor = try FakeMonitor()
        for (number, record) in sent.enumerated() {
            monitor.send(MonitorFrame(record: record).datagram)
            if number == 2 { monitor.send([0x05, 0x00, 0x00, 0x00, 0x09, 0x00, 0x01]) }  // says 9 bytes, 1 follows
        }
        let url = temporaryURL(".btsnoop")
        defer { try? FileManager.default.removeItem(at: url) }
        var options = CaptureCommand.Options()
        options.output = url.path
        options.count = sent.count
        let before = HCIMonitorSocket.now()
        var capture = CaptureSession(options: options, socket: monitor.socket, output: try CaptureOutput(path: url.path), signals: try StopSignals())
        #expect(capture.run() == 0)

        let written = try readRecords(url)
        #expect(written.map(\.flags) == sent.map(\.flags))
        #expect(written.map(\.data) == sent.map(\.data))
        #expect(written.map(\.cumulativeDrops) == sent.indices.map { $0 < 3 ? 0 : 1 })
        #expect(written.allSatisfy { $0.unixMicroseconds >= before && $0.unixMicroseconds <= HCIMonitorSocket.now() })
        #expect(zip(written, written.dropFirst()).allSatisfy { $0.timestamp <= $1.timestamp })
        var mode = stat()
        #expect(stat(url.path, &mode) == 0 && mode.st_mode & 0o777 == 0o600, "captures hold notification content")

        var extractor = BtsnoopExtractor(datalink: .monitor)
        let extracted = try written.flatMap { try extractor.process($0) }
        #expect(extracted.count == 5, "connected, ns, cp, ds, disconnected: \(extracted)")
    }

    @Test func captureFormatThroughTheLoop() throws {
        let (_, sent) = try session()
        let monitor = try FakeMonitor()
        for record in sent { monitor.send(MonitorFrame(record: record).datagram) }
        let url = temporaryURL(".jsonl")
        defer { try? FileManager.default.removeItem(at: url) }
        var options = CaptureCommand.Options()
        options.format = .capture
        options.index = 0
        options.count = sent.count
        var capture = CaptureSession(options: options, socket: monitor.socket, output: try CaptureOutput(path: url.path), signals: try StopSignals())
        #expect(capture.run() == 0)
        let lines = try String(contentsOf: url, encoding: .utf8).split(separator: "\n").map { try JSONValue(parsing: String($0)) }
        let header = try #require(lines.first)
        #expect(header.objectValue?.keys == ["format", "source", "ancsd_version", "index", "datalink", "start"])
        #expect(header["source"] == "ancsd capture" && header["index"] == "hci0")
        #expect(lines.dropFirst().map { $0["char"]?.stringValue ?? $0["event"]?.stringValue ?? "?" } == ["connected", "ns", "cp", "ds", "disconnected"])
    }

    /// `--format capture` reads the frames with the extractor `ancsd decode` uses, which finds
    /// Apple Media Service too; the ancs-capture/1 file holds ANCS only, the same lines as
    /// without AMS.
    @Test func captureFormatLeavesAppleMediaServiceOut() throws {
        func captured(ams: Bool) throws -> [String] {
            let (_, sent) = try session(ams: ams)
            let monitor = try FakeMonitor()
            for record in sent { monitor.send(MonitorFrame(record: record).datagram) }
            let url = temporaryURL(".jsonl")
            defer { try? FileManager.default.removeItem(at: url) }
            var options = CaptureCommand.Options()
            options.format = .capture
            options.count = sent.count
            var capture = CaptureSession(options: options, socket: monitor.socket, output: try CaptureOutput(path: url.path),
                                         signals: try StopSignals())
            #expect(capture.run() == 0)
            // Without the header and the times (the frames came at other times).
            return try String(contentsOf: url, encoding: .utf8).split(separator: "\n").dropFirst().map {
                String($0).replacing(/"t":[0-9.e-]+,/, with: "")
            }
        }
        let lines = try captured(ams: true), without = try captured(ams: false)
        #expect(lines.count == 5 && lines == without)
    }

    @Test func stopsAfterTheDuration() throws {
        let monitor = try FakeMonitor()
        let url = temporaryURL(".btsnoop")
        defer { try? FileManager.default.removeItem(at: url) }
        var options = CaptureCommand.Options()
        options.duration = 0.3
        let start = ContinuousClock.now
        var capture = CaptureSession(options: options, socket: monitor.socket, output: try CaptureOutput(path: url.path), signals: try StopSignals())
        #expect(capture.run() == 0)
        let elapsed = ContinuousClock.now - start
        #expect(elapsed >= .milliseconds(300) && elapsed < .seconds(5), "\(elapsed)")
        #expect(try Data(contentsOf: url) == Data(BtsnoopWriter.fileHeader(.monitor)), "a complete file without records")
    }

    /// The frames queued when the signal comes are written, the file is complete, status 0,
    /// and the signal's previous action is back.
    @Test(arguments: [SIGINT, SIGTERM])
    func stopsCleanlyOnASignal(signal: Int32) throws {
        let (_, sent) = try session()
        let monitor = try FakeMonitor()
        let url = temporaryURL(".btsnoop")
        defer { try? FileManager.default.removeItem(at: url) }
        var options = CaptureCommand.Options()
        options.output = url.path
        func handler() -> Int {
            var action = sigaction()
            sigaction(signal, nil, &action)
            return action.__sigaction_handler.sa_handler.map { unsafeBitCast($0, to: Int.self) } ?? 0
        }
        let previous = handler()
        let signals = try StopSignals()
        #expect(handler() != previous)
        let capture = BackgroundCapture(options, monitor: monitor.socket, output: try CaptureOutput(path: url.path), signals: signals)
        for record in sent { monitor.send(MonitorFrame(record: record).datagram) }
        raiseHere(signal)
        #expect(capture.wait() == 0)
        #expect(try readRecords(url).map(\.data) == sent.map(\.data))
        signals.restore()
        #expect(handler() == previous)
    }

    /// A non-blocking pipe with a slow reader: every byte arrives, in order.
    @Test func partialWritesAndEAGAINLoseNothing() throws {
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        _ = fcntl(ends[1], F_SETFL, O_NONBLOCK)
        let output = CaptureOutput(descriptor: ends[1], name: "a pipe")
        let bytes = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let reader = ReadAll(ends[0])
        output.append(bytes)
        try output.flush()
        #expect(output.pendingCount == 0)
        close(ends[1])
        #expect(reader.wait() == bytes)
        close(ends[0])
    }

    /// BlueZ's and Wireshark's readers take the files the capture loop writes.
    @Test func btmonAndTsharkReadTheFile() throws {
        var b = SnoopBuilder(.monitor)
        b.newIndex(controller: 0)
        b.record(flags: 0xFFFF_0000 | 12, data: Array("ancsd capture test\0".utf8))  // SYSTEM_NOTE, no controller
        b.connect(handle: 0x40)
        // Find Information: btmon 5.66 crashes reading a Read By Type Request from a file.
        b.discovery(handle: 0x40, ns: 0x10, cp: 0x13, ds: 0x16, useFindInformation: true)
        b.write(handle: 0x40, attribute: 0x13, [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, 0x40, 0x00])
        b.writeResponse(handle: 0x40)
        b.notify(handle: 0x40, attribute: 0x16, [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x48, 0x69])
        b.disconnect(handle: 0x40)
        var reader = BtsnoopReader()
        reader.append(b.bytes)
        let monitor = try FakeMonitor()
        var count = 0
        while let record = try reader.next(atEnd: true) {
            monitor.send(MonitorFrame(record: record).datagram)
            count += 1
        }
        let url = temporaryURL(".btsnoop")
        defer { try? FileManager.default.removeItem(at: url) }
        var options = CaptureCommand.Options()
        options.count = count
        var capture = CaptureSession(options: options, socket: monitor.socket, output: try CaptureOutput(path: url.path), signals: try StopSignals())
        #expect(capture.run() == 0)

        // btmon comes with bluez, tshark with tshark: make test installs both.
        let btmon = try runTool("/usr/bin/btmon", ["-r", url.path, "--no-pager"])
        #expect(btmon.status == 0, "\(btmon.text)")
        for expected in [
            "= New Index: 06:05:04:03:02:01", "= Note: ancsd capture test", "LE Connection Complete (0x01)",
            "< ACL Data TX: Handle 64", "ATT: Write Request (0x12) len 10", "> ACL Data RX: Handle 64",
            "ATT: Handle Value Notification (0x1b) len 12", "HCI Event: Disconnect Complete (0x05)",
        ] {
            #expect(btmon.text.contains(expected), "\(expected)\n\(btmon.text)")
        }
        // btmon 5.66 (bookworm) prints "Data: …", 5.82 (trixie) "Data[10]: …".
        #expect(["Data: ", "Data[10]: "].contains { btmon.text.contains($0 + "00070000000102004869") }, "\(btmon.text)")
        let tshark = try runTool("/usr/bin/tshark", ["-r", url.path])
        #expect(tshark.status == 0, "\(tshark.text)")
        for expected in [
            "Adapter Id: 0, Opcode: New Index", "Adapter Id: 65535, Opcode: System Note", "LE Connection Complete",
            "Sent Write Request, Handle: 0x0013", "Rcvd Handle Value Notification, Handle: 0x0016", "Disconnect Complete",
        ] {
            #expect(tshark.text.contains(expected), "\(expected)\n\(tshark.text)")
        }
        #expect(tshark.text.split(separator: "\n").filter { $0.contains("→") }.count == count)
    }
}
