// Counting heap allocations in-process, without LD_PRELOAD, valgrind or glibc malloc hooks
// (glibc 2.34 removed `__malloc_hook`; `mallinfo2()` reports bytes, not calls).
//
// This file defines three C functions that count a call and forward to glibc's own allocator
// through its exported `__libc_malloc` / `__libc_calloc` / `__libc_realloc` entry points. Swift
// reserves the symbol name `malloc`, so they cannot be named `malloc` here; instead `make bench`
// links ancs-bench with
//     -Xlinker --defsym=malloc=ancs_bench_malloc  (and the same for calloc, realloc)
// which makes the executable define `malloc`. ELF symbol resolution prefers the executable's
// definition, so every allocation the Swift runtime (`swift_slowAlloc`, behind every array, string
// and class instance), the standard library and libc make lands here. `free` is not interposed
// and stays glibc's, which matches because the memory comes from glibc's allocator.
// `posix_memalign`/`aligned_alloc` are not counted: Swift uses them only for types aligned to
// more than 16 bytes, which nothing here allocates.
//
// The counter is a global `Int` with a literal initialiser, which Swift emits as static data (no
// lazy initialisation), so the functions are safe to call before the Swift runtime starts. It is
// not atomic: the benchmark is single-threaded. A build without the linker flags (`swift build`)
// still runs; `heapAllocationsAreCounted` then finds the counter not moving and the table prints
// "n/a".
//
// Cross-check with valgrind: `ancs-bench --alloc-passes N` runs N untimed passes; under
// `valgrind --tool=memcheck`, the difference of "total heap usage: A allocs" between two values of
// N, divided by the extra responses, gives the same allocations per response.

@_silgen_name("__libc_malloc")
private func glibcMalloc(_ size: Int) -> UnsafeMutableRawPointer?
@_silgen_name("__libc_calloc")
private func glibcCalloc(_ count: Int, _ size: Int) -> UnsafeMutableRawPointer?
@_silgen_name("__libc_realloc")
private func glibcRealloc(_ pointer: UnsafeMutableRawPointer?, _ size: Int) -> UnsafeMutableRawPointer?

nonisolated(unsafe) private var heapAllocations = 0

@_cdecl("ancs_bench_malloc")
public func countingMalloc(_ size: Int) -> UnsafeMutableRawPointer? {
    heapAllocations &+= 1
    return glibcMalloc(size)
}

@_cdecl("ancs_bench_calloc")
public func countingCalloc(_ count: Int, _ size: Int) -> UnsafeMutableRawPointer? {
    heapAllocations &+= 1
    return glibcCalloc(count, size)
}

@_cdecl("ancs_bench_realloc")
public func countingRealloc(_ pointer: UnsafeMutableRawPointer?, _ size: Int) -> UnsafeMutableRawPointer? {
    heapAllocations &+= 1
    return glibcRealloc(pointer, size)
}

/// Heap allocations (malloc, calloc, realloc calls) made by this process so far.
func heapAllocationCount() -> Int { heapAllocations }

/// True if this executable was linked with the `--defsym` flags, so that the count moves.
let heapAllocationsAreCounted: Bool = {
    let before = heapAllocations
    let probe = Array(repeating: UInt8(7), count: CommandLine.arguments.count + 100)
    return heapAllocations != before && probe.count > 0
}()
