#if canImport(Glibc)
import Glibc
#endif
import ANCSRuntime
import ANCSSession
import BlueZ
import DBus
import MQTT

extension Setting {
    /// Every setting of `ancsd run`, in the order `--help` lists them.
    public static let all: [Setting] = [
        .optional(
            "format", nil, .outputs, .cases(), at: \.format,
            help: "output format: one readable line per event (default on a terminal) or JSON Lines (default otherwise; see docs/output.md)"),
        .optional(
            "fifo", "PATH", .outputs, .nonEmpty("needs a path"), at: \.fifoPath,
            help: """
                also write events to the named pipe PATH (created if missing); the daemon never blocks on it, and events written \
                while no reader is attached wait for the next one, up to a bound
                """),
        .value(
            "fifo-mode", "MODE", .outputs, .checked("must be octal permissions such as 0600") { mode_t($0, radix: 8).flatMap { $0 <= 0o777 ? $0 : nil } },
            at: \.fifoMode, help: "permissions of a FIFO that ancsd creates, in octal (default 0600)"),
        .list(
            "device", "ADDR", .live, .checked("needs a Bluetooth address such as AA:BB:CC:DD:EE:FF", normalizedAddress), at: \.options.devices,
            help: "only this phone (AA:BB:CC:DD:EE:FF); repeat for several"),
        .optional(
            "adapter", "hciN", .live, .checked("needs an adapter name such as hci0") { $0.hasPrefix("hci") && Int($0.dropFirst(3)).map { $0 >= 0 } == true ? $0 : nil },
            at: \.options.adapter, help: "only phones on this adapter"),
        .value(
            "bus", "ADDRESS", .restart, SettingParser.nonEmpty("needs a D-Bus address").map { BusAddress.address($0) }, at: \.options.bus,
            help: "the D-Bus bus where bluetoothd runs (default: the system bus, or DBUS_SYSTEM_BUS_ADDRESS)"),
        .yesNo(
            "acquire-notify", flag: "--no-acquire-notify", .newSessions, at: \.options.preferAcquireNotify,
            help: "receive notifications as D-Bus signals (StartNotify) instead of AcquireNotify sockets"),
        .yesNo(
            "advertise", flag: "--no-advertise", .restart, at: \.options.advertise,
            help: """
                do not register an LE advertisement (connectable, not discoverable: bonded phones reconnect to it) and a pairing \
                agent that refuses every pairing request; for desktops where another agent owns pairing
                """),
        .yesNo(
            "media", flag: "--no-media", .live, at: \.options.media,
            help: """
                do not follow the phone's music (Apple Media Service): no media events, no "ancsd media" commands, no MPRIS \
                player on the desktop
                """),
        .value(
            "accessory", nil, .live, .choice(AccessoryKind.names, AccessoryKind.init(parsing:)), at: \.options.accessory,
            help: """
                what the phone is shown while a paired phone is known: a HID-over-GATT accessory that never sends a key and \
                advertises the HID service, so the bonded phone reconnects by itself and lists this computer in Settings > \
                Bluetooth. keyboard (default) is the shape an iPhone (iOS 26.6) was seen to list and bond; iOS hides its \
                on-screen keyboard while it is connected (the keyboard icon brings it back). remote (or hid) is a media remote \
                that leaves the on-screen keyboard alone; that iOS lists it is inferred, not seen. none: only the ANCS \
                solicitation, for desktops whose own stack already makes the phone reconnect
                """),
        .optional(
            "record", "DIR", .newSessions, .nonEmpty("needs a directory"), at: \.options.recording.directory,
            help: """
                write each phone's session to DIR as an ancs-capture/1 file (ADDRESS_YYYYMMDDTHHMMSSZ.jsonl; see \
                docs/capture-format.md) that "ancsd decode" and "ancsd replay" read
                """),
        .yesNo(
            "record-redact", flag: "--record-redact", .newSessions, at: \.options.recording.redact,
            help: "in recorded files, replace the text of titles, subtitles, messages and action labels with same-length placeholders (\"xxx\")"),
        .optional(
            "control", "PATH", .restart, .nonEmpty("needs a socket path"), at: \.controlPath,
            help: """
                answer requests on the Unix socket PATH (docs/control.md): what "ancsd list", "action", "status", "doctor" and \
                "desktop" use
                """),
        .optional(
            "control-group", "NAME", .restart, .nonEmpty("needs a group name"), at: \.controlGroup,
            help: "the group that may use the control socket (mode 0660)"),
        .list(
            "only-app", "PATTERN", .live, .appPattern, at: \.options.session.filter.onlyApps,
            help: "show only notifications of apps whose bundle identifier matches PATTERN ('*' matches any characters: com.apple.*); repeatable"),
        .list(
            "ignore-app", "PATTERN", .live, .appPattern, at: \.options.session.filter.ignoredApps,
            help: "never show notifications of these apps; repeatable. Only the app identifier of such a notification is fetched"),
        .list(
            "ignore-category", "NAME", .live,
            .checked("needs one of \(CategoryRule.names.joined(separator: ", "))", choices: CategoryRule.names) { CategoryRule($0) },
            at: \.options.session.filter.ignoredCategories,
            help: """
                never show notifications of this category (the output's names: social, email, news, incoming_call, …, \
                reserved); repeatable. They are never fetched. Filtered notifications reach no output, no "list" and no \
                desktop; "ancsd status" counts them
                """),
        .value(
            "replays", nil, .live, .cases(), at: \.options.replays,
            help: """
                which notifications the phone replays on connecting (pre_existing) are printed: all (marked seen_before when \
                shown before), unseen (default: only those never shown, e.g. arrived while ancsd was away) or none
                """),
        .optional(
            "state-dir", "DIR", .restart, .absolutePath("needs an absolute directory path"), at: \.options.stateDirectory,
            help: """
                remember what each phone showed in DIR across restarts (default: systemd's $STATE_DIRECTORY; without either, \
                until ancsd stops); at most 4096 fingerprints (no content) per phone, 140 kB a file
                """),
        .value(
            "alive-check", "SECONDS", .live, .wholeSeconds(example: 900), at: \.options.session.aliveCheckInterval,
            help: """
                every SECONDS (default 900; 0: never) ask each connected phone for a notification that cannot exist, behind all \
                other requests; no answer within 5 s: unsubscribe and subscribe again (the phone dropped the subscriptions \
                without telling)
                """),
        .value(
            "resubscribe-after", "SECONDS", .live, .wholeSeconds(example: 21600), at: \.options.session.resubscribeAfter,
            help: """
                subscribe again after SECONDS without any Notification Source traffic, whatever the alive check says (default \
                21600; 0: never)
                """),
        .optional(
            "exec", "CMD", .outputs, .nonEmpty("needs a command"), at: \.execCommand,
            help: """
                run CMD through /bin/sh -c for each event: the event's JSON object (as --format json prints it) on its standard \
                input, ANCSD_TYPE and ANCSD_DEVICE in its environment, with ANCSD_UID, ANCSD_APP_ID and ANCSD_CATEGORY for \
                notifications, ANCSD_SHARING (on, off) for sharing, ANCSD_MEDIA_STATE (playing, paused, …) for media; one at a time \
                per phone, in order, at most 64 waiting per phone (the oldest dropped); its standard error and a failing exit \
                status are logged (docs/output.md)
                """),
        .value(
            "exec-timeout", "SECONDS", .outputs,
            .checked("needs a number of seconds above 0 and at most 86400, such as 10 or 0.5", RunSettings.commandTimeout), at: \.execTimeout,
            help: "kill the command (and its process group) after SECONDS (default 10)"),
        .optional(
            "mqtt", "URL", .outputs, SettingParser(read: RunSettings.mqttEndpoint), at: \.mqttEndpoint,
            help: """
                also publish events to an MQTT broker: mqtt://[user@]host[:port] (default port 1883) or mqtts://… (TLS, port \
                8883); topics PREFIX/DEVICE/event, …/state, PREFIX/status and Home Assistant discovery (docs/mqtt.md). While \
                the broker is away, up to 1000 messages wait and are delivered in order; older events are dropped
                """),
        .optional(
            "mqtt-password-file", "PATH", .outputs, .absolutePath("needs an absolute file path"), at: \.mqttPasswordFile,
            help: """
                the broker password for the URL's user (the URL must name one): the file's first line; a file other users may \
                read is warned about, and so is a password sent over mqtt:// to another machine
                """),
        .optional(
            "mqtt-ca", "PATH", .outputs, .absolutePath("needs an absolute file path"), at: \.mqttCA,
            help: "the CA certificate that signs the broker's (mqtts://; default: the system's trusted CAs)"),
        .value(
            "mqtt-prefix", "PREFIX", .outputs,
            .checked("needs topic levels without '+', '#' or empty levels (such as ancsd or home/ancsd)") { MQTTTopics.isValidPrefix($0) ? $0 : nil },
            at: \.mqttPrefix, help: "topic prefix (default ancsd)"),
        .value(
            "mqtt-discovery-prefix", "PREFIX", .outputs,
            .checked("needs a topic prefix such as homeassistant, or none") { text -> String?? in
                text == "none" ? .some(nil) : MQTTTopics.isValidPrefix(text) ? .some(text) : nil
            },
            at: \.mqttDiscoveryPrefix, help: "Home Assistant's discovery prefix (default homeassistant), or none"),
        .yesNo(
            "mqtt-actions", flag: "--mqtt-actions", .outputs, at: \.mqttActions,
            help: """
                take actions from PREFIX/DEVICE/action: {"uid": N, "action": "positive"|"negative"}, and media commands \
                from PREFIX/DEVICE/media/command (play, pause, …); the phone's answers go to …/result
                """),
        .value(
            "log-level", "LEVEL", .live, .choice(["debug", "info", "warning", "error"]) { LogLevel(name: $0) }, at: \.logLevel,
            help: "debug, info (default), warning or error; notification content is logged only at debug"),
    ]
}

extension SettingParser where Value == AppPattern {
    /// A bundle identifier pattern (`com.apple.*`).
    static var appPattern: Self {
        checked("needs a bundle identifier, '*' standing for any characters (com.apple.*)") { AppPattern($0) }
    }
}

extension RunSettings {
    /// `exec-timeout`: plain decimal seconds above 0 and at most a day (Double() alone would
    /// also take "0x10", "1e3", "inf").
    static func commandTimeout(_ text: String) -> Duration? {
        guard text.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }), text.filter({ $0 == "." }).count <= 1,
              let seconds = Double(text), seconds.isFinite, seconds > 0, seconds <= 86_400 else { return nil }
        return .milliseconds(max(1, Int((seconds * 1000).rounded())))
    }

    /// `mqtt`: the broker's URL.
    static func mqttEndpoint(_ key: String, _ text: String) -> Result<MQTTEndpoint, SettingError> {
        do {
            return .success(try MQTTEndpoint(url: text))
        } catch {
            return .failure(SettingError("\(key): \(error.description)"))
        }
    }
}
