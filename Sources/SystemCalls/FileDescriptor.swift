#if canImport(Glibc)
public import Glibc
#endif

/// An open file descriptor that this value owns, in the shape of swift-system's
/// `FileDescriptor` (which cannot be fetched here): every call retries on EINTR and throws an
/// `Errno`, and the descriptor is closed exactly once, by `close()` or when the value ends.
/// It is not copyable, so two owners cannot close one descriptor or close a number the kernel
/// has already given to someone else.
public struct FileDescriptor: ~Copyable, Sendable {
    /// The kernel's number; valid while this value lives. Hand it to C calls; never close it.
    public let rawValue: Int32

    /// Takes ownership of an open descriptor (one from `socket`, `accept4`, `pipe2`, …).
    public init(adopting rawValue: Int32) {
        self.rawValue = rawValue
    }

    deinit {
        Glibc.close(rawValue)
    }

    /// Opens `path` (`open(2)`; add `O_CLOEXEC` yourself where it matters: it is not implied).
    public static func open(_ path: String, _ flags: Int32, permissions: mode_t = 0) throws(Errno) -> FileDescriptor {
        FileDescriptor(adopting: try Errno.retrying { Glibc.open(path, flags, permissions) })
    }

    /// Makes a socket (`socket(2)`): `type` with its flags, e.g. `SOCK_STREAM | SOCK_CLOEXEC |
    /// SOCK_NONBLOCK` (close-on-exec is not implied).
    public static func socket(_ domain: Int32, _ type: Int32, _ protocol: Int32 = 0) throws(Errno) -> FileDescriptor {
        FileDescriptor(adopting: try Errno.retrying { Glibc.socket(domain, type, `protocol`) })
    }

    /// Closes the descriptor now, and reports what `close(2)` said (the descriptor is gone
    /// either way: close is never retried, as Linux frees the number even on EINTR).
    public consuming func close() throws(Errno) {
        let raw = rawValue
        discard self
        if Glibc.close(raw) != 0 { throw Errno.current }
    }

    /// Gives the descriptor up without closing it: the caller owns `rawValue` from now on.
    public consuming func release() -> Int32 {
        let raw = rawValue
        discard self
        return raw
    }

    /// Reads at most `buffer.count` bytes; 0 is the end of the input.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try Errno.retrying { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }
    }

    /// Reads until the end of the input (a whole file); more than `limit` bytes throw EFBIG.
    public func readToEnd(limit: Int = .max) throws(Errno) -> [UInt8] {
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 1)
        defer { chunk.deallocate() }
        var out: [UInt8] = []
        while true {
            let count = try read(into: chunk)
            if count == 0 { return out }
            out += chunk[0..<count]
            if out.count > limit { throw Errno(rawValue: EFBIG) }
        }
    }

    /// Writes some of `bytes` and says how many (a non-blocking descriptor may take fewer).
    public func write(_ bytes: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try Errno.retrying { Glibc.write(rawValue, bytes.baseAddress, bytes.count) }
    }

    /// Writes all of `bytes` to a blocking descriptor.
    public func writeAll(_ bytes: [UInt8]) throws(Errno) {
        var failed: Errno?
        bytes.withUnsafeBytes { buffer in
            do throws(Errno) { try writeAll(buffer) } catch { failed = error }
        }
        if let failed { throw failed }
    }

    /// Writes all of `bytes` to a blocking descriptor.
    public func writeAll(_ bytes: UnsafeRawBufferPointer) throws(Errno) {
        var offset = 0
        while offset < bytes.count {
            offset += try write(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
        }
    }

    /// The file's status (`fstat(2)`).
    public func status() throws(Errno) -> stat {
        var info = stat()
        _ = try Errno.retrying { fstat(rawValue, &info) }
        return info
    }
}

/// A failed system call's `errno`.
public struct Errno: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32

    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's `errno` now.
    public static var current: Errno { Errno(rawValue: errno) }

    public static let interrupted = Errno(rawValue: EINTR)
    public static let wouldBlock = Errno(rawValue: EAGAIN)
    public static let tooManyOpenFiles = Errno(rawValue: EMFILE)

    /// What `strerror(3)` says, e.g. "No such file or directory".
    public var description: String { String(cString: strerror(rawValue)) }

    /// Runs a system call until it is not interrupted (EINTR) and returns what it last gave,
    /// -1 with `errno` set included: for non-blocking code that tells EAGAIN from a failure
    /// itself.
    public static func retryingInterrupts<Result: BinaryInteger>(_ call: () -> Result) -> Result {
        while true {
            let result = call()
            if result != -1 || errno != EINTR { return result }
        }
    }

    /// Runs a system call until it is not interrupted (EINTR) and returns what it gave; throws
    /// its `errno` when it gave -1.
    public static func retrying<Result: BinaryInteger>(_ call: () -> Result) throws(Errno) -> Result {
        while true {
            let result = call()
            if result != -1 { return result }
            if errno != EINTR { throw Errno.current }
        }
    }
}
