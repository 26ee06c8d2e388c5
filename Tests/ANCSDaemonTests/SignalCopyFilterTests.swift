@testable import ANCSDaemon
import Testing

/// bluetoothd 5.66 emits one PropertiesChanged per StartNotify client for every notification.
@Suite struct SignalCopyFilterTests {
    let added: [UInt8] = [0, 0, 4, 1, 7, 0, 0, 0]
    let modified: [UInt8] = [1, 0, 4, 1, 7, 0, 0, 0]
    let request: [UInt8] = [0, 7, 0, 0, 0, 1, 20, 0, 3, 20, 0]
    /// A response in fragments, two of them identical (a message of one repeated character).
    let fragments: [[UInt8]] = [
        [0, 7, 0, 0, 0, 1, 20, 0] + Array(repeating: 0x61, count: 12), Array(repeating: 0x61, count: 20),
        Array(repeating: 0x61, count: 20), [0x61, 0x61],
    ]

    enum Value { case ns([UInt8]), ds([UInt8]), written([UInt8]) }

    /// Feeds values as bluetoothd would with `nsCopies` / `dsCopies` StartNotify clients.
    func deliver(_ values: [Value], nsCopies: Int, dsCopies: Int, filter: inout SignalCopyFilter, from start: Duration = .zero) -> [[UInt8]] {
        var passed: [[UInt8]] = []
        var now = start
        for value in values {
            switch value {
            case .written(let bytes):
                filter.expectResponse(to: bytes)
            case .ns(let bytes):
                for _ in 0..<nsCopies {
                    now += .microseconds(40)
                    if filter.admitNotificationSource(bytes, now: now) { passed.append(bytes) }
                }
            case .ds(let bytes):
                for _ in 0..<dsCopies where filter.admitDataSource(bytes) { passed.append(bytes) }
            }
            now += .milliseconds(60)
        }
        return passed
    }

    func session() -> [Value] { [.ns(added), .written(request)] + fragments.map { .ds($0) } + [.ns(modified)] }

    @Test(arguments: [(1, 1), (2, 2), (3, 3), (1, 2), (2, 1), (1, 3)])
    func everyValueOnceWhateverTheCopies(nsCopies: Int, dsCopies: Int) {
        var filter = SignalCopyFilter()
        #expect(deliver(session(), nsCopies: nsCopies, dsCopies: dsCopies, filter: &filter) == [added] + fragments + [modified])
        #expect(filter.sourceCopies == nsCopies)
        #expect(filter.dataCopies == dsCopies)
        #expect(filter.copies == max(nsCopies, dsCopies))
    }

    @Test func theCountsFollowClientsComingAndGoing() {
        var filter = SignalCopyFilter()
        _ = deliver(session(), nsCopies: 2, dsCopies: 2, filter: &filter)
        // The other client leaves: the next values come once, and the counts drop with them.
        #expect(deliver(session(), nsCopies: 1, dsCopies: 1, filter: &filter, from: .seconds(1)) == [added] + fragments + [modified])
        #expect(filter.copies == 1)
        // It comes back, on the Data Source only.
        #expect(deliver(session(), nsCopies: 1, dsCopies: 2, filter: &filter, from: .seconds(2)) == [added] + fragments + [modified])
        #expect(filter.dataCopies == 2 && filter.sourceCopies == 1)
    }

    @Test func leftoverCopiesOfTheLastResponseDoNotStartTheNextOne() {
        var filter = SignalCopyFilter()
        _ = deliver([.ns(added), .written(request)] + fragments.dropLast().map { .ds($0) }, nsCopies: 2, dsCopies: 2, filter: &filter)
        // The last fragment completes the response and the session writes its next request
        // before the fragment's copy has been read.
        let last = filter.admitDataSource([0x61, 0x61])
        filter.expectResponse(to: [0, 8, 0, 0, 0, 1, 20, 0])
        let verdicts = [
            filter.admitDataSource([0x61, 0x61]), filter.admitDataSource([0, 8, 0, 0, 0, 1, 0, 0]),
            filter.admitDataSource([0, 8, 0, 0, 0, 1, 0, 0]),
        ]
        #expect(last)
        #expect(verdicts == [false, true, false])
        #expect(filter.dataCopies == 2)
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

    /// A phone's noise on the Notification Source repeats short values (two empty ones in a row):
    /// no event, so no copy. They were counted, and one subscriber was reported as two (and then
    /// as one again, over and over, not rate limited).
    @Test func repeatedValuesThatAreNoEventAreNotCopies() {
        var filter = SignalCopyFilter()
        var now = Duration.zero
        var verdicts: [Bool] = []
        for value in [[], [], added, [7], [7], [7], modified, [1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 9]] as [[UInt8]] {
            now += .microseconds(100)
            verdicts.append(filter.admitNotificationSource(value, now: now))
        }
        #expect(verdicts.allSatisfy { $0 }, "\(verdicts)")
        #expect(filter.copies == 1)
        // With a second subscriber, events are still counted and copies dropped around the noise.
        let copies = [added, added, [], [], modified, modified].map { value -> Bool in
            now += .microseconds(100)
            return filter.admitNotificationSource(value, now: now)
        }
        #expect(copies == [true, false, true, true, true, false] && filter.sourceCopies == 2)
    }

    /// Two losses the month in a minute found with one subscriber (StartNotify; seed 20270301,
    /// docs/soak.md).
    ///
    /// The phone answered a request written again for the same notification with the same
    /// bytes (it said the same): the new answer's first value equals the last value of the
    /// previous answer, and was taken for its copy; the session waited 5 s for it (day 24
    /// 10:05:46). A value that begins the answer to the request just written is no copy.
    @Test func anAnswerLikeTheLastIsNoCopy() {
        var filter = SignalCopyFilter()
        let answer: [UInt8] = [0, 7, 0, 0, 0, 1, 3, 0, 0x41, 0x64, 0x61]
        filter.expectResponse(to: request)
        let first = filter.admitDataSource(answer)
        filter.expectResponse(to: request)
        let second = filter.admitDataSource(answer)
        #expect(first)
        #expect(second, "the answer to the request written again")
    }

    /// The phone modified a notification twice 33 ms apart, after it had answered the first
    /// modification's fetch: the second event, equal to the first, was dropped as its copy, so
    /// the new text was never fetched (day 28 14:04:21). Copies come back to back: an event after
    /// an answer's values is no copy of the one before them.
    @Test func aModificationAfterTheAnswerIsNoCopy() {
        var filter = SignalCopyFilter()
        let first = filter.admitNotificationSource(modified, now: .seconds(1))
        filter.expectResponse(to: request)
        let answer = fragments.map { filter.admitDataSource($0) }
        let second = filter.admitNotificationSource(modified, now: .seconds(1) + .milliseconds(33))
        #expect(first && answer.allSatisfy { $0 })
        #expect(second, "the second modification")
    }

    @Test func responsesBeginWithTheRequestsCommandAndSubject() {
        #expect(SignalCopyFilter.responseStart(of: request) == [0, 7, 0, 0, 0])
        #expect(SignalCopyFilter.responseStart(of: [1] + Array("com.apple.MobileSMS".utf8) + [0, 0]) == [1] + Array("com.apple.MobileSMS".utf8) + [0])
        #expect(SignalCopyFilter.responseStart(of: [2, 7, 0, 0, 0, 1]) == nil)
        #expect(SignalCopyFilter.responseStart(of: [0, 7]) == nil)
        #expect(SignalCopyFilter.responseStart(of: [1, 0x61]) == nil)
    }
}
