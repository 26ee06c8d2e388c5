// swift-tools-version:6.0
import PackageDescription

/// ancsd: an Apple Notification Center Service consumer for Linux.
///
/// Layers (each knows only the one below it):
/// - `ANCS`: the pure protocol, standard library only, no I/O.
/// - `JSON`: a small standard-library-only JSON value, parser and writer.
/// - `ANCSCapture`: the `ancs-capture/1` file format and its decoder.
/// - `CDBus` / `DBus`: a Swift D-Bus layer over libdbus-1.
/// - `ancsd`: the executable.
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "ancsd",
    products: [
        .library(name: "ANCS", targets: ["ANCS"]),
        .library(name: "DBus", targets: ["DBus"]),
        .executable(name: "ancsd", targets: ["ancsd"]),
    ],
    targets: [
        .target(name: "ANCS", swiftSettings: strict),
        .target(name: "JSON", swiftSettings: strict),
        .target(name: "ANCSCapture", dependencies: ["ANCS", "JSON"], swiftSettings: strict),
        .systemLibrary(
            name: "CDBus",
            pkgConfig: "dbus-1",
            providers: [.apt(["libdbus-1-dev"])]
        ),
        .executableTarget(
            name: "dbus-bench", dependencies: ["DBus"], path: "Benchmarks/dbus-bench", exclude: ["echo_bench.py"],
            swiftSettings: strict),
        .target(name: "DBus", dependencies: ["CDBus"], swiftSettings: strict),
        .executableTarget(name: "ancsd", dependencies: ["ANCS", "JSON", "ANCSCapture"], swiftSettings: strict),
        .executableTarget(name: "ancs-bench", dependencies: ["ANCS"], path: "Benchmarks/ancs-bench", swiftSettings: strict),
        .testTarget(name: "ANCSTests", dependencies: ["ANCS"], swiftSettings: strict),
        .testTarget(name: "JSONTests", dependencies: ["JSON"], swiftSettings: strict),
        .testTarget(name: "ANCSCaptureTests", dependencies: ["ANCSCapture", "ANCS", "JSON"], swiftSettings: strict),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "CDBus"], swiftSettings: strict),
        .testTarget(name: "EndToEndTests", dependencies: ["JSON"], swiftSettings: strict),
    ]
)
