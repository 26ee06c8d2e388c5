public import ANCS

/// Which notifications a session keeps (`--only-app`, `--ignore-app`, `--ignore-category`).
///
/// A category is known from the Notification Source event alone, so a notification dropped by
/// category is never fetched. An app is known only from the notification's AppIdentifier
/// attribute: while app rules exist, a session asks for that attribute alone first, and only
/// for a kept notification for the rest. A notification whose app the phone did not tell
/// matches no app pattern: `--only-app` drops it, `--ignore-app` keeps it.
public struct NotificationFilter: Hashable, Sendable {
    /// When not empty, only apps matching one of these are kept.
    public var onlyApps: [AppPattern] = []
    /// Apps matching one of these are dropped.
    public var ignoredApps: [AppPattern] = []
    /// Categories dropped, by the output's names (`social`, `email`, …, `reserved`).
    public var ignoredCategories: [CategoryRule] = []

    public init(onlyApps: [AppPattern] = [], ignoredApps: [AppPattern] = [], ignoredCategories: [CategoryRule] = []) {
        self.onlyApps = onlyApps
        self.ignoredApps = ignoredApps
        self.ignoredCategories = ignoredCategories
    }

    /// True when nothing is filtered.
    public var isEmpty: Bool { onlyApps.isEmpty && ignoredApps.isEmpty && ignoredCategories.isEmpty }

    /// True when a notification's app must be known before it can be kept.
    public var filtersApps: Bool { !onlyApps.isEmpty || !ignoredApps.isEmpty }

    /// The category rule that drops this category, if any.
    public func rule(droppingCategory category: CategoryID) -> CategoryRule? {
        ignoredCategories.first { $0.matches(category) }
    }

    /// Whether the app is dropped; `matched` lists every app rule it matched (for `doctor`).
    public func decide(app: String?) -> (dropped: Bool, matched: [Rule]) {
        let only = onlyApps.filter { $0.matches(app) }
        let ignored = ignoredApps.filter { $0.matches(app) }
        let dropped = (!onlyApps.isEmpty && only.isEmpty) || !ignored.isEmpty
        return (dropped, only.map { .onlyApp($0) } + ignored.map { .ignoreApp($0) })
    }

    /// Every rule, in the order given.
    public var rules: [Rule] {
        onlyApps.map { .onlyApp($0) } + ignoredApps.map { .ignoreApp($0) } + ignoredCategories.map { .ignoreCategory($0) }
    }

    /// One filter rule, named as on the command line: `only-app com.apple.*`.
    public enum Rule: Hashable, Sendable, CustomStringConvertible {
        case onlyApp(AppPattern)
        case ignoreApp(AppPattern)
        case ignoreCategory(CategoryRule)

        public var description: String {
            switch self {
            case .onlyApp(let pattern): "only-app \(pattern.text)"
            case .ignoreApp(let pattern): "ignore-app \(pattern.text)"
            case .ignoreCategory(let rule): "ignore-category \(rule.name)"
            }
        }
    }
}

/// A bundle identifier pattern: `*` matches any run of characters (also none), everything else
/// itself, case-sensitively (bundle identifiers are compared so by iOS too).
public struct AppPattern: Hashable, Sendable {
    /// The pattern as written.
    public let text: String
    private let pieces: [Substring]

    /// Nil for an empty pattern or one with characters a bundle identifier cannot hold.
    public init?(_ text: String) {
        guard !text.isEmpty, text.utf8.count <= 255,
              text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F })
        else { return nil }
        self.text = text
        pieces = text.split(separator: "*", omittingEmptySubsequences: false)
    }

    /// True if `app` matches; nil matches nothing.
    public func matches(_ app: String?) -> Bool {
        guard let app else { return false }
        let target = Array(app.utf8)
        let parts = pieces.map { Array($0.utf8) }
        guard parts.count > 1 else { return target == parts[0] }
        // Anchored first and last piece, the middle ones found greedily left to right.
        guard let first = parts.first, let last = parts.last, target.count >= first.count + last.count,
              target.starts(with: first), target.reversed().starts(with: last.reversed())
        else { return false }
        var position = first.count
        let end = target.count - last.count
        for part in parts.dropFirst().dropLast() where !part.isEmpty {
            guard let found = find(part, in: target, from: position, before: end) else { return false }
            position = found + part.count
        }
        return true
    }

    private func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int, before end: Int) -> Int? {
        guard end - start >= needle.count else { return nil }
        for index in start...(end - needle.count) where haystack[index..<(index + needle.count)].elementsEqual(needle) {
            return index
        }
        return nil
    }
}

/// A category named as in the output: one of the specification's (`social`, `incoming_call`, …)
/// or `reserved`, which stands for every ID the specification does not define.
public struct CategoryRule: Hashable, Sendable {
    public let name: String

    /// Nil for a name that is no category.
    public init?(_ name: String) {
        guard name == "reserved" || (0...255).contains(where: { CategoryID(rawValue: UInt8($0)).name == name }) else { return nil }
        self.name = name
    }

    /// Every name a rule accepts.
    public static var names: [String] {
        (0...255).compactMap { CategoryID(rawValue: UInt8($0)).name } + ["reserved"]
    }

    public func matches(_ category: CategoryID) -> Bool {
        (category.name ?? "reserved") == name
    }
}
