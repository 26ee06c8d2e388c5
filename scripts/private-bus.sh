# Sourced by the demo and benchmark scripts: starts a private dbus-daemon in $1 (a directory)
# and sets BUS_ADDRESS and BUS_PID. The caller kills BUS_PID when done.
start_private_bus() {
    local dir=$1
    cat > "$dir/bus.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=$dir/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
CONF
    dbus-daemon --config-file="$dir/bus.conf" --nofork --print-address=1 > "$dir/address" 2> "$dir/bus.log" &
    BUS_PID=$!
    local tries=0
    until [ -s "$dir/address" ]; do
        tries=$((tries + 1))
        if [ $tries -gt 100 ] || ! kill -0 "$BUS_PID" 2>/dev/null; then
            echo "could not start dbus-daemon:" >&2
            cat "$dir/bus.log" >&2
            return 1
        fi
        sleep 0.05
    done
    BUS_ADDRESS=$(head -n 1 "$dir/address")
    export BUS_ADDRESS BUS_PID
}
