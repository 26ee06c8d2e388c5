#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
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

    private func flushIfFull() {
        if writer.count >= Self.flushThreshold { flush() }
    }

    /// Writes out everything buffered.
    func flush() { writeOut(&writer) }

    /// Writes out and empties `writer` (the buffer's own, without copying it).
    private func writeOut(_ writer: inout JSONWriter) {
        defer { writer.removeAll() }
        guard !failed, writer.count > 0 else { return }
        if !writer.withBytes({ writeAll(fd, $0) }) { failed = true }
    }
}
