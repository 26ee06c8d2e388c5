#!/usr/bin/env python3
"""Instructions per burst notification of ancsd or the simulator, counted by callgrind.

    python3 Benchmarks/cg_per_notification.py BIN_DIR [ancsd|ancs-phone-sim] [OUT_PREFIX]

Wall-clock figures move with whatever else the machine runs; instructions do not, so this is
how a change to the hot path is judged; make bench reports ancsd's against its target, at most
120,000 (docs/performance.md). It runs the end-to-end burst
twice, of SMALL and LARGE notifications, on a private dbus-daemon with the chosen process under
valgrind --tool=callgrind, and prints (I_large - I_small) / (LARGE - SMALL): start-up, the phone's
connection and the first notifications cancel out. BIN_DIR must hold a --static-swift-stdlib
build (make bench's, for one; valgrind 3.19 fails on the dynamically linked Swift runtime).
Needs valgrind (apt-get install valgrind). The profiles stay in OUT_PREFIX.small and
OUT_PREFIX.large (default /tmp/cgpn-WHO) for callgrind_annotate --inclusive=yes."""
import json, os, re, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import report  # noqa: E402

BIN = sys.argv[1]
WHO = sys.argv[2] if len(sys.argv) > 2 else "ancsd"
OUT = sys.argv[3] if len(sys.argv) > 3 else f"/tmp/cgpn-{WHO}"
SMALL, LARGE = 200, 1200
CONF = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>session</type><listen>unix:path={dir}/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
</busconfig>"""


def run(count, out):
    work = tempfile.mkdtemp(prefix="cgpn-")
    open(f"{work}/bus.conf", "w").write(CONF.format(dir=work))
    bus = subprocess.Popen(["dbus-daemon", f"--config-file={work}/bus.conf", "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, text=True)
    address = bus.stdout.readline().strip()
    settings = {"scenario": "cg", "mtu": 185, "acquire_notify": True,
                "devices": [{"address": "AA:BB:CC:DD:EE:01", "name": "Bench iPhone"}],
                "apps": {"com.apple.MobileSMS": "Messages"}}
    steps = [{"do": "wait_subscribed", "timeout": 120},
             {"after": 1.0, "do": "burst", "count": 5, "start_uid": 1, "rate": 20, "app": "com.apple.MobileSMS"},
             {"after": 2.0, "do": "burst", "count": count, "start_uid": 100000, "rate": 0, "app": "com.apple.MobileSMS"},
             {"do": "sleep", "seconds": 600}, {"do": "end"}]
    with open(f"{work}/s.jsonl", "w") as f:
        for line in [settings] + steps:
            f.write(json.dumps(line) + "\n")
    vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--quiet"]
    ancsd_cmd = [f"{BIN}/ancsd", "--bus", address, "run", "--format", "json", "--log-level", "warning"]
    sim_cmd = [f"{BIN}/ancs-phone-sim", "--bus", address, "--scenario", f"{work}/s.jsonl"]
    ancsd = subprocess.Popen((vg if WHO == "ancsd" else []) + ancsd_cmd, stdout=subprocess.PIPE)
    time.sleep(3 if WHO == "ancsd" else 0.5)
    sim = subprocess.Popen((vg if WHO != "ancsd" else []) + sim_cmd, stderr=subprocess.DEVNULL)
    last = 100000 + count - 1
    pattern = re.compile(rb'"uid":%d\D' % last)
    buf = b""
    deadline = time.time() + 900
    while time.time() < deadline:
        data = ancsd.stdout.read1(1 << 16)
        if not data:
            break
        buf = buf[-64:] + data
        if pattern.search(buf):
            break
    time.sleep(1)
    for p in (sim, ancsd):
        p.terminate()
        p.wait(timeout=60)
    bus.terminate()
    bus.wait()
    total = 0
    for line in open(out):
        if line.startswith("summary:") or line.startswith("totals:"):
            total = int(line.split()[1])
    return total


small = run(SMALL, OUT + ".small")
large = run(LARGE, OUT + ".large")
per_notification = (large - small) / (LARGE - SMALL)
print(f"{WHO} under callgrind: {small:,} instructions with a burst of {SMALL}, {large:,} with {LARGE}")
if WHO == "ancsd":
    report("instructions per burst notification (callgrind)", f"{per_notification:,.0f}", "<= 120,000",
           per_notification <= 120_000)
else:
    print(f"{WHO}: {per_notification:,.0f} instructions per burst notification")
