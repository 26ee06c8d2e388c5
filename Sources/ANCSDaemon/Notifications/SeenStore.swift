#if canImport(Glibc)
import Glibc
#endif
public import ANCSRuntime
public import ANCSSession
import SystemCalls

/// What a notification shows, reduced to 64 bits: FNV-1a over its app identifier, title,
/// subtitle, message and date, each with its length (or a marker for "unknown"), so that no
/// two different field splits hash the same text. Stable across runs and builds (unlike
/// Swift's `Hasher`), so it can be stored.
public struct NotificationFingerprint: Hashable, Sendable {
    public let value: UInt64

    public init(value: UInt64) { self.value = value }

    /// Nil for a notification whose attributes were not all fetched: unknown fields would make
    /// different notifications look the same.
    public init?(_ n: PhoneNotification) {
        guard n.attributesComplete else { return nil }
        var hash = FNV1a()
        hash.mix(field: n.appIdentifier)
        hash.mix(field: n.title)
        hash.mix(field: n.subtitle)
        hash.mix(field: n.message)
        switch n.date {
        case .valid(let date)?: date.withISO8601 { hash.mix(field: $0) }
        case .empty?: hash.mix(field: "")
        case .malformed(let text)?:  // the field is "!" followed by the text
            var text = text
            text.withUTF8 { hash.mix(field: $0, prefix: UInt8(ascii: "!")) }
        case nil: hash.mix(field: nil)
        }
        value = hash.value
    }

    /// 16 lowercase hexadecimal digits.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8](repeating: 0, count: 16)
        for i in 0..<16 { out[i] = digits[Int((value >> UInt64(60 - 4 * i)) & 0xF)] }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses exactly 16 lowercase hexadecimal digits.
    public init?(hex: some Collection<UInt8>) {
        guard hex.count == 16 else { return nil }
        var value: UInt64 = 0
        for byte in hex {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            default: return nil
            }
            value = value << 4 | UInt64(digit)
        }
        self.value = value
    }
}

/// 64-bit FNV-1a, fed the fields of a `NotificationFingerprint` straight from their UTF-8 bytes.
private struct FNV1a {
    var value: UInt64 = 0xcbf2_9ce4_8422_2325

    @inline(__always)
    mutating func mix(_ byte: UInt8) {
        value ^= UInt64(byte)
        value = value &* 0x0000_0100_0000_01b3
    }

    /// A field: its length in four bytes (least significant first), then its bytes, with
    /// `prefix` (when given) counted and mixed before them; 0xFF alone for an unknown field.
    mutating func mix(field bytes: UnsafeBufferPointer<UInt8>, prefix: UInt8? = nil) {
        let length = bytes.count + (prefix == nil ? 0 : 1)
        for shift in stride(from: 0, to: 32, by: 8) { mix(UInt8(truncatingIfNeeded: length >> shift)) }
        if let prefix { mix(prefix) }
        for byte in bytes { mix(byte) }
    }

    mutating func mix(field: String?) {
        guard var field else { return mix(0xFF) }
        field.withUTF8 { mix(field: $0) }
    }
}

extension ReplayGate {
    /// Looks the event's content up among what `device` showed, decides under the policy, and
    /// remembers what is shown (and keeps what is held back but still on the phone recent).
    public mutating func admit(_ event: NotificationEvent, device: String, store: SeenStore) -> (event: NotificationEvent, seenBefore: Bool)? {
        // A removal, or a notification with no fingerprint (its attributes incomplete): never known.
        guard event.kind != .removed, let fingerprint = NotificationFingerprint(event.notification) else {
            return admit(event, known: false)
        }
        var admitted: (event: NotificationEvent, seenBefore: Bool)?
        store.lookUp(fingerprint, device: device) { known in
            admitted = admit(event, known: known)
            return admitted != nil || known
        }
        return admitted
    }
}

/// One phone's bounded set of fingerprints, most recently seen kept; no I/O.
public struct SeenSet: Sendable {
    public let capacity: Int
    private var lastSeen: [UInt64: UInt64] = [:]
    private var order = FIFO<(fingerprint: UInt64, sequence: UInt64)>()
    private var sequence: UInt64 = 0

    public init(capacity: Int) { self.capacity = max(1, capacity) }

    public var count: Int { lastSeen.count }

    /// The most entries `order` ever holds: up to `2 × capacity + 64` current and stale ones
    /// before the rebuild, one pushed before the check, and as many popped ones again before
    /// the queue drops them (past 64, when they are more than half). A full set makes room for
    /// them once, and the rebuild keeps it: the queue's storage is never given back to be grown
    /// again, which made a full phone's memory swing by up to 0.4 MB between two moments
    /// (docs/history/soak.md).
    static func orderBound(capacity: Int) -> Int { 2 * (2 * capacity + 64) + 1 }

    /// Room in `order` (tests).
    var orderCapacity: Int { order.capacity }

    public func contains(_ fingerprint: NotificationFingerprint) -> Bool { lastSeen[fingerprint.value] != nil }

    /// Adds the fingerprint, or makes it the most recent; the least recently seen goes past
    /// `capacity`.
    public mutating func insert(_ fingerprint: NotificationFingerprint) {
        sequence += 1
        lastSeen[fingerprint.value] = sequence
        if lastSeen.count == capacity { order.reserveCapacity(Self.orderBound(capacity: capacity)) }
        order.push((fingerprint.value, sequence))
        while lastSeen.count > capacity, let oldest = order.pop() {
            if lastSeen[oldest.fingerprint] == oldest.sequence { lastSeen[oldest.fingerprint] = nil }
        }
        // Entries refreshed since they were queued are stale in `order`: rebuild it before it
        // grows past twice the set.
        if order.count > 2 * capacity + 64 {
            let current = oldestFirst
            order.removeAll(keepingCapacity: true)
            for (index, value) in current.enumerated() {
                lastSeen[value] = UInt64(index + 1)
                order.push((value, UInt64(index + 1)))
            }
            sequence = UInt64(current.count)
        }
    }

    /// Every fingerprint, least recently seen first.
    public var oldestFirst: [UInt64] {
        lastSeen.sorted { $0.value < $1.value }.map(\.key)
    }
}

/// The notifications each phone has shown, remembered across reconnects and, with a directory
/// (`--state-dir`, systemd's `StateDirectory=`), across restarts.
///
/// On disk, one file per phone, `AA_BB_CC_DD_EE_FF.seen`: the line `ancsd-seen/1`, then one
/// fingerprint per line (16 hexadecimal digits), appended as notifications are shown. A line
/// counts only when it is exactly that and ends with a newline, so a line half-written by a
/// crash is never mistaken for data. When the file holds more than twice `capacity` lines it
/// is rewritten with the set (temporary file, fsync, rename), so it never exceeds
/// `2 × capacity × 17` bytes plus the header: 139,277 bytes at the default 4,096.
public final class SeenStore {
    /// The fingerprints kept per phone.
    public static let defaultCapacity = 4096
    /// Phones whose sets stay in memory (the least recently used is dropped, its file stays).
    public static let phonesInMemory = 16
    static let header = "ancsd-seen/1"

    public let directory: String?
    public let capacity: Int
    private let logger: Logger?
    private var phones: [String: Phone] = [:]
    private var useCounter: UInt64 = 0
    private var failed = false

    private struct Phone {
        var set: SeenSet
        /// Fingerprint lines in the file now.
        var linesOnDisk: Int
        var lastUsed: UInt64
        /// The phone's file (`path(for:)`), nil without a directory.
        let path: String?
    }

    public init(directory: String?, capacity: Int = SeenStore.defaultCapacity, logger: Logger? = nil) {
        self.directory = directory
        self.capacity = max(1, capacity)
        self.logger = logger
    }

    /// True if the phone has shown this before.
    public func contains(_ fingerprint: NotificationFingerprint, device: String) -> Bool {
        withPhone(device) { $0.set.contains(fingerprint) }
    }

    /// Remembers that the phone showed this (again).
    public func record(_ fingerprint: NotificationFingerprint, device: String) {
        withPhone(device) { remember(fingerprint, in: &$0) }
    }

    /// Whether the phone has shown this before, and remembers it when `record` (given that
    /// answer) says so: `contains` then `record` with one look-up of the phone.
    @discardableResult
    public func lookUp(
        _ fingerprint: NotificationFingerprint, device: String, recordingIf record: (_ known: Bool) -> Bool
    ) -> Bool {
        withPhone(device) { entry in
            let known = entry.set.contains(fingerprint)
            if record(known) { remember(fingerprint, in: &entry) }
            return known
        }
    }

    private func remember(_ fingerprint: NotificationFingerprint, in entry: inout Phone) {
        entry.set.insert(fingerprint)
        guard !failed, let path = entry.path else { return }
        if entry.linesOnDisk >= 2 * capacity || !append(fingerprint.hex + "\n", to: path) {
            entry.linesOnDisk = rewrite(entry.set, to: path) ? entry.set.count : Int.max / 2
        } else {
            entry.linesOnDisk += 1
        }
    }

    /// How many fingerprints the phone has in memory.
    public func count(device: String) -> Int { withPhone(device) { $0.set.count } }

    // MARK: Files

    /// Hands the phone's entry (loaded if needed, marked used) to `body` to read or change in
    /// place: one lookup, and no copy of the set, whose storage a copy would share (inserting
    /// into it would then copy all 4,096 entries).
    private func withPhone<R>(_ device: String, _ body: (inout Phone) -> R) -> R {
        useCounter += 1
        if let index = phones.index(forKey: device) {
            phones.values[index].lastUsed = useCounter
            return body(&phones.values[index])
        }
        var entry = load(device)
        let result = body(&entry)
        phones[device] = entry
        return result
    }

    /// A phone that is not in memory, from its file if there is one; makes room for it.
    private func load(_ device: String) -> Phone {
        if phones.count >= Self.phonesInMemory, let victim = phones.min(by: { $0.value.lastUsed < $1.value.lastUsed })?.key {
            phones[victim] = nil
        }
        let path = path(for: device)
        var entry = Phone(set: SeenSet(capacity: capacity), linesOnDisk: 0, lastUsed: useCounter, path: path)
        if let path { load(path, into: &entry) }
        return entry
    }

    func path(for device: String) -> String? {
        guard let directory, !failed else { return nil }
        let name = String(device.map { $0 == ":" ? "_" : $0 })
        guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else { return nil }
        return directory + "/" + name + ".seen"
    }

    private func load(_ path: String, into entry: inout Phone) {
        guard let bytes = readFile(path) else { return }
        var lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        let complete = bytes.last == UInt8(ascii: "\n")
        if !lines.isEmpty { lines.removeLast() }  // after the last newline: empty, or a torn line
        guard let first = lines.first, Array(first) == Array(Self.header.utf8) else {
            logger?.warning("\(path) is not an ancsd-seen/1 file; starting it again")
            entry.linesOnDisk = Int.max / 2  // rewritten on the first record
            return
        }
        var valid = 0
        for line in lines.dropFirst() {
            guard let fingerprint = NotificationFingerprint(hex: line) else { continue }
            entry.set.insert(fingerprint)
            valid += 1
        }
        entry.linesOnDisk = valid
        if !complete || valid != lines.count - 1 {
            // A torn or foreign line: rewrite now, or the next append would follow it on its line.
            entry.linesOnDisk = rewrite(entry.set, to: path) ? entry.set.count : Int.max / 2
        }
    }

    /// Opens a state file that must be a regular file: a symbolic link is not followed, and a
    /// FIFO or device planted in its place neither blocks the open nor is read (`open` with
    /// O_NONBLOCK, then `fstat`); anything else throws EINVAL.
    static func openRegularFile(_ path: String, _ flags: Int32, mode: mode_t = 0o600) throws(Errno) -> FileDescriptor {
        let file = try FileDescriptor.open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, permissions: mode)
        guard let info = try? file.status(), (info.st_mode & S_IFMT) == S_IFREG else {
            try? file.close()
            throw Errno(rawValue: EINVAL)
        }
        _ = fcntl(file.rawValue, F_SETFL, fcntl(file.rawValue, F_GETFL) & ~O_NONBLOCK)
        return file
    }

    private static func reason(_ error: Errno) -> String {
        switch error.rawValue {
        case EINVAL: "it is not a regular file"
        case ELOOP: "it is a symbolic link"
        default: error.description
        }
    }

    private func readFile(_ path: String) -> [UInt8]? {
        do throws(Errno) {
            return try Self.read(path, limit: 4 * capacity * 17 + 4096)  // a file far past the bound is not ours
        } catch {
            if error.rawValue != ENOENT { report("cannot read \(path): \(Self.reason(error))") }
            return nil
        }
    }

    /// The file's first bytes, up to a little past `limit`.
    private static func read(_ path: String, limit: Int) throws(Errno) -> [UInt8] {
        let file = try openRegularFile(path, O_RDONLY)
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while bytes.count <= limit {
            let n = buffer.withUnsafeMutableBytes { buffer in try? file.read(into: buffer) }
            guard let n, n > 0 else { break }
            bytes += buffer[0..<n]
        }
        return bytes
    }

    private func append(_ line: String, to path: String) -> Bool {
        do throws(Errno) {
            let file = try Self.openRegularFile(path, O_WRONLY | O_APPEND)
            try file.writeAll(Array(line.utf8))
            try file.close()
            return true
        } catch {
            // Missing: rewritten with its header.
            if error.rawValue != ENOENT { report("cannot write \(path): \(Self.reason(error))") }
            return false
        }
    }

    /// Writes the whole set crash-safely: a temporary file, fsync, rename over the old one.
    private func rewrite(_ set: SeenSet, to path: String) -> Bool {
        let temporary = path + ".tmp"
        var text = Self.header + "\n"
        text.reserveCapacity(17 * set.count + 16)
        for value in set.oldestFirst { text += NotificationFingerprint(value: value).hex + "\n" }
        var opened = false
        do throws(Errno) {
            let file = try Self.openFresh(temporary)
            opened = true
            try file.writeAll(Array(text.utf8))
            guard fsync(file.rawValue) == 0 else { throw Errno.current }
            try file.close()
            guard rename(temporary, path) == 0 else { throw Errno.current }
            return true
        } catch {
            guard opened else {
                report("cannot write \(temporary): \(Self.reason(error))")
                return false
            }
            report("cannot write \(path): \(error)")
            unlink(temporary)
            return false
        }
    }

    /// A new file at `path`, made afresh (O_EXCL): whatever is there, a planted symbolic link
    /// included, is removed first, never written through.
    private static func openFresh(_ path: String) throws(Errno) -> FileDescriptor {
        do throws(Errno) {
            return try openRegularFile(path, O_WRONLY | O_CREAT | O_EXCL)
        } catch where error.rawValue == EEXIST {
            unlink(path)
        }
        return try openRegularFile(path, O_WRONLY | O_CREAT | O_EXCL)
    }

    /// Logs a file error once, then keeps working in memory only.
    private func report(_ message: String) {
        guard !failed else { return }
        failed = true
        logger?.warning("\(message); what was shown is remembered in memory only until ancsd restarts")
    }
}
