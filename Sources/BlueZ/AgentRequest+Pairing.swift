extension AgentRequest {
    /// True for the requests bluetoothd makes once a pairing is under way (a passkey or PIN
    /// to confirm, show or type, a Just Works authorization): whoever began it, it began.
    public var beginsPairing: Bool {
        switch self {
        case .requestPinCode, .displayPinCode, .requestPasskey, .displayPasskey, .requestConfirmation, .requestAuthorization:
            true
        case .authorizeService, .release, .cancel:
            false
        }
    }
}
