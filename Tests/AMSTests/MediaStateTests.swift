import AMS
import Testing

@Suite struct MediaStateTests {
    func state(_ playbackState: PlaybackState?, rate: Double?, elapsed: Double?, at: Duration = .seconds(10), duration: Double? = nil) -> MediaState {
        var state = MediaState()
        state.playbackState = playbackState
        state.playbackRate = rate
        state.elapsedTime = elapsed
        state.elapsedAt = at
        state.duration = duration
        return state
    }

    @Test func playingMovesOn() {
        let playing = state(.playing, rate: 1, elapsed: 30.5)
        #expect(playing.position(at: .seconds(10)) == 30.5)
        #expect(playing.position(at: .seconds(15)) == 35.5)
        #expect(playing.position(at: .milliseconds(12_250)) == 32.75)
    }

    @Test func pausedStays() {
        #expect(state(.paused, rate: 0, elapsed: 30.5).position(at: .seconds(100)) == 30.5)
        // A paused player with a rate (inconsistent, but the phone may send it) stays too.
        #expect(state(.paused, rate: 1, elapsed: 30.5).position(at: .seconds(100)) == 30.5)
        #expect(state(.playing, rate: 0, elapsed: 30.5).position(at: .seconds(100)) == 30.5)
        #expect(state(.playing, rate: nil, elapsed: 30.5).position(at: .seconds(100)) == 30.5)
    }

    @Test func rateTwoMovesTwiceAsFast() {
        #expect(state(.fastForwarding, rate: 2, elapsed: 30.5).position(at: .seconds(15)) == 40.5)
    }

    @Test func isClampedToTheTrack() {
        #expect(state(.playing, rate: 1, elapsed: 200, duration: 210).position(at: .seconds(30)) == 210)
        #expect(state(.rewinding, rate: -2, elapsed: 5).position(at: .seconds(20)) == 0)
        #expect(state(.playing, rate: 1, elapsed: 300, duration: 210).position(at: .seconds(10)) == 210)
        // Without a duration there is no upper bound.
        #expect(state(.playing, rate: 1, elapsed: 200).position(at: .seconds(30)) == 220)
    }

    @Test func unknownElapsedIsNoPosition() {
        #expect(state(.playing, rate: 1, elapsed: nil).position(at: .seconds(30)) == nil)
        #expect(MediaState().position(at: .seconds(30)) == nil)
    }

    @Test func timeBeforeTheArrivalDoesNotGoBack() {
        #expect(state(.playing, rate: 1, elapsed: 30).position(at: .seconds(5)) == 30)
    }

    @Test func hugeNumbersGiveNoInfinity() {
        let huge = state(.playing, rate: 1e308, elapsed: 1e308)
        #expect(huge.position(at: .seconds(1000)) == nil)
    }

    @Test func aConsistentPositionIsNoChange() {
        let before = state(.playing, rate: 1, elapsed: 30, at: .seconds(10))
        let after = state(.playing, rate: 1, elapsed: 35.1, at: .seconds(15))
        #expect(after.isEquivalent(to: before, at: .seconds(15)))
        let seeked = state(.playing, rate: 1, elapsed: 90, at: .seconds(15))
        #expect(!seeked.isEquivalent(to: before, at: .seconds(15)))
        var renamed = after
        renamed.title = "Other"
        #expect(!renamed.isEquivalent(to: before, at: .seconds(15)))
    }
}
