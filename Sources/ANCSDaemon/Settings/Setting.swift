/// One setting of `ancsd run`, declared once in `Setting.all`: its key, its command-line form,
/// how its text is read and checked, its help and what a reload does with a change of it.
///
/// `RunSettings` parses through the table, `ancsd run --help` and the reload comparison come
/// from it, and tests check the man page, the bash completion and `ancsd.conf` against it: a
/// setting added to the table needs no other code.
public struct Setting: Sendable {
    /// What a reload (SIGHUP) does with a changed setting.
    public enum Reload: String, Sendable, CaseIterable {
        /// Applied to the running daemon at once; the phones stay connected.
        case live
        /// Applied to the phones' sessions that start after the reload.
        case newSessions
        /// The outputs are made again: a kept exec sink takes the new command for the events not
        /// yet started, an MQTT sink whose settings did not change stays connected.
        case outputs
        /// Only a start applies it: a reload that changes it is refused and changes nothing.
        case restart
    }

    /// The configuration file's key, and the long option without `--`.
    public let key: String
    /// The value's name in `--help`: `PATH`, or the choices (`text|json`).
    public let placeholder: String
    /// A command-line option that takes no value and the value it stands for
    /// (`--no-advertise` is `advertise = no`); `--KEY VALUE` is accepted too.
    public let flag: (option: String, value: String)?
    /// The values it takes, when they are a fixed set.
    public let choices: [String]
    /// True for a key that adds to a list each time it is given (a comma-separated list is
    /// accepted too); a command line that gives one replaces the configuration file's list.
    public let isList: Bool
    /// What a reload does when its value changed.
    public let reload: Reload
    /// Its description in `ancsd run --help`, one paragraph.
    public let help: String
    private let store: @Sendable (inout RunSettings, String) -> SettingError?
    private let reset: @Sendable (inout RunSettings) -> Void
    private let compare: @Sendable (RunSettings, RunSettings) -> Bool

    /// The option as the command line and `--help` show it: the flag, or `--KEY PLACEHOLDER`.
    public var usage: String { flag?.option ?? "--\(key) \(placeholder)" }

    /// Reads `text` into `settings` (a list key adds to its list).
    func apply(_ text: String, to settings: inout RunSettings) throws(SettingError) {
        if let error = store(&settings, text) { throw error }
    }

    /// Empties the list of a list key; nothing for another key.
    func clear(_ settings: inout RunSettings) { reset(&settings) }

    /// True if the setting's value in `old` is not the one in `new`.
    public func differs(_ old: RunSettings, _ new: RunSettings) -> Bool { compare(old, new) }

    /// The settings by key.
    static let named = Dictionary(all.map { ($0.key, $0) }, uniquingKeysWith: { first, _ in first })
}

extension Setting {
    /// A setting held at `field`; `placeholder` nil shows the parser's choices.
    static func value<Value: Equatable & Sendable>(
        _ key: String, _ placeholder: String? = nil, _ reload: Reload, _ parser: SettingParser<Value>,
        at field: any WritableKeyPath<RunSettings, Value> & Sendable, flag: (option: String, value: String)? = nil, help: String
    ) -> Setting {
        Setting(
            key: key, placeholder: placeholder ?? parser.choices.joined(separator: "|"), flag: flag, choices: parser.choices,
            isList: false, reload: reload, help: help,
            store: { settings, text in
                switch parser.read(key, text) {
                case .success(let value): settings[keyPath: field] = value; return nil
                case .failure(let error): return error
                }
            },
            reset: { _ in },
            compare: { $0[keyPath: field] != $1[keyPath: field] })
    }

    /// A setting held at an optional `field`, nil until it is given.
    static func optional<Value: Equatable & Sendable>(
        _ key: String, _ placeholder: String? = nil, _ reload: Reload, _ parser: SettingParser<Value>,
        at field: any WritableKeyPath<RunSettings, Value?> & Sendable, help: String
    ) -> Setting {
        value(key, placeholder, reload, parser.map { Optional($0) }, at: field, help: help)
    }

    /// A yes/no setting whose command-line `flag` stands for the value that is not the default:
    /// `--no-…` for no, otherwise yes.
    static func yesNo(
        _ key: String, flag: String, _ reload: Reload, at field: any WritableKeyPath<RunSettings, Bool> & Sendable, help: String
    ) -> Setting {
        value(key, nil, reload, .yesNo, at: field, flag: (flag, flag.hasPrefix("--no-") ? "no" : "yes"), help: help)
    }

    /// A list key held in an array: each comma-separated item read by `parser`, added unless it
    /// is there already.
    static func list<Item: Equatable & Sendable>(
        _ key: String, _ placeholder: String, _ reload: Reload, _ parser: SettingParser<Item>,
        at field: any WritableKeyPath<RunSettings, [Item]> & Sendable, help: String
    ) -> Setting {
        list(key, placeholder, reload, parser, at: field, empty: [], help: help) { items, item in
            if !items.contains(item) { items.append(item) }
        }
    }

    /// A list key held in a set.
    static func list<Item: Hashable & Sendable>(
        _ key: String, _ placeholder: String, _ reload: Reload, _ parser: SettingParser<Item>,
        at field: any WritableKeyPath<RunSettings, Set<Item>> & Sendable, help: String
    ) -> Setting {
        list(key, placeholder, reload, parser, at: field, empty: [], help: help) { items, item in items.insert(item) }
    }

    private static func list<Item: Sendable, Items: Equatable & Sendable>(
        _ key: String, _ placeholder: String, _ reload: Reload, _ parser: SettingParser<Item>,
        at field: any WritableKeyPath<RunSettings, Items> & Sendable, empty: Items, help: String,
        add: @escaping @Sendable (inout Items, Item) -> Void
    ) -> Setting {
        Setting(
            key: key, placeholder: placeholder, flag: nil, choices: parser.choices, isList: true, reload: reload, help: help,
            store: { settings, text in
                for piece in text.split(separator: ",") {
                    switch parser.read(key, piece.trimmingCharacters(in: " \t")) {
                    case .success(let item): add(&settings[keyPath: field], item)
                    case .failure(let error): return error
                    }
                }
                return nil
            },
            reset: { $0[keyPath: field] = empty },
            compare: { $0[keyPath: field] != $1[keyPath: field] })
    }
}
