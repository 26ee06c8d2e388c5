#!/usr/bin/env python3
"""ancsd end-to-end benchmark against the simulated iPhone (make bench).

Measures, on a private dbus-daemon with the simulator answering instantly:
  - latency from the phone's Notification Source notification to ancsd's output line
    (the simulator stamps each NS with CLOCK_MONOTONIC; this script stamps each output line
    with the same clock as it reads it), median and p99;
  - throughput of a burst of notifications sent as fast as possible;
  - ancsd's resident memory after the burst;
  - ancsd's context switches (all threads) while idle for IDLE_SECONDS (default 30).
Targets: median < 2 ms, p99 < 10 ms, burst >= 2,000 notifications/s, RSS < 16 MB, 0 wakeups.
"""
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else ".build/release"
LATENCY_COUNT = int(os.environ.get("LATENCY_COUNT", "300"))
BURST_COUNT = int(os.environ.get("BURST_COUNT", "1000"))
IDLE_SECONDS = float(os.environ.get("IDLE_SECONDS", "30"))
ACQUIRE = os.environ.get("ACQUIRE_NOTIFY", "yes") == "yes"

BUS_CONF = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>session</type><listen>unix:path={dir}/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
</busconfig>"""


def context_switches(pid):
    """Voluntary + involuntary context switches of each thread, by thread ID."""
    counts = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                counts[task] = sum(int(line.split()[1]) for line in f
                                   if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")))
        except FileNotFoundError:
            pass
    return counts


def wakeups(before, after):
    """Switches made during the interval: by threads that lived through it, plus every switch of
    threads that started in it, plus one for each thread that ended in it."""
    return (sum(after[t] - before.get(t, 0) for t in after)
            + sum(1 for t in before if t not in after))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


class Lines:
    """Reads a child's stdout lines without blocking, stamping each with CLOCK_MONOTONIC."""

    def __init__(self, stream):
        self.fd = stream.fileno()
        os.set_blocking(self.fd, False)
        self.buffer = b""
        self.lines = []

    def pump(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        try:
            data = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return True
        if not data:
            return False
        self.buffer += data
        *complete, self.buffer = self.buffer.split(b"\n")
        for line in complete:
            self.lines.append((now, json.loads(line)))
        return True

    def wait_for(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, event in self.lines:
                if predicate(event):
                    return True
            self.pump(0.05)
        return False


def main():
    work = tempfile.mkdtemp(prefix="ancsd-bench-")
    with open(f"{work}/bus.conf", "w") as f:
        f.write(BUS_CONF.format(dir=work))
    bus = subprocess.Popen(["dbus-daemon", f"--config-file={work}/bus.conf", "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, text=True)
    address = bus.stdout.readline().strip()
    timeline = f"{work}/timeline.jsonl"
    scenario = f"{work}/bench.jsonl"
    settings = {"scenario": "bench", "mtu": 185, "acquire_notify": ACQUIRE,
                "devices": [{"address": "AA:BB:CC:DD:EE:01", "name": "Bench iPhone"}],
                "apps": {"com.apple.MobileSMS": "Messages"}}
    steps = [
        {"do": "wait_subscribed", "timeout": 30},
        {"after": 0.5, "do": "burst", "count": LATENCY_COUNT, "start_uid": 1, "rate": 100,
         "app": "com.apple.MobileSMS"},
        {"after": 1.0, "do": "burst", "count": BURST_COUNT, "start_uid": 100000, "rate": 0,
         "app": "com.apple.MobileSMS"},
        {"do": "sleep", "seconds": IDLE_SECONDS + 60},
        {"do": "end"},
    ]
    with open(scenario, "w") as f:
        f.write(json.dumps(settings) + "\n")
        for step in steps:
            f.write(json.dumps(step) + "\n")
    ancsd = subprocess.Popen([f"{BIN}/ancsd", "--bus", address, "run", "--format", "json", "--log-level", "warning"],
                             stdout=subprocess.PIPE)
    lines = Lines(ancsd.stdout)
    time.sleep(0.5)
    rss_start = rss_kb(ancsd.pid)
    phone = subprocess.Popen([f"{BIN}/ancs-phone-sim", "--bus", address, "--scenario", scenario,
                              "--timeline", timeline], stderr=subprocess.DEVNULL)
    try:
        added = lambda e: e.get("type") == "added"
        if not lines.wait_for(lambda e: added(e) and e["uid"] == LATENCY_COUNT, 60):
            sys.exit("bench: the latency run did not finish")
        last_burst_uid = 100000 + BURST_COUNT - 1
        if not lines.wait_for(lambda e: added(e) and e["uid"] == last_burst_uid, 120):
            sys.exit("bench: the burst did not finish")
        sent = {}
        with open(timeline) as f:
            for line in f:
                record = json.loads(line)
                if record.get("event") == "added":
                    sent[record["uid"]] = record["t_ns"]
        arrived = {e["uid"]: t for t, e in lines.lines if added(e)}
        latencies = sorted((arrived[uid] - sent[uid]) / 1e6 for uid in range(1, LATENCY_COUNT + 1)
                           if uid in arrived and uid in sent)
        burst_uids = range(100000, 100000 + BURST_COUNT)
        burst_seconds = (max(arrived[u] for u in burst_uids) - min(sent[u] for u in burst_uids)) / 1e9
        rss = rss_kb(ancsd.pid)
        # Idle: let worker threads that served the burst retire, then count every thread's switches.
        time.sleep(10)
        before = context_switches(ancsd.pid)
        time.sleep(IDLE_SECONDS)
        after = context_switches(ancsd.pid)
        mode = "AcquireNotify" if ACQUIRE else "StartNotify"
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(f"ancsd end to end ({mode}, simulator answering instantly, release build)")
        print(f"  NS -> output latency over {len(latencies)} notifications: "
              f"median {statistics.median(latencies):.3f} ms, p99 {p99:.3f} ms, max {latencies[-1]:.3f} ms"
              f"   (targets: < 2 ms, < 10 ms)")
        print(f"  burst of {BURST_COUNT}: {BURST_COUNT / burst_seconds:,.0f} notifications/s "
              f"({burst_seconds * 1000:.0f} ms)   (target: >= 2,000/s)")
        print(f"  RSS after the burst: {rss / 1024:.1f} MB   (target: < 16 MB)")
        print(f"  RSS before any phone: {rss_start / 1024:.1f} MB")
        print(f"  context switches while idle for {IDLE_SECONDS:.0f} s (all {len(after)} threads): "
              f"{wakeups(before, after)}   (target: 0)")
    finally:
        for process in (phone, ancsd, bus):
            process.terminate()
        for process in (phone, ancsd, bus):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    main()
