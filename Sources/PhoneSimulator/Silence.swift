import ANCS
import DBus

/// What an iPhone stops doing without telling, as PebbleOS reports it (coredevices/PebbleOS
/// #516, #959, #1347, #1348, #2093; docs/field-evidence.md): it drops the GATT subscriptions
/// with no Service Changed and no disconnect, keeps answering the Control Point while the
/// Notification Source push is dead, or answers nothing at all; with "Share System
/// Notifications" off it refuses the Control Point with ATT 0x03.
///
/// Each lasts until the CCCDs are rewritten, modelled as bluetoothd does it: per characteristic,
/// the CCCD is written off when the last subscription (StartNotify session or acquired socket, of
/// any client, `other_notify_clients` included) goes and on when the first comes again — only
/// then does the phone learn that a consumer wants notifications. `activated` marks that moment.
/// After `sharing_on` the strictest plausible iOS is modelled: writes are accepted at once, but
/// the Notification Source and Data Source stay silent until their CCCDs are rewritten. A link
/// loss (a new ANCS session) ends everything.
struct Silence: Sendable {
    /// The Notification Source sends nothing.
    var notificationSource = false
    /// The Data Source sends nothing (a request is acknowledged, its response never comes).
    var dataSource = false
    /// Control Point writes get no reply at all (`silent_drop_all`), until both CCCDs are rewritten.
    var controlPointUnanswered = false

    func isSilent(_ c: PhoneCharacteristic) -> Bool {
        switch c {
        case .notificationSource: notificationSource
        case .dataSource: dataSource
        // The Control Point has nothing to send; AMS is not silenced with ANCS (not reported).
        case .controlPoint, .remoteCommand, .entityUpdate, .entityAttribute: false
        }
    }

    /// The CCCD of `c` was written again; true when that ended a silence. While sharing is
    /// denied the phone stays silent.
    mutating func cccdRewritten(_ c: PhoneCharacteristic, sharingDenied: Bool) -> Bool {
        guard isSilent(c), !sharingDenied else { return false }
        if c == .dataSource { dataSource = false } else { notificationSource = false }
        if !notificationSource, !dataSource { controlPointUnanswered = false }
        return true
    }

    mutating func linkLost() {
        self = Silence()
    }
}

extension PhoneSimulator {
    /// `silent_drop`, `silent_drop_all`, `sharing_off`, `sharing_on` on phone `device`.
    func applySilence(_ action: ScenarioAction, device: Int) {
        let name = settings.devices[device].name
        state.withLock { s in
            switch action {
            case .silentDrop:
                s.devices[device].silence.notificationSource = true
                s.devices[device].silence.dataSource = true
                log("\(name): dropped the subscriptions silently (the Control Point still answers)")
            case .silentDropAll:
                s.devices[device].silence = Silence(notificationSource: true, dataSource: true, controlPointUnanswered: true)
                log("\(name): dropped the subscriptions silently and answers nothing")
            case .sharingOff:
                s.devices[device].model.sharingDenied = true
                s.devices[device].silence.notificationSource = true
                s.devices[device].silence.dataSource = true
                log("\(name): Share System Notifications off")
            case .sharingOn:
                s.devices[device].model.sharingDenied = false
                log("\(name): Share System Notifications on (silent until the CCCDs are rewritten)")
            default:
                break
            }
        }
        note(device, "silence", ["step": .string("\(action)")])
    }
}
