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
    /// How long after a phone connected the window waits for it to begin pairing by itself
    /// before it sends a security request (`Device1.Pair()`): see `securityRequestDelayDefault`.
    public var securityRequestDelay = PairingOptions.securityRequestDelayDefault

    /// 5 s. Apple's Accessory Design Guidelines ask an accessory not to request pairing until an
    /// ATT request was rejected for insufficient authentication: the phone should begin. An
    /// iPhone's HID host reads the accessory's encrypted characteristics within about a second
    /// of connecting, and that read starts pairing; 5 s leave a slow phone room to do so, and a
    /// phone that reads nothing (no HID service, `--accessory none`) is asked soon enough that the
    /// user, who just tapped the accessory, still waits for the passkey. Modelled, not measured:
    /// docs/field-evidence.md, §2.
    public static let securityRequestDelayDefault = Duration.seconds(5)

    public init() {}
}
