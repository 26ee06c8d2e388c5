import Foundation
import Testing
import TestSupport

/// ARCHITECTURE.md names only what exists: every Swift symbol it names in backticks is declared
/// in Sources (the rules: `symbolPath` and `SourceIndex.declares`). Its layer table is checked
/// in `LayersTests`.
@Suite struct ArchitecturePageTests {
    private static let page = Result { try String(contentsOf: repositoryRoot.appendingPathComponent("ARCHITECTURE.md"), encoding: .utf8) }
    private static let sources = Result { try SourceIndex(root: repositoryRoot) }

    @Test func everySymbolThePageNamesIsDeclared() throws {
        let sources = try Self.sources.get()
        let spans = backticked(try Self.page.get())
        let symbols = spans.compactMap { span in symbolPath(span).map { (span, $0) } }
        #expect(symbols.count > 50, "only \(symbols.count) symbols among \(spans.count) spans")
        let missing = Set(symbols.filter { !sources.declares($0.1) }.map { String($0.0) }).sorted()
        #expect(missing.isEmpty, "ARCHITECTURE.md names what Sources do not declare: \(missing)")
    }

    @Test func symbolsAreToldFromOtherSpans() {
        let symbols = ["LoopBound<T>", "Daemon.perform", "OutputEvent.service(ServiceOutput)", "loop.watch(fd:interest:)",
                       "assumeOnLoop { }", "armTimer", "advance(by:)", "Task(executorPreference: loop) { }"]
        #expect(symbols.map { symbolPath($0[...])?.joined(separator: ".") } == [
            "LoopBound", "Daemon.perform", "OutputEvent.service", "loop.watch", "assumeOnLoop", "armTimer", "advance", "Task",
        ])
        let others = ["Run.swift", "ancsd.conf", "Daemon+Transport.swift", "Sources/AMS", "--exec", "make unit", "sd_notify",
                      "POSIX_SPAWN_SETSIGMASK", "fsync", "pause()", "media", "C*", "@unchecked Sendable"]
        #expect(others.filter { symbolPath($0[...]) != nil } == [])
    }

    @Test func aMemberIsLookedForWithItsOwner() throws {
        let sources = try Self.sources.get()
        #expect(sources.declares(["ANCSHandler", "show"]))
        #expect(!sources.declares(["Daemon", "show"]), "the page's old claim: Daemon.show")
        #expect(sources.declares(["ANCS", "DataSourceReassembler"]))  // a module's
        #expect(!sources.declares(["NoSuchType"]))
    }
}
