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

    /// A Home Assistant entity of the service, announced by MQTT discovery in the phone's device
    /// with ancsd's origin and availability (ancsd online and the phone connected): its config is
    /// the retained `DISCOVERY/COMPONENT/ancsd_DEVICE/TYPE_OBJECT/config`, unique id
    /// `ancsd_DEVICE_TYPE_OBJECT`.
    public struct Entity: Hashable, Sendable {
        /// Home Assistant's component: `sensor`, `button`, …
        public var component: String
        /// The object id after the service's type (`title`: `media_title`); `[a-z0-9_]`.
        public var object: String
        public var name: String
        /// The config's members besides `unique_id`, `name`, `availability`, `device` and
        /// `origin` (`icon`, `value_template`, `payload_press`, …). A member whose key ends in
        /// `_topic` names a topic below `PREFIX/DEVICE/` (`media`): discovery writes it in full.
        public var config: JSONObject
        /// It sends commands to ancsd (a button): announced only with `--mqtt-actions`.
        public var takesCommands: Bool
        /// The service has it now (a button for a command the player supports now). One it does
        /// not is removed from Home Assistant (an empty retained config): when it goes, and once
        /// per run, should an earlier run have announced it.
        public var present: Bool

        public init(component: String, object: String, name: String, config: JSONObject, takesCommands: Bool = false, present: Bool = true) {
            self.component = component
            self.object = object
            self.name = name
            self.config = config
            self.takesCommands = takesCommands
            self.present = present
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
    /// Its Home Assistant entities (every one it may have, `present` or not), in order.
    public var entities: [Entity]

    public init(
        type: String, device: String, fields: JSONObject, text: String, label: String, environment: [String] = [],
        retained: [RetainedState] = [], entities: [Entity] = []
    ) {
        self.type = type
        self.device = device
        self.fields = fields
        self.text = text
        self.label = label
        self.environment = environment
        self.retained = retained
        self.entities = entities
    }
}
