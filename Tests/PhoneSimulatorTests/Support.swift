import DBus
import Foundation
import Synchronization
import Testing
import TestSupport

/// The tests' private dbus-daemon (Tests/TestSupport).
typealias TestBus = PrivateBus

/// Collects signals delivered to a callback.
final class Collector: Sendable {
    private let items = Mutex<[Signal]>([])
    var handler: @Sendable (Signal) -> Void { { [self] s in items.withLock { $0.append(s) } } }
    var signals: [Signal] { items.withLock { $0 } }
    func clear() { items.withLock { $0.removeAll() } }

    /// The `Value`s carried by PropertiesChanged signals from `path`, in order.
    func values(at path: ObjectPath) -> [[UInt8]] {
        signals.compactMap { s in
            guard s.path == path, let change = try? PropertiesChanged(s) else { return nil }
            return change.changed["Value"]?.bytes
        }
    }

    /// Waits until `path` has sent at least `count` values.
    func waitForValues(_ count: Int, at path: ObjectPath) async throws -> [[UInt8]] {
        try await eventually("\(count) value(s) from \(path)") { self.values(at: path).count >= count }
        return values(at: path)
    }
}

/// Asserts that `body` throws a DBusError with this name and message.
func expectError(
    _ name: String, _ message: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected \(name): \(message), nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as DBusError {
        #expect(error.name == name, sourceLocation: sourceLocation)
        #expect(error.message == message, sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected \(name), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Reads one datagram from a non-blocking socket, failing after `seconds`; nil at EOF (HUP).
/// It never blocks a thread: the simulator under test needs the (two) cooperative threads.
func readDatagram(_ fd: Int32, within seconds: Double = 5) async throws -> [UInt8]? {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    var buffer = [UInt8](repeating: 0, count: 1024)
    while true {
        let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
        if n > 0 { return Array(buffer[0..<n]) }
        if n == 0 { return nil }
        guard errno == EAGAIN || errno == EINTR else { throw TestFailure("recv failed: errno \(errno)") }
        guard ContinuousClock.now < deadline else { throw TestFailure("no datagram within \(seconds) s") }
        try await Task.sleep(for: .milliseconds(2))
    }
}

/// The repository's root.
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// Registers, on `client`, a connectable advertisement with the HID service UUID and the ANCS
/// solicitation (what `ancsd run` keeps registered), so a strict phone reconnects.
func advertiseHID(_ client: DBusConnection, path: ObjectPath = "/test/run_advertisement") async throws {
    try await client.export(ExportedObject(ExportedInterface(
        "org.bluez.LEAdvertisement1", methods: [.immediate("Release") { _ in [] }],
        properties: [
            ExportedProperty("Type", value: .string("peripheral")),
            ExportedProperty("ServiceUUIDs", value: .stringArray(["00001812-0000-1000-8000-00805f9b34fb"])),
            ExportedProperty("SolicitUUIDs", value: .stringArray(["7905f431-b5ce-4e99-a40f-4b1e122d00d0"])),
            ExportedProperty("Discoverable", value: .bool(false)),
        ])), at: path)
    _ = try await client.call(
        destination: "org.bluez", path: "/org/bluez/hci0", interface: "org.bluez.LEAdvertisingManager1",
        member: "RegisterAdvertisement", arguments: [.objectPath(path), .variantDictionary([:])], timeout: .seconds(5))
}
