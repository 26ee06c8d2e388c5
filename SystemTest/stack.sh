# Sourced by the guest scripts: starts and stops the Bluetooth stack inside the VM.
# Logs go to /out/logs; processes are remembered in the *_pid variables.
logs=/out/logs
mkdir -p "$logs"

note() { echo "[$(cut -d' ' -f1 /proc/uptime)] $*"; }

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
    local limit=$1 i=0
    shift
    until "$@" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -gt $((limit * 10)) ] && return 1
        sleep 0.1
    done
}

# The system bus, with Debian's own policy (/etc/dbus-1/system.conf and system.d/bluetooth.conf).
start_bus() {
    [ -s /etc/machine-id ] || dbus-uuidgen > /etc/machine-id
    dbus-daemon --system --fork --nopidfile --print-pid=1 > /run/dbus/pid 2> "$logs/dbus.log"
    bus_pid=$(cat /run/dbus/pid)
    wait_for 10 test -S /run/dbus/system_bus_socket
}

# Five LE controllers on one virtual radio: hci0 (this machine), hci1 (the phone), hci2 (a
# stranger: a neighbour's device), hci3 and hci4 (the remote pass's accessory and phone, on
# addresses of their own); then two dual-mode (BR/EDR and LE, Bluetooth 5.2) controllers on a
# second radio, hci5 and hci6: one advertises, the other scans, for the advertising check on a
# dual-mode controller. Controllers on different radios never hear each other.
start_controllers() {
    local le=5
    modprobe -a bluetooth hci_vhci algif_hash algif_skcipher cmac ecb ecdh_generic
    # The phone's HID host (bluetoothd's hog plugin) makes its input device through /dev/uhid.
    modprobe -a uhid hid_generic 2>/dev/null || true
    # Under TCG an on-demand module load during controller setup times the HCI reset out.
    local helper
    helper=$(cat /proc/sys/kernel/modprobe)
    echo > /proc/sys/kernel/modprobe
    btvirt -L -l"$le" > "$logs/btvirt.log" 2>&1 &
    btvirt_pid=$!
    wait_for 20 test -e /sys/class/bluetooth/hci$((le - 1)) || { echo "$helper" > /proc/sys/kernel/modprobe; return 1; }
    sleep 1
    btvirt -l2 > "$logs/btvirt-dual.log" 2>&1 &
    btvirt_dual_pid=$!
    wait_for 20 test -e /sys/class/bluetooth/hci$((le + 1)) || { echo "$helper" > /proc/sys/kernel/modprobe; return 1; }
    sleep 1
    echo "$helper" > /proc/sys/kernel/modprobe
    # Everything the controllers carry, for reading after a failure (btmon -r).
    btmon -w "$logs/hci.btsnoop" > /dev/null 2>&1 &
}

# bluetoothd with the settings file $1 (default: Debian's /etc/bluetooth/main.conf).
start_bluetoothd() {
    local conf=${1:-/etc/bluetooth/main.conf}
    /usr/libexec/bluetooth/bluetoothd --nodetach --debug -f "$conf" >> "$logs/bluetoothd.log" 2>&1 &
    bluetoothd_pid=$!
    wait_for 20 bluez_running
}

bluez_running() {
    dbus-send --system --print-reply --dest=org.freedesktop.DBus / org.freedesktop.DBus.NameHasOwner string:org.bluez | grep -q true
}

stop_bluetoothd() {
    kill -TERM "$bluetoothd_pid" 2>/dev/null
    wait "$bluetoothd_pid" 2>/dev/null
    bluetoothd_pid=
}
