import ANCSRuntime
import ANCSSession

extension LogLevel {
    /// The logger's level for a session's message.
    init(_ level: SessionLogLevel) {
        switch level {
        case .debug: self = .debug
        case .info: self = .info
        case .warning: self = .warning
        case .error: self = .error
        }
    }
}
