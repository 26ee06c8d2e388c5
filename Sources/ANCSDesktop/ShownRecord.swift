#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// What `ancsd desktop` popped up, as fingerprints (a 64-bit hash of the phone, app, summary,
/// body and date: no content), the newest `capacity` of them, so that nothing the user saw or
/// dismissed pops up again: not when the phone or the daemon comes back, and not when the
/// companion itself restarts (a new login, `systemctl --user restart`), whose record is a file.
///
/// The file holds 8-byte records, oldest first, appended one per new notification; it is
/// rewritten with the newest `capacity` when it holds twice that (64 KiB at most). A file that
/// cannot be read or written leaves the record in memory only (`failure` says why, once).
final class ShownRecord {
    let capacity: Int
    /// The file, or nil for a record in memory only.
    let path: String?
    /// Why the file could not be read or written, the first time; nil while all is well.
    private(set) var failure: String?
    private var members: Set<UInt64> = []
    /// Oldest first, at most `capacity`.
    private var order: [UInt64] = []
    /// The records in the file, for knowing when to rewrite it.
    private var recordsInFile = 0

    static let recordSize = 8

    init(path: String?, capacity: Int = 4096) {
        self.path = path
        self.capacity = capacity
        guard let path else { return }
        do {
            let file = try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC)
            let bytes = try file.readToEnd(limit: 2 * capacity * Self.recordSize + Self.recordSize)
            let count = bytes.count / Self.recordSize
            recordsInFile = count
            for index in 0..<count {
                var value: UInt64 = 0
                for byte in 0..<Self.recordSize {
                    value |= UInt64(bytes[index * Self.recordSize + byte]) << (8 * UInt64(byte))
                }
                add(value)
            }
        } catch let error where error.rawValue == ENOENT {
            // Nothing shown yet.
        } catch let error where error.rawValue == EFBIG {
            // Not a file of ours: replaced at the first notification.
            recordsInFile = 2 * capacity
        } catch {
            failure = "cannot read \(path): \(error)"
        }
    }

    func contains(_ fingerprint: UInt64) -> Bool { members.contains(fingerprint) }

    /// Remembers `fingerprint`; it is in the file too unless writing failed (`failure`).
    func insert(_ fingerprint: UInt64) {
        guard !members.contains(fingerprint) else { return }
        add(fingerprint)
        guard let path, failure == nil else { return }
        do {
            if recordsInFile + 1 > 2 * capacity {
                try rewrite(path)
            } else {
                try append([fingerprint], to: path, flags: O_WRONLY | O_APPEND | O_CREAT)
                recordsInFile += 1
            }
        } catch {
            failure = "cannot write \(path): \(error)"
        }
    }

    private func add(_ fingerprint: UInt64) {
        guard members.insert(fingerprint).inserted else { return }
        order.append(fingerprint)
        if order.count > capacity { members.remove(order.removeFirst()) }
    }

    /// The newest `capacity` records, written to a new file that then takes the old one's place.
    private func rewrite(_ path: String) throws(Errno) {
        let temporary = path + ".new"
        try append(order, to: temporary, flags: O_WRONLY | O_CREAT | O_TRUNC)
        guard rename(temporary, path) == 0 else { throw Errno.current }
        recordsInFile = order.count
    }

    private func append(_ fingerprints: [UInt64], to path: String, flags: Int32) throws(Errno) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(fingerprints.count * Self.recordSize)
        for value in fingerprints {
            for byte in 0..<Self.recordSize { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(byte)))) }
        }
        let file = try FileDescriptor.open(path, flags | O_CLOEXEC, permissions: 0o600)
        try file.writeAll(bytes)
        try file.close()
    }

    /// A fingerprint that stays the same from one run to the next (FNV-1a over the fields,
    /// each ended by a unit separator): Swift's `hashValue` is seeded anew in every process.
    static func fingerprint(_ fields: [String]) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for field in fields {
            for byte in field.utf8 {
                hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            }
            hash = (hash ^ 0x1F) &* 0x0000_0100_0000_01b3
        }
        return hash
    }
}
