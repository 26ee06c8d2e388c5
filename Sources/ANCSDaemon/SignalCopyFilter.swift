/// Drops the extra copies of notification values that bluetoothd sends as signals.
///
/// bluetoothd 5.66 calls its notify callback once per `StartNotify` client of a characteristic,
/// and each call emits a `PropertiesChanged` (src/gatt-client.c, `notify_cb`): while another
/// program (bluetoothctl's "notify on", a second ANCS consumer) holds a notification session on
/// the phone's ANCS characteristics, every value reaches ancsd once per session, back to back.
/// A copied Data Source fragment breaks the response it belongs to.
///
/// The copies are counted on the Notification Source, where they are unmistakable: a phone
/// never sends the same 8-byte event twice within a few milliseconds, and dropping such a
/// repeat loses nothing (a second identical "modified" would only fetch the same attributes
/// again). Data Source values, where identical neighbours can be genuine, are then taken once
/// per `copies` identical values in a row. Values read from an AcquireNotify socket are never
/// copied and do not pass through here.
struct SignalCopyFilter {
    /// How many times bluetoothd delivers each notification, as last counted.
    private(set) var copies = 1
    private var lastSource: [UInt8]?
    private var lastSourceTime: Duration = .zero
    private var sourceRun = 0
    private var lastData: [UInt8]?
    private var dataRun = 0

    /// Identical Notification Source values closer than this are copies of one notification.
    static let burst: Duration = .milliseconds(50)

    /// Whether a Notification Source value is new (true) or a copy (false).
    mutating func admitNotificationSource(_ value: [UInt8], now: Duration) -> Bool {
        if let last = lastSource, last == value, now - lastSourceTime <= Self.burst {
            sourceRun += 1
            copies = max(copies, sourceRun)
            lastSourceTime = now
            return false
        }
        // The run that just ended says how many copies each notification comes in now.
        if lastSource != nil { copies = sourceRun }
        lastSource = value
        lastSourceTime = now
        sourceRun = 1
        return true
    }

    /// Whether a Data Source value is new (true) or a copy (false).
    mutating func admitDataSource(_ value: [UInt8]) -> Bool {
        guard copies > 1 else {
            lastData = nil
            return true
        }
        if let last = lastData, last == value, dataRun < copies {
            dataRun += 1
            return false
        }
        lastData = value
        dataRun = 1
        return true
    }
}
