/// A JSON value. Objects keep their keys in order, so output is stable and readable.
///
/// Standard library only: the daemon's JSON Lines output, capture files and control
/// requests use it without Foundation.
public enum JSONValue: Hashable, Sendable {
    case null
    case bool(Bool)
    /// A number written without fraction or exponent that fits an `Int`.
    case int(Int)
    /// Any other number.
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The string, if this is one.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The integer, if this is an integral number.
    public var intValue: Int? {
        switch self {
        case .int(let value): value
        case .double(let value) where value.rounded() == value && abs(value) < 9.0e15: Int(value)
        default: nil
        }
    }

    /// The integer, only if the number was written as one (`1`, not `1.0` or `1e3`): for
    /// fields that name something by number, such as a notification UID.
    public var integerValue: Int? {
        if case .int(let value) = self { return value }
        return nil
    }

    /// The number as a `Double`, if this is a number.
    public var doubleValue: Double? {
        switch self {
        case .int(let value): Double(value)
        case .double(let value): value
        default: nil
        }
    }

    /// The Boolean, if this is one.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The elements, if this is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The object, if this is one.
    public var objectValue: JSONObject? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The member named `key`, if this is an object that has it.
    public subscript(key: String) -> JSONValue? { objectValue?[key] }

    /// The JSON type's name, for error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int, .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

/// A JSON object: members in the order they were added or parsed.
public struct JSONObject: Hashable, Sendable, ExpressibleByDictionaryLiteral, Sequence {
    /// One member: a name and its value.
    ///
    /// A struct rather than a tuple: an array of tuples is destroyed element by element through
    /// the runtime's generic tuple code, a noticeable part of an event's JSON in the daemon's
    /// hot path; a struct's own code is several times quicker.
    public struct Member: Sendable {
        public var key: String
        public var value: JSONValue

        public init(key: String, value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    public private(set) var members: [Member]

    public init() { members = [] }

    /// An empty object with room for `capacity` members, for a builder that knows how many it
    /// appends: each growth of the members' storage is an allocation and a copy.
    public init(capacity: Int) {
        members = []
        members.reserveCapacity(capacity)
    }

    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        members = elements.map { Member(key: $0.0, value: $0.1) }
    }

    /// The value of `key` (the last one if a key repeats); setting replaces it in place or appends.
    public subscript(key: String) -> JSONValue? {
        get { members.last { $0.key == key }?.value }
        set {
            if let index = members.lastIndex(where: { $0.key == key }) {
                if let newValue { members[index].value = newValue } else { members.remove(at: index) }
            } else if let newValue {
                members.append(Member(key: key, value: newValue))
            }
        }
    }

    /// Appends a member without looking for an existing one (for parsers and builders).
    public mutating func append(_ key: String, _ value: JSONValue) {
        members.append(Member(key: key, value: value))
    }

    /// The keys in order.
    public var keys: [String] { members.map(\.key) }

    /// The members in order, as `(key, value)` pairs.
    public struct Iterator: IteratorProtocol {
        var base: IndexingIterator<[Member]>

        public mutating func next() -> (key: String, value: JSONValue)? {
            guard let member = base.next() else { return nil }
            return (key: member.key, value: member.value)
        }
    }

    public func makeIterator() -> Iterator { Iterator(base: members.makeIterator()) }

    public var underestimatedCount: Int { members.count }

    public static func == (a: JSONObject, b: JSONObject) -> Bool {
        a.members.count == b.members.count && zip(a.members, b.members).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }

    public func hash(into hasher: inout Hasher) {
        for member in members {
            hasher.combine(member.key)
            hasher.combine(member.value)
        }
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        var object = JSONObject()
        for (key, value) in elements { object.append(key, value) }
        self = .object(object)
    }
}

extension JSONValue {
    /// A string, or null when nil.
    public init(_ value: String?) { self = value.map { .string($0) } ?? .null }
    /// An integer, or null when nil.
    public init(_ value: Int?) { self = value.map { .int($0) } ?? .null }
    /// A Boolean, or null when nil.
    public init(_ value: Bool?) { self = value.map { .bool($0) } ?? .null }
}
