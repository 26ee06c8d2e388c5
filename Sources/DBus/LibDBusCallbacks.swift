import CDBus

// The C callbacks ConnectionCore installs in libdbus (watches, timeouts, dispatch status, the
// message filter), each a trampoline to the core's method.
//
// libdbus calls these synchronously from inside the libdbus call we made, i.e. holding the
// connection's event loop (or, for the final close, from the exclusive context of deinit).
// They reach the core through an unretained pointer; the core outlives every callback
// because it clears all callbacks in `shutdown()` before releasing the connection.

private func core(_ data: UnsafeMutableRawPointer?) -> ConnectionCore? {
    guard let data else { return nil }
    return Unmanaged<ConnectionCore>.fromOpaque(data).takeUnretainedValue()
}

let cAddWatch: DBusAddWatchFunction = { watch, data in
    guard let watch, let core = core(data) else { return 0 }
    return core.addWatch(watch) ? 1 : 0
}
let cRemoveWatch: DBusRemoveWatchFunction = { watch, data in
    guard let watch, let core = core(data) else { return }
    core.removeWatch(watch)
}
let cToggleWatch: DBusWatchToggledFunction = { watch, data in
    guard let watch, let core = core(data) else { return }
    core.toggleWatch(watch)
}
let cAddTimeout: DBusAddTimeoutFunction = { timeout, data in
    guard let timeout, let core = core(data) else { return 0 }
    core.addTimeout(timeout)
    return 1
}
let cRemoveTimeout: DBusRemoveTimeoutFunction = { timeout, data in
    guard let timeout, let core = core(data) else { return }
    core.removeTimeout(timeout)
}
let cToggleTimeout: DBusTimeoutToggledFunction = { timeout, data in
    guard let timeout, let core = core(data) else { return }
    core.toggleTimeout(timeout)
}
let cDispatchStatusChanged: DBusDispatchStatusFunction = { _, status, data in
    guard status == DBUS_DISPATCH_DATA_REMAINS, let core = core(data) else { return }
    core.dispatchStatusChanged()
}
let cFilter: DBusHandleMessageFunction = { _, message, data in
    guard let message, let core = core(data) else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
    return core.filter(message)
}
