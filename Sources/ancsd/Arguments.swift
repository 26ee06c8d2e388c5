/// A command-line mistake: printed with a hint to `--help`, exit status 2.
struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// One command-line token, as the scanner sees it.
enum Argument: Equatable {
    /// `--name`, `--name=value` or `-x`.
    case option(String, inlineValue: String?)
    /// Anything else, including `-` (standard input) and everything after `--`.
    case positional(String)
}

/// Walks the arguments of a command, GNU style: `--name value`, `--name=value`, `--` ends options.
struct ArgumentScanner {
    private var arguments: [String]
    private var index = 0
    private var optionsEnded = false

    init(_ arguments: [String]) { self.arguments = arguments }

    /// The next token, or nil at the end.
    mutating func next() -> Argument? {
        guard index < arguments.count else { return nil }
        let argument = arguments[index]
        index += 1
        if optionsEnded || argument == "-" || !argument.hasPrefix("-") { return .positional(argument) }
        if argument == "--" {
            optionsEnded = true
            return next()
        }
        if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
            return .option(String(argument[..<equals]), inlineValue: String(argument[argument.index(after: equals)...]))
        }
        return .option(argument, inlineValue: nil)
    }

    /// The value of an option that takes one: inline after `=` or the next argument.
    mutating func value(of option: String, inline: String?) throws(UsageError) -> String {
        if let inline { return inline }
        guard index < arguments.count else { throw UsageError("\(option) needs a value") }
        index += 1
        return arguments[index - 1]
    }
}
