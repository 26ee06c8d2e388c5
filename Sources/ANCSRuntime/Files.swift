#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

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
    do {
        let file = try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC)
        return .success(String(decoding: try file.readToEnd(limit: 1 << 20), as: UTF8.self))
    } catch {
        return .failure(SystemError(code: error.rawValue))
    }
}
