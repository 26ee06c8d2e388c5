#if canImport(Glibc)
import Glibc
#endif

/// The version printed by `ancsd --version`.
let ancsdVersion = "0.1.0"

let topLevelHelp = """
Usage: ancsd <command> [options]

ancsd shows an iPhone's notifications on Linux: it speaks Apple Notification Center
Service (ANCS) over Bluetooth LE through BlueZ.

Commands:
  decode [FILE|-]   decode a capture of ANCS traffic (ancs-capture/1) to JSON Lines

Options:
  -h, --help        show this help (or a command's: ancsd <command> --help)
  --version         print the version

Run "ancsd <command> --help" for a command's options.
"""

/// Writes text to standard error, unbuffered.
func writeStandardError(_ text: String) {
    var text = text
    text.withUTF8 { bytes in
        var offset = 0
        while offset < bytes.count {
            let written = write(STDERR_FILENO, bytes.baseAddress.map { $0 + offset }, bytes.count - offset)
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }
}

/// Writes an error message to standard error.
func logError(_ message: String) {
    writeStandardError("ancsd: \(message)\n")
}

/// Reports a command-line mistake and returns exit status 2.
func usageFailure(_ error: any Error, command: String?) -> Int32 {
    logError("\(error)")
    writeStandardError("Try 'ancsd \(command.map { "\($0) " } ?? "")--help'.\n")
    return 2
}

func runMain(_ arguments: [String]) -> Int32 {
    guard let command = arguments.first else {
        writeStandardError(topLevelHelp + "\n")
        return 2
    }
    let rest = Array(arguments.dropFirst())
    switch command {
    case "-h", "--help", "help":
        print(topLevelHelp)
        return 0
    case "--version":
        print("ancsd \(ancsdVersion)")
        return 0
    case "decode":
        return DecodeCommand.run(rest)
    default:
        return usageFailure(UsageError("unknown command '\(command)'"), command: nil)
    }
}

exit(runMain(Array(CommandLine.arguments.dropFirst())))
