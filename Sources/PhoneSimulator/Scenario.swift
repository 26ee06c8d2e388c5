public import ANCS
import JSON

/// One simulated phone, as the scenario's settings line describes it.
public struct DeviceSettings: Hashable, Sendable {
    /// `AA:BB:CC:DD:EE:FF`, upper case.
    public var address: String
    public var name: String
    /// "public" or "random".
    public var addressType: String
    public var connected: Bool
    public var paired: Bool
    public var bonded: Bool
    public var trusted: Bool
    /// The ATT MTU of this phone's link (AcquireNotify returns it; DS fragments use mtu - 3).
    public var mtu: Int
    /// False: bluetoothd does not know the phone yet; it appears at an `appear` or `pair` step,
    /// and its ANCS service only once it is bonded.
    public var present: Bool = true
    /// This phone's own iOS policy (nil: the scenario's `ios`).
    public var ios: IOSPolicy?

    public init(
        address: String, name: String, addressType: String = "random", connected: Bool = true,
        paired: Bool = true, bonded: Bool = true, trusted: Bool = true, mtu: Int = 185
    ) {
        self.address = address
        self.name = name
        self.addressType = addressType
        self.connected = connected
        self.paired = paired
        self.bonded = bonded
        self.trusted = trusted
        self.mtu = mtu
    }

    /// The BlueZ object path element: `dev_AA_BB_CC_DD_EE_FF`.
    public var pathElement: String { "dev_" + address.replacingAll(":", with: "_") }
}

/// How far the simulated bluetoothd + iPhone behave like a real iPhone (docs/simulator.md,
/// "The iOS policy").
public enum IOSPolicy: String, Hashable, Sendable {
    /// As iOS does: lists only a HID advertisement with the ANCS solicitation, pairs only when
    /// the accessory demands it, shows up under a fresh resolvable private address before
    /// bonding, reconnects only to a HID advertisement. The default.
    case strict
    /// The phone of earlier versions: pairs when told, keeps its identity address, comes back
    /// at every `connect`. Only for tests that need it (each says why).
    case lenient
}

/// The accessory shape the test asked ancsd for (`"accessory"`: `keyboard`, the default as it
/// is ancsd's, or `remote`): a strict phone flags a Keyboard usage in the Report Map it reads
/// only when `remote` was asked for.
public enum AskedAccessory: String, Hashable, Sendable {
    case keyboard
    case remote
}

/// The first line of a scenario.
public struct ScenarioSettings: Hashable, Sendable {
    public var name: String
    /// The phones' iOS policy (`"ios"`: `strict`, the default, or `lenient`).
    public var ios: IOSPolicy = .strict
    /// The accessory shape ancsd was asked for (`"accessory"`).
    public var accessory: AskedAccessory = .keyboard
    /// Seconds an unbonded phone's temporary device object stays after it disconnects
    /// (bluetoothd's TemporaryTimeout, 30 s in main.conf; 1 s here so scenarios stay short).
    public var temporaryTimeout: Double = 1
    /// The default ATT MTU for devices that do not give their own.
    public var mtu: Int
    /// Whether AcquireNotify is offered; when false it answers `org.bluez.Error.NotSupported`,
    /// forcing clients onto StartNotify.
    public var acquireNotify: Bool
    /// Whether a reconnect (and a bluetoothd restart) gives existing notifications new UIDs.
    public var renumberOnConnect: Bool
    /// Other programs holding StartNotify sessions on each phone's Notification Source and Data
    /// Source while it is connected (bluetoothctl's "notify on"): AcquireNotify answers
    /// InProgress, and every value is signalled once per session, as bluetoothd 5.66 does.
    public var otherNotifyClients = 0
    /// False: the controller stops advertising while any device holds a link (some do), so a
    /// phone comes back only while nothing else is connected.
    public var advertiseWhileConnected = true
    public var adapterAddress: String
    public var adapterName: String
    public var devices: [DeviceSettings]
    /// App identifier → display name, answered to GetAppAttributes.
    public var apps: [String: String]
    /// The adapter's Pairable, Discoverable and their timeouts at start.
    public var adapterPairable = true
    public var adapterDiscoverable = false
    public var adapterPairableTimeout: UInt32 = 0
    public var adapterDiscoverableTimeout: UInt32 = 180
    /// The phones serve the Apple Media Service beside ANCS (`"ams"`). Off by default: with it on,
    /// an AMS client subscribes and writes on every phone, which changes what a test of ANCS sees.
    public var ams = false
    /// The player each phone starts with (`"media"`).
    public var media = MediaSettings()
    /// The AMS characteristics the phones offer (`"ams_characteristics"`: any subset, as the
    /// specification allows), in handle order.
    public var amsCharacteristics: [PhoneCharacteristic] = PhoneCharacteristic.ams

    public init(
        name: String = "scenario", mtu: Int = 185, acquireNotify: Bool = true, renumberOnConnect: Bool = true,
        adapterAddress: String = "00:1A:7D:DA:71:13", adapterName: String = "ancsd-sim",
        devices: [DeviceSettings] = [DeviceSettings(address: "AA:BB:CC:DD:EE:FF", name: "iPhone")],
        apps: [String: String] = [:]
    ) {
        self.name = name
        self.mtu = mtu
        self.acquireNotify = acquireNotify
        self.renumberOnConnect = renumberOnConnect
        self.adapterAddress = adapterAddress
        self.adapterName = adapterName
        self.devices = devices
        self.apps = apps
    }
}

/// A notification as a scenario adds it; `uid` is the scenario's key for it.
public struct NotificationSpec: Hashable, Sendable {
    public var uid: UInt32
    public var category: CategoryID
    public var flags: EventFlags
    public var attributes: [NotificationAttributeID: String]

    public init(uid: UInt32, category: CategoryID = .other, flags: EventFlags = [], attributes: [NotificationAttributeID: String] = [:]) {
        self.uid = uid
        self.category = category
        self.flags = flags
        self.attributes = attributes
    }

    /// Notification `index` (from 0) of a `burst` step of `count` from `startUID`.
    public static func burst(index: Int, count: Int, startUID: UInt32, category: CategoryID, app: String) -> NotificationSpec {
        let uid = startUID &+ UInt32(index)
        return NotificationSpec(uid: uid, category: category, attributes: [
            .appIdentifier: app, .title: "Burst \(index + 1) of \(count)",
            .message: "Notification \(uid): generated by the phone simulator to measure throughput.",
            .date: "20261130T101500",
        ])
    }
}

/// Changes a `modify` step makes; nil leaves a field as it is.
public struct NotificationChange: Hashable, Sendable {
    public var category: CategoryID?
    public var flags: EventFlags?
    public var attributes: [NotificationAttributeID: String]

    public init(category: CategoryID? = nil, flags: EventFlags? = nil, attributes: [NotificationAttributeID: String] = [:]) {
        self.category = category
        self.flags = flags
        self.attributes = attributes
    }
}

/// What a scenario step does.
public enum ScenarioAction: Hashable, Sendable {
    case add(NotificationSpec)
    case modify(uid: UInt32, NotificationChange)
    case remove(uid: UInt32)
    /// `count` notifications from `startUID`, `rate` per second (0: as fast as possible).
    case burst(count: Int, startUID: UInt32, rate: Double, category: CategoryID, app: String)
    case disconnect
    /// The phone comes back. Strict: only a bonded phone, and only once a connectable
    /// advertisement with the HID service UUID is registered (waiting up to `timeout`);
    /// `expect` `away` asserts that it does not come back within `timeout`.
    case connect(timeout: Double, expectAway: Bool)
    /// Drop the bus name and every object, wait `downtime` seconds, come back.
    case restartBlueZ(downtime: Double)
    /// Answer the next `count` Control Point writes with ATT error `code`.
    case cpError(code: UInt8, count: Int)
    case denySharing
    case allowSharing
    /// The phone drops the subscriptions without telling (see `Silence.swift`): the
    /// Notification Source and Data Source stop; the Control Point is still answered.
    case silentDrop
    /// As `silentDrop`, and Control Point writes get no reply at all.
    case silentDropAll
    /// "Share System Notifications" turned off: Control Point writes are refused with ATT
    /// 0x03, the Notification Source and Data Source stop.
    case sharingOff
    /// Sharing turned back on: writes are accepted; the Notification Source and Data Source
    /// resume only once their CCCDs are rewritten.
    case sharingOn
    /// Delay each Data Source response by this many seconds.
    case slow(delay: Double)
    /// For `seconds` from now, in the background (the step returns at once), malformed values
    /// `rate` per second in all, round robin over the phone's subscribed notifying
    /// characteristics; a Data Source value only between whole responses (`Garbage.swift`).
    /// Replaces the phone's noise that is still going; `seconds` 0 only stops it. `seed` (the
    /// step's line, mixed with the phone's index) makes the values the same at every run.
    case garbage(seconds: Double, rate: Int, seed: UInt64)
    /// Leave this attribute's tuple out of responses (nil: stop omitting).
    case omit(NotificationAttributeID?)
    /// Send half of the next Data Source response, then disconnect.
    case midResponseDisconnect
    /// Acknowledge the next `count` attribute requests but never answer them on the Data Source.
    case cpTimeout(count: Int)
    /// The next Control Point write drops the link before it is answered.
    case disconnectOnWrite
    /// The next `count` StartNotify/AcquireNotify calls fail with NotPermitted "Notify acquired",
    /// as when bluetoothd still holds the socket of a link that just went away.
    case refuseSubscribe(count: Int)
    /// The next link loss leaves the Notification Source's and Data Source's acquired sockets
    /// registered: their client ends close (HUP), yet StartNotify and AcquireNotify answer
    /// NotPermitted "Notify acquired" until somebody calls StopNotify (bluetoothd 5.82 after a
    /// fast reconnection, docs/system-test.md).
    case staleSockets
    /// Every misbehaviour switched on for the phone is off again: injected errors, requests
    /// left unanswered, pending disconnects, slowness, omitted tuples, denied sharing, refused
    /// subscriptions, a pending `staleSockets`. (A `garbage` noise goes on: its seconds end it.)
    case heal
    /// Wait until a client subscribes to the Notification Source (fails after `timeout`).
    case waitSubscribed(timeout: Double)
    /// bluetoothd learns of the phone (InterfacesAdded of its Device1, not paired).
    case appear
    /// The phone connects and asks to pair: RequestConfirmation(device, passkey) on the
    /// default agent. `expect` ("paired" or "rejected") makes another outcome fail the run.
    /// Strict: the phone first waits up to `timeout` for an advertisement it lists, connects
    /// under a fresh resolvable private address, then waits up to `timeout` for the accessory
    /// to demand pairing (an encrypted HID attribute to read, or Device1.Pair()).
    case pair(passkey: UInt32, expect: PairingOutcome?, timeout: Double)
    /// Wait until bluetoothd's state matches (fails after `timeout`).
    case waitState(StateExpectation, timeout: Double)
    /// bluetoothd calls Release on every registered advertisement and forgets them.
    case releaseAdvertisements
    /// Another bus client (not bluetoothd) calls every method of every registered agent and
    /// advertisement; each must fail (with `error`, if given).
    case rogue(error: String?)
    /// A device that is not a phone connects to the accessory's connectable advertisement and
    /// holds the link, unbonded (`Strangers.swift`).
    case strangerConnect(timeout: Double)
    /// A device that claims a keyboard and no display connects and asks for passkey-entry
    /// pairing; bluetoothd calls DisplayPasskey and does not wait for the agent. `expect`:
    /// how it ends within `timeout` (`Strangers.swift`).
    case strangerPair(passkey: UInt32, expect: StrangerOutcome?, timeout: Double)
    case sleep(seconds: Double)
    /// The phone's media player changes, or the phone withdraws or offers AMS (`media_*` steps).
    case media(MediaStep)
    case end
}

/// What a `media_*` step does to the phone's player or its Apple Media Service.
public enum MediaStep: Hashable, Sendable {
    /// `media_track`: the current track is replaced by this one, from its start.
    case track(MediaTrack)
    /// `media_play`, `media_pause`: the user presses play or pause on the phone.
    case play
    case pause
    /// `media_volume`: 0…1.
    case volume(Double)
    /// `media_commands`: the Remote Commands the player supports now.
    case commands([MediaCommand])
    /// `media_service`: the phone withdraws AMS (false) or offers it again (true).
    case service(present: Bool)
}

/// How a stranger's pairing attempt (`stranger_pair`) ended.
public enum StrangerOutcome: String, Hashable, Sendable, CaseIterable {
    /// The accessory dropped the link: the pairing ended with it.
    case cut
    /// Still connected and pairing after the step's timeout: the stranger may go on guessing.
    case open
    /// The adapter is not pairable: bluetoothd refused the pairing before any agent call.
    case refused
}

/// How a pairing attempt ended.
public enum PairingOutcome: String, Hashable, Sendable, CaseIterable {
    case paired
    case rejected
    /// Strict: no registered advertisement the phone lists (HID UUID in ServiceUUIDs, ANCS in
    /// SolicitUUIDs, Discoverable): the user never sees the accessory, nothing connects.
    case notListed = "not_listed"
    /// Strict: the phone connected, but the accessory never demanded pairing (no encrypted
    /// HID attribute, no Device1.Pair()): it stays connected, unpaired.
    case notPaired = "not_paired"
}

/// What a `wait_state` step waits for; nil fields are not checked.
public struct StateExpectation: Hashable, Sendable {
    public var pairable: Bool?
    public var discoverable: Bool?
    public var pairableTimeout: UInt32?
    public var discoverableTimeout: UInt32?
    /// Registered agents.
    public var agents: Int?
    /// Whether a default agent is set.
    public var defaultAgent: Bool?
    /// Registered advertisements.
    public var advertisements: Int?
    /// Registered advertisements with Discoverable true.
    public var discoverableAdvertisements: Int?
    /// The step's phone: Paired and Trusted.
    public var paired: Bool?
    public var trusted: Bool?
    /// The step's phone: Connected and Bonded.
    public var connected: Bool?
    public var bonded: Bool?
    /// The step's phone's Device1 Address as bluetoothd shows it now (upper case).
    public var address: String?
    /// Registered GATT applications (GattManager1).
    public var applications: Int?
    /// The step's phone: input reports (PropertiesChanged of the Report's Value) counted since bonding.
    public var inputReports: Int?
    /// The step's phone: the Report Map it read has a Generic Desktop Keyboard usage (a Keypad
    /// usage does not count: iOS keeps its on-screen keyboard for one).
    public var keyboard: Bool?
    /// The step's phone: the Report Map it read has a Keyboard usage although the scenario's
    /// `accessory` is `remote`.
    public var accessoryFlagged: Bool?
    /// The step's phone: it subscribed to the accessory's input Report (StartNotify).
    public var reportSubscribed: Bool?
    /// The step's phone: its media player is "playing" or "paused".
    public var mediaState: String?
    /// The step's phone: how many Remote Command writes it received.
    public var mediaCommandsReceived: Int?
    /// The step's phone: how many Device1.Pair() calls (security requests) it received.
    public var securityRequests: Int?

    public init() {}
}

/// One line after the settings.
public struct ScenarioStep: Hashable, Sendable {
    /// The 1-based line number in the scenario file.
    public var line: Int
    /// Seconds to wait after the previous step.
    public var after: Double
    /// Index into `ScenarioSettings.devices`.
    public var device: Int
    public var action: ScenarioAction

    public init(line: Int, after: Double = 0, device: Int = 0, action: ScenarioAction) {
        self.line = line
        self.after = after
        self.device = device
        self.action = action
    }
}

/// A parsed scenario file.
public struct Scenario: Hashable, Sendable {
    public var settings: ScenarioSettings
    public var steps: [ScenarioStep]

    public init(settings: ScenarioSettings, steps: [ScenarioStep]) {
        self.settings = settings
        self.steps = steps
    }
}

/// A scenario file that cannot be run, with the line at fault.
public struct ScenarioError: Error, Hashable, Sendable, CustomStringConvertible {
    /// 1-based line number (0 when the file as a whole is at fault).
    public var line: Int
    public var message: String

    public init(line: Int, _ message: String) {
        self.line = line
        self.message = message
    }

    public var description: String { line > 0 ? "line \(line): \(message)" : message }
}

extension Scenario {
    /// Parses a JSON Lines scenario. Blank lines and lines starting with `//` or `#` are skipped.
    public init(parsing text: String) throws(ScenarioError) {
        var settings: ScenarioSettings?
        var steps: [ScenarioStep] = []
        var lineNumber = 0
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            lineNumber += 1
            guard !Self.isBlankOrComment(rawLine) else { continue }
            if let current = settings {
                steps.append(try ScenarioStep(parsingLine: String(rawLine), number: lineNumber, settings: current))
            } else {
                settings = try ScenarioSettings(parsingLine: String(rawLine), number: lineNumber)
            }
        }
        guard let settings else { throw ScenarioError(line: 0, "the scenario is empty: the first line must hold the settings") }
        self.init(settings: settings, steps: steps)
    }

    /// True for the lines a scenario skips: blank ones and `#` or `//` comments.
    public static func isBlankOrComment(_ line: Substring) -> Bool {
        let trimmed = line.trimmingSpaces
        return trimmed.isEmpty || trimmed.hasPrefix("#") || trimmed.hasPrefix("//")
    }
}

extension ScenarioSettings {
    /// Parses a scenario's first line (`number` is its line number, for errors).
    public init(parsingLine text: String, number: Int = 1) throws(ScenarioError) {
        var reader = try ObjectReader(line: text, number: number)
        self = try reader.settings()
        try reader.finish()
    }
}

extension ScenarioStep {
    /// Parses one step line of a scenario whose first line gave `settings`.
    public init(parsingLine text: String, number: Int, settings: ScenarioSettings) throws(ScenarioError) {
        var reader = try ObjectReader(line: text, number: number)
        self = try reader.step(settings: settings)
        try reader.finish()
    }
}
