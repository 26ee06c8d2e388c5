public import JSON

/// A notification as the control socket shows it in `list` and `get` replies and in events: the
/// fields of an `added` event of docs/output.md, without `v` and `type`.
public struct ControlNotification: Sendable, Equatable {
    /// The phone's identity address.
    public var device: String
    public var uid: UInt32
    /// The ANCS category's name (`social`, `incoming_call`, …; `reserved` for one ANCS does not
    /// name) and number.
    public var category: String
    public var categoryID: Int
    public var categoryCount: Int
    /// The ANCS event flags set, by name: `silent`, `important`, `pre_existing`,
    /// `positive_action`, `negative_action`.
    public var flags: [String]
    /// The phone replayed it on connecting rather than just receiving it.
    public var preExisting: Bool
    /// A replay this phone showed through ancsd before.
    public var seenBefore: Bool
    public var appID: String?
    public var appName: String?
    public var title: String?
    public var subtitle: String?
    public var message: String?
    /// The message's whole length in bytes, as the phone gave it.
    public var messageSize: Int?
    /// The phone cut the title, subtitle or message short (`get` with `full` fetches them whole).
    public var truncated: Bool?
    /// The phone's date of the notification, ISO 8601.
    public var date: String?
    /// The labels of its actions ("Answer", "Clear"), where offered.
    public var positiveAction: String?
    public var negativeAction: String?
    /// Every attribute asked for arrived.
    public var complete: Bool

    public init(
        device: String, uid: UInt32, category: String, categoryID: Int, categoryCount: Int, flags: [String],
        preExisting: Bool, seenBefore: Bool, appID: String?, appName: String?, title: String?, subtitle: String?,
        message: String?, messageSize: Int?, truncated: Bool?, date: String?, positiveAction: String?,
        negativeAction: String?, complete: Bool
    ) {
        self.device = device
        self.uid = uid
        self.category = category
        self.categoryID = categoryID
        self.categoryCount = categoryCount
        self.flags = flags
        self.preExisting = preExisting
        self.seenBefore = seenBefore
        self.appID = appID
        self.appName = appName
        self.title = title
        self.subtitle = subtitle
        self.message = message
        self.messageSize = messageSize
        self.truncated = truncated
        self.date = date
        self.positiveAction = positiveAction
        self.negativeAction = negativeAction
        self.complete = complete
    }

    /// The object, members in the order `ancsd run --format json` writes them.
    public var json: JSONObject {
        var object: JSONObject = [:]
        appendMembers(to: &object)
        return object
    }

    /// Appends the members to `object` (an event's, after its `v` and `type`).
    func appendMembers(to object: inout JSONObject) {
        object.append("device", .string(device))
        object.append("uid", .int(Int(uid)))
        object.append("category", .string(category))
        object.append("category_id", .int(categoryID))
        object.append("category_count", .int(categoryCount))
        object.append("flags", .array(flags.map { .string($0) }))
        object.append("pre_existing", .bool(preExisting))
        object.append("seen_before", .bool(seenBefore))
        object.append("app_id", JSONValue(appID))
        object.append("app_name", JSONValue(appName))
        object.append("title", JSONValue(title))
        object.append("subtitle", JSONValue(subtitle))
        object.append("message", JSONValue(message))
        object.append("message_size", JSONValue(messageSize))
        object.append("truncated", JSONValue(truncated))
        object.append("date", JSONValue(date))
        object.append("positive_action", JSONValue(positiveAction))
        object.append("negative_action", JSONValue(negativeAction))
        object.append("complete", .bool(complete))
    }

    /// Reads a notification; members it does not know (a later daemon's) are ignored.
    public init(decoding object: JSONObject) throws(ControlDecodingError) {
        try self.init(ControlFields(object, "a notification"))
    }

    init(_ fields: ControlFields) throws(ControlDecodingError) {
        device = try fields.string("device")
        uid = try UInt32(uid: "uid", of: fields)
        category = try fields.string("category")
        categoryID = try fields.int("category_id")
        categoryCount = try fields.int("category_count")
        var flags: [String] = []
        for flag in try fields.array("flags") {
            guard let name = flag.stringValue else { throw ControlDecodingError("a flag of \(fields.place) is not a string") }
            flags.append(name)
        }
        self.flags = flags
        preExisting = try fields.bool("pre_existing")
        seenBefore = try fields.bool("seen_before")
        appID = try fields.optionalString("app_id")
        appName = try fields.optionalString("app_name")
        title = try fields.optionalString("title")
        subtitle = try fields.optionalString("subtitle")
        message = try fields.optionalString("message")
        messageSize = try fields.optionalInt("message_size")
        truncated = try fields.optionalBool("truncated")
        date = try fields.optionalString("date")
        positiveAction = try fields.optionalString("positive_action")
        negativeAction = try fields.optionalString("negative_action")
        complete = try fields.bool("complete")
    }
}
