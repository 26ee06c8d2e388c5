/// What `BtsnoopScrubber` replaced, by kind: each count is a number of values (or payloads)
/// replaced, `bytes` the bytes replaced in all.
public struct ScrubCounts: Hashable, Sendable {
    /// ANCS attribute values in the Data Source (title, subtitle, message, app identifier, date,
    /// labels, app display name) and app identifiers in Control Point writes.
    public var ancsValues = 0
    /// Apple Media Service values: Entity Update values and Entity Attribute reads.
    public var amsValues = 0
    /// Device names: GAP Device Name values, HCI local and remote names, Local Name AD
    /// structures in advertising, scan response and EIR data.
    public var deviceNames = 0
    /// Key material, zeroed: SMP LTK, EDIV/Rand, IRK, CSRK; HCI LE Long Term Key Request Reply,
    /// LE Enable Encryption, link keys, PIN codes, OOB data, resolving-list IRKs, DHKeys.
    public var keys = 0
    /// Other ATT values whose characteristic is not known to hold only structure (values of
    /// handles the capture does not describe, reads by UUID, signed writes, multiple reads).
    public var otherValues = 0
    /// Payloads carried whole: L2CAP channels other than ATT, signaling and SMP (EATT, RFCOMM,
    /// SDP…), SCO and ISO audio, ACL fragments without their frame's start, vendor
    /// diagnostics, management (MGMT) commands and events, records that cannot be parsed.
    public var payloads = 0
    /// User-space log messages on the monitor channel (bluetoothd's): the text, not the ident.
    public var logMessages = 0
    /// The bytes replaced, all kinds together.
    public var bytes = 0

    public init() {}

    /// Each kind with its count, in a fixed order, with a name for people: what `ancsd
    /// report` prints.
    public var lines: [(kind: String, count: Int)] {
        [("ANCS attribute values and app identifiers", ancsValues), ("AMS values", amsValues), ("device names", deviceNames),
         ("keys (zeroed)", keys), ("other ATT values", otherValues),
         ("other payloads (non-ATT channels, audio, management, unparsable)", payloads), ("log messages", logMessages)]
    }

    /// The counts as a JSON-ready list of (key, value): `ancs_values`, … `bytes`.
    public var members: [(String, Int)] {
        [("ancs_values", ancsValues), ("ams_values", amsValues), ("device_names", deviceNames), ("keys", keys),
         ("other_att_values", otherValues), ("payloads", payloads), ("log_messages", logMessages), ("bytes", bytes)]
    }
}
