import Foundation

/// Runs the built `ancsd` binary, which sits beside the test bundle in the build directory.
struct AncsdProcess {
    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
        var lines: [String] { stdout.split(separator: "\n").map(String.init) }
    }

    static var binary: URL {
        if let override = ProcessInfo.processInfo.environment["ANCSD_BINARY"] { return URL(fileURLWithPath: override) }
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("ancsd")
    }

    /// The repository's root, for fixtures.
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    static let captures = repository.appendingPathComponent("Tests/ANCSCaptureTests/Fixtures/captures")

    static func run(_ arguments: [String], stdin: Data? = nil) throws -> Result {
        try command(binary.path, arguments, stdin: stdin)
    }

    /// Runs any program to its end, with what it printed.
    static func command(_ executable: String, _ arguments: [String], stdin: Data? = nil) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe(), err = Pipe(), input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(stdin) }
        try input.fileHandleForWriting.close()
        // Read both pipes before waiting, so a full pipe cannot deadlock the child.
        let errData = ReadInBackground(err.fileHandleForReading)
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                      stderr: String(decoding: errData.wait(), as: UTF8.self))
    }
}

/// Reads a file handle to its end on another thread.
final class ReadInBackground: @unchecked Sendable {
    private var data = Data()
    private let done = DispatchSemaphore(value: 0)

    init(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            data = handle.readDataToEndOfFile()
            done.signal()
        }
    }

    func wait() -> Data {
        done.wait()
        return data
    }
}

/// A temporary file holding `text`, removed by the caller.
func temporaryFile(_ text: String, suffix: String = ".jsonl") throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("ancsd-test-\(UUID().uuidString)\(suffix)")
    try text.write(to: url, atomically: true, encoding: .utf8)
    return url
}
