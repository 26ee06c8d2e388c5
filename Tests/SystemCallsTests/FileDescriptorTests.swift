#if canImport(Glibc)
import Glibc
#endif
import SystemCalls
import Testing

@Suite struct FileDescriptorTests {
    /// What is written to one end of a pipe is read from the other; the end of input is 0 bytes
    /// once the writer is gone.
    @Test func aPipeCarriesBytesAndEnds() throws {
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        let reader = FileDescriptor(adopting: ends[0])
        do {
            let writer = FileDescriptor(adopting: ends[1])
            try Array("hello".utf8).withUnsafeBytes { try writer.writeAll($0) }
            try writer.close()
        }
        var buffer = [UInt8](repeating: 0, count: 16)
        let count = try buffer.withUnsafeMutableBytes { try reader.read(into: $0) }
        #expect(Array(buffer[..<count]) == Array("hello".utf8))
        #expect(try buffer.withUnsafeMutableBytes { try reader.read(into: $0) } == 0)
    }

    /// `readToEnd` gathers reads of any size, past its 64 KiB chunk, until the end of input.
    @Test func readToEndReadsAWholeFile() throws {
        var template = Array("/tmp/ancsd-systemcalls-XXXXXX".utf8CString)
        let made = mkstemp(&template)
        #expect(made >= 0)
        let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        defer { unlink(path) }
        let bytes = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let writer = FileDescriptor(adopting: made)
        try bytes.withUnsafeBytes { try writer.writeAll($0) }
        try writer.close()
        #expect(try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC).readToEnd() == bytes)
        let empty = try FileDescriptor.open("/dev/null", O_RDONLY | O_CLOEXEC).readToEnd()
        #expect(empty.isEmpty)
    }

    /// A descriptor is closed when its owner ends, and `release` hands it on open.
    @Test func theOwnerClosesOnceAndReleaseHandsOn() throws {
        let path = "/proc/self/status"
        var raw: Int32 = -1
        do {
            let file = try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC)
            raw = file.rawValue
            #expect(fcntl(raw, F_GETFD) != -1)
        }
        #expect(fcntl(raw, F_GETFD) == -1 && errno == EBADF)
        let kept = try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC).release()
        #expect(fcntl(kept, F_GETFD) != -1)
        close(kept)
    }

    /// `socket` makes a socket of the type asked, with its flags, owned like any descriptor.
    @Test func socketMakesAnOwnedSocket() throws {
        var raw: Int32 = -1
        do {
            let socket = try FileDescriptor.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            raw = socket.rawValue
            var type: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            #expect(getsockopt(raw, SOL_SOCKET, SO_TYPE, &type, &length) == 0 && type == Int32(SOCK_DGRAM.rawValue))
            #expect(fcntl(raw, F_GETFD) & FD_CLOEXEC != 0)
        }
        #expect(fcntl(raw, F_GETFD) == -1 && errno == EBADF)
        #expect(throws: Errno(rawValue: EAFNOSUPPORT)) { _ = try FileDescriptor.socket(-1, Int32(SOCK_STREAM.rawValue)) }
    }

    /// A failed call throws its errno, with strerror's words.
    @Test func failuresThrowTheirErrno() {
        #expect(throws: Errno(rawValue: ENOENT)) { _ = try FileDescriptor.open("/nonexistent/ancsd", O_RDONLY) }
        #expect(Errno(rawValue: ENOENT).description == "No such file or directory")
    }

    /// A call that EINTR interrupts is made again.
    @Test func anInterruptedCallIsRetried() throws {
        var calls = 0
        let result = try Errno.retrying { () -> Int32 in
            calls += 1
            if calls < 3 {
                errno = EINTR
                return -1
            }
            return 7
        }
        #expect(result == 7 && calls == 3)
    }

    /// For non-blocking code: EINTR is retried, any other failure comes back as -1 with errno.
    @Test func retryingInterruptsGivesOtherFailuresBack() {
        var calls = 0
        let result = Errno.retryingInterrupts { () -> Int in
            calls += 1
            errno = calls < 3 ? EINTR : EAGAIN
            return -1
        }
        #expect(result == -1 && errno == EAGAIN && calls == 3)
    }
}
