public import BlueZ
public import DBus

/// What `ancsd pair` was asked for: the window's settings.
public struct PairingOptions: Sendable {
    /// The name to advertise (cut to 29 bytes); nil: the adapter's alias or the host name.
    public var name: String?
    /// How long the window stays open, in seconds.
    public var timeout = 120
    /// The adapter to use (`hci0`); nil: the first one that can advertise.
    public var adapter: String?
    /// What the phone is shown besides the ANCS solicitation.
    public var accessory = AccessoryKind.keyboard
    /// When no phone has connected this long into the window, say so and name the other
    /// shape to try (45 s: time to open Settings > Bluetooth and look; tests shorten it).
    public var noPhoneHintAfter: Duration = .seconds(45)
    /// Accept every passkey without asking.
    public var yes = false
    /// The bus where bluetoothd runs.
    public var bus: BusAddress = .system

    public init() {}
}
