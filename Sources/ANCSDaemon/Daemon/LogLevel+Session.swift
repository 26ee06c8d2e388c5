import ANCSRuntime
import ANCSSession
import GattSession

extension LogLevel {
    /// The logger's level for a session's message.
    init(_ level: SessionLogLevel) {
        self.init(ServiceLogLevel(level))
    }

    /// The logger's level for a service's message.
    init(_ level: ServiceLogLevel) {
        switch level {
        case .debug: self = .debug
        case .info: self = .info
        case .warning: self = .warning
        case .error: self = .error
        }
    }
}
