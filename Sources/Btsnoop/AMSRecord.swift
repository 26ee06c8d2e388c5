public import AMS
import BluetoothUUIDs
public import GattSession
public import JSON

/// A value of an Apple Media Service characteristic that crossed the link, as
/// `BtsnoopExtractor` finds it: a notification of the phone, a write of the client (with the
/// phone's answer), or the whole value of a read (its Read Response and Read Blob Responses
/// joined).
///
/// AMS traffic is decoded from btsnoop files only: the `ancs-capture/1` format holds ANCS's
/// characteristics, so `ancsd decode --to-capture` and `ancsd capture --format capture` leave
/// these records out.
public struct AMSRecord: Hashable, Sendable {
    /// AMS's three characteristics, by the short names `--handles` gives them.
    public enum Characteristic: String, Hashable, Sendable, CaseIterable {
        /// Remote Command: the phone notifies the commands its player takes; a write sends one.
        case rc
        /// Entity Update: writes register for attributes; the phone notifies their values.
        case eu
        /// Entity Attribute: a write names an attribute; a read gives its whole value.
        case ea

        /// The characteristic's UUID, as the `AMS` module names it.
        public var uuid: CharacteristicUUID {
            switch self {
            case .rc: AMSUUID.remoteCommand
            case .eu: AMSUUID.entityUpdate
            case .ea: AMSUUID.entityAttribute
            }
        }
    }

    /// Seconds since the file's first record: of the notification, of the write's request, or
    /// of the read's first response.
    public var time: Double
    public var characteristic: Characteristic
    public var direction: AMSDirection
    /// The value: notified, written, or read (every part of a long read, in order).
    public var bytes: [UInt8]
    /// The ATT error the phone answered a write or a read with, if it refused it.
    public var attError: UInt8?
    /// False for a read whose last part never came (the link, the bearer or the file ended
    /// while a Read Blob Request waited for its response).
    public var complete: Bool

    public init(time: Double, characteristic: Characteristic, direction: AMSDirection, bytes: [UInt8], attError: UInt8? = nil,
                complete: Bool = true) {
        self.time = time
        self.characteristic = characteristic
        self.direction = direction
        self.bytes = bytes
        self.attError = attError
        self.complete = complete
    }

    /// What the value says (`AMSRecordDescription`), with the phone's refusal if there was one.
    public var described: AMSRecordDescription {
        // A read refused before any byte came has no value to describe.
        if direction == .read, let attError, bytes.isEmpty {
            let name = MediaSession.service.characteristic(characteristic.uuid)?.name ?? characteristic.rawValue
            return AMSRecordDescription(
                summary: "\(name) read: refused (\(AMSErrorCode(rawValue: attError)))",
                fields: ["characteristic": .string(name), "direction": .string(direction.rawValue)])
        }
        // Every characteristic of `Characteristic` is AMS's: the describer always answers.
        var description = AMSRecordDescription(characteristic: characteristic.uuid, direction: direction, value: bytes)
            ?? AMSRecordDescription(summary: "\(characteristic.rawValue): \(bytes.count) bytes", fields: [:])
        if let attError { description.summary += " (refused: \(AMSErrorCode(rawValue: attError)))" }
        if !complete { description.summary += " (incomplete: its last part did not come)" }
        return description
    }

    /// True if the value is malformed (the describer's `error` field): `ancsd decode` counts it
    /// as a protocol error.
    public var isMalformed: Bool { described.fields["error"] != nil }

    /// The members that come first, in this order; the describer's other fields follow sorted.
    private static let leadingFields = ["characteristic", "direction"]

    /// Appends the record as one JSON Lines object, as `ancsd decode` prints it:
    /// `{"conn":…,"service":"ams","char":"eu","characteristic":"Entity Update","direction":
    /// "notification","summary":"…",` the describer's other fields by name, `"att_error"` and
    /// `"att_error_name"` when the phone refused it, `"complete":false` for a read cut short,
    /// and `positionKey` (`"record"`) with `position` when the value is malformed`}`. Returns
    /// true if it was malformed.
    @discardableResult
    public func write(connection: String?, position: Int, positionKey: String = "record", into out: inout JSONWriter) -> Bool {
        let description = described
        out.appendASCII("{")
        if let connection {
            out.appendASCII("\"conn\":")
            out.write(connection)
            out.appendASCII(",")
        }
        out.appendASCII("\"service\":\"ams\",\"char\":")
        out.write(characteristic.rawValue)
        for name in Self.leadingFields {
            if let value = description.fields[name] { Self.member(name, value, &out) }
        }
        out.appendASCII(",\"summary\":")
        out.write(description.summary)
        for name in description.fields.keys.sorted() where !Self.leadingFields.contains(name) {
            if let value = description.fields[name] { Self.member(name, value, &out) }
        }
        if let attError {
            out.appendASCII(",\"att_error\":")
            out.write(Int(attError))
            out.appendASCII(",\"att_error_name\":")
            out.write(AMSErrorCode(rawValue: attError).description)
        }
        if !complete { out.appendASCII(",\"complete\":false") }
        let malformed = description.fields["error"] != nil
        if malformed {
            out.appendASCII(",")
            out.write(positionKey)
            out.appendASCII(":")
            out.write(position)
        }
        out.appendASCII("}\n")
        return malformed
    }

    private static func member(_ name: String, _ value: AMSFieldValue, _ out: inout JSONWriter) {
        out.appendASCII(",")
        out.write(name)
        out.appendASCII(":")
        switch value {
        case .string(let text): out.write(text)
        case .int(let number): out.write(number)
        case .double(let number): out.write(number)
        }
    }
}

/// AMS's UUIDs (`AMSUUID`) as values, for learning handles from GATT discovery. (Optional only
/// because parsing text is: `BtsnoopTests` checks that each parses.)
enum AMSAttributeUUID {
    static let service = BluetoothUUID(AMSUUID.service.rawValue)
    static let remoteCommand = BluetoothUUID(AMSUUID.remoteCommand.rawValue)
    static let entityUpdate = BluetoothUUID(AMSUUID.entityUpdate.rawValue)
    static let entityAttribute = BluetoothUUID(AMSUUID.entityAttribute.rawValue)
}
