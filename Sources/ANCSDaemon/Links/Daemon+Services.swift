import GattSession

/// The services a link speaks beside ANCS. When each starts and stops is the link machine's
/// (`LinkMachine+Services.swift`); adding a service is one entry in `extraServices`.
extension Daemon {
    /// A service a link may speak beside ANCS.
    struct ExtraService: Sendable {
        /// Its description: the UUIDs to look for.
        var description: GattServiceDescription
        /// Whether the options turn it on.
        var enabled: @Sendable (DaemonOptions) -> Bool
        /// Its handler for a new link.
        var make: @Sendable (DaemonOptions) -> any ServiceHandler
    }

    /// Every service a link may speak beside ANCS.
    static let extraServices: [ExtraService] = [MediaHandler.extra]
}
