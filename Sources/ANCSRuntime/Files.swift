#if canImport(Glibc)
import Glibc
#endif
public import SystemCalls

/// Why a file could not be read, or a descriptor used.
public struct ReadError: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}

/// The text of the current `errno`.
public func systemError() -> String { Errno.current.description }

/// The whole of a small text file (at most 1 MiB), as UTF-8 (invalid bytes repaired).
public func readTextFile(_ path: String) -> Result<String, Errno> {
    do {
        let file = try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC)
        return .success(String(decoding: try file.readToEnd(limit: 1 << 20), as: UTF8.self))
    } catch {
        return .failure(error)
    }
}
