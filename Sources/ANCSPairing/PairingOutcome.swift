/// How a pairing window ended.
public enum PairingOutcome: Sendable {
    /// A phone bonded, offers ANCS and is trusted; its label.
    case paired(String)
    /// No phone paired within the timeout.
    case timedOut
    /// The passkey was not confirmed, or could not be asked; why.
    case refused(String)
    /// A signal (SIGINT, SIGTERM) closed the window.
    case interrupted(Int32)
    /// The window could not be opened or kept open; why.
    case failed(String)

    /// The exit status of `ancsd pair` for the outcome.
    public var status: Int32 {
        switch self {
        case .paired: 0
        case .failed: 1
        case .timedOut: 3
        case .refused: 4
        case .interrupted(let signal): 128 + signal
        }
    }
}
