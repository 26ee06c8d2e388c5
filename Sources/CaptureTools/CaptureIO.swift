#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import CBluetooth
import SystemCalls

/// Why the capture cannot write its output or catch its signals.
public struct CaptureError: Error, CustomStringConvertible {
    public var description: String
}

/// Where `ancsd capture` writes: a file (created with mode 0600, truncated) or standard output.
/// Bytes are gathered and written whole by `flush()`: partial writes, EINTR and a non-blocking
/// descriptor (EAGAIN) are handled.
public final class CaptureOutput {
    /// "standard output" or the path, for messages.
    public let name: String
    let fd: Int32
    /// The file created for a path, closed with the output (nil for a descriptor not ours).
    private let file: FileDescriptor?
    private var pending: [UInt8] = []

    /// Opens `path`, or standard output for `-`.
    public init(path: String) throws(CaptureError) {
        if path == "-" {
            fd = STDOUT_FILENO
            file = nil
            name = "standard output"
            return
        }
        let opened: FileDescriptor
        do {
            opened = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, permissions: 0o600)
        } catch {
            throw CaptureError(description: "cannot create \(path): \(error)")
        }
        fd = opened.rawValue
        file = consume opened
        name = path
    }

    /// Writes to a descriptor that stays open (a pipe, in tests).
    init(descriptor: Int32, name: String) {
        fd = descriptor
        file = nil
        self.name = name
    }

    /// True if the output is a terminal.
    public var isTerminal: Bool { isatty(fd) == 1 }

    /// How many bytes wait for `flush()`.
    var pendingCount: Int { pending.count }

    func append(_ bytes: [UInt8]) {
        pending += bytes
    }

    /// Writes what was appended.
    func flush() throws(CaptureError) {
        var offset = 0
        defer { pending.removeFirst(offset) }
        while offset < pending.count {
            let written = try? Errno.retrying { pending[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
            if let written, written > 0 {
                offset += written
                continue
            }
            switch errno {
            case EAGAIN, EWOULDBLOCK:
                var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&entry, 1, -1)
            default: throw CaptureError(description: "cannot write \(name): \(systemError())")
            }
        }
    }

    /// Flushes, and for a file syncs it to disk, so that it is complete.
    func finish() throws(CaptureError) {
        try flush()
        var info = stat()
        if fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, fsync(fd) != 0 {
            throw CaptureError(description: "cannot sync \(name): \(systemError())")
        }
    }
}

/// SIGINT and SIGTERM as a readable pipe, for poll: CBluetooth's C handler writes each signal's
/// number to it. Until `restore()`, the signals no longer end the process. One at a time.
public final class StopSignals {
    private let readEnd: FileDescriptor
    private let writeEnd: FileDescriptor
    var fd: Int32 { readEnd.rawValue }
    private var restored = false

    public init() throws(CaptureError) {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw CaptureError(description: "cannot create a pipe for signals: \(systemError())") }
        readEnd = FileDescriptor(adopting: ends[0])
        writeEnd = FileDescriptor(adopting: ends[1])
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, O_NONBLOCK)  // the handler never blocks; take() never waits
        }
        guard cbt_catch_stop_signals(writeEnd.rawValue) == 0 else {
            throw CaptureError(description: "cannot catch SIGINT and SIGTERM: \(systemError())")
        }
    }

    deinit { restore() }

    /// The signal that arrived, if one did.
    func take() -> Int32? {
        var byte: UInt8 = 0
        return read(fd, &byte, 1) == 1 ? Int32(byte) : nil
    }

    /// Gives SIGINT and SIGTERM their previous actions back (the pipe closes with the value).
    public func restore() {
        guard !restored else { return }
        restored = true
        cbt_release_stop_signals()
    }
}
