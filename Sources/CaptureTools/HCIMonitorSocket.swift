#if canImport(Glibc)
import Glibc
#endif
import Btsnoop
import CBluetooth
import SystemCalls

/// Why the HCI monitor channel cannot be opened or read.
public struct MonitorSocketError: Error, CustomStringConvertible {
    public var description: String

    /// The message for `errno` after `call` failed, with what to do about the usual causes.
    init(call: String, errno code: Int32) {
        let text = "\(call): \(String(cString: strerror(code)))"
        switch code {
        case EAFNOSUPPORT, EPROTONOSUPPORT:
            description = "this kernel has no Bluetooth support (\(text)); load the bluetooth module (modprobe bluetooth) or use a kernel with CONFIG_BT"
        case EPERM, EACCES:
            description = "the HCI monitor channel needs root or CAP_NET_RAW (\(text))"
        default:
            description = "cannot use the HCI monitor channel (\(text))"
        }
    }
}

/// One datagram of the monitor channel, as received.
struct MonitorDatagram {
    /// The bytes kept (all of them unless the datagram did not fit the buffer).
    var bytes: [UInt8]
    /// The datagram's full length.
    var length: Int
    /// When the kernel received it (SO_TIMESTAMP), else when it was read; microseconds since the Unix epoch.
    var unixMicroseconds: Int64
}

/// The kernel's HCI monitor channel, the one btmon reads: the traffic of every controller, one
/// frame per datagram. On bind the kernel replays NEW_INDEX, OPEN_INDEX and INDEX_INFO for the
/// controllers that exist. Non-blocking: poll `fd`, then `receive()` until it returns nil.
public final class HCIMonitorSocket {
    private let socket: FileDescriptor
    var fd: Int32 { socket.rawValue }
    private var buffer = [UInt8](repeating: 0, count: MonitorFrame.maxDatagramLength + 1)

    /// Opens and binds the channel (all controllers: the monitor channel takes no other).
    public init() throws(MonitorSocketError) {
        let made = Glibc.socket(CBT_AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), CBT_BTPROTO_HCI)
        guard made >= 0 else { throw MonitorSocketError(call: "socket(AF_BLUETOOTH, SOCK_RAW, BTPROTO_HCI)", errno: errno) }
        let socket = FileDescriptor(adopting: made)
        let fd = socket.rawValue
        var address = sockaddr_hci(hci_family: sa_family_t(CBT_AF_BLUETOOTH), hci_dev: CBT_HCI_DEV_NONE, hci_channel: CBT_HCI_CHANNEL_MONITOR)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_hci>.size)) }
        }
        guard bound == 0 else { throw MonitorSocketError(call: "bind(HCI_CHANNEL_MONITOR)", errno: errno) }
        // Kernel receive times, as btmon takes them; without them, the time of reading.
        var on: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_TIMESTAMP, &on, socklen_t(MemoryLayout<Int32>.size))
        self.socket = socket
    }

    /// Takes over a descriptor that delivers monitor frames as datagrams (a socket pair, in tests).
    init(descriptor: Int32) {
        socket = FileDescriptor(adopting: descriptor)
    }

    /// The next datagram waiting, or nil when none is. EINTR is retried; ENETDOWN and ENODEV
    /// (a controller went away) are not the channel's end and also give nil. Throws on other
    /// errors.
    func receive() throws(MonitorSocketError) -> MonitorDatagram? {
        var microseconds: Int64 = -1
        let capacity = buffer.count
        let received = Result { () throws(Errno) -> Int in
            try Errno.retrying { buffer.withUnsafeMutableBytes { cbt_recv_timestamped(fd, $0.baseAddress, capacity, &microseconds) } }
        }
        switch received {
        case .failure(let error):
            switch error.rawValue {
            case EAGAIN, EWOULDBLOCK, ENETDOWN, ENODEV: return nil
            case let code: throw MonitorSocketError(call: "recvmsg", errno: code)
            }
        case .success(let length):
            let kept = min(length, capacity)
            return MonitorDatagram(bytes: Array(buffer[0..<kept]), length: length,
                                   unixMicroseconds: microseconds >= 0 ? microseconds : Self.now())
        }
    }

    /// The real-time clock in microseconds since the Unix epoch.
    static func now() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec) * 1_000_000 + Int64(time.tv_nsec) / 1_000
    }
}
