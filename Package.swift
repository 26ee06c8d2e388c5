// swift-tools-version:6.0
import PackageDescription

/// ancsd: an Apple Notification Center Service consumer for Linux.
///
/// The map of the house: every target, lowest layer first, each with the targets it may use in
/// brackets (none: the standard library, Glibc, Dispatch and Synchronization only). A target uses
/// only targets of layers below its own. `Tests/LayersTests` checks this map against
/// `swift package describe`, against the `import`s of every target's sources, and against
/// ARCHITECTURE.md's layer table.
///
/// Layer 0: no other target
/// - `ANCS`: the pure protocol: identifiers, Notification Source, Control Point, Data Source; no I/O.
/// - `BluetoothUUIDs`: the 128-bit Bluetooth UUID, and the UUIDs of ANCS's service and characteristics.
/// - `JSON`: a small JSON value, parser and writer.
/// - `Tar`: ustar archives built in memory (`ancsd report`); no I/O.
/// - `GattSession`: the seam between a phone's link and a GATT service's pure state machine (`GattServiceSession`).
/// - `SystemCalls`: an owning `FileDescriptor` (EINTR retried, closed once) and `Errno`, swift-system's shape.
/// - `CEventLoop`: epoll, eventfd and timerfd from glibc's headers, linking nothing.
/// - `CDBus`: libdbus-1 (pkg-config dbus-1).
/// - `CMosquitto`: libmosquitto's header and the types of the functions MQTT loads from it, linking nothing.
/// - `CBluetooth`: the kernel's Bluetooth socket headers (libbluetooth-dev), linking nothing.
/// - `CSpawn`: posix_spawn and pidfd_open for `--exec`, linking nothing.
/// - `CLinux`: glibc calls the Glibc module leaves out (pwritev2, mallopt, signalfd), linking nothing.
///
/// Layer 1: protocol state, file formats, the event loop
/// - `AMS` [GattSession]: Apple Media Service: identifiers, values, the media state and `MediaSession`; no I/O.
/// - `ANCSSession` [ANCS, BluetoothUUIDs, GattSession]: one phone's ANCS session: notifications, filters, events, the replay gate; no I/O;
///   a `GattServiceSession`.
/// - `LinkMachine` [GattSession]: every decision about the phones' links (which device gets one, subscribing, back-off,
///   pauses, services beside ANCS, renewals) as a pure state machine; no I/O.
/// - `ANCSCapture` [ANCS, JSON]: the `ancs-capture/1` file format, its decoder and writer.
/// - `ControlProtocol` [JSON]: the control socket's requests, replies, errors and events as types, fuzzed alone.
/// - `EventLoop` [CEventLoop, SystemCalls]: an epoll run loop on one thread, a serial and task executor with timers
///   (on a virtual clock that only a test moves, if made so).
///
/// Layer 2: transports and the runtime
/// - `Btsnoop` [AMS, ANCSCapture, BluetoothUUIDs, GattSession, JSON]: btsnoop files and HCI monitor frames to ANCS records
///   and Apple Media Service values.
/// - `DBus` [CDBus, CEventLoop, EventLoop, SystemCalls]: a Swift D-Bus layer over libdbus-1, on an event loop.
/// - `MQTT` [CMosquitto, EventLoop, SystemCalls]: an MQTT client over libmosquitto (loaded when the first client is made), on an event loop.
/// - `ANCSRuntime` [CLinux, EventLoop, SystemCalls]: what every ancsd process runs on: the logger, the one
///   executor, its signals (a signalfd the loop watches), file helpers.
/// - `ANCSControl` [ControlProtocol, EventLoop, JSON, SystemCalls]: the control socket's path and `ControlClient`, the one client.
///
/// Layer 3: BlueZ, and what the simulated phones and the tests share
/// - `BlueZ` [BluetoothUUIDs, DBus]: bluetoothd's objects, GATT client, agent, advertisement, HID accessory.
/// - `PhoneSimulator` [ANCS, BluetoothUUIDs, DBus, EventLoop, JSON, SystemCalls]: simulated iPhones and bluetoothd.
/// - `TestSupport` [Btsnoop, JSON]: child processes, private buses, brokers, snoop files for the tests.
///
/// Layer 4: the daemon and its companions
/// - `ANCSDaemon` [AMS, ANCS, ANCSCapture, ANCSRuntime, ANCSSession, BlueZ, BluetoothUUIDs, CLinux, CSpawn, ControlProtocol,
///   DBus, EventLoop, GattSession, JSON, LinkMachine, MQTT, SystemCalls]: `ancsd run`: phones, sessions, presence, the control server, the outputs.
/// - `ANCSPairing` [ANCSRuntime, BlueZ, DBus]: `ancsd pair`'s window: advertisement, agent, passkey prompt.
/// - `ANCSDesktop` [ANCSControl, ANCSRuntime, ControlProtocol, DBus, EventLoop, JSON, SystemCalls]: `ancsd desktop`.
/// - `GattPhone` [ANCS, BluetoothUUIDs, BlueZ, DBus, JSON, PhoneSimulator, SystemCalls]: an iPhone on a real bluetoothd.
///
/// Layer 5: tools over captures
/// - `CaptureTools` [ANCS, ANCSCapture, ANCSDaemon, ANCSRuntime, ANCSSession, Btsnoop, CBluetooth, JSON,
///   SystemCalls]:
///   `ancsd decode`, `replay` and `capture`: their pipelines, the HCI monitor socket, line reading.
///
/// Layer 6: programs (argument parsing, `--help` and wiring)
/// - `ancsd` [AMS, ANCSControl, ANCSDaemon, ANCSDesktop, ANCSPairing, ANCSRuntime, ANCSSession, BlueZ, BluetoothUUIDs, Btsnoop,
///   CBluetooth, CLinux, CSpawn, CaptureTools, ControlProtocol, DBus, EventLoop, JSON, MQTT, SystemCalls, Tar]: the executable.
/// - `ancs-phone-sim` [DBus, JSON, PhoneSimulator, SystemCalls]: the simulated phone, for `make demo` and the tests.
/// - `ancs-gatt-phone` [DBus, GattPhone, JSON, PhoneSimulator, SystemCalls]: the GATT phone, for the system test.
/// - `ancs-bench` [ANCS]: the protocol core's benchmark.
/// - `dbus-bench` [DBus]: the D-Bus layer's benchmark.
/// - `hop-floor` [CEventLoop]: what a hop between threads costs, the floor under the event loop's.
///
/// Test targets: `Tests/XTests` tests `X` and may use any target on the map; `EndToEndTests` runs the
/// built programs.
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
        .target(name: "BluetoothUUIDs", swiftSettings: strict),
        .target(name: "ANCSSession", dependencies: ["ANCS", "BluetoothUUIDs", "GattSession"], swiftSettings: strict),
        .target(name: "JSON", swiftSettings: strict),
        .target(name: "Tar", swiftSettings: strict),
        .target(name: "GattSession", swiftSettings: strict),
        .target(name: "AMS", dependencies: ["GattSession"], swiftSettings: strict),
        .target(name: "LinkMachine", dependencies: ["GattSession"], swiftSettings: strict),
        .target(name: "SystemCalls", swiftSettings: strict),
        .target(name: "ANCSCapture", dependencies: ["ANCS", "JSON"], swiftSettings: strict),
        .target(name: "Btsnoop", dependencies: ["AMS", "ANCSCapture", "BluetoothUUIDs", "GattSession", "JSON"], swiftSettings: strict),
        .target(name: "ANCSRuntime", dependencies: ["EventLoop", "SystemCalls", "CLinux"], swiftSettings: strict),
        .target(name: "ControlProtocol", dependencies: ["JSON"], swiftSettings: strict),
        .target(name: "ANCSControl", dependencies: ["ControlProtocol", "JSON", "EventLoop", "SystemCalls"], swiftSettings: strict),
        .target(
            name: "ANCSDaemon",
            dependencies: [
                "AMS", "ANCS", "ANCSSession", "ANCSCapture", "ANCSRuntime", "JSON", "BlueZ", "BluetoothUUIDs", "DBus", "CSpawn", "CLinux",
                "MQTT", "EventLoop", "ControlProtocol", "GattSession", "LinkMachine", "SystemCalls",
            ],
            swiftSettings: strict),
        .target(name: "ANCSPairing", dependencies: ["ANCSRuntime", "BlueZ", "DBus"], swiftSettings: strict),
        .target(
            name: "CaptureTools",
            dependencies: ["ANCS", "ANCSCapture", "ANCSDaemon", "ANCSRuntime", "ANCSSession", "Btsnoop", "CBluetooth", "JSON", "SystemCalls"],
            swiftSettings: strict),
        .target(name: "ANCSDesktop", dependencies: ["ANCSControl", "ANCSRuntime", "DBus", "EventLoop", "JSON", "SystemCalls"], swiftSettings: strict),
        .systemLibrary(
            name: "CDBus",
            pkgConfig: "dbus-1",
            providers: [.apt(["libdbus-1-dev"])]
        ),
        // Headers only: no pkgConfig (it would link libmosquitto, which MQTT loads when used).
        .systemLibrary(name: "CMosquitto", providers: [.apt(["libmosquitto-dev"])]),
        .target(name: "MQTT", dependencies: ["CMosquitto", "EventLoop", "SystemCalls"], swiftSettings: strict),
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
        .target(name: "BlueZ", dependencies: ["DBus", "BluetoothUUIDs"], swiftSettings: strict),
        .executableTarget(
            name: "ancsd",
            dependencies: [
                "AMS", "JSON", "ANCSSession", "ANCSRuntime", "ANCSControl", "ANCSDaemon", "ANCSDesktop", "ANCSPairing", "BlueZ", "DBus",
                "BluetoothUUIDs", "Btsnoop", "CaptureTools", "CBluetooth", "CLinux", "CSpawn", "ControlProtocol", "EventLoop", "MQTT",
                "SystemCalls", "Tar",
            ],
            swiftSettings: strict),
        .executableTarget(name: "ancs-bench", dependencies: ["ANCS"], path: "Benchmarks/ancs-bench", swiftSettings: strict),
        .executableTarget(name: "hop-floor", dependencies: ["CEventLoop"], path: "Benchmarks/hop-floor", swiftSettings: strict),
        .target(name: "TestSupport", dependencies: ["Btsnoop", "JSON"], path: "Tests/TestSupport", swiftSettings: strict),
        .target(name: "PhoneSimulator", dependencies: ["ANCS", "BluetoothUUIDs", "DBus", "EventLoop", "JSON", "SystemCalls"], swiftSettings: strict),
        .executableTarget(name: "ancs-phone-sim", dependencies: ["PhoneSimulator", "DBus", "JSON", "SystemCalls"], swiftSettings: strict),
        .target(name: "GattPhone", dependencies: ["ANCS", "BluetoothUUIDs", "BlueZ", "DBus", "JSON", "PhoneSimulator", "SystemCalls"], swiftSettings: strict),
        .executableTarget(
            name: "ancs-gatt-phone", dependencies: ["GattPhone", "PhoneSimulator", "DBus", "JSON", "SystemCalls"], swiftSettings: strict),
        .testTarget(
            name: "PhoneSimulatorTests", dependencies: ["PhoneSimulator", "ANCS", "DBus", "JSON", "TestSupport"],
            swiftSettings: strict),
        .testTarget(name: "ANCSTests", dependencies: ["ANCS"], swiftSettings: strict),
        .testTarget(name: "AMSTests", dependencies: ["AMS", "GattSession", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "LinkMachineTests", dependencies: ["LinkMachine", "GattSession", "ANCS", "ANCSSession", "AMS"], swiftSettings: strict),
        .testTarget(name: "PhoneMonthTests", dependencies: ["LinkMachine", "ANCSSession", "ANCS", "AMS", "GattSession", "ANCSDaemon", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "BluetoothUUIDsTests", dependencies: ["BluetoothUUIDs"], swiftSettings: strict),
        .testTarget(name: "SystemCallsTests", dependencies: ["SystemCalls"], swiftSettings: strict),
        .testTarget(name: "EventLoopTests", dependencies: ["EventLoop", "TestSupport"], swiftSettings: strict),
        .testTarget(
            name: "GattPhoneTests", dependencies: ["GattPhone", "PhoneSimulator", "ANCS", "BluetoothUUIDs", "DBus", "JSON", "TestSupport", "ancs-gatt-phone"],
            swiftSettings: strict),
        .testTarget(name: "ANCSSessionTests", dependencies: ["ANCSSession", "ANCS", "ANCSCapture", "JSON"], swiftSettings: strict),
        .testTarget(
            name: "ANCSDaemonTests", dependencies: ["AMS", "ANCSDaemon", "LinkMachine", "ANCSRuntime", "BlueZ", "ANCSSession", "ANCS", "JSON", "DBus", "TestSupport", "MQTT", "ControlProtocol", "ANCSControl", "EventLoop",
                "PhoneSimulator"],
            swiftSettings: strict),
        .testTarget(
            name: "ANCSDesktopTests", dependencies: ["ANCSDesktop", "ANCSControl", "ANCSDaemon", "ANCSRuntime", "DBus", "EventLoop", "JSON", "TestSupport"],
            swiftSettings: strict),
        .testTarget(name: "MQTTTests", dependencies: ["MQTT", "EventLoop", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "JSONTests", dependencies: ["JSON", "TestSupport"], swiftSettings: strict),
        .testTarget(
            name: "ANCSCaptureTests", dependencies: ["ANCSCapture", "ANCS", "JSON", "TestSupport"],
            exclude: ["Fixtures"], swiftSettings: strict),
        .testTarget(name: "BtsnoopTests", dependencies: ["Btsnoop", "AMS", "ANCSCapture", "ANCS", "JSON", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "CaptureTests", dependencies: ["ancsd", "CaptureTools", "ANCSRuntime", "Btsnoop", "JSON", "SystemCalls", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "BlueZTests", dependencies: ["BlueZ", "DBus", "BluetoothUUIDs", "TestSupport"], swiftSettings: strict),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "CDBus", "EventLoop", "TestSupport"], swiftSettings: strict),
        .testTarget(
            name: "EndToEndTests", dependencies: ["JSON", "DBus", "ancsd", "ancs-phone-sim", "TestSupport", "Btsnoop", "ANCSDaemon"],
            exclude: ["Fixtures"],
            swiftSettings: strict),
        .testTarget(name: "TarTests", dependencies: ["Tar"], swiftSettings: strict),
        .testTarget(name: "LayersTests", dependencies: ["JSON", "TestSupport"], swiftSettings: strict),
    ]
)
