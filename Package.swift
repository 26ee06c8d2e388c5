// swift-tools-version:6.0
import PackageDescription

/// ancsd: an Apple Notification Center Service consumer for Linux.
///
/// Layers (each knows only the one below it):
/// - `ANCS`: the pure protocol, standard library only, no I/O.
/// - `SystemCalls`: an owning `FileDescriptor` (EINTR retried, closed once) and `Errno`, over
///   glibc: the shape of swift-system, which cannot be fetched here.
/// - `JSON`: a small standard-library-only JSON value, parser and writer.
/// - `ANCSCapture`: the `ancs-capture/1` file format and its decoder.
/// - `Btsnoop`: btsnoop files (H4, BlueZ monitor) to ANCS capture records: HCI, L2CAP, ATT;
///   HCI monitor frames to btsnoop records.
/// - `CEventLoop` / `EventLoop`: an epoll run loop on one thread, a serial and task executor
///   that also watches descriptors and runs timers (epoll, eventfd, timerfd; linking nothing).
/// - `CDBus` / `DBus`: a Swift D-Bus layer over libdbus-1, on an event loop.
/// - `CBluetooth`: the kernel's Bluetooth socket headers (libbluetooth-dev), linking nothing.
/// - `CSpawn`: posix_spawn and pidfd_open over glibc, for `--exec`, linking nothing.
/// - `CLinux`: Linux and glibc calls the Glibc module leaves out (pwritev2, mallopt), linking nothing.
/// - `CMosquitto` / `MQTT`: an MQTT client over libmosquitto, driven by a dispatch queue.
/// - `ANCSSession`: one phone's ANCS session: notifications, filters, events.
/// - `ANCSRuntime`: what every ancsd process runs on: the logger and the one executor (an EventLoop).
/// - `ControlProtocol`: the control socket's requests, replies, errors and events as types, each
///   writing and reading its JSON (docs/control.md); stdlib and `JSON` only, so its parsers are
///   fuzzed on their own. The server and the clients build on it.
/// - `ANCSControl`: the control socket as its clients see it (docs/control.md): its default
///   path and `ControlClient`, the one client (typed requests, replies and events), re-exporting
///   `ControlProtocol`.
/// - `ANCSDaemon`: the daemon (`ancsd run`): phones over BlueZ, sessions, presence, the control
///   server, and the outputs, each an `OutputSink` the `OutputRouter` feeds (docs/outputs.md).
/// - `ANCSDesktop`: the desktop companion (`ancsd desktop`), a client of the control socket
///   and of the session bus's notification server; it knows nothing of the daemon's insides.
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
        .executable(name: "ancs-phone-sim", targets: ["ancs-phone-sim"]),
        .executable(name: "ancs-gatt-phone", targets: ["ancs-gatt-phone"]),
    ],
    targets: [
        .target(name: "ANCS", swiftSettings: strict),
        .target(name: "ANCSSession", dependencies: ["ANCS"], swiftSettings: strict),
        .target(name: "JSON", swiftSettings: strict),
        .target(name: "SystemCalls", swiftSettings: strict),
        .target(name: "ANCSCapture", dependencies: ["ANCS", "JSON"], swiftSettings: strict),
        .target(name: "Btsnoop", dependencies: ["ANCS", "ANCSCapture", "JSON"], swiftSettings: strict),
        .target(name: "ANCSRuntime", dependencies: ["ANCSSession", "EventLoop"], swiftSettings: strict),
        .target(name: "ControlProtocol", dependencies: ["JSON"], swiftSettings: strict),
        .target(name: "ANCSControl", dependencies: ["ControlProtocol", "JSON", "EventLoop"], swiftSettings: strict),
        .target(
            name: "ANCSDaemon",
            dependencies: [
                "ANCS", "ANCSSession", "ANCSCapture", "ANCSRuntime", "JSON", "BlueZ", "DBus", "CSpawn", "CLinux", "MQTT", "EventLoop",
                "ControlProtocol",
            ],
            swiftSettings: strict),
        .target(name: "ANCSDesktop", dependencies: ["ANCSControl", "ANCSRuntime", "DBus", "EventLoop", "JSON"], swiftSettings: strict),
        .systemLibrary(
            name: "CDBus",
            pkgConfig: "dbus-1",
            providers: [.apt(["libdbus-1-dev"])]
        ),
        .systemLibrary(
            name: "CMosquitto",
            pkgConfig: "libmosquitto",
            providers: [.apt(["libmosquitto-dev"])]
        ),
        .target(name: "MQTT", dependencies: ["CMosquitto"], swiftSettings: strict),
        // Headers only: no pkgConfig (bluez.pc would link libbluetooth), no link in the module map.
        .systemLibrary(name: "CBluetooth", providers: [.apt(["libbluetooth-dev"])]),
        // Headers only: posix_spawn and pidfd_open for --exec, over glibc.
        .systemLibrary(name: "CSpawn"),
        // Headers only: glibc calls Swift's Glibc module leaves out (pwritev2, mallopt).
        .systemLibrary(name: "CLinux"),
        .executableTarget(
            name: "dbus-bench", dependencies: ["DBus"], path: "Benchmarks/dbus-bench", exclude: ["echo_bench.py"],
            swiftSettings: strict),
        .systemLibrary(name: "CEventLoop"),
        .target(name: "EventLoop", dependencies: ["CEventLoop", "SystemCalls"], swiftSettings: strict),
        .target(name: "DBus", dependencies: ["CDBus", "CEventLoop", "EventLoop", "SystemCalls"], swiftSettings: strict),
        .target(name: "BlueZ", dependencies: ["DBus", "ANCS"], swiftSettings: strict),
        .executableTarget(
            name: "ancsd",
            dependencies: [
                "ANCS", "JSON", "ANCSCapture", "ANCSSession", "ANCSRuntime", "ANCSControl", "ANCSDaemon", "ANCSDesktop", "BlueZ",
                "DBus", "Btsnoop", "CBluetooth", "EventLoop", "MQTT", "ControlProtocol", "SystemCalls",
            ],
            swiftSettings: strict),
        .executableTarget(name: "ancs-bench", dependencies: ["ANCS"], path: "Benchmarks/ancs-bench", swiftSettings: strict),
        .executableTarget(name: "hop-floor", dependencies: ["CEventLoop"], path: "Benchmarks/hop-floor", swiftSettings: strict),
        .target(name: "TestSupport", dependencies: ["Btsnoop", "JSON"], path: "Tests/TestSupport", swiftSettings: strict),
        .target(name: "PhoneSimulator", dependencies: ["ANCS", "DBus", "EventLoop", "JSON", "SystemCalls"], swiftSettings: strict),
        .executableTarget(name: "ancs-phone-sim", dependencies: ["PhoneSimulator", "DBus", "JSON", "SystemCalls"], swiftSettings: strict),
        .target(name: "GattPhone", dependencies: ["ANCS", "BlueZ", "DBus", "JSON", "PhoneSimulator", "SystemCalls"], swiftSettings: strict),
        .executableTarget(
            name: "ancs-gatt-phone", dependencies: ["GattPhone", "PhoneSimulator", "DBus", "JSON", "SystemCalls"], swiftSettings: strict),
        .testTarget(
            name: "PhoneSimulatorTests", dependencies: ["PhoneSimulator", "ANCS", "DBus", "JSON", "TestSupport"],
            swiftSettings: strict),
        .testTarget(name: "ANCSTests", dependencies: ["ANCS"], swiftSettings: strict),
        .testTarget(name: "SystemCallsTests", dependencies: ["SystemCalls"], swiftSettings: strict),
        .testTarget(name: "EventLoopTests", dependencies: ["EventLoop", "TestSupport"], swiftSettings: strict),
        .testTarget(
            name: "GattPhoneTests", dependencies: ["GattPhone", "PhoneSimulator", "ANCS", "TestSupport", "ancs-gatt-phone"],
            swiftSettings: strict),
        .testTarget(name: "ANCSSessionTests", dependencies: ["ANCSSession", "ANCS", "ANCSCapture", "JSON"], swiftSettings: strict),
        .testTarget(
            name: "ANCSDaemonTests", dependencies: ["ANCSDaemon", "ANCSRuntime", "BlueZ", "ANCSSession", "ANCS", "JSON", "DBus", "TestSupport", "MQTT", "ControlProtocol", "ANCSControl", "EventLoop"],
            swiftSettings: strict),
        .testTarget(name: "ANCSDesktopTests", dependencies: ["ANCSDesktop", "ANCSControl", "DBus", "JSON"], swiftSettings: strict),
        .testTarget(name: "MQTTTests", dependencies: ["MQTT", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "JSONTests", dependencies: ["JSON", "TestSupport"], swiftSettings: strict),
        .testTarget(
            name: "ANCSCaptureTests", dependencies: ["ANCSCapture", "ANCS", "JSON", "TestSupport"],
            exclude: ["Fixtures"], swiftSettings: strict),
        .testTarget(name: "BtsnoopTests", dependencies: ["Btsnoop", "ANCSCapture", "ANCS", "JSON", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "CaptureTests", dependencies: ["ancsd", "Btsnoop", "JSON", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBus", "ANCS", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "CDBus", "EventLoop", "TestSupport"], swiftSettings: strict),
        .testTarget(
            name: "EndToEndTests", dependencies: ["JSON", "DBus", "ancsd", "ancs-phone-sim", "TestSupport", "Btsnoop", "ANCSDaemon"],
            swiftSettings: strict),
    ]
)
