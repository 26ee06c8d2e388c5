/// Drops the extra copies of notification values that bluetoothd sends as signals.
///
/// bluetoothd 5.66 calls its notify callback once per `StartNotify` client of a characteristic,
/// and each call emits a `PropertiesChanged` (src/gatt-client.c, `notify_cb`): while another
/// program (bluetoothctl's "notify on", a second ANCS consumer) holds a notification session on
/// a characteristic of the phone, each of its values reaches ancsd once per session, back to
/// back. A copied Data Source fragment breaks the response it belongs to.
///
/// Copies are counted where they are unmistakable, for each characteristic on its own:
/// - Notification Source: a phone never sends the same 8-byte event twice within a few
///   milliseconds, and dropping such a repeat loses nothing (a second identical "modified"
///   would only fetch the same attributes again). A value of another length is no event: it
///   passes, and counts for nothing (a phone's noise repeats short values, and two empty ones in
///   a row were taken for a second subscriber).
/// - Data Source: the first value of a response starts with the request's command and UID or
///   app identifier, and no later fragment of it can equal it; its repeats are copies.
/// Data Source values are then taken once per that many identical values in a row, since
/// identical neighbouring fragments can be genuine. Values read from an AcquireNotify socket
/// are never copied and do not pass through here.
struct SignalCopyFilter {
    /// How many times bluetoothd delivers each Notification Source value, as last counted.
    private(set) var sourceCopies = 1
    /// How many times bluetoothd delivers each Data Source value, as last counted.
    private(set) var dataCopies = 1
    private var lastSource: [UInt8]?
    private var lastSourceTime: Duration = .zero
    private var sourceRun = 0
    private var lastData: [UInt8]?
    private var dataRun = 0
    /// The beginning of the response the Control Point request in flight asked for.
    private var expectedStart: [UInt8]?
    /// True while the first value of a response is repeating: its repeats are being counted.
    private var countingDataCopies = false

    /// Identical Notification Source values closer than this are copies of one notification.
    static let burst: Duration = .milliseconds(50)
    /// The size of a Notification Source event.
    static let eventSize = 8

    /// The larger of the two counts, for reporting.
    var copies: Int { max(sourceCopies, dataCopies) }

    /// Whether a Notification Source value is new (true) or a copy (false).
    mutating func admitNotificationSource(_ value: [UInt8], now: Duration) -> Bool {
        guard value.count == Self.eventSize else { return true }
        if let last = lastSource, last == value, now - lastSourceTime <= Self.burst {
            sourceRun += 1
            sourceCopies = max(sourceCopies, sourceRun)
            lastSourceTime = now
            return false
        }
        // The run that just ended says how many copies each event comes in now.
        if lastSource != nil { sourceCopies = sourceRun }
        lastSource = value
        lastSourceTime = now
        sourceRun = 1
        return true
    }

    /// A Control Point request was written: its response will begin like `request` does.
    mutating func expectResponse(to request: [UInt8]) {
        expectedStart = Self.responseStart(of: request)
    }

    /// A Data Source value arrived, from a socket or a signal: copies come back to back, so a
    /// Notification Source value after it is no copy of the one before it (the phone may
    /// modify a notification twice within `burst`, its first answer in between).
    mutating func dataSourceArrived() {
        if lastSource != nil { sourceCopies = sourceRun }
        lastSource = nil
    }

    /// Whether a Data Source value is new (true) or a copy (false).
    mutating func admitDataSource(_ value: [UInt8]) -> Bool {
        dataSourceArrived()
        // The first value of the answer to the request just written is new, even when it
        // equals the last value (the phone said the same again); its copies follow it.
        if let start = expectedStart, value.starts(with: start) {
            expectedStart = nil
            countingDataCopies = true
            dataCopies = 1
            lastData = value
            dataRun = 1
            return true
        }
        if let last = lastData, last == value {
            if countingDataCopies {
                dataRun += 1
                dataCopies = dataRun
                return false
            }
            if dataRun < dataCopies {
                dataRun += 1
                return false
            }
        }
        countingDataCopies = false
        lastData = value
        dataRun = 1
        return true
    }

    /// The bytes a response repeats from its request: the command ID and the UID, or the
    /// command ID and the NUL-terminated app identifier. Nil for requests without a response.
    static func responseStart(of request: [UInt8]) -> [UInt8]? {
        switch request.first {
        case 0 where request.count >= 5: Array(request.prefix(5))
        case 1: request.firstIndex(of: 0).map { Array(request[...$0]) }
        default: nil
        }
    }
}
