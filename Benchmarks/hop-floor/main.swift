// hop-floor: the latency floor of the end-to-end benchmark's process chain, measured on the
// same machine in the same run (Benchmarks/daemon_bench.py starts it).
//
// A notification crosses five processes and four wake-ups before its line is read: the phone's
// Notification Source datagram wakes the daemon, whose Control Point write wakes dbus-daemon,
// which wakes the phone, whose Data Source datagram wakes the daemon again, whose output line
// wakes the reader. (The write's reply also goes phone → dbus-daemon → daemon, off that path.)
// These three roles do the same hops with the same kinds of sockets and an epoll loop each, and
// no other work, so what they take is what the machine's scheduler and wake-ups cost: no
// daemon, however lean, can be faster here.
//
//   hop-floor phone NS_FD DS_FD BUS_FD COUNT RATE   sends COUNT notifications at RATE per second
//   hop-floor bus PHONE_FD DAEMON_FD                 forwards bytes both ways, like dbus-daemon
//   hop-floor daemon NS_FD DS_FD BUS_FD              writes {"type":"added","uid":U,"t_ns":T}
//                                                    per notification to standard output
//
// Descriptors are inherited from the caller. Each role exits when a peer closes its socket.
import CEventLoop
import Glibc

/// A message: the notification's UID and the phone's CLOCK_MONOTONIC stamp, taken just before
/// the Notification Source datagram is sent (as the simulator stamps its timeline).
struct Stamp {
    var uid: UInt64
    var sentNs: UInt64

    var bytes: [UInt8] {
        withUnsafeBytes(of: (uid, sentNs)) { Array($0) }
    }

    init(uid: UInt64, sentNs: UInt64) {
        self.uid = uid
        self.sentNs = sentNs
    }

    init?(_ bytes: ArraySlice<UInt8>) {
        guard bytes.count == 16 else { return nil }
        var pair: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &pair) { $0.copyBytes(from: bytes) }
        self.init(uid: pair.0, sentNs: pair.1)
    }
}

func fail(_ message: String) -> Never {
    let line = Array("hop-floor: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    exit(2)
}

/// Reads what is there (up to 4 KiB); nil at end of file or on an error.
func readSome(_ fd: Int32) -> ArraySlice<UInt8>? {
    var buffer = [UInt8](repeating: 0, count: 4096)
    let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
    guard count > 0 else { return nil }
    return buffer[0..<count]
}

func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
    var done = 0
    while done < bytes.count {
        let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress.map { $0 + done }, $0.count - done) }
        guard count > 0 else { exit(0) }  // the peer is gone: the run is over
        done += count
    }
}

/// An epoll set over `fds`; `wait` returns the ready ones.
struct Poller {
    let epoll: Int32
    let fds: [Int32]

    init(_ fds: [Int32]) {
        epoll = ancs_epoll_create()
        self.fds = fds
        for fd in fds where ancs_epoll_ctl(epoll, Int32(ANCS_EPOLL_CTL_ADD), fd, UInt32(ANCS_EPOLLIN), UInt64(fd)) != 0 {
            fail("epoll_ctl: errno \(errno)")
        }
    }

    func wait() -> [Int32] {
        var ready = [ancs_ready](repeating: ancs_ready(), count: 8)
        let count = ancs_epoll_wait(epoll, &ready, 8, -1)
        guard count > 0 else { return [] }
        return ready[0..<Int(count)].map { Int32(truncatingIfNeeded: $0.token) }
    }
}

func descriptor(_ index: Int) -> Int32 {
    let arguments = CommandLine.arguments
    guard index < arguments.count, let fd = Int32(arguments[index]) else { fail("argument \(index) must be a descriptor") }
    return fd
}

/// Sends COUNT notifications, one every 1/RATE s on an absolute schedule; answers each Control
/// Point write with the write's reply (to the bus) and then the Data Source datagram, as the
/// simulator does.
func phone() {
    let (ns, ds, bus) = (descriptor(2), descriptor(3), descriptor(4))
    guard CommandLine.arguments.count > 6, let count = UInt64(CommandLine.arguments[5]),
        let rate = Double(CommandLine.arguments[6]), rate > 0
    else { fail("phone needs COUNT and RATE") }
    let period = UInt64(1e9 / rate)
    var next = ancs_monotonic_ns() + period
    let poller = Poller([bus])
    for uid in 1...max(count, 1) {
        var due = timespec(tv_sec: Int(next / 1_000_000_000), tv_nsec: Int(next % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, nil) == EINTR {}
        next += period
        let stamp = Stamp(uid: uid, sentNs: ancs_monotonic_ns())
        writeAll(ns, stamp.bytes)
        _ = poller.wait()
        guard let write = readSome(bus), let request = Stamp(write) else { exit(0) }
        writeAll(bus, request.bytes)  // the write's reply
        writeAll(ds, request.bytes)  // the Data Source response
    }
    // Let the last line through before the sockets close.
    var linger = timespec(tv_sec: 0, tv_nsec: 200_000_000)
    nanosleep(&linger, nil)
}

/// Forwards whatever arrives from one side to the other.
func bus() {
    let (phoneFD, daemonFD) = (descriptor(2), descriptor(3))
    let poller = Poller([phoneFD, daemonFD])
    while true {
        for fd in poller.wait() {
            guard let bytes = readSome(fd) else { exit(0) }
            writeAll(fd == phoneFD ? daemonFD : phoneFD, Array(bytes))
        }
    }
}

/// On a Notification Source datagram, writes the Control Point request to the bus; on the Data
/// Source datagram, writes the output line; reads and drops the write's reply.
func daemon() {
    let (ns, ds, bus) = (descriptor(2), descriptor(3), descriptor(4))
    let poller = Poller([ns, ds, bus])
    while true {
        for fd in poller.wait() {
            guard let bytes = readSome(fd) else { exit(0) }
            if fd == ns {
                writeAll(bus, Array(bytes))
            } else if fd == ds, let stamp = Stamp(bytes) {
                writeAll(STDOUT_FILENO, Array("{\"type\":\"added\",\"uid\":\(stamp.uid),\"t_ns\":\(stamp.sentNs)}\n".utf8))
            }
        }
    }
}

signal(SIGPIPE, SIG_IGN)
switch CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "" {
case "phone": phone()
case "bus": bus()
case "daemon": daemon()
default: fail("usage: hop-floor phone|bus|daemon FD... (started by Benchmarks/daemon_bench.py)")
}
