import ANCSRuntime
import BlueZ
import DBus
import EventLoop

/// Strangers: a device connected to the adapter ancsd advertises on that is not bonded. `ancsd
/// run` advertises connectable for the phone's way back, and anything in range may connect to
/// that advertisement and hold the link for as long as it likes; on a controller that stops
/// advertising while a link is up, the phone could then not come back at all. Such a device is
/// disconnected after `strangerGrace`, unless someone is pairing (below).
///
/// Left alone: bonded or paired devices (the phones, and whatever else the computer paired),
/// devices marked Trusted (`bluetoothctl trust`: a sensor some other program reads without
/// bonding), devices on adapters ancsd does not advertise on, everything while ancsd advertises
/// nothing (`--no-advertise`, no paired phone yet), and every device while the adapter is
/// Discoverable or Pairable with a timeout: a pairing window is open (`ancsd pair`, the desktop's
/// Bluetooth settings), and the new phone is not bonded yet.
extension Daemon {
    /// How long a stranger may stay connected: long enough for a pairing that someone started
    /// on this computer to make the adapter pairable, short enough that the phone's way back
    /// is not held for long.
    static let strangerGrace = Duration.seconds(10)

    /// Starts the grace of every new stranger and forgets those that are no longer strangers
    /// (gone, bonded, or someone began pairing). Runs at every change of a device or adapter.
    func watchStrangers() {
        let now = Set(tree.devices.filter(isStranger).map(\.path))
        for path in strangerGraces.keys where !now.contains(path) {
            strangerGraces[path] = nil
        }
        for path in now where strangerGraces[path] == nil {
            nextStrangerGrace &+= 1
            let grace = nextStrangerGrace
            strangerGraces[path] = grace
            logger.debug("\(deviceLabel(path)): connected and not bonded; disconnected in \(Self.strangerGrace.components.seconds) s unless it bonds or someone begins pairing")
            executor.after(Self.strangerGrace, onLoop { $0.strangerGraceOver(path, grace) })
        }
    }

    /// True for a device that gets a grace and then a disconnection (the type's comment says which).
    func isStranger(_ device: BlueZDevice) -> Bool {
        guard presence != nil, device.connected, !device.isBonded, !device.paired, !device.trusted,
              let adapter = device.adapter, phoneAdapters.contains(adapter)
        else { return false }
        return !someoneIsPairing(on: adapter)
    }

    /// The adapter is open for pairing: Discoverable, or Pairable with a timeout (a window that
    /// closes by itself, as `ancsd pair` and desktops open it). Pairable without a timeout is
    /// bluetoothd's everyday setting while any agent is registered, ours included: not a sign.
    func someoneIsPairing(on adapter: ObjectPath) -> Bool {
        let discoverable = tree.property(adapter, BlueZ.adapterInterface, "Discoverable")?.boolValue ?? false
        let pairable = tree.property(adapter, BlueZ.adapterInterface, "Pairable")?.boolValue ?? false
        let timeout = tree.property(adapter, BlueZ.adapterInterface, "PairableTimeout")?.uint32Value ?? 0
        return discoverable || (pairable && timeout > 0)
    }

    /// The grace of `path` is over: disconnected if it still is a stranger.
    func strangerGraceOver(_ path: ObjectPath, _ grace: UInt64) {
        guard strangerGraces[path] == grace else { return }
        strangerGraces[path] = nil
        guard let device = tree.device(at: path), isStranger(device), let connection else { return }
        strangerLog("disconnected a device that is not bonded: \(device.address) stayed connected \(Self.strangerGrace.components.seconds) s without pairing")
        spawn { daemon in
            do {
                try await DeviceCalls(connection: connection).disconnect(path)
            } catch {
                daemon.logger.debug("\(device.address): Disconnect: \(error)")
            }
        }
    }
}
