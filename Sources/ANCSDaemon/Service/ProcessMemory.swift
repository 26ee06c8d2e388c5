#if canImport(Glibc)
import Glibc
#endif
import CLinux
import SystemCalls

/// Keeps a long-running daemon's resident memory to what it uses.
public enum ProcessMemory {
    /// What `releaseStartupText()` released.
    public struct Release: Sendable, Equatable {
        /// How many mappings were advised.
        public var mappings = 0
        /// Their total size in bytes (resident or not).
        public var bytes = 0
    }

    /// The block size from which malloc maps a block of its own (given back whole when freed),
    /// and the free memory at the top of a heap past which it gives the rest back: glibc's
    /// starting value of both, 128 KiB.
    public static let mallocThreshold = 128 * 1024

    /// Keeps glibc's mmap and trim thresholds at `mallocThreshold` for the life of the process.
    ///
    /// glibc raises both each time a block it mapped is freed: the mmap threshold to that
    /// block's size (up to 32 MiB), the trim threshold to twice it. After one burst freed a
    /// table of a few megabytes, every later block up to that size came from the loop thread's
    /// heap, the heap grew to fit each and kept up to twice that free at its top, and the
    /// freed blocks stayed resident between the small ones allocated after them: the soak's
    /// anonymous memory grew 1.7-2.4 MB after warm-up, of which 0.4 MB was in use
    /// (docs/history/soak.md). Set once, before any thread starts; true when both took.
    @discardableResult
    public static func fixMallocThresholds() -> Bool {
        ancsd_fix_malloc_thresholds(Int32(mallocThreshold)) == 1
    }

    /// Gives back the resident file pages the process needed only to start.
    ///
    /// Starting touches code and read-only data all over the binary and its shared libraries
    /// (the Swift runtime's and standard library's initialisation, the dynamic linker's symbol
    /// lookups, argument parsing, the bus handshake), and for each page fault the kernel maps the
    /// 64 KiB of page cache around it (fault-around): after start-up about 6.6 MB of the static
    /// `ancsd` file's text and 1.7 MB of the libraries' read-only data are resident, most of it
    /// never used again. This unmaps (`MADV_DONTNEED`) the resident pages of every private,
    /// non-writable mapping of a file (`r-xp` code, `r--p` read-only data) that holds no private
    /// copy of a page (`Anonymous: 0 kB`), so every page it drops is exactly the file's page: the
    /// pages stay in the page cache, and the next use of one maps it back with a minor fault (no
    /// I/O while the file is cached). Writable mappings, and read-only ones with relocated pages
    /// (RELRO), are never touched.
    @discardableResult
    public static func releaseStartupText() -> Release {
        bindTupleMetadataPath()
        var release = Release()
        for mapping in cleanFileMappings() {
            guard let start = UnsafeMutableRawPointer(bitPattern: mapping.start) else { continue }
            let length = Int(mapping.end - mapping.start)
            if madvise(start, length, MADV_DONTNEED) == 0 {
                release.mappings += 1
                release.bytes += length
            }
        }
        return release
    }

    /// Makes the Swift runtime build a tuple type's metadata from its mangled name once, now.
    ///
    /// The runtime builds the labels of a tuple type in a C++ `std::string` (libstdc++'s, shared),
    /// and libstdc++ binds the functions it calls from there (`operator new`, `free`, ...) lazily,
    /// at their first call: a lookup that reads the symbol tables of ancsd and of each library in
    /// turn, whose pages the kernel maps 64 KiB at a time. Done after the release, on the first
    /// notification (whose event is a tuple), those lookups mapped about 0.6 MB back in.
    /// Returns the type built: `(event: Int, seenBefore: Bool)`, whose labels are longer than
    /// the 15 bytes a `std::string` keeps inline, so that it allocates.
    @discardableResult
    static func bindTupleMetadataPath() -> Any.Type? {
        _typeByName("Si5event_Sb10seenBeforet")
    }

    struct Mapping: Equatable {
        var start: UInt
        var end: UInt
    }

    /// The private non-writable mappings of a file whose pages are all the file's own.
    static func cleanFileMappings() -> [Mapping] {
        guard let text = readProcFile("/proc/self/smaps") else { return [] }
        return parseSmaps(text)
    }

    /// Parses `/proc/PID/smaps` text into the mappings `releaseStartupText` may advise.
    static func parseSmaps(_ text: [UInt8]) -> [Mapping] {
        var result: [Mapping] = []
        var candidate: Mapping?
        for line in text.split(separator: 0x0A) {
            let fields = line.split(separator: 0x20, omittingEmptySubsequences: true)
            guard let first = fields.first else { continue }
            if let dash = first.firstIndex(of: 0x2D), fields.count >= 5 {
                // A mapping's header: start-end perms offset dev inode [path]
                candidate = nil
                guard fields.count >= 6, fields[5].first == 0x2F,  // a file's path
                    Array(fields[1]) == Array("r-xp".utf8) || Array(fields[1]) == Array("r--p".utf8),
                    let start = hex(first[first.startIndex..<dash]),
                    let end = hex(first[first.index(after: dash)...]), end > start
                else { continue }
                candidate = Mapping(start: start, end: end)
            } else if Array(first) == Array("Anonymous:".utf8), let mapping = candidate {
                if fields.count >= 2, Array(fields[1]) == [0x30] { result.append(mapping) }  // "0" kB
                candidate = nil
            }
        }
        return result
    }

    private static func hex(_ digits: ArraySlice<UInt8>) -> UInt? {
        guard !digits.isEmpty, digits.count <= 16 else { return nil }
        var value: UInt = 0
        for byte in digits {
            let digit: UInt8
            switch byte {
            case 0x30...0x39: digit = byte - 0x30
            case 0x61...0x66: digit = byte - 0x61 + 10
            default: return nil
            }
            value = value << 4 | UInt(digit)
        }
        return value
    }

    private static func readProcFile(_ path: String) -> [UInt8]? {
        try? FileDescriptor.open(path, O_RDONLY | O_CLOEXEC).readToEnd()
    }
}
