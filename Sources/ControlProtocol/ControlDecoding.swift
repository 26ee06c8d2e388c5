public import JSON

/// A reply or event a client cannot read: a member missing or of another type, an unknown event
/// type or error code. What a daemon of another version may send; reading one never traps.
public struct ControlDecodingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, naming the member.
    public var message: String
    /// The `id` of the reply it was, when it had one.
    public var requestID: JSONValue?

    public init(_ message: String, requestID: JSONValue? = nil) {
        self.message = message
        self.requestID = requestID
    }

    public var description: String { "ancsd sent what this client cannot read: \(message) (is ancsd another version than this client?)" }
}

/// The members of one object of a reply or event, read by type; each failure names the member
/// and where it is.
struct ControlFields {
    let object: JSONObject
    /// Where the object is, for messages: "the status reply", "a phone of the status reply".
    let place: String

    init(_ object: JSONObject, _ place: String) {
        self.object = object
        self.place = place
    }

    init(_ value: JSONValue?, _ place: String) throws(ControlDecodingError) {
        guard let object = value?.objectValue else {
            throw ControlDecodingError("\(place) is \(value.map { "a JSON \($0.typeName)" } ?? "missing"), not an object")
        }
        self.init(object, place)
    }

    func value(_ key: String) throws(ControlDecodingError) -> JSONValue {
        guard let value = object[key] else { throw ControlDecodingError("\(place) has no \"\(key)\"") }
        return value
    }

    func string(_ key: String) throws(ControlDecodingError) -> String { try read(key, "a string", \.stringValue) }
    func int(_ key: String) throws(ControlDecodingError) -> Int { try read(key, "an integer", \.integerValue) }
    func bool(_ key: String) throws(ControlDecodingError) -> Bool { try read(key, "a Boolean", \.boolValue) }
    func array(_ key: String) throws(ControlDecodingError) -> [JSONValue] { try read(key, "an array", \.arrayValue) }

    /// Members that are present either way, null when there is nothing to say.
    func optionalString(_ key: String) throws(ControlDecodingError) -> String? { try readOptional(key, "a string", \.stringValue) }
    func optionalInt(_ key: String) throws(ControlDecodingError) -> Int? { try readOptional(key, "an integer", \.integerValue) }
    func optionalBool(_ key: String) throws(ControlDecodingError) -> Bool? { try readOptional(key, "a Boolean", \.boolValue) }

    private func read<T>(_ key: String, _ expected: String, _ convert: (JSONValue) -> T?) throws(ControlDecodingError) -> T {
        let value = try value(key)
        guard let converted = convert(value) else { throw wrong(key, value, expected) }
        return converted
    }

    private func readOptional<T>(_ key: String, _ expected: String, _ convert: (JSONValue) -> T?) throws(ControlDecodingError) -> T? {
        let value = try value(key)
        if value == .null { return nil }
        guard let converted = convert(value) else { throw wrong(key, value, expected + " or null") }
        return converted
    }

    /// The member `key`, an object, named `place` in messages.
    func fields(_ key: String, _ place: String) throws(ControlDecodingError) -> ControlFields {
        let value = try value(key)
        guard let object = value.objectValue else { throw wrong(key, value, "an object") }
        return ControlFields(object, place)
    }

    /// The elements of the array `key`, each read by `read` as the object `place`.
    func objects<T>(_ key: String, _ place: String, _ read: (ControlFields) throws(ControlDecodingError) -> T)
        throws(ControlDecodingError) -> [T]
    {
        var out: [T] = []
        for element in try array(key) { out.append(try read(try ControlFields(element, place))) }
        return out
    }

    private func wrong(_ key: String, _ value: JSONValue, _ expected: String) -> ControlDecodingError {
        ControlDecodingError("\"\(key)\" of \(place) is a JSON \(value.typeName), not \(expected)")
    }
}

extension UInt32 {
    /// A UID member: an integer from 0 to 4294967295.
    init(uid key: String, of fields: ControlFields) throws(ControlDecodingError) {
        guard let uid = UInt32(exactly: try fields.int(key)) else {
            throw ControlDecodingError("\"\(key)\" of \(fields.place) is not a notification UID (0 to 4294967295)")
        }
        self = uid
    }
}
