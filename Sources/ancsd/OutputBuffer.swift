#if canImport(Glibc)
import Glibc
#endif
import JSON

/// JSON Lines to a file descriptor through one reusable buffer: lines are appended as bytes and
/// written with one `write(2)` per `flushThreshold` bytes (and at `flush()`), not one per line.
final class OutputBuffer {
    /// How many bytes collect before they are written.
    static let flushThreshold = 1 << 16

    private let fd: Int32
    private(set) var writer = JSONWriter(capacity: OutputBuffer.flushThreshold + 4096)
    /// Set once a write failed (a closed pipe); later output is dropped.
    private(set) var failed = false

    init(fd: Int32 = STDOUT_FILENO) { self.fd = fd }

    deinit { flush() }

    /// Appends `value` as one line.
    func line(_ value: JSONValue) {
        writer.writeLine(value)
        flushIfFull()
    }

    /// Appends a line of text (the newline is added).
    func line(_ text: String) {
        var text = text
        text.withUTF8 { writer.appendRaw(UnsafeRawBufferPointer($0)) }
        writer.newline()
        flushIfFull()
    }

    /// Lets `body` append to the buffer directly (it must end what it writes with a newline).
    func append(_ body: (inout JSONWriter) -> Void) {
        body(&writer)
        flushIfFull()
    }

    /// Lets `body` append many lines to the buffer directly, in one access: after each line it
    /// calls the function it is given, which writes the lines out once `flushThreshold` bytes
    /// collect.
    func appendLines(_ body: (inout JSONWriter, _ lineEnded: (inout JSONWriter) -> Void) -> Void) {
        body(&writer) { writer in
            if writer.count >= Self.flushThreshold { writeOut(&writer) }
        }
    }

    private func flushIfFull() {
        if writer.count >= Self.flushThreshold { flush() }
    }

    /// Writes out everything buffered.
    func flush() { writeOut(&writer) }

    /// Writes out and empties `writer` (the buffer's own).
    private func writeOut(_ writer: inout JSONWriter) {
        defer { writer.removeAll() }
        guard !failed, writer.count > 0 else { return }
        let failedNow = writer.withBytes { bytes in
            guard let base = bytes.baseAddress else { return false }
            var offset = 0
            while offset < bytes.count {
                let written = write(fd, base + offset, bytes.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return true
                }
                offset += written
            }
            return false
        }
        if failedNow { failed = true }
    }
}
