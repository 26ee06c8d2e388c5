import Foundation
import JSON
import TestSupport

/// A target as `swift package describe --type json` gives it.
struct PackageTarget {
    var name: String
    /// The module name, as sources import it (`ancs_phone_sim` for `ancs-phone-sim`).
    var moduleName: String
    /// "library", "executable", "test" or "system-target".
    var type: String
    var path: String
    var sources: [String]
    var dependencies: [String]
    var productDependencies: [String]
}

/// Runs `swift package describe --type json` on this repository, with a scratch directory of its
/// own: the build directory of the `swift test` running this is locked.
func describePackage() throws -> [PackageTarget] {
    let swift = try swiftExecutable()
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("layers-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
    defer { try? FileManager.default.removeItem(at: scratch) }
    let process = Process()
    process.executableURL = swift
    process.arguments = ["package", "--package-path", repositoryRoot.path, "--scratch-path", scratch.path, "describe", "--type", "json"]
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw TestFailure("swift package describe failed (\(process.terminationStatus)): \(errors)") }
    let targets = try JSONValue(parsing: text)["targets"]?.arrayValue ?? []
    return targets.map { target in
        PackageTarget(
            name: target["name"]?.stringValue ?? "",
            moduleName: target["c99name"]?.stringValue ?? "",
            type: target["type"]?.stringValue ?? "",
            path: target["path"]?.stringValue ?? "",
            sources: target["sources"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            dependencies: target["target_dependencies"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            productDependencies: target["product_dependencies"]?.arrayValue?.compactMap(\.stringValue) ?? [])
    }
}

/// The `swift` driver: on the PATH, else where the toolchains put it.
private func swiftExecutable() throws -> URL {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let candidates = path.split(separator: ":").map { "\($0)/swift" } + ["/opt/swift/usr/bin/swift", "/usr/bin/swift"]
    guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
        throw TestFailure("no swift executable on the PATH (\(path))")
    }
    return URL(fileURLWithPath: found)
}

/// The modules a Swift source file imports (`import X`, `public import X`, `@testable import X`),
/// from lines that start with the import (not indented: not inside a string).
func importedModules(_ source: String) -> Set<String> {
    var modules: Set<String> = []
    for line in source.split(separator: "\n") where !(line.first?.isWhitespace ?? true) {
        var words = line.split(separator: " ")[...]
        while let first = words.first, first.hasPrefix("@") || ["public", "internal", "package", "private", "fileprivate"].contains(first) {
            words = words.dropFirst()
        }
        guard words.first == "import", words.count >= 2 else { continue }
        let name = words.count >= 3 && ["struct", "class", "enum", "func", "var", "let", "protocol", "typealias"].contains(words[words.startIndex + 1])
            ? words[words.startIndex + 2] : words[words.startIndex + 1]
        modules.insert(String(name.split(separator: ".").first ?? name))
    }
    return modules
}
