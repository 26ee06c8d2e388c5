"""The soak's outputs besides standard output: `--exec` and MQTT (docs/soak.md, section 2).

ancsd's standard output is complete (the oracle holds it to the phones), so each other output is
checked against it, phone by phone, in **windows**: from one quiet point (a settle, a kill -9,
the start of an ancsd process) to the next. Within a window:

- exec: the lines the command appended to the phone's file are a subsequence of the lines ancsd
  printed for that phone, in order, none twice; the lines missing, over all phones, are exactly
  the events ancsd counted as dropped by exec in that window.
- MQTT: the payloads received on `ancsd/DEVICE/event`, less re-deliveries, are such a
  subsequence too, and the lines missing are exactly what ancsd counted as dropped by MQTT. A
  re-delivery (QoS 1 is at least once) is a payload equal to one of the REDELIVERY_SPAN payloads
  of that phone received before it, and is accepted only within the first 2 × REDELIVERY_SPAN
  messages the subscriber got after a broker restart, and only where the payload is not the
  next line ancsd printed.
- A window that ends with a kill -9 holds ancsd to the order only: what the killed process had
  waiting (exec's queue, MQTT's queue) is gone with it, and its counts cannot be read.

The functions here are pure: the driver (soak.py) reads the files and ancsd's status.
"""
import collections
import os
import socket
import subprocess
import threading
import time

from oracle import Violation

# ancsd hands at most 20 unacknowledged messages to libmosquitto (MQTTClient.window) and sends
# them again after a reconnect; the broker keeps at most 20 in flight to the subscriber
# (mosquitto's max_inflight_messages) and sends those again when it reconnects.
REDELIVERY_SPAN = 40


def short(line, n=200):
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line)
    return text if len(text) <= n else text[:n] + "…"


def match_exec(device, got, printed):
    """exec's lines for one phone in a window against ancsd's printed lines for it: returns how
    many printed lines the command never got; raises Violation if `got` is not a subsequence."""
    j = 0
    for i, line in enumerate(got):
        k = j
        while k < len(printed) and printed[k] != line:
            k += 1
        if k == len(printed):
            if line in printed[:j]:
                why = "twice, or out of order"
            else:
                why = "although ancsd never printed it in this window"
            raise Violation(f"exec got line {i + 1} of this window for {device} {why}: {short(line)}")
        j = k + 1
    return len(printed) - len(got)


class Recent:
    """The last REDELIVERY_SPAN payloads a phone's MQTT topic delivered (across windows)."""

    def __init__(self):
        self.lines = collections.deque(maxlen=REDELIVERY_SPAN)

    def __contains__(self, line):
        return line in self.lines

    def add(self, line):
        self.lines.append(line)


def match_mqtt(device, got, printed, recent):
    """MQTT payloads for one phone in a window, each `(payload, after_restart)`, against ancsd's
    printed lines for it. Returns (missing, redelivered); raises Violation if they are not a
    subsequence once re-deliveries are taken out. `recent` (a Recent) carries over windows."""
    j = 0
    matched = 0
    redelivered = 0
    for i, (line, after_restart) in enumerate(got):
        if j < len(printed) and printed[j] == line:
            j += 1
        elif after_restart and line in recent:
            redelivered += 1
            continue
        else:
            k = j
            while k < len(printed) and printed[k] != line:
                k += 1
            if k == len(printed):
                if line in recent or line in printed[:j]:
                    why = "twice (not right after a broker restart), or out of order"
                else:
                    why = "although ancsd never printed it in this window"
                raise Violation(f"MQTT delivered message {i + 1} of this window for {device} {why}: {short(line)}")
            j = k + 1
        matched += 1
        recent.add(line)
    return len(printed) - matched, redelivered


def check_window(what, missing, dropped, killed):
    """`missing` lines over all phones against the `dropped` count ancsd gave for the window."""
    if killed:
        return
    if missing != dropped:
        raise Violation(f"{what}: {missing} lines ancsd printed never came, but ancsd counted {dropped} dropped "
                        f"in this window")


def output_counts(status, name):
    """The counts of the output called `name` ("exec", or "MQTT" for the one whose name starts so)
    from `ancsd status --json`'s `outputs`; None if there is no such output."""
    for output in status.get("outputs", []):
        if output.get("name") == name or (name == "MQTT" and str(output.get("name", "")).startswith("MQTT ")):
            return output
    return None


def parse_subscriber_line(line):
    """`mosquitto_sub -v` prints `TOPIC PAYLOAD`: returns (device in lower case without colons or
    None, payload bytes) for an `ancsd/DEVICE/event` topic, else None."""
    topic, _, payload = line.partition(b" ")
    parts = topic.split(b"/")
    if len(parts) != 3 or parts[0] != b"ancsd" or parts[2] != b"event":
        return None
    return parts[1].decode(), payload


def topic_device(address):
    """`AA:BB:CC:DD:EE:01` → `aabbccddee01`, as docs/mqtt.md names the phone in topics."""
    return address.replace(":", "").lower()


# The driver's side: the broker, the subscriber, the files, the windows.

MOSQUITTO = "/usr/sbin/mosquitto"
EXEC_DRAIN_SECONDS = 10       # a settle gives exec this long to run what waits
MQTT_DRAIN_SECONDS = 30       # and MQTT this long to reconnect (0.5 s doubling) and deliver
BROKER_CONF = """listener {port} 127.0.0.1
persistence true
persistence_location {dir}/
allow_anonymous true
log_dest stderr
log_type error
log_type warning
log_type notice
{user}"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def exec_command(directory, variant=0, sleep=None):
    """The soak's exec command: appends its standard input (the event's JSON line) to the phone's
    file, with one /bin/sh that becomes `cat`. Variants differ in text only (an exec-reload);
    `sleep` makes it slow (an exec-slow spell)."""
    target = f'"{directory}/exec-$ANCSD_DEVICE.jsonl"'
    if sleep is not None:
        return f"sleep {sleep}; exec cat >> {target}"
    return [f"exec cat >> {target}",
            f"exec cat >> {target} # reload {variant}",
            f"out={target}; exec cat >> \"$out\""][variant % 3]


class Outputs:
    """ancsd's exec and MQTT outputs in a soak run: a private mosquitto broker, a subscriber that
    writes every event message to mqtt.txt, the exec command's files, and the checks by window."""

    def __init__(self, directory, devices, fail):
        self.dir = directory
        self.devices = devices
        self.by_topic = {topic_device(a): a for a in devices}
        self.fail = fail
        self.port = free_port()
        self.broker = None
        self.subscriber = None
        self.broker_lock = threading.Lock()   # held while the broker is down, and by a check
        self.lock = threading.Lock()
        self.printed = {a: [] for a in devices}          # stdout lines of the current window
        self.exec_offsets = {a: 0 for a in devices}
        self.exec_partial = {a: b"" for a in devices}
        self.sub_file = None
        self.sub_partial = b""
        self.sub_lines = 0
        self.after_restart_until = -1         # subscriber lines before this index may be re-deliveries
        self.received = {a: [] for a in devices}         # (payload, after_restart) of the window
        self.recent = {a: Recent() for a in devices}
        self.probes = set()
        self.probe_count = 0
        self.exec_base = 0                    # ancsd's dropped counts at the window's start
        self.mqtt_base = 0
        self.counts = collections.Counter()

    def path(self, name):
        return os.path.join(self.dir, name)

    def config(self, variant, sleep):
        return (f"exec = {exec_command(self.dir, variant, sleep)}\n"
                f"mqtt = mqtt://127.0.0.1:{self.port}\nmqtt-discovery-prefix = none\nmqtt-actions = yes\n")

    # processes

    def start(self):
        os.makedirs(self.path("mqtt"), exist_ok=True)
        for a in self.devices:
            open(self.path(f"exec-{a}.jsonl"), "w").close()
        with open(self.path("mqtt/mosquitto.conf"), "w") as f:
            f.write(BROKER_CONF.format(port=self.port, dir=self.path("mqtt"),
                                       user="user root\n" if os.geteuid() == 0 else ""))
        self.start_broker()
        # A persistent session (-c) at QoS 1: what the broker holds for it while it reconnects
        # after a broker restart is delivered then (the broker saves it on SIGTERM).
        self.sub_file = open(self.path("mqtt.txt"), "wb")
        self.subscriber = subprocess.Popen(
            ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(self.port), "-c", "-i", "soak-sub", "-q", "1", "-v",
             "-t", "ancsd/+/event"], stdout=self.sub_file, stderr=open(self.path("mqtt/subscriber.log"), "w"))
        self.reader = open(self.path("mqtt.txt"), "rb")
        self.sync_subscriber(first=True)

    def start_broker(self):
        with open(self.path("mqtt/broker.log"), "a") as log:
            self.broker = subprocess.Popen([MOSQUITTO, "-c", self.path("mqtt/mosquitto.conf")],
                                           stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.broker.poll() is not None or time.monotonic() > deadline:
                    self.fail(f"mosquitto did not start (status {self.broker.poll()}; see {self.path('mqtt/broker.log')})")
                time.sleep(0.02)

    def restart_broker(self, downtime):
        """Stops the broker (SIGTERM: it saves its sessions), waits `downtime`, starts it again on
        the same port. Returns False when a restart or a check already holds the broker."""
        if not self.broker_lock.acquire(blocking=False):
            return False
        try:
            self.broker.terminate()
            self.broker.wait(10)
            with self.lock:
                self.read_subscriber()
                self.after_restart_until = self.sub_lines + 2 * REDELIVERY_SPAN
            time.sleep(downtime)
            self.start_broker()
            self.counts["broker restarts"] += 1
            return True
        finally:
            self.broker_lock.release()

    def stop(self):
        for process in (self.subscriber, self.broker):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()

    def pids(self):
        return [("broker", self.broker.pid if self.broker else None),
                ("subscriber", self.subscriber.pid if self.subscriber else None)]

    # reading

    def printed_line(self, device, raw):
        """A line ancsd printed on standard output (the reader thread calls this for each)."""
        with self.lock:
            lines = self.printed.get(device)
            if lines is not None:
                lines.append(raw)

    def read_exec(self):
        """Every complete line the exec command appended since the last read, by phone."""
        got = {}
        for a in self.devices:
            with open(self.path(f"exec-{a}.jsonl"), "rb") as f:
                f.seek(self.exec_offsets[a])
                data = f.read()
            self.exec_offsets[a] += len(data)
            *lines, self.exec_partial[a] = (self.exec_partial[a] + data).split(b"\n")
            got[a] = lines
        return got

    def read_subscriber(self):
        data = self.reader.read()
        *lines, self.sub_partial = (self.sub_partial + data).split(b"\n")
        for line in lines:
            parsed = parse_subscriber_line(line)
            index = self.sub_lines
            self.sub_lines += 1
            if parsed is None:
                continue
            device, payload = parsed
            if device == "probe":
                self.probes.add(payload)
                continue
            address = self.by_topic.get(device)
            if address is None:
                self.fail(f"MQTT delivered an event for a phone the soak does not know: {short(line)}")
            self.received[address].append((payload, index < self.after_restart_until))

    def publish_probe(self):
        self.probe_count += 1
        token = f"probe {self.probe_count}".encode()
        result = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(self.port), "-q", "1",
                                 "-t", "ancsd/probe/event", "-m", token], capture_output=True, timeout=30)
        if result.returncode != 0:
            self.fail(f"mosquitto_pub could not publish the soak's probe: {result.stderr.decode()[:200]}")
        return token

    def sync_subscriber(self, first=False):
        """Publishes a probe and reads the subscriber until it shows: the broker had every message
        ancsd's status called delivered before the probe, and hands them on in order. The `first`
        time the subscriber may not have subscribed yet: probes go out again every 0.5 s."""
        token = self.publish_probe()
        tokens = {token}
        deadline = time.monotonic() + MQTT_DRAIN_SECONDS
        again = time.monotonic() + 0.5
        while True:
            with self.lock:
                self.read_subscriber()
                if tokens & self.probes:
                    return
            if first and time.monotonic() > again:
                tokens.add(self.publish_probe())
                again = time.monotonic() + 0.5
            if time.monotonic() > deadline:
                self.fail(f"the subscriber did not get the soak's probe within {MQTT_DRAIN_SECONDS} s "
                          f"(see {self.path('mqtt/subscriber.log')})")
            time.sleep(0.05)

    # the checks

    def settle(self, status, caught_up_after):
        """At a quiet point: exec has run everything and MQTT has delivered everything within a
        bounded wait; then each output is checked against standard output for the window."""
        with self.broker_lock:
            began = time.monotonic()
            while True:
                reply = status()
                ex, mq = output_counts(reply, "exec"), output_counts(reply, "MQTT")
                if ex is None or mq is None:
                    self.fail(f"ancsd's status shows no exec or MQTT output: {reply.get('outputs')}")
                exec_done = ex["running"] == 0 and ex["waiting"] == 0
                mqtt_done = mq["connected"] and mq["queued"] == 0
                if exec_done and mqtt_done:
                    break
                waited = time.monotonic() - began
                if not exec_done and waited > EXEC_DRAIN_SECONDS:
                    self.fail(f"exec did not catch up within {EXEC_DRAIN_SECONDS} s of a quiet point: {ex}")
                if not mqtt_done and waited > MQTT_DRAIN_SECONDS:
                    self.fail(f"MQTT did not deliver everything within {MQTT_DRAIN_SECONDS} s of a quiet point "
                              f"with the broker up: {mq}")
                time.sleep(0.1)
            execs = self.read_exec()
            caught_up_after(time.monotonic_ns())      # standard output read past this moment
            self.sync_subscriber()
            self.check(execs, ex["dropped"], mq["dropped"], killed=False)
            self.counts["exec dropped"] += ex["dropped"] - self.exec_base
            self.counts["MQTT dropped"] += mq["dropped"] - self.mqtt_base
            self.exec_base, self.mqtt_base = ex["dropped"], mq["dropped"]

    def ended(self, how):
        """ancsd is gone (`how`: "kill -9" or "SIGTERM"): what its exec commands still running
        append is waited for (files still for 0.5 s), then the window is checked for order only;
        the next process counts from 0."""
        last, still = None, time.monotonic()
        deadline = still + 5
        while time.monotonic() - still < 0.5 and time.monotonic() < deadline:
            sizes = [os.path.getsize(self.path(f"exec-{a}.jsonl")) for a in self.devices]
            if sizes != last:
                last, still = sizes, time.monotonic()
            time.sleep(0.05)
        with self.broker_lock:
            execs = self.read_exec()
            self.sync_subscriber()
            self.check(execs, 0, 0, killed=True)
        self.counts["windows ended by " + how] += 1
        self.exec_base = self.mqtt_base = 0

    def check(self, execs, exec_dropped, mqtt_dropped, killed):
        with self.lock:
            printed, self.printed = self.printed, {a: [] for a in self.devices}
            received, self.received = self.received, {a: [] for a in self.devices}
        exec_missing = mqtt_missing = 0
        for a in self.devices:
            exec_missing += match_exec(a, execs[a], printed[a])
            missing, redelivered = match_mqtt(a, received[a], printed[a], self.recent[a])
            mqtt_missing += missing
            self.counts["exec lines"] += len(execs[a])
            self.counts["MQTT messages"] += len(received[a])
            self.counts["MQTT re-deliveries"] += redelivered
            self.counts["printed lines"] += len(printed[a])
        check_window("exec", exec_missing, exec_dropped - self.exec_base, killed)
        check_window("MQTT", mqtt_missing, mqtt_dropped - self.mqtt_base, killed)
        self.counts["windows"] += 1
        if killed:
            self.counts["exec lines lost with a process"] += exec_missing
            self.counts["MQTT messages lost with a process"] += mqtt_missing
