@testable import ANCSDaemon
import Foundation
import Testing

@Suite struct ProcessMemoryTests {
    /// Only private, non-writable mappings of a file with no private page are picked.
    @Test func picksCleanReadOnlyFileMappingsOnly() {
        let smaps = """
            55f1f7ff3000-55f1f88c8000 r-xp 00000000 fe:00 123 /usr/bin/ancsd
            Size:               9044 kB
            Rss:                5772 kB
            Anonymous:             0 kB
            55f1f88c9000-55f1f8906000 r--p 008d4000 fe:00 123 /usr/bin/ancsd
            Rss:                 244 kB
            Anonymous:           244 kB
            55f1f8906000-55f1f8a7a000 rw-p 00911000 fe:00 123 /usr/bin/ancsd
            Rss:                 580 kB
            Anonymous:           112 kB
            55f1f8a7a000-55f1f8a9b000 rw-p 00000000 00:00 0                          [heap]
            Anonymous:            16 kB
            7ff375420000-7ff3754c1000 r--p 00000000 fe:00 77 /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30
            Rss:                 612 kB
            Anonymous:             0 kB
            7ff3754c1000-7ff3754c2000 ---p 000a1000 fe:00 77 /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30
            Anonymous:             0 kB
            7ff3754e6000-7ff3754e7000 r--s 00000000 fe:00 78 /tmp/shared
            Anonymous:             0 kB
            7fff809c8000-7fff809ca000 r-xp 00000000 00:00 0                          [vdso]
            Anonymous:             0 kB

            """
        let picked = ProcessMemory.parseSmaps(Array(smaps.utf8))
        #expect(picked == [
            .init(start: 0x55f1_f7ff_3000, end: 0x55f1_f88c_8000),
            .init(start: 0x7ff3_7542_0000, end: 0x7ff3_754c_1000),
        ])
    }

    /// The mangled name the release binds libstdc++'s string functions with is a labelled tuple
    /// the runtime can build (a wrong name would build nothing, and bind nothing).
    @Test func theTupleBuiltBeforeTheReleaseIsTheLabelledOne() {
        #expect(ProcessMemory.bindTupleMetadataPath() == (event: Int, seenBefore: Bool).self)
    }

    @Test func malformedHeadersAreSkipped() {
        let smaps = """
            zz-55f1f88c8000 r-xp 00000000 fe:00 123 /usr/bin/ancsd
            Anonymous:             0 kB
            2000-1000 r-xp 00000000 fe:00 123 /usr/bin/ancsd
            Anonymous:             0 kB
            1000-2000 r-xp 00000000 fe:00 123 /usr/bin/ancsd

            """
        #expect(ProcessMemory.parseSmaps(Array(smaps.utf8)).isEmpty, "no Anonymous line: not known to be clean")
    }

    /// In this very process: the file pages go, and the code that runs next still runs.
    @Test func releasesResidentFilePagesOfThisProcess() throws {
        let before = try residentFileKB()
        let release = ProcessMemory.releaseStartupText()
        let after = try residentFileKB()
        #expect(release.mappings > 0)
        #expect(release.bytes > 0)
        #expect(after < before, "RssFile \(before) kB before, \(after) kB after")
        #expect((1...1000).reduce(0, +) == 500_500)
    }

    /// After a free of a large mapped block, a block of a quarter its size still gets a mapping
    /// of its own (given back whole when freed): glibc's dynamic threshold would have raised the
    /// mmap threshold to 256 MiB and carved it out of a heap. The sizes are far past any free
    /// chunk a long test process may hold in its heaps (malloc serves a block from a free chunk
    /// before it maps one, whatever the threshold); the blocks are never touched, so they cost
    /// no memory.
    @Test func aBlockPastTheThresholdIsMappedAfterALargerOneWasFreed() throws {
        #expect(ProcessMemory.fixMallocThresholds())
        let large = try #require(malloc(256 << 20))
        #expect(isMapped(large))
        free(large)
        let block = try #require(malloc(64 << 20))
        defer { free(block) }
        #expect(isMapped(block), "a 64 MiB block after a 256 MiB one was freed")
        let small = try #require(malloc(ProcessMemory.mallocThreshold / 4))
        defer { free(small) }
        #expect(!isMapped(small), "below the threshold, from a heap")
    }

    /// Whether glibc mapped the block for itself rather than carving it out of a heap: the
    /// IS_MMAPPED bit (2) of the chunk's size, the word before the block (glibc's malloc.c).
    private func isMapped(_ block: UnsafeMutableRawPointer) -> Bool {
        (block - MemoryLayout<UInt>.size).load(as: UInt.self) & 2 != 0
    }

    private func residentFileKB() throws -> Int {
        try statusKB("RssFile:")
    }

    private func statusKB(_ field: String) throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix(field) })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }
}
