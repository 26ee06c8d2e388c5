import Foundation
import Testing
import TestSupport

/// Package.swift's map of the house is true: every target is on it, uses only what the map
/// allows it, and the map's layers point one way; ARCHITECTURE.md's layer table agrees with it.
@Suite struct LayersTests {
    let map: LayerMap
    let targets: [PackageTarget]

    init() throws {
        map = try Self.map.get()
        targets = try Self.described.get()
    }

    /// Read once for all the tests (each test makes a suite value of its own).
    private static let map = Result {
        LayerMap(manifest: try String(contentsOf: repositoryRoot.appendingPathComponent("Package.swift"), encoding: .utf8))
    }
    private static let described = Result { try describePackage() }
    private static let table = Result {
        LayerTable(page: try String(contentsOf: repositoryRoot.appendingPathComponent("ARCHITECTURE.md"), encoding: .utf8))
    }

    @Test func theMapReads() {
        #expect(map.problems.isEmpty, "\(map.problems.joined(separator: "\n"))")
        #expect(map.entries.count > 10)
    }

    @Test func everyTargetIsOnTheMapAndNothingElse() {
        let real = Set(targets.filter { $0.type != "test" }.map(\.name))
        #expect(real.count > 10, "describe gave \(targets.count) targets")
        let unmapped = real.subtracting(map.entries.keys).sorted()
        #expect(unmapped.isEmpty, "targets missing from Package.swift's doc comment: \(unmapped)")
        let stale = Set(map.entries.keys).subtracting(real).sorted()
        #expect(stale.isEmpty, "Package.swift's doc comment names targets that do not exist: \(stale)")
    }

    @Test func everyTargetUsesOnlyWhatTheMapAllows() {
        for target in targets where target.type != "test" {
            guard let entry = map.entries[target.name] else { continue }  // reported above
            let wrong = Set(target.dependencies).subtracting(entry.allowed).sorted()
            #expect(wrong.isEmpty, "\(target.name) depends on \(wrong); the map allows it \(entry.allowed.sorted())")
            #expect(target.productDependencies.isEmpty, "\(target.name) uses products of other packages: \(target.productDependencies)")
        }
    }

    @Test func theMapPointsDownward() {
        for (name, entry) in map.entries {
            for used in entry.allowed.sorted() {
                guard let other = map.entries[used] else {
                    Issue.record("the map lets \(name) use \(used), which is not on the map")
                    continue
                }
                #expect(other.layer < entry.layer, "the map lets \(name) (layer \(entry.layer)) use \(used) (layer \(other.layer)): not below it")
            }
        }
    }

    /// ARCHITECTURE.md's layer table draws the same map, coarser: every target in one row.
    @Test func theArchitecturePagesTableNamesEveryTargetOnce() throws {
        let table = try Self.table.get()
        #expect(table.problems.isEmpty, "\(table.problems.joined(separator: "\n"))")
        let named = table.rows.flatMap(\.targets)
        let twice = Dictionary(grouping: named, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
        #expect(twice.isEmpty, "ARCHITECTURE.md's layer table names these in more than one row: \(twice)")
        let missing = Set(map.entries.keys).subtracting(named).sorted()
        #expect(missing.isEmpty, "targets on the map missing from ARCHITECTURE.md's layer table: \(missing)")
        let stale = Set(named).subtracting(map.entries.keys).sorted()
        #expect(stale.isEmpty, "ARCHITECTURE.md's layer table names targets not on the map: \(stale)")
    }

    /// The table's rows go from the bottom up: a target uses, by the map, only targets of its own
    /// row or of the rows before it.
    @Test func theArchitecturePagesTablePointsDownward() throws {
        let rows = try Self.table.get().rows
        var row: [String: Int] = [:]
        for (index, each) in rows.enumerated() { for target in each.targets { row[target] = index } }
        for (name, entry) in map.entries.sorted(by: { $0.key < $1.key }) {
            guard let own = row[name] else { continue }  // reported above
            for used in entry.allowed.sorted() {
                guard let other = row[used], other > own else { continue }
                Issue.record("ARCHITECTURE.md puts \(name) in \"\(rows[own].name)\", but it uses \(used), of the later row \"\(rows[other].name)\"")
            }
        }
    }

    /// A module SwiftPM builds is visible to every target built after it, declared or not: an
    /// undeclared import would slip past the dependency lists.
    @Test func everyImportIsADeclaredDependency() throws {
        let modules = Dictionary(targets.map { ($0.moduleName, $0.name) }, uniquingKeysWith: { first, _ in first })
        for target in targets where target.type != "system-target" {
            var used: Set<String> = []
            for source in target.sources where source.hasSuffix(".swift") {
                let url = repositoryRoot.appendingPathComponent(target.path).appendingPathComponent(source)
                used.formUnion(importedModules(try String(contentsOf: url, encoding: .utf8)).compactMap { modules[$0] })
            }
            let undeclared = used.subtracting(target.dependencies).subtracting([target.name]).sorted()
            #expect(undeclared.isEmpty, "\(target.name) imports \(undeclared) without declaring them in Package.swift")
        }
    }

    @Test func importsAreReadFromSources() {
        let source = """
            #if canImport(Glibc)
            import Glibc
            #endif
            public import DBus
            @testable import ancsd
            import struct JSON.JSONValue
            // import Commented
            """
        #expect(importedModules(source) == ["Glibc", "DBus", "ancsd", "JSON"])
    }
}
