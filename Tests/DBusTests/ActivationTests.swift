import DBus
import Foundation
import Testing
import TestSupport

extension DBusTests {
    /// A connection made with `activatesServices: false` never makes the bus start a service: a
    /// daemon must not start bluetoothd by calling it, nor wait 25 s for an activation that
    /// systemd skips (no adapter).
    @Suite struct Activation {
        /// A bus that can activate `org.ancsd.Activatable`, whose program only leaves a mark
        /// (it never takes the name, so an activated call waits until its timeout).
        static func activatableBus() throws -> (PrivateBus, mark: String) {
            let services = NSTemporaryDirectory() + "ancsd-services-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
            let mark = services + "/activated"
            try """
                [D-BUS Service]
                Name=org.ancsd.Activatable
                Exec=/bin/sh -c 'touch \(mark); sleep 30'
                """.write(toFile: services + "/org.ancsd.Activatable.service", atomically: true, encoding: .utf8)
            return (try PrivateBus(serviceDirectory: services), mark)
        }

        @Test func callsWithoutAutoStartFailAtOnce() async throws {
            let (bus, mark) = try Self.activatableBus()
            defer { bus.stop() }
            let connection = try await DBusConnection.connect(to: .address(bus.address), activatesServices: false)
            let started = ContinuousClock.now
            do {
                _ = try await connection.call(
                    destination: "org.ancsd.Activatable", path: "/", interface: "org.ancsd.Activatable", member: "Ping",
                    timeout: .seconds(10))
                Issue.record("the call succeeded")
            } catch let error as DBusError {
                #expect(error.name == DBusError.Names.nameHasNoOwner, "\(error)")
            }
            #expect(ContinuousClock.now - started < .seconds(2))
            try await Task.sleep(for: .milliseconds(300))
            #expect(!FileManager.default.fileExists(atPath: mark), "the bus started the service")
            await connection.close()
        }

        /// The same call with activation allowed does start the service: the test above proves
        /// something.
        @Test func callsWithAutoStartActivate() async throws {
            let (bus, mark) = try Self.activatableBus()
            defer { bus.stop() }
            let connection = try await DBusConnection.connect(to: .address(bus.address))
            #expect(connection.activatesServices)
            _ = try? await connection.call(
                destination: "org.ancsd.Activatable", path: "/", interface: "org.ancsd.Activatable", member: "Ping",
                timeout: .seconds(1))
            #expect(FileManager.default.fileExists(atPath: mark), "the bus did not start the service")
            await connection.close()
        }
    }
}
