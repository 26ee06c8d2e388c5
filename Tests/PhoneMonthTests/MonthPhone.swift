import ANCS
import ANCSSession
import GattSession

/// The phone's characteristics of ANCS and AMS.
enum Characteristic: Int, CaseIterable, Hashable {
    case notificationSource, controlPoint, dataSource, remoteCommand, entityUpdate, entityAttribute

    static let devicePath = "/org/bluez/hci0/dev_5C_AD_CF_3A_11_07"

    /// Its object path in bluetoothd's tree.
    var path: String {
        switch self {
        case .notificationSource: "\(Self.devicePath)/service0030/char0031"
        case .controlPoint: "\(Self.devicePath)/service0030/char0034"
        case .dataSource: "\(Self.devicePath)/service0030/char0036"
        case .remoteCommand: "\(Self.devicePath)/service0040/char0041"
        case .entityUpdate: "\(Self.devicePath)/service0040/char0044"
        case .entityAttribute: "\(Self.devicePath)/service0040/char0047"
        }
    }

    /// Its UUID, as the sessions' descriptions spell it.
    var uuid: CharacteristicUUID {
        switch self {
        case .notificationSource: ANCSSession.notificationSourceUUID
        case .controlPoint: ANCSSession.controlPointUUID
        case .dataSource: ANCSSession.dataSourceUUID
        // AMS's UUIDs, written here from Apple's specification.
        case .remoteCommand: CharacteristicUUID("9B3C81D8-57B1-4A8A-B8DF-0E56F7CA51C2")
        case .entityUpdate: CharacteristicUUID("2F7CABCE-808D-411F-9A0C-BB92BA96C102")
        case .entityAttribute: CharacteristicUUID("C6B2F38C-23AB-46D8-A6AB-A3A870BBD5D7")
        }
    }

    var notifies: Bool { self == .notificationSource || self == .dataSource || self == .remoteCommand || self == .entityUpdate }

    static let notifying: [Characteristic] = [.notificationSource, .dataSource, .remoteCommand, .entityUpdate]

    init?(path: String) {
        guard let found = Self.allCases.first(where: { $0.path == path }) else { return nil }
        self = found
    }

    init?(uuid: CharacteristicUUID) {
        guard let found = Self.allCases.first(where: { $0.uuid == uuid }) else { return nil }
        self = found
    }
}

/// An ATT request bluetoothd makes of the phone.
enum ATTRequest: Hashable {
    /// Writes the characteristic's Client Characteristic Configuration: notifications on or off.
    case writeCCCD(Characteristic, on: Bool)
    case write(Characteristic, [UInt8])
    case read(Characteristic)
}

/// How the phone answers an ATT request.
enum ATTAnswer: Hashable {
    case written
    case value([UInt8])
    case error(UInt8)
}

/// What a notification on the phone says, as a session that fetched all of it shows it.
struct Content: Hashable {
    var app: String?
    var title: String?
    var subtitle: String?
    var message: String?
    var date: DateAttribute?

    init(app: String?, title: String?, subtitle: String?, message: String?, date: DateAttribute?) {
        (self.app, self.title, self.subtitle, self.message, self.date) = (app, title, subtitle, message, date)
    }

    /// What a session shows of a notification.
    init(_ n: PhoneNotification) {
        self.init(app: n.appIdentifier, title: n.title, subtitle: n.subtitle, message: n.message, date: n.date)
    }
}

/// One iPhone as ANCS and AMS show it, written from Apple's specifications and as strict as
/// docs/field-evidence.md says an iPhone is: UIDs renumbered in each connection, the backlog
/// replayed (pre-existing) when the Notification Source's CCCD is written on, subscriptions
/// dropped without a word (sections 8: the Notification Source and Data Source fall silent until
/// their CCCDs are written again, the Control Point still answered or not at all), sharing
/// turned off (section 9: Control Point writes refused with ATT 0x03, silent until the CCCDs are
/// written again after it is turned on), the alive check's UID answered 0xA2; AMS (section 10):
/// the supported commands when Remote Command is subscribed, registrations forgotten with the
/// Entity Update's subscription, the current values at registration and every change after,
/// values cut at MTU − 6 with the Truncated flag, the whole value through Entity Attribute,
/// commands it does not take ignored. AMS bytes are written here by hand from the specification.
///
/// The phone sends a notification only on a characteristic whose CCCD is on and that is not
/// silent; what it sends goes to `notify`.
final class MonthPhone {
    struct Held {
        let key: UInt64
        var uid: UInt32
        let category: CategoryID
        let flags: EventFlags
        let app: String
        let title: String
        var subtitle: String
        var message: String
        let date: String
        var version = 0
        /// What a session that fetched this version shows (`shownContent(of:)`), kept with it.
        var shown = Content(app: nil, title: nil, subtitle: nil, message: nil, date: nil)
    }

    struct App {
        var identifier: String
        var name: String
        var category: CategoryID
        var flags: EventFlags
    }

    static let apps: [App] = [
        App(identifier: "com.apple.MobileSMS", name: "Messages", category: .social, flags: [.positiveAction, .negativeAction]),
        App(identifier: "net.whatsapp.WhatsApp", name: "WhatsApp", category: .social, flags: [.negativeAction]),
        App(identifier: "com.apple.mobilemail", name: "Mail", category: .email, flags: [.negativeAction]),
        App(identifier: "com.google.Gmail", name: "Gmail", category: .email, flags: []),
        App(identifier: "com.apple.mobilecal", name: "Calendar", category: .schedule, flags: [.important]),
        App(identifier: "com.apple.mobilephone", name: "Phone", category: .missedCall, flags: [.positiveAction]),
        App(identifier: "com.tinyspeck.chatlyio", name: "Slack", category: .social, flags: []),
        App(identifier: "com.apple.news", name: "News", category: .news, flags: [.silent]),
        App(identifier: "com.apple.Health", name: "Health", category: .healthAndFitness, flags: []),
        App(identifier: "ch.bank.mobile", name: "Bank · Konto", category: .businessAndFinance, flags: [.important]),
        App(identifier: "com.apple.reminders", name: "Reminders", category: .other, flags: []),
        App(identifier: "com.apple.weather", name: "Wetter ☀️", category: .location, flags: [.silent]),
    ]

    /// The ATT MTU of every link (a Data Source value carries MTU − 3 bytes; an Entity Update value MTU − 6).
    static let mtu = 185

    let clock: VirtualClock
    /// Where the phone's notifications go (the air, to bluetoothd).
    var notify: (Characteristic, [UInt8]) -> Void = { _, _ in }

    private(set) var held: [UInt64: Held] = [:]
    /// Keys in the order the notifications were added (the replay's order).
    private(set) var order: [UInt64] = []
    private var keyByUID: [UInt32: UInt64] = [:]
    private var categoryCounts: [UInt8: Int] = [:]
    private var nextUID: UInt32 = 0
    private var nextKey: UInt64 = 0

    /// The LE link is up.
    private(set) var connected = false
    /// A number for each connection (each is a new ANCS session).
    private(set) var session: UInt64 = 0
    /// The CCCDs written on in this connection.
    private(set) var cccd: Set<Characteristic> = []
    /// What the phone stopped sending without a word (section 8), until the CCCDs are written again.
    private(set) var silentSource = false
    private(set) var silentData = false
    /// Control Point writes get no answer at all (`silent_drop_all`).
    private(set) var controlPointUnanswered = false
    /// "Share System Notifications" is off: Control Point writes are refused with 0x03.
    private(set) var sharingDenied = false

    /// Every version of every notification's content, to the notification and version (the
    /// oracle's index: contents are unique, each message ends with a serial number).
    private(set) var contents: [Content: (key: UInt64, version: Int)] = [:]

    /// A Control Point write and how the phone answered it (nil: not at all), for the oracle.
    var onControlPointWrite: (_ request: ControlPointRequest?, _ answer: ATTAnswer?) -> Void = { _, _ in }
    /// A CCCD was written (for the oracle: the subscriptions renewed).
    var onCCCD: (_ characteristic: Characteristic, _ on: Bool) -> Void = { _, _ in }
    /// The player performed a remote command (its track's end moves).
    var onCommandPerformed: () -> Void = {}

    var player = Player()
    /// Attributes registered per entity, in the order written (forgotten with the Entity Update's subscription).
    private(set) var registrations: [UInt8: [UInt8]] = [:]
    private var selected: (entity: UInt8, attribute: UInt8)?
    /// Remote commands received: the command and whether the player performed it.
    private(set) var commandsReceived: [(command: UInt8, performed: Bool)] = []

    init(clock: VirtualClock) { self.clock = clock }

    // MARK: The link

    /// The LE link comes up: a new ANCS session, every UID renumbered from a new base. With
    /// sharing off the Notification Source and Data Source send nothing.
    func linkUp(uidBase: UInt32) {
        connected = true
        session += 1
        cccd = []
        silentSource = sharingDenied
        silentData = sharingDenied
        keyByUID = [:]
        nextUID = uidBase
        for key in order {
            held[key]?.uid = nextUID
            keyByUID[nextUID] = key
            nextUID &+= 1
        }
    }

    /// The LE link is lost: subscriptions, registrations and the silences end with it.
    func linkDown() {
        connected = false
        cccd = []
        registrations = [:]
        selected = nil
        silentSource = false
        silentData = false
        controlPointUnanswered = false
    }

    /// The phone withdraws AMS (Service Changed): its subscriptions and registrations go with it.
    func withdrawMedia() {
        cccd.remove(.remoteCommand)
        cccd.remove(.entityUpdate)
        registrations = [:]
        selected = nil
    }

    // MARK: What the user and the apps do

    /// A new notification from one of the apps; returns its key.
    @discardableResult
    func post(app: App, title: String, subtitle: String, message: String, date: String) -> UInt64 {
        nextKey += 1
        let key = nextKey
        var n = Held(
            key: key, uid: 0, category: app.category, flags: app.flags, app: app.identifier, title: title, subtitle: subtitle,
            message: message, date: date)
        n.uid = nextUID
        nextUID &+= 1
        index(&n)
        held[key] = n
        order.append(key)
        keyByUID[n.uid] = key
        categoryCounts[n.category.rawValue, default: 0] += 1
        send(.notificationSource, event(.notificationAdded, n))
        return key
    }

    /// The app changes what a notification says (a thread gets another message).
    func modify(_ key: UInt64, message: String, subtitle: String? = nil) {
        guard var n = held[key] else { return }
        n.version += 1
        n.message = message
        if let subtitle { n.subtitle = subtitle }
        index(&n)
        held[key] = n
        send(.notificationSource, event(.notificationModified, n))
    }

    /// The user dismisses a notification (or reads it elsewhere).
    func remove(_ key: UInt64) {
        guard let n = held.removeValue(forKey: key) else { return }
        if let position = order.firstIndex(of: key) { order.remove(at: position) }
        keyByUID[n.uid] = nil
        categoryCounts[n.category.rawValue, default: 1] -= 1
        if categoryCounts[n.category.rawValue] == 0 { categoryCounts[n.category.rawValue] = nil }
        send(.notificationSource, event(.notificationRemoved, n))
    }

    /// The phone drops the ANCS subscriptions without a word; `all`: it answers no Control Point write either.
    func dropSilently(all: Bool) {
        silentSource = true
        silentData = true
        if all { controlPointUnanswered = true }
    }

    func setSharing(_ on: Bool) {
        sharingDenied = !on
        if !on {
            silentSource = true
            silentData = true
        }
    }

    /// The Notification Source and Data Source send: the CCCDs are on and nothing silenced them.
    var ancsHealthy: Bool {
        connected && !sharingDenied && !silentSource && !silentData && !controlPointUnanswered
            && cccd.contains(.notificationSource) && cccd.contains(.dataSource)
    }

    func key(ofUID uid: UInt32) -> UInt64? { keyByUID[uid] }

    // MARK: ATT

    /// Answers an ATT request (nil: never answered) and says what it sends after the answer.
    func handle(_ request: ATTRequest) -> (answer: ATTAnswer?, then: [(Characteristic, [UInt8])]) {
        switch request {
        case .writeCCCD(let c, let on):
            return (.written, cccdWritten(c, on: on))
        case .write(.controlPoint, let bytes):
            return controlPoint(bytes)
        case .write(.remoteCommand, let bytes):
            return (.written, remoteCommand(bytes))
        case .write(.entityUpdate, let bytes):
            return entityUpdateWrite(bytes)
        case .write(.entityAttribute, let bytes):
            guard cccd.contains(.entityUpdate) else { return (.error(0xA0), []) }
            guard bytes.count == 2, Player.attributeCount(bytes[0]).map({ bytes[1] < $0 }) == true else { return (.error(0xA1), []) }
            selected = (bytes[0], bytes[1])
            return (.written, [])
        case .read(.entityAttribute):
            guard cccd.contains(.entityUpdate), let selected else { return (.error(0xA0), []) }
            let value = Player.cut(Array(player.value(selected.entity, selected.attribute, at: clock.now).utf8), to: 512)
            return (value.isEmpty ? .error(0xA2) : .value(value), [])
        case .write, .read:
            return (.error(0x03), [])
        }
    }

    private func cccdWritten(_ c: Characteristic, on: Bool) -> [(Characteristic, [UInt8])] {
        defer { onCCCD(c, on) }
        guard on else {
            cccd.remove(c)
            if c == .entityUpdate { registrations = [:] }
            return []
        }
        cccd.insert(c)
        // Written again after a silence: the characteristic sends again (not while sharing is off).
        if !sharingDenied {
            if c == .notificationSource { silentSource = false }
            if c == .dataSource { silentData = false }
            if !silentSource, !silentData { controlPointUnanswered = false }
        }
        switch c {
        case .notificationSource:
            guard !silentSource else { return [] }
            return order.compactMap { held[$0] }.map { (.notificationSource, event(.notificationAdded, $0, extra: .preExisting)) }
        case .remoteCommand:
            return [(.remoteCommand, player.supportedCommands)]
        case .entityUpdate:
            registrations = [:]  // a new subscription starts with nothing registered (the strictest)
            return []
        default:
            return []
        }
    }

    private func controlPoint(_ bytes: [UInt8]) -> (answer: ATTAnswer?, then: [(Characteristic, [UInt8])]) {
        let request = try? ControlPointRequest(decoding: bytes)
        if controlPointUnanswered {
            onControlPointWrite(request, nil)
            return (nil, [])
        }
        let answer: ATTAnswer
        var response: [UInt8]?
        if sharingDenied {
            answer = .error(ATTErrorCode.writeNotPermitted.rawValue)
        } else {
            switch request {
            case nil:
                answer = .error(ATTErrorCode.invalidCommand.rawValue)
            case .getNotificationAttributes(let uid, let requested)?:
                if let key = keyByUID[uid], let n = held[key] {
                    answer = .written
                    response = DataSourceEncoder.notificationResponse(uid: uid, requested: requested, values: values(of: n))
                } else {
                    answer = .error(ATTErrorCode.invalidParameter.rawValue)
                }
            case .getAppAttributes(let identifier, let requested)?:
                answer = .written
                let name = Self.apps.first { $0.identifier == identifier }?.name ?? ""
                response = DataSourceEncoder.appResponse(appIdentifier: identifier, requested: requested, values: [.displayName: Array(name.utf8)])
            case .performNotificationAction(let uid, _)?:
                answer = keyByUID[uid] == nil ? .error(ATTErrorCode.invalidParameter.rawValue) : .written
            }
        }
        onControlPointWrite(request, answer)
        guard let response, cccd.contains(.dataSource), !silentData else { return (answer, []) }
        return (answer, DataSourceEncoder.fragments(of: response, mtu: Self.mtu).map { (.dataSource, $0) })
    }

    private func values(of n: Held) -> [NotificationAttributeID: [UInt8]] {
        let app = Self.apps.first { $0.identifier == n.app }
        var values: [NotificationAttributeID: [UInt8]] = [
            .appIdentifier: Array(n.app.utf8), .title: Array(n.title.utf8), .subtitle: Array(n.subtitle.utf8),
            .message: Array(n.message.utf8), .messageSize: Array(String(n.message.utf8.count).utf8), .date: Array(n.date.utf8),
        ]
        if n.flags.contains(.positiveAction) { values[.positiveActionLabel] = Array((app?.category == .missedCall ? "Call Back" : "Reply").utf8) }
        if n.flags.contains(.negativeAction) { values[.negativeActionLabel] = Array("Clear".utf8) }
        return values
    }

    /// What a session that fetched `n` with the default maximum lengths shows (Title and
    /// Subtitle cut at 128 bytes, Message at 2048, as the phone cuts them).
    static func shownContent(of n: Held) -> Content {
        func cut(_ text: String, _ max: Int) -> String {
            String(decoding: DataSourceEncoder.truncated(Array(text.utf8), maxLength: max), as: UTF8.self)
        }
        return Content(
            app: n.app, title: cut(n.title, 128), subtitle: cut(n.subtitle, 128), message: cut(n.message, 2048),
            date: DateAttribute(Array(n.date.utf8)))
    }

    private func index(_ n: inout Held) {
        n.shown = Self.shownContent(of: n)
        contents[n.shown] = (n.key, n.version)
    }

    private func event(_ id: EventID, _ n: Held, extra: EventFlags = []) -> [UInt8] {
        NotificationSourceEvent(
            eventID: id, flags: n.flags.union(extra), categoryID: n.category,
            categoryCount: UInt8(clamping: categoryCounts[n.category.rawValue] ?? 0), notificationUID: n.uid
        ).encoded
    }

    /// Sends a value if the characteristic's CCCD is on and it is not silent.
    private func send(_ c: Characteristic, _ bytes: [UInt8]) {
        guard connected, cccd.contains(c) else { return }
        if c == .notificationSource, silentSource { return }
        if c == .dataSource, silentData { return }
        notify(c, bytes)
    }

    // MARK: AMS

    private func remoteCommand(_ bytes: [UInt8]) -> [(Characteristic, [UInt8])] {
        guard bytes.count == 1 else { return [] }
        let changed = player.perform(bytes[0], at: clock.now)
        commandsReceived.append((bytes[0], changed != nil))
        if changed != nil { onCommandPerformed() }
        return updates(changed ?? [])
    }

    private func entityUpdateWrite(_ bytes: [UInt8]) -> (answer: ATTAnswer?, then: [(Characteristic, [UInt8])]) {
        guard cccd.contains(.entityUpdate) else { return (.error(0xA0), []) }
        guard bytes.count >= 2, let count = Player.attributeCount(bytes[0]), bytes.dropFirst().allSatisfy({ $0 < count }) else {
            return (.error(0xA1), [])
        }
        registrations[bytes[0]] = Array(bytes.dropFirst())
        return (.written, bytes.dropFirst().map { (.entityUpdate, entityUpdate(bytes[0], $0)) })
    }

    /// One Entity Update value: EntityID, AttributeID, EntityUpdateFlags, the value cut to fit
    /// one notification (MTU − 6 bytes here, at a character boundary) with the Truncated flag.
    private func entityUpdate(_ entity: UInt8, _ attribute: UInt8) -> [UInt8] {
        let text = Array(player.value(entity, attribute, at: clock.now).utf8)
        let room = Self.mtu - 6
        let cut = Player.cut(text, to: room)
        return [entity, attribute, cut.count < text.count ? 1 : 0] + cut
    }

    /// The Entity Update values of the registered attributes among `changed`, entity by entity
    /// in the order `changed` names them, each entity's in the order registered.
    private func updates(_ changed: [(UInt8, UInt8)]) -> [(Characteristic, [UInt8])] {
        guard cccd.contains(.entityUpdate) else { return [] }
        var out: [(Characteristic, [UInt8])] = []
        var entities: [UInt8] = []
        for (entity, _) in changed where !entities.contains(entity) { entities.append(entity) }
        for entity in entities {
            for attribute in registrations[entity] ?? [] where changed.contains(where: { $0 == (entity, attribute) }) {
                out.append((.entityUpdate, entityUpdate(entity, attribute)))
            }
        }
        return out
    }

    /// The player moves on by itself (the track ended) or the user changed it on the phone.
    func playerChanged(_ changed: [(UInt8, UInt8)]) {
        guard connected else { return }
        for (c, bytes) in updates(changed) { send(c, bytes) }
    }
}

/// The phone's media player: a queue of tracks, play or pause, the elapsed time, the volume.
struct Player {
    struct Track {
        var artist: String
        var album: String
        var title: String
        var duration: Int
    }

    var name = "Music"
    var tracks: [Track] = []
    var index = 0
    var playing = false
    /// Seconds into the track at `since` (the phone's clock).
    var elapsed = 0.0
    var since = Duration.zero
    /// Volume in sixteenths.
    var volume = 8

    /// The commands it takes: play, pause, toggle, next, previous, volume up and down.
    var supportedCommands: [UInt8] { [0, 1, 2, 3, 4, 5, 6] }

    static func attributeCount(_ entity: UInt8) -> UInt8? {
        switch entity {
        case 0: 3
        case 1, 2: 4
        default: nil
        }
    }

    var track: Track { tracks.isEmpty ? Track(artist: "", album: "", title: "", duration: 0) : tracks[index] }

    func position(at now: Duration) -> Double {
        playing ? min(Double(track.duration), elapsed + (now - since).seconds) : elapsed
    }

    /// An attribute's value as text (AMS Appendix A's formats).
    func value(_ entity: UInt8, _ attribute: UInt8, at now: Duration) -> String {
        switch (entity, attribute) {
        case (0, 0): name
        case (0, 1): "\(playing ? 1 : 0),\(playing ? "1.0" : "0.0"),\(Self.decimal(position(at: now)))"
        case (0, 2): Self.decimal(Double(volume) / 16, places: 4)
        case (1, 0): "\(index)"
        case (1, 1): "\(tracks.count)"
        case (1, 2), (1, 3): "0"
        case (2, 0): track.artist
        case (2, 1): track.album
        case (2, 2): track.title
        case (2, 3): "\(track.duration).0"
        default: ""
        }
    }

    /// A command's effect: the attributes it changed, or nil if the player does not take it now.
    mutating func perform(_ command: UInt8, at now: Duration) -> [(UInt8, UInt8)]? {
        switch command {
        case 0: return playing ? [] : setPlaying(true, at: now)
        case 1: return playing ? setPlaying(false, at: now) : []
        case 2: return setPlaying(!playing, at: now)
        case 3: return skip(by: 1, at: now)
        case 4: return skip(by: -1, at: now)
        case 5, 6:
            let new = min(16, max(0, volume + (command == 5 ? 1 : -1)))
            guard new != volume else { return [] }
            volume = new
            return [(0, 2)]
        default: return nil
        }
    }

    mutating func setPlaying(_ on: Bool, at now: Duration) -> [(UInt8, UInt8)] {
        elapsed = position(at: now)
        since = now
        playing = on
        return [(0, 1)]
    }

    /// The next (or previous) track, from its start: one notification per changed Track attribute,
    /// the queue index, the PlaybackInfo.
    mutating func skip(by step: Int, at now: Duration) -> [(UInt8, UInt8)] {
        guard !tracks.isEmpty else { return [] }
        let before = track
        index = (index + step + tracks.count) % tracks.count
        elapsed = 0
        since = now
        let after = track
        var changed: [(UInt8, UInt8)] = []
        if after.artist != before.artist { changed.append((2, 0)) }
        if after.album != before.album { changed.append((2, 1)) }
        if after.title != before.title { changed.append((2, 2)) }
        if after.duration != before.duration { changed.append((2, 3)) }
        return changed + [(1, 0), (0, 1)]
    }

    static func decimal(_ value: Double, places: Int = 3) -> String {
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        let whole = Int64((value * scale).rounded())
        let integer = whole / Int64(scale), fraction = whole % Int64(scale)
        var digits = String(fraction)
        while digits.count < places { digits = "0" + digits }
        return "\(integer).\(digits)"
    }

    /// At most `limit` bytes of `text`, cut at a character boundary.
    static func cut(_ text: [UInt8], to limit: Int) -> [UInt8] {
        guard text.count > limit else { return text }
        var end = limit
        while end > 0, text[end] & 0xC0 == 0x80 { end -= 1 }
        return Array(text[..<end])
    }
}
