@testable import ancsd
@testable import CaptureTools
import ANCSRuntime
import Btsnoop
import SystemCalls
import Foundation
import Testing
import TestSupport

/// A stand-in for the monitor channel: a SOCK_SEQPACKET socket pair keeps datagram boundaries.
final class FakeMonitor {
    let socket: HCIMonitorSocket
    private let writer: Int32

    init() throws {
        var ends: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw Errno.current
        }
        socket = HCIMonitorSocket(descriptor: ends[0])
        writer = ends[1]
    }

    deinit { close(writer) }

    func send(_ datagram: [UInt8]) {
        let sent = datagram.withUnsafeBytes { Glibc.send(writer, $0.baseAddress, $0.count, 0) }
        #expect(sent == datagram.count)
    }
}

/// An ANCS session on hci0 as the kernel's monitor channel delivers it; with `ams`, Apple
/// Media Service discovered beside it and its traffic between ANCS's.
func session(ams: Bool = false) throws -> (builder: SnoopBuilder, records: [BtsnoopRecord]) {
    let ns: UInt16 = 0x10, cp: UInt16 = 0x13, ds: UInt16 = 0x16
    var b = SnoopBuilder(.monitor)
    b.newIndex(controller: 0)
    b.connect(handle: 0x40)
    b.discovery(handle: 0x40, ns: ns, cp: cp, ds: ds)
    if ams {
        b.amsDiscovery(handle: 0x40, rc: 0x20, eu: 0x23, ea: 0x26)
        b.write(handle: 0x40, attribute: 0x23, [0x00, 0x00, 0x01, 0x02])
        b.notify(handle: 0x40, attribute: 0x20, [0x00, 0x01])  // before the write's answer
        b.writeResponse(handle: 0x40)
        b.notify(handle: 0x40, attribute: 0x23, [0x00, 0x00, 0x00] + Array("Music".utf8))
    }
    b.notify(handle: 0x40, attribute: ns, [0x00, 0x00, 0x04, 0x01, 0x07, 0x00, 0x00, 0x00])
    b.write(handle: 0x40, attribute: cp, [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, 0x40, 0x00])
    b.writeResponse(handle: 0x40)
    b.notify(handle: 0x40, attribute: ds, [0x00, 0x07, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x48, 0x69])
    b.disconnect(handle: 0x40)
    var reader = BtsnoopReader()
    reader.append(b.bytes)
    var records: [BtsnoopRecord] = []
    while let record = try reader.next(atEnd: true) { records.append(record) }
    return (b, records)
}

func readRecords(_ url: URL) throws -> [BtsnoopRecord] {
    var reader = BtsnoopReader()
    reader.append(try Data(contentsOf: url))
    var out: [BtsnoopRecord] = []
    while let record = try reader.next(atEnd: true) { out.append(record) }
    #expect(reader.datalink == .monitor)
    return out
}

func temporaryURL(_ suffix: String) -> URL {
    FileManager.default.temporaryDirectory.appendingPathComponent("ancsd-capture-test-\(UUID().uuidString)\(suffix)")
}

/// Runs a capture into `url` on a thread of its own; `wait()` gives its exit status.
final class BackgroundCapture: @unchecked Sendable {
    private var session: CaptureSession
    private var status: Int32?
    private let done = DispatchSemaphore(value: 0)

    init(_ options: CaptureCommand.Options, monitor: HCIMonitorSocket, output: CaptureOutput, signals: StopSignals) {
        session = CaptureSession(options: options, socket: monitor, output: output, signals: signals)
        Thread.detachNewThread { [self] in
            status = session.run()
            done.signal()
        }
    }

    func wait(seconds: Double = 10) -> Int32? {
        done.wait(timeout: .now() + seconds) == .success ? status : nil
    }
}

/// Sends `signal` to this thread with it unblocked here, so that it is handled before `raise` returns.
func raiseHere(_ signal: Int32) {
    var set = sigset_t(), old = sigset_t()
    sigemptyset(&set)
    sigaddset(&set, signal)
    pthread_sigmask(SIG_UNBLOCK, &set, &old)
    raise(signal)
    pthread_sigmask(SIG_SETMASK, &old, nil)
}

/// Reads a descriptor to its end on a thread of its own, slowly.
final class ReadAll: @unchecked Sendable {
    private var bytes: [UInt8] = []
    private let done = DispatchSemaphore(value: 0)

    init(_ fd: Int32) {
        Thread.detachNewThread { [self] in
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count <= 0 { break }
                bytes += chunk[0..<count]
                if bytes.count % (64 * 1024) < 4096 { usleep(1000) }
            }
            done.signal()
        }
    }

    func wait() -> [UInt8] {
        done.wait()
        return bytes
    }
}

