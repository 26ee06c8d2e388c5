public import JSON

/// The control socket's protocol as types (docs/control.md): what a client may ask, and the
/// error codes it may get. Both ends use these; nothing here does I/O, so the parser is fuzzed
/// on its own (`make fuzz FUZZ_TARGETS=control`).
public struct ControlRequest: Sendable, Equatable {
    /// Echoed in the reply: any JSON value the client chose, or none.
    public var id: JSONValue?
    public var command: ControlCommand

    public init(id: JSONValue? = nil, _ command: ControlCommand) {
        self.id = id
        self.command = command
    }
}

/// One request's command and its fields, validated.
public enum ControlCommand: Sendable, Equatable {
    /// The daemon, its phones and outputs.
    case status
    /// What each phone holds; `device` picks one.
    case list(device: BluetoothAddressText?)
    /// One notification; `full` fetches a message the phone cut short whole.
    case get(device: BluetoothAddressText, uid: UInt32, full: Bool)
    /// Performs a notification's positive or negative action on the phone.
    case action(device: BluetoothAddressText, uid: UInt32, action: ControlAction)
    /// Every event from now on, after the reply.
    case subscribe
    /// What each phone's player says (Apple Media Service); `device` picks one.
    case media(device: BluetoothAddressText?)
    /// Sends a remote command to the phone's player.
    case mediaCommand(device: BluetoothAddressText, command: ControlMediaCommand)

    /// The `cmd` values, in the order docs/control.md lists them.
    public static let names = ["list", "get", "action", "status", "subscribe", "media", "media_command"]

    /// The `cmd` value.
    public var name: String {
        switch self {
        case .status: "status"
        case .list: "list"
        case .get: "get"
        case .action: "action"
        case .subscribe: "subscribe"
        case .media: "media"
        case .mediaCommand: "media_command"
        }
    }
}

/// A notification action a client can ask for.
public enum ControlAction: String, Sendable, CaseIterable {
    case positive, negative
}

/// A Bluetooth address as `AA:BB:CC:DD:EE:FF` (upper case, colons), from any spelling a
/// person types (lower case, dashes).
public struct BluetoothAddressText: Sendable, Hashable, CustomStringConvertible {
    public let description: String

    public init?(_ text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            .flatMap { $0.split(separator: "-", omittingEmptySubsequences: false) }
        guard parts.count == 6, parts.allSatisfy({ $0.count == 2 && $0.allSatisfy { $0.isASCII && $0.isHexDigit } }) else { return nil }
        description = parts.map { $0.uppercased() }.joined(separator: ":")
    }
}

/// Every error code a reply may carry (docs/control.md, "Errors").
public enum ControlErrorCode: String, Sendable, CaseIterable {
    case badRequest = "bad_request"
    case tooLong = "too_long"
    case unknownCommand = "unknown_command"
    case forbidden
    case noSuchDevice = "no_such_device"
    case noSuchNotification = "no_such_notification"
    case notificationGone = "notification_gone"
    case actionFailed = "action_failed"
    case notAvailable = "not_available"
    /// `media_command`: the phone's player does not accept that command now (the message lists those it does).
    case unsupportedCommand = "unsupported_command"
    /// `media_command`: the phone's player has as many commands as it takes for now (too many
    /// waiting, or more than 10 a second); try again in a moment.
    case busy
    case failed
}

/// A request that cannot be served, or a command that failed: the reply's `error`.
public struct ControlError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: ControlErrorCode
    public var message: String
    /// The `id` of the request refused, when it had one that could be read.
    public var requestID: JSONValue?

    public init(_ code: ControlErrorCode, _ message: String, requestID: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.requestID = requestID
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// `{"id":…,"ok":false,"error":{"code":…,"message":…}}`, with the request's `id`.
    public var reply: JSONObject { reply(id: requestID) }

    /// The reply with another `id`.
    public func reply(id: JSONValue?) -> JSONObject {
        var object: JSONObject = [:]
        if let id { object.append("id", id) }
        object.append("ok", false)
        object.append("error", ["code": .string(code.rawValue), "message": .string(message)])
        return object
    }
}

extension ControlRequest {
    /// The longest request line a server accepts.
    public static let maxLineLength = 64 * 1024

    /// A request line (without its newline). The error carries the request's `id` when the
    /// line was a JSON object that had one.
    public static func parse(line: [UInt8]) -> Result<ControlRequest, ControlError> {
        guard line.count <= maxLineLength else { return .failure(ControlError(.tooLong, "a request line is at most 64 KiB")) }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: line)
        } catch {
            return .failure(ControlError(.badRequest, "not JSON: \(error)"))
        }
        guard let object = value.objectValue else { return .failure(ControlError(.badRequest, "a request is a JSON object")) }
        return Result { () throws(ControlError) -> ControlRequest in try ControlRequest(object) }
            .mapError { error in
                var refused = error
                refused.requestID = object["id"]
                return refused
            }
    }

    /// A request from its JSON object; unknown members are ignored (clients of later versions).
    public init(_ object: JSONObject) throws(ControlError) {
        id = object["id"]
        guard let name = object["cmd"]?.stringValue else {
            throw ControlError(.badRequest, "a request needs \"cmd\" as a string")
        }
        switch name {
        case "status":
            command = .status
        case "subscribe":
            command = .subscribe
        case "list":
            command = .list(device: try object["device"].map(Self.device))
        case "get":
            let full: Bool
            switch object["full"] {
            case nil: full = false
            case .bool(let value)?: full = value
            case _?: throw ControlError(.badRequest, "\"full\" must be true or false")
            }
            command = .get(device: try Self.device(object["device"]), uid: try Self.uid(object["uid"]), full: full)
        case "action":
            guard let text = object["action"]?.stringValue, let action = ControlAction(rawValue: text) else {
                throw ControlError(.badRequest, "\"action\" must be \"positive\" or \"negative\"")
            }
            command = .action(device: try Self.device(object["device"]), uid: try Self.uid(object["uid"]), action: action)
        case "media":
            command = .media(device: try object["device"].map(Self.device))
        case "media_command":
            let names = ControlMediaCommand.allCases.map(\.rawValue).joined(separator: ", ")
            guard let text = object["command"]?.stringValue, let mediaCommand = ControlMediaCommand(rawValue: text) else {
                throw ControlError(.badRequest, "\"command\" must be one of \(names)")
            }
            command = .mediaCommand(device: try Self.device(object["device"]), command: mediaCommand)
        default:
            throw ControlError(.unknownCommand, "unknown command \"\(name)\"")
        }
    }

    private static func device(_ value: JSONValue?) throws(ControlError) -> BluetoothAddressText {
        guard let text = value?.stringValue, let address = BluetoothAddressText(text) else {
            throw ControlError(.badRequest, "\"device\" must be a Bluetooth address such as AA:BB:CC:DD:EE:FF")
        }
        return address
    }

    private static func uid(_ value: JSONValue?) throws(ControlError) -> UInt32 {
        // Written as an integer: 1.0 and 1e3 name no notification.
        guard let number = value?.integerValue, let uid = UInt32(exactly: number) else {
            throw ControlError(.badRequest, "\"uid\" must be an integer from 0 to 4294967295 (written without a fraction or exponent)")
        }
        return uid
    }

    /// The request as a client sends it (canonical: `cmd` first, then its fields, then `id`).
    public var json: JSONObject {
        var object: JSONObject = ["cmd": .string(command.name)]
        switch command {
        case .status, .subscribe:
            break
        case .list(let device):
            if let device { object.append("device", .string(device.description)) }
        case .get(let device, let uid, let full):
            object.append("device", .string(device.description))
            object.append("uid", .int(Int(uid)))
            if full { object.append("full", true) }
        case .action(let device, let uid, let action):
            object.append("device", .string(device.description))
            object.append("uid", .int(Int(uid)))
            object.append("action", .string(action.rawValue))
        case .media(let device):
            if let device { object.append("device", .string(device.description)) }
        case .mediaCommand(let device, let command):
            object.append("device", .string(device.description))
            object.append("command", .string(command.rawValue))
        }
        if let id { object.append("id", id) }
        return object
    }
}
