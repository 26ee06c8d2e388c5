@testable import ANCSDaemon
import EventLoop
import Glibc
import Synchronization
import Testing
import TestSupport

/// The reader of an AcquireNotify socket (`SOCK_SEQPACKET`, one datagram per notification),
/// where a read of 0 bytes is either an empty notification or the end of the stream.
@Suite struct NotificationReaderTests {
    /// What a reader handed on: each value, then its end; and the reader, kept meanwhile.
    private final class Seen: Sendable {
        let items = Mutex<[String]>([])
        let reader = Mutex<NotificationReader?>(nil)
        func add(_ item: String) { items.withLock { $0.append(item) } }
        var all: [String] { items.withLock { $0 } }
    }

    /// A socket pair as bluetoothd makes it for AcquireNotify.
    private func pair() throws -> (reader: Int32, phone: Int32) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw TestFailure("socketpair failed: errno \(errno)")
        }
        return (fds[0], fds[1])
    }

    private func send(_ fd: Int32, _ bytes: [UInt8]) {
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        #expect(sent == bytes.count)
    }

    /// Reads `fd` on `loop` until it closes.
    private func read(_ fd: Int32, on loop: EventLoop, into seen: Seen) {
        loop.perform {
            do {
                let reader = try NotificationReader(
                    fd: fd, loop: loop, onValue: { seen.add("value \($0)") }, onClose: { seen.add("closed: \($0)") })
                seen.reader.withLock { $0 = reader }
            } catch {
                seen.add("failed: \(error)")
            }
        }
    }

    private func waitFor(_ seen: Seen, count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        while seen.all.count < count {
            guard ContinuousClock.now < deadline else { throw TestFailure("only \(seen.all)") }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    /// An empty datagram (a notification with an empty value, as a phone may send one) is a
    /// value like any other: it used to be taken for the end of the stream, and the link was
    /// dropped and set up again (the phone's `garbage` step did it every few hundred values).
    @Test func anEmptyDatagramIsAValueAndOnlyTheCloseEndsTheStream() async throws {
        let (fd, phone) = try pair()
        let loop = try EventLoop(name: "reader-test")
        defer { loop.shutdown() }
        let seen = Seen()
        read(fd, on: loop, into: seen)
        send(phone, [])
        send(phone, [1, 2, 3])
        send(phone, [])
        try await waitFor(seen, count: 3)
        close(phone)
        try await waitFor(seen, count: 4)
        #expect(seen.all == ["value []", "value [1, 2, 3]", "value []", "closed: the link closed"])
    }

    /// After the phone's side closed, what it sent before is still read, an empty datagram with
    /// a value behind it included; then the stream ends.
    @Test func whatWasSentBeforeTheCloseIsReadThenTheStreamEnds() async throws {
        let (fd, phone) = try pair()
        send(phone, [])
        send(phone, [4])
        close(phone)
        let loop = try EventLoop(name: "reader-test")
        defer { loop.shutdown() }
        let seen = Seen()
        read(fd, on: loop, into: seen)
        try await waitFor(seen, count: 3)
        #expect(seen.all == ["value []", "value [4]", "closed: the link closed"])
    }
}
