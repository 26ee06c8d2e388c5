import CDBus
import CEventLoop
import EventLoop
import Glibc
import SystemCalls

/// The glue between libdbus and the connection's `EventLoop`: libdbus's watches become loop
/// watches, and its timeouts and the calls' deadlines share one timer.
extension ConnectionCore {
    // MARK: Watches

    final class WatchState {
        let raw: OpaquePointer
        /// One loop watch per direction libdbus asked for, each on a dup of its fd.
        var watches: [(watch: OwnedWatch, interest: Watch.Events)] = []
        init(raw: OpaquePointer) { self.raw = raw }
    }

    func addWatch(_ watch: OpaquePointer) -> Bool {
        let id = newID()
        let fd = dbus_watch_get_unix_fd(watch)
        guard fd >= 0 else { return false }
        let flags = dbus_watch_get_flags(watch)
        let state = WatchState(raw: watch)
        let owner = self.owner
        // Each direction watches its own dup of libdbus's fd: epoll takes one registration per
        // descriptor, and libdbus may give a readable and a writable watch of one socket.
        for (bit, interest) in [(CDBUS_WATCH_READABLE, Watch.Events.readable), (CDBUS_WATCH_WRITABLE, .writable)]
        where flags & bit != 0 {
            do {
                let dup = FileDescriptor(adopting: try Errno.retrying { fcntl(fd, F_DUPFD_CLOEXEC, 0) })
                // Registered disabled; `update` turns it on when libdbus enables the watch.
                let watch = try OwnedWatch(dup, on: loop, interest: []) { [weak owner] _ in
                    owner?.handle { $0.core.handleWatch(id, bit) }
                }
                state.watches.append((watch, interest))
            } catch {
                cancel(state)
                return false
            }
        }
        watches[id] = state
        watchIDs[watch] = id
        update(state)
        return true
    }

    private func update(_ state: WatchState) {
        let enabled = dbus_watch_get_enabled(state.raw) != 0
        for (owned, interest) in state.watches { owned.watch.update(enabled ? interest : []) }
    }

    /// Unregisters at once (libdbus closes its fd right after removing a watch), then closes the dups.
    func cancel(_ state: WatchState) {
        state.watches = []
    }

    func removeWatch(_ watch: OpaquePointer) {
        guard let id = watchIDs.removeValue(forKey: watch), let state = watches.removeValue(forKey: id) else { return }
        cancel(state)
    }

    func toggleWatch(_ watch: OpaquePointer) {
        guard let id = watchIDs[watch], let state = watches[id] else { return }
        update(state)
    }

    /// A watch's fd is ready: let libdbus do its I/O, then dispatch what arrived.
    func handleWatch(_ id: UInt64, _ flags: UInt32) {
        guard !isClosed, let state = watches[id], dbus_watch_get_enabled(state.raw) != 0 else { return }
        inHandler = true
        dbus_watch_handle(state.raw, flags)
        inHandler = false
        drain()
    }

    // MARK: Timeouts (one timer for all of them)
    //
    // One timerfd, watched on the loop, for the calls' deadlines and libdbus's own timeouts (it
    // registers none while no DBusPendingCall is used, but may). It is armed lazily: an armed
    // deadline earlier than the one asked for stays, since firing early is harmless
    // (`handleTimer` finds nothing due and re-arms), so calls that follow each other touch the
    // timerfd only to arm it for the first and to disarm it when none is left: no call or
    // timeout pending, no wakeup.

    final class TimeoutState {
        let raw: OpaquePointer
        var deadline: UInt64?
        init(raw: OpaquePointer) { self.raw = raw }
    }

    /// Creates the connection's one timer and watches it on the loop.
    func startTimer() throws(DBusError) {
        let fd = ancs_timerfd()
        guard fd >= 0 else { throw .failed("cannot create a timer: errno \(errno)") }
        let owner = self.owner
        do {
            timer = try OwnedWatch(FileDescriptor(adopting: fd), on: loop, interest: .readable) { [weak owner] _ in
                owner?.handle { $0.core.handleTimer() }
            }
        } catch {
            throw .failed("cannot watch a timer: \(error)")
        }
    }

    /// Drops every watch and the timer, once libdbus has let go of them (at shutdown).
    func stopWatchesAndTimer() {
        for (_, state) in watches { cancel(state) }
        watches = [:]
        watchIDs = [:]
        timeouts = []
        timer = nil
    }

    static func now() -> UInt64 { ancs_monotonic_ns() }

    private func refresh(_ state: TimeoutState, now: UInt64) {
        if dbus_timeout_get_enabled(state.raw) != 0 {
            let interval = UInt64(max(0, dbus_timeout_get_interval(state.raw)))
            state.deadline = now + interval * 1_000_000
        } else {
            state.deadline = nil
        }
    }

    func addTimeout(_ timeout: OpaquePointer) {
        let state = TimeoutState(raw: timeout)
        timeouts.append(state)
        refresh(state, now: Self.now())
        if let deadline = state.deadline { wake(by: deadline) }
    }

    func removeTimeout(_ timeout: OpaquePointer) {
        timeouts.removeAll { $0.raw == timeout }
        disarmIfIdle()
    }

    func toggleTimeout(_ timeout: OpaquePointer) {
        guard let state = timeouts.first(where: { $0.raw == timeout }) else { return }
        refresh(state, now: Self.now())
        if let deadline = state.deadline { wake(by: deadline) } else { disarmIfIdle() }
    }

    /// Makes the timer fire no later than `deadline`.
    func wake(by deadline: UInt64) {
        if armedKnown, let armed = armedDeadline, armed <= deadline { return }
        setTimer(deadline)
    }

    /// Disarms the timer when no call and no enabled timeout is left.
    func disarmIfIdle() {
        guard pendingBySerial.isEmpty, !armedKnown || armedDeadline != nil,
            timeouts.allSatisfy({ $0.deadline == nil })
        else { return }
        setTimer(nil)
    }

    private func setTimer(_ deadline: UInt64?) {
        guard let timer, !isClosed else { return }
        armedDeadline = deadline
        armedKnown = true
        _ = ancs_timerfd_arm(timer.descriptor.rawValue, deadline.map { max($0, 1) } ?? 0)
    }

    /// The earliest deadline of a pending call or an enabled timeout.
    private func nextDeadline() -> UInt64? {
        var next: UInt64 = .max
        for t in timeouts { if let d = t.deadline, d < next { next = d } }
        for entry in pendingBySerial.values where entry.deadline < next { next = entry.deadline }
        return next == .max ? nil : next
    }

    func handleTimer() {
        guard !isClosed else { return }
        var expirations: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &expirations) { try? timer?.descriptor.read(into: $0) }
        armedKnown = false
        let now = Self.now()
        let due = timeouts.filter { ($0.deadline ?? .max) <= now }
        inHandler = true
        for state in due where timeouts.contains(where: { $0 === state }) {
            // libdbus timeouts repeat until removed or disabled.
            let interval = UInt64(max(0, dbus_timeout_get_interval(state.raw)))
            state.deadline = now + interval * 1_000_000
            dbus_timeout_handle(state.raw)
        }
        expireCalls(now: now)
        inHandler = false
        if !isClosed {
            let next = nextDeadline()
            if !armedKnown || next != armedDeadline { setTimer(next) }
        }
        drain()
    }

}
