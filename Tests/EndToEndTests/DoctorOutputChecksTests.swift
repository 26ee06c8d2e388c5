@testable import ancsd
import JSON
import Testing

/// `ancsd doctor`'s checks of the outputs, from the status reply's `outputs`.
@Suite struct DoctorOutputChecksTests {
    private func checks(_ outputs: String) throws -> [DoctorCommand.Check] {
        DoctorCommand.outputChecks(try JSONValue(parsing: outputs).arrayValue ?? [])
    }

    @Test func healthyOutputsPassOrSayNothing() throws {
        let found = try checks(#"""
            [{"name": "standard output", "written": 9, "dropped": 0},
             {"name": "exec", "started": 9, "succeeded": 9, "failed": 0, "timed_out": 0, "spawn_failures": 0, "dropped": 0, "running": 0, "waiting": 0},
             {"name": "MQTT mqtt://h:1883", "connected": true, "connections": 1, "delivered": 20, "queued": 0, "dropped": 0}]
            """#)
        #expect(found.map(\.what) == ["ancsd is connected to MQTT mqtt://h:1883"])
        #expect(found.allSatisfy { $0.ok })
    }

    @Test func aBrokerAwayFailsAndDropsAndFailuresWarn() throws {
        let found = try checks(#"""
            [{"name": "/run/ancsd/events", "written": 3, "dropped": 120},
             {"name": "exec", "started": 10, "succeeded": 7, "failed": 3, "timed_out": 1, "spawn_failures": 0, "dropped": 2, "running": 0, "waiting": 0},
             {"name": "MQTT mqtt://h:1883", "connected": false, "connections": 0, "delivered": 0, "queued": 41, "dropped": 0}]
            """#)
        #expect(found.map(\.what) == [
            "/run/ancsd/events dropped 120 event(s)",
            "3 of 10 commands run by exec failed",
            "exec dropped 2 event(s)",
            "ancsd is not connected to MQTT mqtt://h:1883 (41 message(s) waiting)",
        ])
        #expect(found.map(\.warning) == [true, true, true, false])
        #expect(found.allSatisfy { !$0.ok && $0.fix != nil })
    }
}
