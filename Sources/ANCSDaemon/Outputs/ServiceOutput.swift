public import JSON

/// An event of a GATT service beside ANCS's notifications (Apple Media Service's now-playing
/// state): it carries its own renderings, so the sinks handle every service the same way and
/// a new service needs no case of its own in any of them.
public struct ServiceOutput: Hashable, Sendable {
    /// A retained MQTT state: the topic below `PREFIX/DEVICE/`, and its payload.
    public struct RetainedState: Hashable, Sendable {
        public var topic: String
        public var payload: String

        public init(topic: String, payload: String) {
            self.topic = topic
            self.payload = payload
        }
    }

    /// The JSON `type` ("media").
    public var type: String
    /// The phone's address.
    public var device: String
    /// The JSON members after `v`, `type` and `device` (docs/output.md).
    public var fields: JSONObject
    /// The text line's words after the type column and before the device.
    public var text: String
    /// What a log line may say of it: never content ("media playing").
    public var label: String
    /// `ANCSD_…=…` variables for `--exec` beside `ANCSD_TYPE` and `ANCSD_DEVICE`.
    public var environment: [String]
    /// Retained MQTT states to publish with it.
    public var retained: [RetainedState]

    public init(
        type: String, device: String, fields: JSONObject, text: String, label: String, environment: [String] = [],
        retained: [RetainedState] = []
    ) {
        self.type = type
        self.device = device
        self.fields = fields
        self.text = text
        self.label = label
        self.environment = environment
        self.retained = retained
    }
}
