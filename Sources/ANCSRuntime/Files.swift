#if canImport(Glibc)
import Glibc
#endif

/// Why a file could not be read, or a descriptor used.
public struct ReadError: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}

/// The text of the current `errno`.
public func systemError() -> String { String(cString: strerror(errno)) }

/// An errno with its text.
public struct SystemError: Error, CustomStringConvertible {
    public var code: Int32
    public init(code: Int32) { self.code = code }
    public var description: String { String(cString: strerror(code)) }
}

/// The whole of a small text file (at most 1 MiB), as UTF-8 (invalid bytes repaired).
public func readTextFile(_ path: String) -> Result<String, SystemError> {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return .failure(SystemError(code: errno)) }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16_384)
    while bytes.count <= 1 << 20 {
        let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0 {
            if errno == EINTR { continue }
            return .failure(SystemError(code: errno))
        }
        if count == 0 { return .success(String(decoding: bytes, as: UTF8.self)) }
        bytes += chunk[0..<count]
    }
    return .failure(SystemError(code: EFBIG))
}
