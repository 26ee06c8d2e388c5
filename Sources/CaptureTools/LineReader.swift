#if canImport(Glibc)
import Glibc
#endif
import ANCSCapture
import ANCSRuntime
import SystemCalls

/// Reads a file or standard input line by line, as bytes, with a bound on the line length so a
/// file without newlines cannot exhaust memory.
final class LineReader {
    /// The longest line accepted.
    static let maxLineLength = 1 << 20

    private let fd: Int32
    /// The file opened for a path, closed with the reader (nil for standard input).
    private let file: FileDescriptor?
    private var buffer: [UInt8] = []
    private var start = 0
    private var atEOF = false
    private var chunk = [UInt8](repeating: 0, count: 65_536)

    /// Opens `path`, or standard input for `-`.
    init(path: String) throws(ReadError) {
        if path == "-" {
            fd = STDIN_FILENO
            file = nil
        } else {
            let opened: FileDescriptor
            do {
                opened = try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC)
            } catch {
                throw ReadError(description: "cannot open \(path): \(error)")
            }
            if let info = try? opened.status(), (info.st_mode & S_IFMT) == S_IFDIR {
                throw ReadError(description: "cannot read \(path): it is a directory")
            }
            fd = opened.rawValue
            file = consume opened
        }
    }

    /// The next line without its newline (a final line without one counts), or nil at the end.
    func nextLine() throws(ReadError) -> [UInt8]? {
        while true {
            if let newline = buffer[start...].firstIndex(of: 0x0A) {
                let line = Array(buffer[start..<newline])
                start = newline + 1
                return line
            }
            if buffer.count - start > Self.maxLineLength {
                throw ReadError(description: "a line is longer than \(Self.maxLineLength) bytes")
            }
            if atEOF {
                guard start < buffer.count else { return nil }
                let line = Array(buffer[start...])
                start = buffer.count
                return line
            }
            try fill()
        }
    }

    /// Hands the next line, without its newline, to `body` as bytes valid only during the call
    /// (no copy); false at the end of the input.
    func withNextLine(_ body: (UnsafeBufferPointer<UInt8>) throws -> Void) throws -> Bool {
        while true {
            let from = start
            let found = buffer.withUnsafeBufferPointer { all -> Int? in
                guard from < all.count, let base = all.baseAddress,
                      let hit = memchr(base + from, 0x0A, all.count - from)
                else { return nil }
                return UnsafePointer(hit.assumingMemoryBound(to: UInt8.self)) - base
            }
            if let newline = found {
                let lineStart = start
                start = newline + 1
                try buffer.withUnsafeBufferPointer { try body(UnsafeBufferPointer(rebasing: $0[lineStart..<newline])) }
                return true
            }
            if buffer.count - start > Self.maxLineLength {
                throw ReadError(description: "a line is longer than \(Self.maxLineLength) bytes")
            }
            if atEOF {
                guard start < buffer.count else { return false }
                let lineStart = start
                start = buffer.count
                try buffer.withUnsafeBufferPointer { try body(UnsafeBufferPointer(rebasing: $0[lineStart...])) }
                return true
            }
            try fill()
        }
    }

    /// Hands every line left, in order, to `body` as `withNextLine(_:)` does, the lines of each
    /// read taken in one pass (one call per read, not per line). Stops at the end of the input,
    /// or when `body` throws.
    func forEachLine(_ body: (UnsafeBufferPointer<UInt8>) throws -> Void) throws {
        while true {
            let from = start
            let consumed = try buffer.withUnsafeBufferPointer { all -> Int in
                guard let base = all.baseAddress else { return from }
                var lineStart = from
                while lineStart < all.count, let hit = memchr(base + lineStart, 0x0A, all.count - lineStart) {
                    let newline = UnsafePointer(hit.assumingMemoryBound(to: UInt8.self)) - base
                    start = newline + 1  // consumed before `body` runs, as in `withNextLine`
                    try body(UnsafeBufferPointer(rebasing: all[lineStart..<newline]))
                    lineStart = newline + 1
                }
                return lineStart
            }
            start = consumed
            if buffer.count - start > Self.maxLineLength {
                throw ReadError(description: "a line is longer than \(Self.maxLineLength) bytes")
            }
            if atEOF {
                guard start < buffer.count else { return }
                let lineStart = start
                start = buffer.count
                try buffer.withUnsafeBufferPointer { try body(UnsafeBufferPointer(rebasing: $0[lineStart...])) }
                return
            }
            try fill()
        }
    }

    /// The first `count` bytes not consumed yet (fewer at the end of the file), without consuming them.
    func peek(_ count: Int) throws(ReadError) -> [UInt8] {
        while buffer.count - start < count && !atEOF { try fill() }
        return Array(buffer[start..<min(buffer.count, start + count)])
    }

    /// The next bytes as they come, for binary files; nil at the end.
    func nextChunk() throws(ReadError) -> [UInt8]? {
        while start == buffer.count {
            if atEOF { return nil }
            try fill()
        }
        let chunk = Array(buffer[start...])
        start = buffer.count
        return chunk
    }

    private func fill() throws(ReadError) {
        if start > 0 && start >= buffer.count / 2 {
            buffer.removeFirst(start)
            start = 0
        }
        guard let count = try? Errno.retrying({ chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }) else {
            throw ReadError(description: "read failed: \(systemError())")
        }
        if count == 0 { atEOF = true }
        buffer.append(contentsOf: chunk[0..<count])
    }
}

/// How a path names itself in messages: "-" is standard input.
func displayName(_ path: String) -> String { path == "-" ? "standard input" : path }

extension LineReader {
    /// Hands each `ancs-capture/1` entry to `body` with its line number. `lineNumber` is the last
    /// line read, also when a line is malformed and this throws.
    func forEachCaptureEntry(lineNumber: inout Int, _ body: (CaptureEntry, Int) -> Void) throws {
        var parser = CaptureParser()
        while let line = try nextLine() {
            lineNumber += 1
            guard let entry = try parser.parseEntry(line: line) else { continue }
            body(entry, lineNumber)
        }
    }
}
