#!/usr/bin/python3
"""python3-dbus reference for dbus-bench.

  echo_bench.py serve ADDRESS            export com.example.Bench.Echo(s) -> s at /bench,
                                         print "ready <unique name>", run until killed
  echo_bench.py call ADDRESS DEST N W    W warm-up calls, then N timed blocking calls to
                                         DEST's Echo; print the N round trips in ns
"""
import sys
import time

import dbus
import dbus.bus
import dbus.service

INTERFACE = "com.example.Bench"


def serve(address):
    from gi.repository import GLib
    import dbus.mainloop.glib

    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)

    class Echo(dbus.service.Object):
        @dbus.service.method(INTERFACE, in_signature="s", out_signature="s")
        def Echo(self, text):
            return text

    Echo(bus, "/bench")
    print("ready", bus.get_unique_name(), flush=True)
    GLib.MainLoop().run()


def call(address, dest, n, warmup):
    bus = dbus.bus.BusConnection(address)
    samples = []
    for i in range(warmup + n):
        start = time.perf_counter_ns()
        reply = bus.call_blocking(dest, "/bench", INTERFACE, "Echo", "s", ("hello",))
        end = time.perf_counter_ns()
        if reply != "hello":
            raise SystemExit("bad echo: %r" % (reply,))
        if i >= warmup:
            samples.append(end - start)
    print(" ".join(str(s) for s in samples), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        call(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
