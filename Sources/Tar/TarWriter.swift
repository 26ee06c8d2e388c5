/// Why a member cannot go into a ustar archive.
public struct TarError: Error, Hashable, Sendable, CustomStringConvertible {
    public var reason: String

    public init(_ reason: String) { self.reason = reason }

    public var description: String { reason }
}

/// A ustar archive (POSIX.1-1988, what `tar` reads everywhere) built in memory: regular files
/// only, each a 512-byte header and its bytes padded to 512, two zero blocks at the end. Pure:
/// no I/O; the caller writes `bytes` (compressed or not).
public struct TarWriter: Sendable {
    /// The archive so far (without its end until `finish()`).
    public private(set) var bytes: [UInt8] = []
    /// The members added: name and size, in order.
    public private(set) var members: [(name: String, size: Int)] = []

    public init() {}

    /// Adds a regular file. `name` is the path inside the archive (at most 100 bytes, or 255
    /// with a `/` where a 155-byte prefix can end); `mode` its permissions; `modified` seconds
    /// since the Unix epoch. Throws for a name that does not fit or a file over 8 GiB.
    public mutating func add(name: String, contents: [UInt8], mode: UInt32 = 0o644, modified: Int64) throws(TarError) {
        let (prefix, base) = try Self.split(Array(name.utf8))
        guard contents.count < 0o77777777777 else { throw TarError("\(name): \(contents.count) bytes is more than a ustar member holds") }
        var header = [UInt8](repeating: 0, count: 512)
        func put(_ field: [UInt8], at offset: Int) {
            for (index, byte) in field.enumerated() { header[offset + index] = byte }
        }
        func octal(_ value: Int64, width: Int) -> [UInt8] {  // width - 1 digits, then NUL
            var digits = Array(String(value, radix: 8).utf8)
            while digits.count < width - 1 { digits.insert(UInt8(ascii: "0"), at: 0) }
            return digits + [0]
        }
        put(base, at: 0)
        put(octal(Int64(mode), width: 8), at: 100)
        put(octal(0, width: 8), at: 108)  // uid
        put(octal(0, width: 8), at: 116)  // gid
        put(octal(Int64(contents.count), width: 12), at: 124)
        put(octal(max(0, modified), width: 12), at: 136)
        put(Array(repeating: UInt8(ascii: " "), count: 8), at: 148)  // the checksum counts as spaces
        header[156] = UInt8(ascii: "0")  // a regular file
        put(Array("ustar".utf8) + [0] + Array("00".utf8), at: 257)
        put(Array("root".utf8), at: 265)
        put(Array("root".utf8), at: 297)
        put(prefix, at: 345)
        let checksum = header.reduce(0) { $0 + Int64($1) }
        put(octal(checksum, width: 7) + [UInt8(ascii: " ")], at: 148)  // six digits, NUL, space
        bytes += header
        bytes += contents
        bytes += [UInt8](repeating: 0, count: (512 - contents.count % 512) % 512)
        members.append((name, contents.count))
    }

    /// The archive, ended with its two zero blocks.
    public func finish() -> [UInt8] {
        bytes + [UInt8](repeating: 0, count: 1024)
    }

    /// A name as ustar holds it: a prefix (up to 155 bytes) and a name (up to 100), split at a `/`.
    private static func split(_ name: [UInt8]) throws(TarError) -> (prefix: [UInt8], name: [UInt8]) {
        let text = String(decoding: name, as: UTF8.self)
        guard !name.isEmpty, !name.contains(0) else { throw TarError("a member needs a name without NUL bytes") }
        if name.count <= 100 { return ([], name) }
        for index in name.indices.reversed() where name[index] == UInt8(ascii: "/") {
            let prefix = Array(name[..<index]), rest = Array(name[(index + 1)...])
            if prefix.count <= 155 && rest.count <= 100 && !rest.isEmpty { return (prefix, rest) }
        }
        throw TarError("\(text): the name is too long for a ustar member")
    }
}
