import AMS
import ANCS
import ANCSSession
import GattSession
import LinkMachine
import TestSupport

/// A month of one phone's life against the daemon model, on the virtual clock, all drawn from
/// one seed: each day is planned at its midnight (so the plan never holds more than a day).
///
/// A day: about 340 notifications, all but one or two between 07:00 and 23:00, a third removed
/// within half an hour, a third within hours, the rest cleared at 23:30, a quarter of the
/// messages and mails modified (now and then twice within 100 ms); walk-aways and returns from
/// 07:30 to 21:30 (none on two days at home), some returns at the edge of range that drop and
/// come back; on half the days a silent drop (three in ten answer nothing); now and then
/// sharing turned off for a while, bluetoothd restarted, or AMS withdrawn and offered again;
/// one to three spells of music with track changes and the user's media commands. The night is
/// at home, quiet from 23:30: at 23:59:50 the tables are measured.
final class MonthWorld {
    let seed: UInt64
    private var rng: SplitMix64
    let clock = VirtualClock()
    let phone: MonthPhone
    let bluetoothd: MonthBluetoothd
    let oracle: MonthOracle
    let daemon: DaemonModel
    let configuration = SessionConfiguration()
    /// The phone is near the computer.
    private(set) var inRange = true
    /// Days spent at home, without walk-aways.
    private let homeDays: Set<Int>
    private var serial = 0
    /// The table sizes measured at the end of each day.
    private(set) var tables: [Int: [(name: String, count: Int)]] = [:]
    /// A track end scheduled for the player (a change of the player cancels it).
    private var trackEndToken = 0

    init(seed: UInt64) {
        self.seed = seed
        rng = SplitMix64(seed: seed)
        phone = MonthPhone(clock: clock)
        bluetoothd = MonthBluetoothd(clock: clock, phone: phone, seed: seed &+ 1)
        oracle = MonthOracle(seed: seed, clock: clock, phone: phone, configuration: configuration)
        daemon = DaemonModel(clock: clock, bluetoothd: bluetoothd, oracle: oracle, configuration: configuration, replays: .unseen)
        bluetoothd.daemon = daemon
        var days = Set<Int>()
        while days.count < 2 { days.insert(Int.random(in: 2...27, using: &rng)) }
        homeDays = days
        phone.player.tracks = (0..<24).map { index in
            Player.Track(
                artist: rng.pick(["Nina Simone", "Radiohead", "Sigur Rós", "Daft Punk", "Björk", "Yann Tiersen"]),
                album: rng.pick(["Blue", "Kid A", "Ágætis byrjun", "Discovery", "Homogenic", "Amélie"]),
                title: index % 7 == 3 ? String(repeating: "A very long title, ", count: 12) + "\(index)" : "Track \(index) – \(rng.pick(["Intro", "Dawn", "Río", "Hyperballad"]))",
                duration: Int.random(in: 120...360, using: &rng))
        }
        phone.onControlPointWrite = { [unowned self] request, answer in oracle.controlPointWrite(request, answer: answer) }
        phone.onCCCD = { [unowned self] _, _ in oracle.phoneChanged() }
        // A command the phone performed changed its player: its track's end moves.
        phone.onCommandPerformed = { [unowned self] in playerChanged([]) }
        bluetoothd.onLinkLost = { [unowned self] reason in
            oracle.trace("bluetoothd: link lost: \(reason)")
            oracle.linkLost(reason: reason)
            // Still in range (an ATT timeout, a flap): the phone connects again in a few seconds.
            if inRange, reason != "the phone walked away", reason != "bluetoothd stopped" { reconnect(after: rng.duration(.seconds(1), .seconds(5))) }
        }
    }

    /// Runs the month.
    func run(days: Int) {
        clock.at(.zero) { [self] in daemon.treeChanged() }
        reconnect(after: .seconds(1))
        for day in 0..<days {
            clock.at(.day * Int64(day)) { [self] in plan(day: day) }
            clock.run(until: .day * Int64(day + 1))
        }
    }

    // MARK: The plan of a day

    private func plan(day: Int) {
        let midnight = clock.now
        func at(_ hours: Double, _ body: @escaping () -> Void) {
            clock.at(midnight + .microseconds(Int64(hours * 3_600_000_000)), body)
        }
        // Notifications: one every 4 h or so at night, one every 2.8 minutes from 07:00 to
        // 23:00, none after (the night's quiet).
        for (from, to, minutes) in [(0.0, 7.0, 240.0), (7.0, 23.0, 2.8)] {
            var t = from
            while true {
                t += rng.exponential(mean: .microseconds(Int64(minutes * 60_000_000))).seconds / 3600
                guard t < to else { break }
                at(t) { [self] in post() }
            }
        }
        at(23.5) { [self] in clearAll() }
        // Walk-aways, unless at home all day.
        if !homeDays.contains(day) {
            var leave = 7.5 + rng.exponential(mean: .minutes(50)).seconds / 3600
            while leave < 21.5 {
                let away = min(150, max(1, rng.exponential(mean: .minutes(20)).seconds / 60)) / 60
                let flap = rng.chance(0.1)
                at(leave) { [self] in walkAway() }
                at(leave + away) { [self] in comeBack(flapping: flap) }
                leave += away + rng.exponential(mean: .minutes(50)).seconds / 3600
            }
        }
        if rng.chance(0.5) {
            let all = rng.chance(0.3)
            at(Double.random(in: 8...22, using: &rng)) { [self] in dropSilently(all: all) }
        }
        if rng.chance(0.15) {
            let off = Double.random(in: 8...20, using: &rng)
            let length = min(3, max(1.0 / 60, rng.exponential(mean: .minutes(40)).seconds / 3600))
            at(off) { [self] in setSharing(false) }
            at(off + length) { [self] in setSharing(true) }
        }
        if rng.chance(0.3) {
            let withdrawn = Double.random(in: 8...21, using: &rng)
            let back = withdrawn + rng.duration(.seconds(2), .minutes(10)).seconds / 3600
            at(withdrawn) { [self] in setMediaOffered(false) }
            at(back) { [self] in setMediaOffered(true) }
        }
        if rng.chance(0.14) {
            let downtime = rng.duration(.milliseconds(300), .seconds(2))
            at(Double.random(in: 7...22, using: &rng)) { [self] in restartBluetoothd(downtime: downtime) }
        }
        for _ in 0..<Int.random(in: 1...3, using: &rng) {
            let start = Double.random(in: 8...21, using: &rng)
            let length = Double.random(in: 20...120, using: &rng) / 60
            at(start) { [self] in listen(true) }
            var command = start + rng.exponential(mean: .minutes(5)).seconds / 3600
            while command < start + length {
                let which = rng.pick([RemoteCommand.nextTrack, .nextTrack, .previousTrack, .volumeUp, .volumeDown, .togglePlayPause, .play, .pause])
                at(command) { [self] in daemon.mediaCommand(which) }
                command += rng.exponential(mean: .minutes(5)).seconds / 3600
            }
            at(start + length) { [self] in listen(false) }
        }
        for minute in stride(from: 2, to: 24 * 60, by: 2) {
            at(Double(minute) / 60) { [self] in oracle.tick(daemon: daemon) }
        }
        at(23 + 59.0 / 60 + 50.0 / 3600) { [self] in measure(day: day, tries: 9) }
    }

    // MARK: The phone's life

    private static let senders = ["Anna Keller", "Ben", "Zoë 🎉", "Léa Martin", "Team Build", "Mum", "石川 さん", "Dr. Ahmed"]
    private static let words = ["see you at eight", "the invoice is attached", "can you call me back?", "running late, sorry",
                                "build #4512 failed", "lunch?", "Grüße aus Zürich", "your parcel arrives today", "🎂🎈", "ok"]

    private func post() {
        let app = rng.pick(MonthPhone.apps)
        serial += 1
        var title = rng.pick(Self.senders)
        if rng.chance(0.03) { title += " " + String(repeating: "and friends ", count: 12) }
        var message = "\(rng.pick(Self.words)) #\(serial)"
        if rng.chance(0.02) { message = String(repeating: "A long message line; ", count: 110) + message }
        let subtitle = app.category == .email ? "Re: \(rng.pick(Self.words))" : ""
        let key = phone.post(app: app, title: title, subtitle: subtitle, message: message, date: date())
        oracle.trace("phone: posts \(key) uid \(phone.held[key]?.uid ?? 0): \(message.suffix(40))")
        oracle.created += 1
        oracle.lastPhoneActivity = clock.now
        // How long it stays: a third minutes, a third hours, the rest until the evening's clear.
        let lifetime: Duration? = switch Double.random(in: 0..<1, using: &rng) {
        case ..<0.35: rng.duration(.minutes(1), .minutes(30))
        case ..<0.7: rng.duration(.minutes(30), .hours(5))
        default: nil
        }
        if let lifetime {
            clock.after(lifetime) { [self] in
                guard phone.held[key] != nil else { return }
                oracle.removals += 1
                oracle.lastPhoneActivity = clock.now
                oracle.trace("phone: removes \(key) uid \(phone.held[key]?.uid ?? 0)")
                phone.remove(key)
            }
        }
        guard app.category == .social || app.category == .email, rng.chance(0.25) else { return }
        var after = Duration.zero
        for _ in 0..<Int.random(in: 1...3, using: &rng) {
            // Now and then a second change right after the first (a thread that fills up).
            after += rng.chance(0.05) ? rng.duration(.milliseconds(10), .milliseconds(100)) : rng.duration(.seconds(10), .minutes(20))
            clock.after(after) { [self] in
                guard phone.held[key] != nil else { return }
                serial += 1
                oracle.modifications += 1
                oracle.lastPhoneActivity = clock.now
                phone.modify(key, message: "\(rng.pick(Self.words)) (and more) #\(serial)")
                oracle.trace("phone: modifies \(key) uid \(phone.held[key]?.uid ?? 0) to version \(phone.held[key]?.version ?? 0): #\(serial)")
            }
        }
    }

    /// The phone's clock as ANCS's Date attribute: yyyyMMdd'T'HHmmSS, the month from 1 March 2027.
    private func date() -> String {
        let s = Int(clock.now.seconds)
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "202703\(two(s / 86_400 + 1))T\(two(s % 86_400 / 3600))\(two(s % 3600 / 60))\(two(s % 60))"
    }

    /// "Clear All" on the phone: every notification goes, a few milliseconds apart.
    private func clearAll() {
        for (index, key) in phone.order.enumerated() {
            clock.after(.milliseconds(5 * Int64(index))) { [self] in
                guard phone.held[key] != nil else { return }
                oracle.removals += 1
                oracle.lastPhoneActivity = clock.now
                phone.remove(key)
            }
        }
    }

    private func walkAway() {
        inRange = false
        oracle.walkAways += 1
        oracle.trace("phone: walks away")
        bluetoothd.linkLost("the phone walked away")
    }

    /// The phone is back: it connects within seconds; at the edge of range it drops at once
    /// (before or while the daemon subscribes) and connects again.
    private func comeBack(flapping: Bool) {
        inRange = true
        let connectAfter = rng.duration(.milliseconds(200), .seconds(3))
        reconnect(after: connectAfter)
        guard flapping else { return }
        oracle.flaps += 1
        let dropAfter = connectAfter + rng.duration(.milliseconds(30), .seconds(3))
        clock.after(dropAfter) { [self] in
            guard inRange else { return }
            inRange = false
            bluetoothd.linkLost("the phone walked away")
            clock.after(rng.duration(.seconds(1), .seconds(10))) { [self] in
                inRange = true
                reconnect(after: rng.duration(.milliseconds(200), .seconds(2)))
            }
        }
    }

    private func reconnect(after delay: Duration) {
        clock.after(delay) { [self] in
            guard inRange, bluetoothd.running, !bluetoothd.linkUp else { return }
            bluetoothd.phoneConnects()
            oracle.trace("phone: connects (session \(phone.session))")
            oracle.phoneChanged()
        }
    }

    private func dropSilently(all: Bool) {
        guard phone.connected, phone.ancsHealthy else { return }
        phone.dropSilently(all: all)
        oracle.trace("phone: drops the subscriptions silently\(all ? ", answers nothing" : "")")
        oracle.troubleBegins(all ? .silentDropAll : .silentDrop)
    }

    private func setSharing(_ on: Bool) {
        phone.setSharing(on)
        oracle.trace("phone: sharing \(on ? "on" : "off")")
        if !on, phone.connected { oracle.troubleBegins(.sharingOff) } else { oracle.phoneChanged() }
    }

    private func restartBluetoothd(downtime: Duration) {
        oracle.bluetoothdRestarts += 1
        bluetoothd.stop()
        clock.after(downtime) { [self] in
            bluetoothd.start()
            reconnect(after: rng.duration(.milliseconds(100), .seconds(2)))
        }
    }

    private func setMediaOffered(_ offered: Bool) {
        oracle.trace("phone: AMS \(offered ? "offered again" : "withdrawn")")
        if !offered { oracle.mediaWithdrawals += 1 }
        oracle.lastPlayerChange = clock.now
        bluetoothd.setMediaOffered(offered)
    }

    // MARK: Music

    private func listen(_ on: Bool) {
        playerChanged(phone.player.setPlaying(on, at: clock.now))
    }

    /// The player changed on the phone: its values go out, and the track's end is (re)scheduled.
    private func playerChanged(_ changed: [(UInt8, UInt8)]) {
        oracle.lastPlayerChange = clock.now
        phone.playerChanged(changed)
        trackEndToken += 1
        let token = trackEndToken, player = phone.player
        guard player.playing else { return }
        let left = Double(player.track.duration) - player.position(at: clock.now)
        clock.after(.microseconds(Int64(max(0, left) * 1_000_000))) { [self] in
            guard trackEndToken == token, phone.player.playing else { return }
            oracle.trackChanges += 1
            playerChanged(phone.player.skip(by: 1, at: clock.now))
        }
    }

    // MARK: Measures

    /// The tables at a quiet moment of the night (no call or request waiting), tried for a few seconds.
    private func measure(day: Int, tries: Int) {
        let sizes = tableSizes
        let busy = sizes.contains { ($0.name == "daemon: calls waiting" || $0.name == "daemon: requests waiting") && $0.count > 0 }
        if busy, tries > 0 {
            clock.after(.seconds(1)) { [self] in measure(day: day, tries: tries - 1) }
            return
        }
        tables[day] = sizes
    }

    /// Every table of every machine, the daemon model's, bluetoothd's and the phone's.
    var tableSizes: [(name: String, count: Int)] {
        var sizes = daemon.machine.tableSizes.map { ("link machine: \($0.name)", $0.count) }
        sizes += daemon.tableSizes.map { ("daemon: \($0.name)", $0.count) }
        let link = daemon.links.values.first
        let ancs = link?.ancs
        sizes += (ancs?.session.tableSizes ?? ANCSSession().tableSizes).map { ("ANCS session: \($0.name)", $0.count) }
        sizes.append(("replay gate: seen before", ancs?.gate.seenBefore.count ?? 0))
        sizes.append(("replay gate: printed", ancs?.gate.printed.count ?? 0))
        let media = link?.media
        sizes += (media?.session.tableSizes ?? MediaSession().tableSizes).map { ("AMS session: \($0.name)", $0.count) }
        sizes += (media?.tableSizes ?? MediaHandlerModel().tableSizes).map { ("AMS handler: \($0.name)", $0.count) }
        sizes += bluetoothd.tableSizes.map { ("bluetoothd: \($0.name)", $0.count) }
        sizes.append(("phone: notifications held", phone.held.count))
        sizes.append(("clock: things waiting", clock.pending))
        return sizes
    }
}
