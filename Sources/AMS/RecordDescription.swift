public import GattSession

/// Which way a recorded AMS value went.
public enum AMSDirection: String, Hashable, Sendable {
    /// The phone notified it.
    case notification
    /// The client wrote it.
    case write
    /// The client read it.
    case read
}

/// A value of a recorded field: text or a number.
public enum AMSFieldValue: Hashable, Sendable, CustomStringConvertible {
    case string(String)
    case int(Int)
    case double(Double)

    public var description: String {
        switch self {
        case .string(let text): text
        case .int(let value): String(value)
        case .double(let value): String(value)
        }
    }
}

/// What one AMS value of a capture says, for `ancsd decode`: a short text and its fields.
/// Made from any bytes: what does not decode is described as malformed, never trapped on.
/// The text and fields carry the content (titles, artists) as it came: a capture holds it anyway.
public struct AMSRecordDescription: Hashable, Sendable {
    /// One line, e.g. `Entity Update track.title = "Bohemian Rhapsody"`.
    public var summary: String
    /// The decoded fields by name (`entity`, `attribute`, `value`, `commands`, `error`, …).
    public var fields: [String: AMSFieldValue]

    public init(summary: String, fields: [String: AMSFieldValue]) {
        self.summary = summary
        self.fields = fields
    }

    /// Describes `value`, which went `direction` on `characteristic`; nil if `characteristic`
    /// is not one of AMS's.
    public init?(characteristic: CharacteristicUUID, direction: AMSDirection, value: [UInt8]) {
        switch characteristic {
        case AMSUUID.remoteCommand: self = Self.remoteCommand(direction, value)
        case AMSUUID.entityUpdate: self = Self.entityUpdate(direction, value)
        case AMSUUID.entityAttribute: self = Self.entityAttribute(direction, value)
        default: return nil
        }
        fields["characteristic"] = .string(Self.name(of: characteristic))
        fields["direction"] = .string(direction.rawValue)
    }

    private static func name(of characteristic: CharacteristicUUID) -> String {
        MediaSession.service.characteristic(characteristic)?.name ?? characteristic.rawValue
    }

    private static func malformed(_ what: String, _ error: AMSFormatError, _ value: [UInt8]) -> AMSRecordDescription {
        AMSRecordDescription(
            summary: "\(what): malformed (\(error))",
            fields: ["error": .string(error.code), "length": .int(value.count), "bytes": .string(hex(value))])
    }

    private static func remoteCommand(_ direction: AMSDirection, _ value: [UInt8]) -> AMSRecordDescription {
        switch direction {
        case .notification:
            let commands = decodeSupportedCommands(value)
            let names = commands.map(\.description)
            return AMSRecordDescription(
                summary: "Remote Command: the player takes " + (names.isEmpty ? "nothing" : names.joined(separator: ", ")),
                fields: ["commands": .string(names.joined(separator: ",")), "count": .int(commands.count)])
        case .write:
            do {
                let command = try RemoteCommand(decoding: value)
                return AMSRecordDescription(
                    summary: "Remote Command: send \(command)",
                    fields: ["command": .string(command.description), "command_id": .int(Int(command.rawValue))])
            } catch {
                return malformed("Remote Command write", error, value)
            }
        case .read:
            return AMSRecordDescription(
                summary: "Remote Command read: \(value.count) bytes", fields: ["length": .int(value.count), "bytes": .string(hex(value))])
        }
    }

    private static func entityUpdate(_ direction: AMSDirection, _ value: [UInt8]) -> AMSRecordDescription {
        switch direction {
        case .notification:
            do {
                let update = try EntityUpdate(decoding: value)
                let text = update.text
                var fields = attributeFields(update.attribute)
                fields["value"] = .string(text.string)
                fields["flags"] = .int(Int(update.flags.rawValue))
                if update.isTruncated { fields["truncated"] = .int(1) }
                if text.wasRepaired { fields["repaired"] = .int(1) }
                fields.merge(valueFields(update.attribute, text.string)) { _, new in new }
                let truncated = update.isTruncated ? " (truncated)" : ""
                return AMSRecordDescription(summary: "Entity Update \(update.attribute) = \"\(text.string)\"\(truncated)", fields: fields)
            } catch {
                return malformed("Entity Update notification", error, value)
            }
        case .write:
            do {
                let registration = try EntityRegistration(decoding: value)
                let names = registration.attributes.map {
                    EntityAttribute(entity: registration.entity, attribute: $0).attributeName ?? "unknown(\(hexByte($0)))"
                }
                return AMSRecordDescription(
                    summary: "Entity Update: register for the \(registration.entity)'s \(names.joined(separator: ", "))",
                    fields: [
                        "entity": .string(registration.entity.description), "entity_id": .int(Int(registration.entity.rawValue)),
                        "attributes": .string(names.joined(separator: ",")),
                    ])
            } catch {
                return malformed("Entity Update write", error, value)
            }
        case .read:
            return AMSRecordDescription(
                summary: "Entity Update read: \(value.count) bytes", fields: ["length": .int(value.count), "bytes": .string(hex(value))])
        }
    }

    private static func entityAttribute(_ direction: AMSDirection, _ value: [UInt8]) -> AMSRecordDescription {
        switch direction {
        case .write:
            do {
                let request = try EntityAttributeRequest(decoding: value)
                return AMSRecordDescription(summary: "Entity Attribute: ask for the whole \(request.attribute)", fields: attributeFields(request.attribute))
            } catch {
                return malformed("Entity Attribute write", error, value)
            }
        case .read:
            let text = AMSText(value)
            var fields: [String: AMSFieldValue] = ["value": .string(text.string), "length": .int(value.count)]
            if text.wasRepaired { fields["repaired"] = .int(1) }
            return AMSRecordDescription(summary: "Entity Attribute: \"\(text.string)\"", fields: fields)
        case .notification:
            return AMSRecordDescription(
                summary: "Entity Attribute notification (it does not notify): \(value.count) bytes",
                fields: ["length": .int(value.count), "bytes": .string(hex(value))])
        }
    }

    private static func attributeFields(_ attribute: EntityAttribute) -> [String: AMSFieldValue] {
        var fields: [String: AMSFieldValue] = [
            "entity": .string(attribute.entity.description), "entity_id": .int(Int(attribute.entity.rawValue)),
            "attribute_id": .int(Int(attribute.attribute)),
        ]
        if let name = attribute.attributeName { fields["attribute"] = .string(name) }
        return fields
    }

    /// The numbers an attribute's text holds, read as the session reads them.
    private static func valueFields(_ attribute: EntityAttribute, _ text: String) -> [String: AMSFieldValue] {
        var fields: [String: AMSFieldValue] = [:]
        switch attribute {
        case .playbackInfo:
            let info = PlaybackInfo(parsing: text)
            if let state = info.state { fields["playback_state"] = .string(state.description) }
            if let rate = info.rate { fields["playback_rate"] = .double(rate) }
            if let elapsed = info.elapsed { fields["elapsed_time"] = .double(elapsed) }
        case .volume:
            if let volume = parseVolume(text) { fields["volume"] = .double(volume) }
        case .duration:
            if let duration = parseTrackDuration(text) { fields["duration"] = .double(duration) }
        case .queueIndex, .queueCount:
            if let number = parseAMSInteger(text) { fields[attribute == .queueIndex ? "queue_index" : "queue_count"] = .int(number) }
        case .shuffleMode:
            if let mode = parseAMSInteger(text) { fields["shuffle_mode"] = .string(ShuffleMode(rawValue: mode).description) }
        case .repeatMode:
            if let mode = parseAMSInteger(text) { fields["repeat_mode"] = .string(RepeatMode(rawValue: mode).description) }
        default:
            break
        }
        return fields
    }
}

/// Bytes as lower-case hex without separators.
func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef")
    var text = ""
    text.reserveCapacity(bytes.count * 2)
    for byte in bytes {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 0x0F)])
    }
    return text
}
