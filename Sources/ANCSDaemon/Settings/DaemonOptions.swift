public import ANCSSession
public import BlueZ
public import DBus

/// What `ancsd run` is told to do.
public struct DaemonOptions: Sendable {
    /// The bus where bluetoothd lives.
    public var bus: BusAddress = .system
    /// Only these phones (addresses as `AA:BB:CC:DD:EE:FF`); empty for every bonded phone.
    public var devices: Set<String> = []
    /// Only phones on this adapter (`hci0`); nil for every adapter.
    public var adapter: String?
    /// Try AcquireNotify (a socket per characteristic) before StartNotify (D-Bus signals).
    public var preferAcquireNotify = true
    /// Keep a connectable LE advertisement and a pairing agent that refuses every request
    /// registered with bluetoothd (see `Presence`); off where another agent owns pairing.
    public var advertise = true
    /// Follow the phone's player over Apple Media Service (`--media`, default yes).
    public var media = true
    /// What the advertisement and the GATT application show the phone (`--accessory`): the
    /// keyboard, the shape seen listed by iOS 26, by default. SIGHUP applies a change.
    public var accessory = AccessoryKind.keyboard
    /// How each phone's session fetches attributes.
    public var session = SessionConfiguration()
    /// Where sessions are recorded (`--record`), if anywhere.
    public var recording = RecordingOptions()
    /// Which replayed notifications are printed (`--replays`).
    public var replays = ReplayPolicy.unseen
    /// Where what each phone showed is remembered across restarts (`--state-dir`); nil for
    /// memory only.
    public var stateDirectory: String?

    public init() {}

    /// True if the options allow this device.
    func allows(address: String, adapterName: String?) -> Bool {
        (devices.isEmpty || devices.contains(address)) && (adapter == nil || adapter == adapterName)
    }
}
