import ANCS

/// The alive check and the phone's notification sharing: the probe's schedule, renewals of the
/// subscriptions, and what a refused Control Point write says.
extension ANCSSession {
    mutating func requestResubscription(_ reason: String, into actions: inout [SessionAction]) {
        resubscriptions += 1
        actions.append(.resubscribe(reason))
    }

    /// The next alive check, after the usual interval (sooner while sharing is off; at once
    /// after a single refused write, to confirm it).
    mutating func scheduleProbe(now: Duration) {
        defer { updateDeadline() }
        guard var interval = configuration.aliveCheckInterval else { return }
        if consecutiveRefusals == 1, !sharingOff {
            probeWanted = true
            aliveCheckAt = nil
            return
        }
        if sharingOff { interval = min(interval, configuration.sharingOffCheckInterval) }
        probeWanted = false
        aliveCheckAt = now + interval
    }

    /// The phone answered the alive check (its answer says nothing about notifications).
    mutating func probeAnswered(now: Duration) {
        scheduleProbe(now: now)
    }

    /// The phone looked at a Control Point write: sharing is on.
    mutating func sharingAccepted(now: Duration, into actions: inout [SessionAction]) {
        consecutiveRefusals = 0
        notificationSharingAllowed = true
        guard sharingOff else { return }
        sharingOff = false
        deniedReported = false
        actions.append(.log(.info, "the iPhone shares its notifications again"))
        actions.append(.sharingChanged(allowed: true))
        // No renewal of its own here: after one the phone replays under the same UIDs, and a
        // notification shown before it and removed before its fetch again would never be shown
        // removed (the soak, seed 22). A Notification Source left dead is found by the alive
        // check's schedule and --resubscribe-after.
    }

    /// The phone refused a Control Point write with ATT 0x03: the second in a row starts an
    /// episode of sharing turned off; the first asks for an alive check at once to confirm.
    mutating func sharingRefused(into actions: inout [SessionAction]) {
        consecutiveRefusals += 1
        if consecutiveRefusals == 1, !sharingOff, configuration.aliveCheckInterval != nil, aliveCheckAt != nil {
            probeWanted = true  // confirm at once, behind the other work
            aliveCheckAt = nil
            updateDeadline()
        }
        guard consecutiveRefusals >= 2, !sharingOff else { return }
        sharingOff = true
        notificationSharingAllowed = false
        actions.append(.sharingChanged(allowed: false))
        reportDenied(code: .writeNotPermitted, into: &actions)
    }

    /// Says once per episode how to let this computer read notifications.
    mutating func reportDenied(code: ATTErrorCode, into actions: inout [SessionAction]) {
        guard !deniedReported else { return }
        deniedReported = true
        actions.append(.log(.error, """
            the iPhone does not let this computer read notifications (ATT \(code.description)). \
            On the iPhone open Settings > Bluetooth, tap (i) next to this computer and turn on \
            "Share System Notifications"; if it is not listed, forget the device on both sides and pair again
            """))
    }
}
