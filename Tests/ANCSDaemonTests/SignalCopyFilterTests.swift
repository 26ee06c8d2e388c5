@testable import ANCSDaemon
import Testing

/// bluetoothd 5.66 emits one PropertiesChanged per StartNotify client for every notification.
@Suite struct SignalCopyFilterTests {
    let added: [UInt8] = [0, 0, 4, 1, 7, 0, 0, 0]
    let modified: [UInt8] = [1, 0, 4, 1, 7, 0, 0, 0]

    /// Feeds NS and DS values as bluetoothd would with `copies` StartNotify clients.
    func deliver(_ values: [(ns: Bool, value: [UInt8])], copies: Int, filter: inout SignalCopyFilter, at start: Duration = .zero) -> [[UInt8]] {
        var passed: [[UInt8]] = []
        var now = start
        for (ns, value) in values {
            for _ in 0..<copies {
                now += .microseconds(40)
                let admitted = ns ? filter.admitNotificationSource(value, now: now) : filter.admitDataSource(value)
                if admitted { passed.append(value) }
            }
            now += .milliseconds(60)
        }
        return passed
    }

    @Test(arguments: [1, 2, 3])
    func everyValueOnceWhateverTheCopies(copies: Int) {
        var filter = SignalCopyFilter()
        // A response whose fragments repeat (a message of one repeated character) stays whole.
        let response: [(ns: Bool, value: [UInt8])] = [
            (true, added), (false, [0, 7, 0, 0, 0, 1, 20, 0]), (false, Array(repeating: 0x61, count: 20)),
            (false, Array(repeating: 0x61, count: 20)), (false, [0x61, 0x61]), (true, modified),
        ]
        #expect(deliver(response, copies: copies, filter: &filter) == response.map(\.value))
        #expect(filter.copies == copies)
    }

    @Test func theCountFollowsClientsComingAndGoing() {
        var filter = SignalCopyFilter()
        _ = deliver([(true, added)], copies: 2, filter: &filter)
        #expect(filter.copies == 2)
        // The other client leaves: the next event comes once, and the count drops with it.
        #expect(deliver([(true, modified), (true, added)], copies: 1, filter: &filter, at: .seconds(1)) == [modified, added])
        #expect(filter.copies == 1)
        #expect(deliver([(false, [1, 2]), (false, [1, 2])], copies: 1, filter: &filter, at: .seconds(2)) == [[1, 2], [1, 2]])
    }

    @Test func aRepeatedEventLaterIsNotACopy() {
        var filter = SignalCopyFilter()
        let first = filter.admitNotificationSource(modified, now: .seconds(1))
        let second = filter.admitNotificationSource(modified, now: .seconds(2))
        #expect(first && second)
        #expect(filter.copies == 1)
        let data = [filter.admitDataSource([9]), filter.admitDataSource([9])]
        #expect(data == [true, true])
    }
}
