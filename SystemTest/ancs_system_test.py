#!/usr/bin/env python3
"""The ANCS system test, run inside the VM by SystemTest/guest-ancs (see docs/system-test.md).

Real kernel Bluetooth (two btvirt LE controllers), real bluetoothd, the real ancsd on hci0 and
an iPhone played by ancs-gatt-phone on hci1 as a BlueZ GATT application. Every check reads
ancsd's own JSON output; the phone's event stream is used only to know when to act.
"""
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import traceback

import raw_stranger

BIN = os.environ.get("SYSTEM_TEST_BIN", "/repo/.build/release")
# The controllers (SystemTest/stack.sh start_controllers): hci0 (ancsd), hci1 (the phone), a
# stranger and REMOTE (the remote pass's accessory and phone) on one LE radio; DUAL, two
# dual-mode ones on a radio of their own (the first advertises, the second scans).
STRANGER = "hci2"
REMOTE = ("hci3", "hci4")
DUAL = ("hci5", "hci6")
LOGS = "/out/logs"
BLUETOOTHD = "/usr/libexec/bluetooth/bluetoothd"
APPS = {"com.apple.MobileSMS": "Messages", "com.apple.mobilemail": "Mail", "com.apple.mobilecal": "Calendar"}
# The phone's player (AMS): the track it starts with, and a title longer than an Entity Update
# carries at MTU 48 (40 bytes of text), which ancsd reads whole through the Entity Attribute.
MEDIA = {"player": "Music", "title": "Clair de lune", "artist": "Claude Debussy", "album": "Suite bergamasque",
         "duration": 300, "state": "paused"}
LONG_TITLE = "Goldberg Variations, BWV 988: Aria da capo e fine (live at the Wigmore Hall)"
LONG_MESSAGE = " ".join(f"Part {i:03d} of a long message that needs many Data Source fragments." for i in range(22))
START = time.monotonic()
results = []


class Failure(Exception):
    pass


kernel_crash = []  # the first line of a kernel BUG or Oops, once the guest's kernel has crashed


def watch_kernel():
    """Follows the kernel log: a crashed kernel Bluetooth stack cannot recover, so every wait
    ends at once with the kernel's words instead of running into its timeout."""
    try:
        with open("/dev/kmsg", "rb", buffering=0) as kmsg:
            while True:
                try:
                    record = kmsg.read(8192).decode(errors="replace")
                except OSError:  # EPIPE: records were overwritten while we slept
                    continue
                text = record.split(";", 1)[-1].strip()
                if not kernel_crash and any(w in text for w in ("kernel BUG at", "Oops:", "general protection fault", "blocked for more than")):
                    kernel_crash.append(text)
    except OSError as error:
        say(f"cannot follow the kernel log: {error}")


def say(text):
    print(f"[{time.monotonic() - START:7.2f}] {text}", flush=True)


def check(condition, what):
    if not condition:
        raise Failure(what)


def poll_until(condition, seconds, failure):
    """Checks `condition` every 0.2 s until it holds; fails with `failure` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        check(time.monotonic() < deadline, failure)
        time.sleep(0.2)


def run(*command, timeout=30, check_status=True):
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check_status and done.returncode != 0:
        raise Failure(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


class Lines:
    """A child process whose standard output is JSON Lines, read on a thread of its own."""

    def __init__(self, name, command, stdin=None, env=None):
        self.name = name
        self.log = open(f"{LOGS}/{name}.stderr", "a")
        self.raw = open(f"{LOGS}/{name}.stdout", "a")
        self.process = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=self.log, env=env, text=True)
        self.lines = []
        self.cursor = 0
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.raw.write(line)
            self.raw.flush()
            try:
                value = json.loads(line)
            except ValueError:
                value = {"unparsed": line}
            with self.changed:
                self.lines.append(value)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait(self, predicate, what, timeout=60):
        """The first line after the cursor that matches; the cursor moves past it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for index in range(self.cursor, len(self.lines)):
                    if predicate(self.lines[index]):
                        self.cursor = index + 1
                        return self.lines[index]
                if kernel_crash:
                    raise Failure(f"the guest kernel crashed while waiting for {what}: {kernel_crash[0]}")
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and self.cursor >= len(self.lines)):
                    tail = "\n    ".join(json.dumps(v) for v in self.lines[-8:])
                    raise Failure(f"{self.name}: no {what} within {timeout} s; last lines:\n    {tail}")
                self.changed.wait(min(left, 0.5))

    def all(self, predicate):
        with self.changed:
            return [v for v in self.lines if predicate(v)]

    def ahead(self, predicate):
        """The lines after the cursor that match, the cursor left where it is."""
        with self.changed:
            return [v for v in self.lines[self.cursor:] if predicate(v)]

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                raise Failure(f"{self.name} did not stop within 10 s of SIGTERM")
        return self.process.returncode


class Phone(Lines):
    """ancs-gatt-phone on hci1 (or `adapter`), strict (as iOS) unless `lenient`: it connects only
    to a HID advertisement, never calls Pair(), registers ANCS once bonded, reconnects only through
    its bluetoothd's HID host, and reports the Report Map and input reports that host got."""

    def __init__(self, peer, lenient=False, accessory="keyboard", name="phone", adapter="hci1"):
        super().__init__(name, [f"{BIN}/ancs-gatt-phone", "--adapter", adapter, "--peer", peer]
                         + (["--lenient"] if lenient else []), stdin=subprocess.PIPE)
        self.line = 0
        self.do({"scenario": "system-test", "renumber_on_connect": False, "apps": APPS, "ams": True, "media": MEDIA,
                 "accessory": accessory})

    def do(self, step):
        """Sends a scenario line; returns its line number (the phone reports {"event": "step", "line": N})."""
        self.process.stdin.write(json.dumps(step) + "\n")
        self.process.stdin.flush()
        self.line += 1
        return self.line

    def event(self, name, timeout=60, **fields):
        return self.wait(lambda e: e.get("event") == name and all(e.get(k) == v for k, v in fields.items()),
                         f'phone event "{name}" {fields or ""}', timeout)


class Stack:
    """bluetoothd, restartable with other settings (the ATT MTU it offers)."""

    def __init__(self):
        self.process = None
        self.log = open(f"{LOGS}/bluetoothd.log", "a")

    def start(self, mtu=517, eatt=False, auto_enable=True):
        """bluetoothd offering ATT MTU `mtu`, with EATT (Channels = 3) or without (Channels = 1).

        Each restart is followed by a reconnect with the bond, and now and then that reconnect
        crashed Linux 6.1 (list corruption in hci_chan_del as bluetoothd closes an L2CAP socket
        while a failed re-encryption tears the link down; the VM boots 6.12 now, the bookworm
        root still 6.1): the test keeps restarts few, and SystemTest/run boots the VM again when
        the kernel crashed."""
        conf = f"/etc/bluetooth/system-test-{mtu}-{'eatt' if eatt else 'att'}.conf"
        with open("/etc/bluetooth/main.conf") as base, open(conf, "w") as out:
            text = base.read().replace("#ExchangeMTU = 517", f"ExchangeMTU = {mtu}")
            text = text if auto_enable else text.replace("AutoEnable=true", "AutoEnable=false")
            out.write(text if eatt else text.replace("#Channels = 3", "Channels = 1"))
        self.log.write(f"==== bluetoothd with ExchangeMTU {mtu}, {'EATT' if eatt else 'no EATT'}\n")
        self.log.flush()
        self.process = subprocess.Popen([BLUETOOTHD, "--nodetach", "--debug", "-f", conf], stdout=self.log, stderr=self.log)
        def both_adapters():
            check(self.process.poll() is None, f"bluetoothd exited with {self.process.returncode}")
            return "hci1" in run("busctl", "--system", "tree", "org.bluez", check_status=False)
        poll_until(both_adapters, 20, "bluetoothd did not show both adapters within 20 s")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(10)

    def power(self, adapter, on):
        """Powers `adapter` on or off; retried while bluetoothd is busy with it (right after its start)."""
        def done():
            run("busctl", "--system", "set-property", "org.bluez", f"/org/bluez/{adapter}", "org.bluez.Adapter1",
                "Powered", "b", "true" if on else "false", check_status=False)
            out = run("busctl", "--system", "get-property", "org.bluez", f"/org/bluez/{adapter}", "org.bluez.Adapter1",
                      "Powered", check_status=False)
            return out.strip() == ("b true" if on else "b false")
        poll_until(done, 20, f"{adapter} was not powered {'on' if on else 'off'} within 20 s")

    def address(self, adapter):
        out = run("busctl", "--system", "get-property", "org.bluez", f"/org/bluez/{adapter}", "org.bluez.Adapter1", "Address")
        return out.split('"')[1]


def ancsd(name, *arguments):
    return Lines(name, [f"{BIN}/ancsd", *arguments])


def notification(uid, title, message, app="com.apple.MobileSMS", category="social", **extra):
    step = {"do": "add", "uid": uid, "category": category, "app": app, "title": title, "message": message,
            "date": "20261130T101500", **extra}
    return step


def expect_added(daemon, uid, title, message, pre_existing=False, timeout=60, seen_before=False):
    event = daemon.wait(lambda e: e.get("type") == "added" and e.get("uid") == uid and e.get("title") == title,
                        f'"added" for uid {uid} ({title})', timeout)
    check(event["message"] == message, f"uid {uid}: message differs: {event['message']!r}")
    check(event["message_size"] == len(message.encode()), f"uid {uid}: message_size {event['message_size']}")
    check(event["complete"] is True, f"uid {uid}: not complete: {event}")
    check(event["pre_existing"] is pre_existing, f"uid {uid}: pre_existing is {event['pre_existing']}")
    check(event["seen_before"] is seen_before, f"uid {uid}: seen_before is {event['seen_before']}")
    return event


# The adapter settings `ancsd pair` must leave as it found them: bluetoothd's Adapter1 properties
# and the kernel's own settings (btmgmt: "powered connectable bondable le …").
ADAPTER_PROPERTIES = ["Powered", "Discoverable", "DiscoverableTimeout", "Pairable", "PairableTimeout", "Alias"]


def adapter_settings(adapter):
    settings = {}
    for name in ADAPTER_PROPERTIES:
        settings[name] = run("busctl", "--system", "get-property", "org.bluez", f"/org/bluez/{adapter}", "org.bluez.Adapter1",
                             name).strip()
    info = run("btmgmt", "--index", adapter[3:], "info", timeout=30)
    settings["kernel"] = next((line.split(":", 1)[1].strip() for line in info.splitlines() if "current settings" in line), "?")
    return settings


def settled_settings(adapter):
    """The settings once they stop changing. Every default agent registered with this one
    bluetoothd (bluetoothctl's, the phone's) turns every adapter's Pairable on, and the last one
    leaving turns it off: "as found" is measured after the other programs are in place."""
    current = adapter_settings(adapter)
    for _ in range(20):
        time.sleep(0.5)
        again = adapter_settings(adapter)
        if again == current:
            return current
        current = again
    raise Failure(f"{adapter}'s settings keep changing: {current}")


def check_settings_kept(adapter, before):
    after = adapter_settings(adapter)
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    check(not changed, f"ancsd pair changed {adapter}'s settings (before, after): {changed}")
    return after


# What a controller was told to advertise and what another one received, from the kernel's HCI
# monitor (ancsd capture's btsnoop file, datalink 2001: the record's flags carry the controller
# index and the packet type).
ANCS_SOLICITATION = bytes.fromhex("7905F431B5CE4E99A40F4B1E122D00D0")[::-1]
AD_NAMES = {0x01: "flags", 0x08: "short name", 0x09: "name", 0x15: "solicit128", 0x19: "appearance"}


def monitor_records(path):
    with open(path, "rb") as f:
        data = f.read()
    offset = 16
    while offset + 24 <= len(data):
        included = int.from_bytes(data[offset + 4:offset + 8], "big")
        flags = int.from_bytes(data[offset + 8:offset + 12], "big")
        yield flags >> 16, flags & 0xFFFF, data[offset + 24:offset + 24 + included]
        offset += 24 + included


def ad_structures(data):
    out, i = [], 0
    while i < len(data) and data[i]:
        out.append((data[i + 1], bytes(data[i + 2:i + 1 + data[i]])))
        i += 1 + data[i]
    return out


def ad_field(data, *types):
    return next((value for kind, value in ad_structures(data) if kind in types), None)


def describe_ad(data):
    parts = []
    for kind, value in ad_structures(data):
        name = AD_NAMES.get(kind, f"0x{kind:02x}")
        if kind in (0x08, 0x09):
            parts.append(f'{name} "{value.decode(errors="replace")}"')
        elif kind == 0x15 and value == ANCS_SOLICITATION:
            parts.append("solicit ANCS")
        else:
            parts.append(f"{name} {value.hex()}")
    return f"{len(data)} bytes: " + ", ".join(parts)


def advertising(path):
    """Per controller index: the advertising and scan response data it was told to send (LE Set
    Advertising Data / Scan Response Data and their extended forms) and the advertising reports
    it received (legacy and extended)."""
    found = {}
    for index, kind, packet in monitor_records(path):
        entry = found.setdefault(index, {"adv": [], "scan_rsp": [], "reports": []})
        if kind == 2 and len(packet) >= 3:  # a command
            opcode, params = int.from_bytes(packet[0:2], "little"), packet[3:]
            if opcode in (0x2008, 0x2009) and params:
                entry["adv" if opcode == 0x2008 else "scan_rsp"].append(params[1:1 + params[0]])
            elif opcode in (0x2037, 0x2038) and len(params) >= 4:
                entry["adv" if opcode == 0x2037 else "scan_rsp"].append(params[4:4 + params[3]])
        elif kind == 3 and len(packet) >= 4 and packet[0] == 0x3E:  # an LE meta event
            subevent, body = packet[2], packet[3:]
            if subevent == 0x02 and len(body) >= 10 and body[0] == 1:  # LE Advertising Report
                entry["reports"].append(("scan_rsp" if body[1] == 0x04 else "adv", body[10:10 + body[9]]))
            elif subevent == 0x0D and len(body) >= 25 and body[0] == 1:  # LE Extended Advertising Report
                event_type = int.from_bytes(body[1:3], "little")
                entry["reports"].append(("scan_rsp" if event_type & 0x08 else "adv", body[25:25 + body[24]]))
    return found


def acl_payloads(path):
    """(controller index, "sent" or "received", L2CAP CID, payload) of each first ACL fragment."""
    for index, kind, packet in monitor_records(path):
        if kind in (4, 5) and len(packet) >= 8 and (packet[1] >> 4) & 0x3 in (0, 2):
            yield index, "sent" if kind == 4 else "received", int.from_bytes(packet[6:8], "little"), packet[8:]


SMP_NAMES = {0x01: "Pairing Request", 0x02: "Pairing Response", 0x03: "Pairing Confirm", 0x04: "Pairing Random",
             0x05: "Pairing Failed", 0x06: "Encryption Information", 0x07: "Central Identification",
             0x08: "Identity Information", 0x09: "Identity Address Information", 0x0A: "Signing Information",
             0x0B: "Security Request", 0x0C: "Pairing Public Key", 0x0D: "Pairing DHKey Check"}


def smp_pdus(path):
    """Every SMP PDU (CID 0x0006) a host sent: (controller index, code), in order."""
    return [(index, payload[0]) for index, direction, cid, payload in acl_payloads(path)
            if cid == 0x0006 and direction == "sent" and payload]


def security_request_delays(path, index=0):
    """Seconds from each LE connection of controller `index` (its LE (Enhanced) Connection
    Complete) to the SMP Security Request its host sent on it, from the capture's timestamps."""
    with open(path, "rb") as f:
        data = f.read()
    offset, connected, delays = 16, None, []
    while offset + 24 <= len(data):
        included = int.from_bytes(data[offset + 4:offset + 8], "big")
        flags = int.from_bytes(data[offset + 8:offset + 12], "big")
        t = int.from_bytes(data[offset + 16:offset + 24], "big") / 1e6
        packet = data[offset + 24:offset + 24 + included]
        offset += 24 + included
        if flags >> 16 != index:
            continue
        kind = flags & 0xFFFF
        if kind == 3 and len(packet) >= 4 and packet[0] == 0x3E and packet[2] in (0x01, 0x0A) and packet[3] == 0:
            connected = t
        elif kind == 3 and packet[:1] == b"\x05":
            connected = None
        elif (kind == 4 and len(packet) >= 9 and (packet[1] >> 4) & 0x3 in (0, 2)
              and int.from_bytes(packet[6:8], "little") == 0x0006 and packet[8] == 0x0B and connected is not None):
            delays.append(t - connected)
            connected = None
    return delays


def describe_smp(pdus):
    return ", ".join(f"hci{index} {SMP_NAMES.get(code, hex(code))}" for index, code in pdus) or "none"


def notifications_sent(path, index):
    """ATT Handle Value Notifications (0x1B) and Multiple Handle Value Notifications (0x23) the
    host of controller `index` sent, on the fixed ATT channel and on EATT channels (after the
    K-frame's 2-byte SDU length)."""
    count = 0
    for i, direction, cid, payload in acl_payloads(path):
        if i != index or direction != "sent":
            continue
        opcode = payload[0] if cid == 0x0004 and payload else payload[2] if 0x40 <= cid <= 0x7F and len(payload) > 2 else None
        count += opcode in (0x1B, 0x23)
    return count


def check_pair_advertisement(found, advertiser, scanner, name, label):
    """The pair window's PDUs as sent by `advertiser` and received by `scanner`; returns their descriptions."""
    sent = found.get(advertiser, {"adv": [], "scan_rsp": []})
    ours = [d for d in sent["adv"] if ad_field(d, 0x15) == ANCS_SOLICITATION]
    window = [d for d in ours if (ad_field(d, 0x01) or b"\0")[0] & 0x02]
    check(window, f"{label}: hci{advertiser} was never told to advertise LE General Discoverable with the ANCS solicitation: "
                  f"{[describe_ad(d) for d in sent['adv']]}")
    primary = window[-1]
    check(len(primary) <= 31, f"{label}: primary PDU of {len(primary)} bytes")
    check(ad_field(primary, 0x01) == b"\x06", f"{label}: flags {ad_field(primary, 0x01)!r}, not 0x06 (LE General Discoverable, "
                                              f"BR/EDR not supported): {describe_ad(primary)}")
    response = [d for d in sent["scan_rsp"] if (ad_field(d, 0x08, 0x09) or b"").decode(errors="replace") == name]
    check(response, f"{label}: no scan response with the name {name!r}: {[describe_ad(d) for d in sent['scan_rsp']]}")
    received = found.get(scanner, {"reports": []})["reports"]
    check(any(k == "adv" and d == primary for k, d in received),
          f"{label}: hci{scanner} never received the primary PDU ({len(received)} reports)")
    check(any(k == "scan_rsp" and d == response[-1] for k, d in received),
          f"{label}: hci{scanner} never received the scan response with the name")
    return describe_ad(primary), describe_ad(response[-1])


def step(name):
    def wrap(body):
        def timed(*args):
            begun = time.monotonic()
            say(f"-- {name}")
            body(*args)
            results.append((name, time.monotonic() - begun))
            say(f"ok {name} ({time.monotonic() - begun:.1f} s)")
        return timed
    return wrap


def pair_from_peripheral(btsnoop, name, program=f"{BIN}/ancsd"):
    """What ancsd pair's Device1.Pair() puts on the air from the peripheral role, alone: ancsd
    pair on hci0 with --accessory none (nothing there makes the other side pair by itself),
    bluetoothctl on hci1 (LE-only, so the link is LE) connects and never asks to pair. Returns
    the SMP PDUs hci0 and hci1 sent, in order, and ancsd pair's account of its Pair() call. The
    bond it makes is removed on both sides before the phone comes."""
    address = {adapter: run("busctl", "--system", "get-property", "org.bluez", f"/org/bluez/{adapter}", "org.bluez.Adapter1",
                            "Address").split('"')[1] for adapter in ("hci0", "hci1")}
    before = len(smp_pdus(btsnoop))
    scanner = subprocess.Popen(["bluetoothctl"], stdin=subprocess.PIPE, stdout=open(f"{LOGS}/bluetoothctl-connect.log", "w"),
                               stderr=subprocess.STDOUT, text=True)
    scanner.stdin.write(f"select {address['hci1']}\nscan le\n")
    scanner.stdin.flush()
    pairing = Lines("ancsd-pair-peripheral", [program, "pair", "--adapter", "hci0", "--accessory", "none", "--yes",
                                              "--timeout", "20", "--name", name])
    device = "/org/bluez/hci1/dev_" + address["hci0"].replace(":", "_")
    poll_until(lambda: device in run("busctl", "--system", "tree", "org.bluez", check_status=False), 30,
               "hci1 did not see hci0's pair window")
    scanner.stdin.write(f"scan off\nconnect {address['hci0']}\n")
    scanner.stdin.flush()
    try:
        status = pairing.process.wait(60)
    except subprocess.TimeoutExpired:
        raise Failure("ancsd pair --accessory none did not end within 60 s")
    scanner.stdin.write("quit\n")
    scanner.stdin.close()
    scanner.wait(10)
    pdus = [(index, code) for index, code in smp_pdus(btsnoop)[before:] if index in (0, 1)]
    delays = security_request_delays(btsnoop)
    with open(f"{LOGS}/ancsd-pair-peripheral.stderr") as log:
        said = [line.strip() for line in log if "Pair()" in line or "asking it to pair" in line]
    for adapter, other in (("hci0", "hci1"), ("hci1", "hci0")):
        run("busctl", "--system", "call", "org.bluez", f"/org/bluez/{adapter}", "org.bluez.Adapter1", "RemoveDevice", "o",
            f"/org/bluez/{adapter}/dev_" + address[other].replace(":", "_"), check_status=False)
    check(status == 3, f"ancsd pair --accessory none exited {status}, not 3 (a bond without ANCS ends nothing)")
    check(said, "ancsd pair did not ask the connected, unpaired device to pair")
    check(pdus and pdus[0] == (0, 0x0B), f"ancsd's Device1.Pair() as peripheral sent no SMP Security Request first: "
                                         f"{describe_smp(pdus)}; ancsd pair said {said}")
    check((1, 0x01) in pdus, f"hci1 never answered the Security Request with a Pairing Request: {describe_smp(pdus)}")
    # ancsd pair waits 5 s (PairingOptions.securityRequestDelay) for the phone to begin pairing
    # itself, as Apple's guidelines ask, before it sends the Security Request.
    check(delays and 4.5 <= delays[-1] <= 15, f"the Security Request came {delays} s after the connection, not 5 s")
    return {"smp": describe_smp(pdus), "ancsd_pair": said, "security_request_after_s": round(delays[-1], 3)}


@step("Device1.Pair() from the peripheral role: ancsd pair --accessory none on hci0, bluetoothctl on hci1 connects "
      "without pairing; the HCI capture shows what Pair() sent")
def pair_from_peripheral_step(stack, ctx):
    seen = ctx["pair_from_peripheral"] = pair_from_peripheral(f"{LOGS}/ancs.btsnoop", "ancsd asks to pair")
    say(f"   SMP sent: {seen['smp']}; the Security Request {seen['security_request_after_s']} s after the LE connection "
        f"(the capture's timestamps)")
    say(f"   ancsd pair: {seen['ancsd_pair']}")


@step(f"advertising on a dual-mode controller: ancsd pair on {DUAL[0]} while {DUAL[1]} scans; {DUAL[0]}'s settings untouched")
def advertising_dual(stack, ctx):
    poll_until(lambda: DUAL[1] in run("busctl", "--system", "tree", "org.bluez", check_status=False), 20,
               f"bluetoothd did not show the dual-mode adapters {DUAL[0]} and {DUAL[1]}")
    # Connectable on, as on a desktop that pages bonded BR/EDR devices: ancsd pair used to turn
    # it off by putting Discoverable back (bluetoothd 5.66 does that with Set Connectable off).
    run("btmgmt", "--index", DUAL[0][3:], "connectable", "on", timeout=30)
    scanner = subprocess.Popen(["bluetoothctl"], stdin=subprocess.PIPE, stdout=open(f"{LOGS}/bluetoothctl-scan.log", "w"),
                               stderr=subprocess.STDOUT, text=True)
    scanner.stdin.write(f"select {stack.address(DUAL[1])}\nscan le\n")
    scanner.stdin.flush()
    poll_until(lambda: run("busctl", "--system", "get-property", "org.bluez", f"/org/bluez/{DUAL[1]}", "org.bluez.Adapter1",
                           "Discovering").strip() == "b true", 20, f"bluetoothctl did not start scanning on {DUAL[1]}")
    before = settled_settings(DUAL[0])
    check("connectable" in before["kernel"].split(), f"{DUAL[0]} is not connectable before the window: {before}")
    # Nobody pairs: the window times out (exit status 3) and puts everything back.
    pairing = ancsd("ancsd-pair-dual", "pair", "--adapter", DUAL[0], "--timeout", "10", "--name", "ancsd on a dual-mode controller")
    try:
        status = pairing.process.wait(60)
    except subprocess.TimeoutExpired:
        raise Failure(f"ancsd pair on {DUAL[0]} did not end within 60 s")
    check(status == 3, f"ancsd pair on {DUAL[0]} exited {status}, not 3 (no phone within the timeout)")
    pairing.wait(lambda e: 'advertising as "ancsd on a dual-mode controll"' in e.get("unparsed", ""),
                 "the name cut to 29 bytes", timeout=10)
    after = check_settings_kept(DUAL[0], before)
    scanner.stdin.write("scan off\nquit\n")
    scanner.stdin.close()
    scanner.wait(10)
    say(f"   {DUAL[0]} (dual-mode) before and after: {after}")
    ctx["advertising_dual"] = after


def confirmations(phone, pair_log):
    """Who confirmed the passkey: the phone's agent and/or ancsd pair's (in the VM both adapters
    share one bluetoothd, whose default agent answers both sides)."""
    phone_side = [e for e in phone.all(lambda e: e.get("event") == "agent") if "requestConfirmation" in e["request"]]
    with open(f"{LOGS}/{pair_log}.stdout") as out, open(f"{LOGS}/{pair_log}.stderr") as err:
        text = out.read() + err.read()
    return len(phone_side), text.count("Pairing request from")


def check_strict_pairing(phone, pair_log, btsnoop, since=0, accessory=0, phone_index=1):
    """The strict phone paired without asking: no Pair() of its own, the passkey compared,
    ANCS registered only after the bond; returns what the HCI capture shows of SMP (controllers
    `accessory` and `phone_index`: hci0 and hci1 unless told)."""
    check(not phone.all(lambda e: e.get("event") == "pairing"), "the strict phone called Pair() itself")
    listed = phone.all(lambda e: e.get("event") == "advertisement")
    check(listed and listed[-1]["listed"], f"the phone never listed the accessory: {listed}")
    on_phone, on_ancsd = confirmations(phone, pair_log)
    check(on_phone + on_ancsd >= 1, "no passkey comparison: neither the phone's agent nor ancsd pair confirmed a passkey")
    events = [e.get("event") for e in phone.lines]
    check("application_registered" in events and events.index("application_registered") > events.index("paired"),
          f"the phone registered ANCS before bonding: {events}")
    pdus = [(index, code) for index, code in smp_pdus(btsnoop)[since:] if index in (accessory, phone_index)]
    check(any(code == 0x01 for _, code in pdus), f"no SMP Pairing Request in the capture: {describe_smp(pdus)}")
    # The phone begins, as Apple's guidelines ask: its HID host (bluetoothd's HoG, which wants a
    # bond before it uses a HID service) sends the Pairing Request well within the 5 s ancsd pair
    # waits before a Security Request of its own, which is then never sent.
    check(pdus[0] == (phone_index, 0x01) and (accessory, 0x0B) not in pdus,
          f"the phone did not begin the pairing, or ancsd sent a Security Request: {describe_smp(pdus)}")
    return {"started_by": "phone's HID host",
            "listing": listed[-1], "confirmed_by_phone": on_phone, "confirmed_by_ancsd": on_ancsd, "smp": describe_smp(pdus)}


def check_report_map(phone, asked):
    """The Report Map the phone's HID host read, checked against the shape asked for: the
    keyboard's Keyboard application, or the remote's Consumer Control only; never flagged."""
    seen = phone.all(lambda e: e.get("event") == "report_map")  # it may have come while other steps read on
    report_map = seen[-1] if seen else phone.event("report_map", timeout=60)
    check(report_map.get("asked") == asked, f"the phone was not told {asked} was asked for: {report_map}")
    check(report_map.get("accessory_flagged") is False, f"the phone flagged the Report Map ({asked} asked for): {report_map}")
    check(report_map.get("keyboard") is (asked == "keyboard"), f"the {asked}'s Report Map as the phone read it: {report_map}")
    applications = ["0x1:0x6"] if asked == "keyboard" else ["0xC:0x1"]
    check(report_map.get("applications") == applications, f"applications {report_map.get('applications')}, not {applications}")
    return report_map


def pair_remote_pass(btsnoop, accessory, phone_adapter, program=f"{BIN}/ancsd", serve=None):
    """The strict pairing once with --accessory remote, a phone told "remote", on controllers of
    its own (ancsd pair on `accessory`, the phone on `phone_adapter`): it pairs as with the
    keyboard (the phone's HID host meets the encrypted reads), its HID host reads the Consumer
    Control map and flags nothing. Then the link ends and both bonds are removed, so nothing of
    it reaches the keyboard pass on hci0 and hci1. (Run on hci0 and hci1 before the keyboard pass, even with
    the bonds removed and bluetoothd restarted in between, the keyboard pass's HID host read
    handles of a database that was not the keyboard's: docs/system-test.md.) The phone's HID host
    reads the Report Map once an `ancsd run` serves the accessory after the pairing: `serve`
    starts one with --accessory remote on `accessory` and returns it (None: one runs already,
    the booted roots' service). Returns what it saw, for the summary."""
    address = {adapter: Stack.address(None, adapter) for adapter in (accessory, phone_adapter)}
    index = {adapter: int(adapter[3:]) for adapter in (accessory, phone_adapter)}
    Stack.power(None, accessory, True)
    Stack.power(None, phone_adapter, True)
    phone = Phone(address[accessory], accessory="remote", name="phone-remote", adapter=phone_adapter)
    phone.event("registered", timeout=60)
    smp_before = len(smp_pdus(btsnoop))
    pairing = Lines("ancsd-pair-remote", [program, "pair", "--yes", "--adapter", accessory, "--timeout", "120",
                                          "--accessory", "remote", "--name", "ancsd-remote"])
    phone.event("paired", timeout=120)
    try:
        status = pairing.process.wait(60)
    except subprocess.TimeoutExpired:
        raise Failure("ancsd pair --accessory remote did not end within 60 s of the phone pairing")
    check(status == 0, f"ancsd pair --accessory remote exited {status}")
    seen = check_strict_pairing(phone, "ancsd-pair-remote", btsnoop, since=smp_before,
                                accessory=index[accessory], phone_index=index[phone_adapter])
    server = serve() if serve else None
    report_map = check_report_map(phone, "remote")
    if server:
        server.stop()
    with open(f"{LOGS}/ancsd-pair-remote.stdout") as out:
        told = out.read()
    check("listed as a remote" in told, f"ancsd pair --accessory remote did not say what to look for:\n{told}")
    # Forget each other without tearing a live link down under bluetoothd: RemoveDevice on a
    # connected device closes its L2CAP sockets while the link goes, which hits the guest
    # kernel's hci_chan_del list corruption (it killed bluetoothd 5.66 in the bookworm root
    # before the bond's removal was stored), and so did the phone's radio going off under the
    # live link (five boots out of five in one VM run on Linux 6.1). So the link is
    # ended first, cleanly, by the phone's side (Device1.Disconnect: counted as its user's, which
    # also takes the accessory off its HID host's auto-connect list, so that the link stays down
    # although the booted roots' ancsd service still advertises for the bonded phone); then each
    # side forgets the other, both adapters on (bluetoothd refuses RemoveDevice on an adapter that
    # is off).
    devices = {accessory: f"/org/bluez/{accessory}/dev_" + address[phone_adapter].replace(":", "_"),
               phone_adapter: f"/org/bluez/{phone_adapter}/dev_" + address[accessory].replace(":", "_")}

    def forget(adapter):
        run("busctl", "--system", "call", "org.bluez", f"/org/bluez/{adapter}", "org.bluez.Adapter1", "RemoveDevice", "o",
            devices[adapter], check_status=False)
        poll_until(lambda: devices[adapter] not in run("busctl", "--system", "tree", "org.bluez", check_status=False), 30,
                   f"{adapter} did not forget the other side of the remote pass ({devices[adapter]})")
    run("busctl", "--system", "call", "org.bluez", devices[phone_adapter], "org.bluez.Device1", "Disconnect")
    phone.event("link_down", timeout=30)
    phone.stop()
    forget(accessory)
    forget(phone_adapter)
    return {"adapters": f"ancsd pair on {accessory}, the phone on {phone_adapter}", "started_by": seen["started_by"],
            "smp": seen["smp"], "report_map": report_map["hex"], "applications": report_map["applications"]}


@step(f"pair with --accessory remote (strict phone told remote) on addresses of its own ({REMOTE[0]}, the phone on {REMOTE[1]}): "
      "bonded, its HID host read the Consumer Control map, nothing flagged; both bonds removed")
def pair_remote(stack, ctx):
    def serve():
        os.makedirs("/run/ancsd-remote-state", exist_ok=True)
        return ancsd("ancsd-run-remote", "run", "--adapter", REMOTE[0], "--accessory", "remote", "--control",
                     "/run/ancsd-remote.control", "--state-dir", "/run/ancsd-remote-state", "--log-level", "debug")
    seen = ctx["pairing_remote"] = pair_remote_pass(f"{LOGS}/ancs.btsnoop", *REMOTE, serve=serve)
    say(f"   remote ({seen['adapters']}): SMP {seen['smp']}; started by the {seen['started_by']}; "
        f"Report Map {seen['applications']}: {seen['report_map']}")


@step("pair (strict phone, keyboard, the default): ancsd pair --yes on hci0; the phone lists the HID advertisement, connects, "
      "never calls Pair(); pairing (LE Secure Connections) is begun by the phone's HID host, no Security Request; ANCS appears after the bond")
def pair(stack, ctx):
    ctx["phone"] = phone = Phone(ctx["hci0"])
    phone.event("registered")
    before = settled_settings("hci0")
    began = time.monotonic()
    smp_before = len(smp_pdus(f"{LOGS}/ancs.btsnoop"))
    pairing = ancsd("ancsd-pair", "pair", "--yes", "--adapter", "hci0", "--timeout", "120", "--name", "ancsd-system-test")
    phone.event("paired", timeout=120)
    try:
        status = pairing.process.wait(60)
    except subprocess.TimeoutExpired:
        raise Failure("ancsd pair did not end within 60 s of the phone pairing")
    check(status == 0, f"ancsd pair exited {status}")
    say(f"   paired in {time.monotonic() - began:.1f} s")
    info = run("bluetoothctl", "info", ctx["hci1"])
    check("Paired: yes" in info and "Trusted: yes" in info, f"hci0 does not hold a trusted bond:\n{info}")
    after = check_settings_kept("hci0", before)
    say(f"   hci0 (LE-only) before and after: {after}")
    seen = ctx["pairing"] = check_strict_pairing(phone, "ancsd-pair", f"{LOGS}/ancs.btsnoop", since=smp_before)
    ctx["smp_after_pair"] = len(smp_pdus(f"{LOGS}/ancs.btsnoop"))
    with open(f"{LOGS}/ancsd-pair.stderr") as log:
        asked = [line.strip() for line in log if "Pair()" in line]
    ctx["pairing"]["ancsd_pair_calls"] = asked
    say(f"   advertisement as the phone's bluetoothd shows it: {seen['listing']}")
    say(f"   passkey confirmed by the phone's agent {seen['confirmed_by_phone']}x, by ancsd pair's {seen['confirmed_by_ancsd']}x")
    say(f"   SMP sent: {seen['smp']}; started by the {seen['started_by']}; ancsd pair's Device1.Pair(): {asked or 'not called'}")


@step("the phone's HID host: the Report Map it read is the keyboard asked for (Keyboard application, not flagged)")
def hid_host(stack, ctx):
    report_map = ctx["report_map"] = check_report_map(ctx["phone"], "keyboard")
    say(f"   Report Map ({report_map['bytes']} bytes, applications {report_map.get('applications')}): {report_map['hex']}")


@step("run (AcquireNotify) at ExchangeMTU 48: notifications arrive once, with every field, a long message in 36 fragments")
def first_session(stack, ctx):
    phone = ctx["phone"]
    ctx["daemon"] = daemon = ancsd("ancsd-run", "run", "--format", "json", "--adapter", "hci0", "--replays", "all",
                                   "--control", "/run/ancsd.control", "--log-level", "debug")
    daemon.wait(lambda e: e.get("type") == "connected" and e.get("device") == ctx["hci1"], '"connected"')
    phone.event("consumer_subscribed")
    phone.do(notification(1, "Grace Hopper", "Found the bug: a moth in relay 70",
                          flags=["positive_action", "negative_action"], positive_action="Reply", negative_action="Clear"))
    event = expect_added(daemon, 1, "Grace Hopper", "Found the bug: a moth in relay 70")
    check(event["app_name"] == "Messages" and event["app_id"] == "com.apple.MobileSMS", f"app: {event}")
    check(event["category"] == "social" and event["date"] == "2026-11-30T10:15:00", f"category/date: {event}")
    check(event["positive_action"] == "Reply" and event["negative_action"] == "Clear", f"actions: {event}")
    check(set(event["flags"]) == {"positive_action", "negative_action"}, f"flags: {event['flags']}")
    phone.do(notification(2, "Ada Lovelace", LONG_MESSAGE, app="com.apple.mobilemail", category="email", subtitle="Notes"))
    expect_added(daemon, 2, "Ada Lovelace", LONG_MESSAGE)
    cp = phone.event("control_point")  # the long message's response
    while cp.get("response_bytes", 0) < len(LONG_MESSAGE):
        cp = phone.event("control_point")
    check(cp["mtu"] == 48, f"the link's MTU is {cp['mtu']}, not 48")
    ctx["fragments"] = {cp["mtu"]: cp["fragments"]}
    check(cp["fragments"] > 1, f"the long message came in one piece: {cp}")
    say(f"   MTU {cp['mtu']}: {cp['response_bytes']} bytes in {cp['fragments']} fragments")


@step("modify and remove")
def modify_remove(stack, ctx):
    phone, daemon = ctx["phone"], ctx["daemon"]
    phone.do({"do": "modify", "uid": 1, "message": "Moth taped into the logbook"})
    event = daemon.wait(lambda e: e.get("type") == "modified" and e.get("uid") == 1, '"modified" for uid 1')
    check(event["message"] == "Moth taped into the logbook", f"modified message: {event['message']!r}")
    phone.do({"do": "remove", "uid": 1})
    event = daemon.wait(lambda e: e.get("type") == "removed" and e.get("uid") == 1, '"removed" for uid 1')
    check(event["title"] == "Grace Hopper", f"removed: {event}")


@step("link loss caused from the accessory's side: the phone's bluetoothd reconnects by itself")
def link_loss(stack, ctx):
    phone, daemon = ctx["phone"], ctx["daemon"]
    device = "/org/bluez/hci0/dev_" + ctx["hci1"].replace(":", "_")
    began = time.monotonic()
    run("busctl", "--system", "call", "org.bluez", device, "org.bluez.Device1", "Disconnect")
    daemon.wait(lambda e: e.get("type") == "disconnected", '"disconnected" after the link loss')
    phone.event("link_down")
    mark = len(phone.lines)
    daemon.wait(lambda e: e.get("type") == "connected", '"connected" again without the phone asking', timeout=60)
    phone.event("link_up")
    asked = [e for e in phone.lines[mark:] if e.get("event") == "connecting"]
    check(not asked, f"the phone called Connect() itself: {asked}")
    expect_added(daemon, 2, "Ada Lovelace", LONG_MESSAGE, pre_existing=True, seen_before=True)
    say(f"   back in {time.monotonic() - began:.1f} s, reconnected by the phone's bluetoothd")


@step("ancsd list, status and doctor describe the real stack")
def clients(stack, ctx):
    daemon = ctx["daemon"]
    # In the first-contact boot nothing before this step waits on the link, and it may have
    # ended since the first session (there the phone's bluetoothd reconnected by itself during
    # the HID host's step, and ancsd list ran before the session had Ada's notification again):
    # the clients describe the stack once ancsd shows the phone's notifications again.
    if daemon.ahead(lambda e: e.get("type") == "disconnected"):
        daemon.wait(lambda e: e.get("type") == "disconnected", '"disconnected"')
        daemon.wait(lambda e: e.get("type") == "connected" and e.get("device") == ctx["hci1"], '"connected" again', timeout=60)
        expect_added(daemon, 2, "Ada Lovelace", LONG_MESSAGE, pre_existing=True, seen_before=True)
        say("   the link had ended and come back since the first session: waited for ancsd to show Ada's notification again")
    listed = run(f"{BIN}/ancsd", "list", "--control", "/run/ancsd.control")
    check("Ada Lovelace" in listed and ctx["hci1"] in listed, f"ancsd list:\n{listed}")
    status = run(f"{BIN}/ancsd", "status", "--control", "/run/ancsd.control")
    check("connected: yes" in status and "notification sharing: allowed" in status, f"ancsd status:\n{status}")
    doctor = subprocess.run([f"{BIN}/ancsd", "doctor", "--control", "/run/ancsd.control"], capture_output=True, text=True,
                            timeout=60)
    with open(f"{LOGS}/doctor.txt", "w") as out:
        out.write(doctor.stdout + doctor.stderr)
    check(doctor.returncode == 0, f"ancsd doctor exited {doctor.returncode}:\n{doctor.stdout}{doctor.stderr}")


@step("ancsd report --capture on the real stack: it lists what it holds; no title, message, name or key in any member; "
      "ancsd decode reads the scrubbed exchange")
def report(stack, ctx):
    phone, daemon = ctx["phone"], ctx["daemon"]
    archive, title, message = f"{LOGS}/report.tar.gz", "Planted Title Q7", "A planted message body Z9"
    reporting = Lines("ancsd-report", [f"{BIN}/ancsd", "report", "--output", archive, "--control", "/run/ancsd.control",
                                       "--capture", "6"])
    reporting.wait(lambda e: "capturing" in e.get("unparsed", ""), "ancsd report capturing", timeout=60)
    phone.do(notification(20, title, message))
    expect_added(daemon, 20, title, message)
    try:
        status = reporting.process.wait(60)
    except subprocess.TimeoutExpired:
        raise Failure("ancsd report did not end within 60 s of its capture")
    check(status == 0, f"ancsd report exited {status}")
    # What must never leave: the notification, the phone's name and the bond's keys.
    # The phone's name: its adapter's (hci0 has no Name for a phone that connected to it; BlueZ's
    # default "BlueZ 5.66" is the computer's name too, which the report masks as well).
    name = run("busctl", "--system", "get-property", "org.bluez", "/org/bluez/hci1", "org.bluez.Adapter1", "Alias").split('"')[1]
    with open(f"/var/lib/bluetooth/{ctx['hci0']}/{ctx['hci1']}/info") as info:
        keys = re.findall(r"^Key=([0-9A-Fa-f]{32})$", info.read(), re.M)
    check(keys, "no key in hci0's bond with the phone to look for")
    needles = [title.encode(), message.encode(), name.encode()]
    for key in keys:
        needles += [key.encode(), key.lower().encode(), bytes.fromhex(key), bytes.fromhex(key)[::-1]]
    unpacked = f"{LOGS}/report"
    os.makedirs(unpacked, exist_ok=True)
    run("tar", "-xzf", archive, "-C", unpacked)
    members = {}
    for root, _, files in os.walk(unpacked):
        for file in files:
            with open(os.path.join(root, file), "rb") as f:
                members[file] = f.read()
    with open(archive, "rb") as f:
        members["report.tar.gz"] = f.read()
    check("capture.btsnoop" in members, f"the report holds no capture: {sorted(members)}")
    for member, data in members.items():
        found = [needle for needle in needles if needle in data]
        if found:
            raise Failure(f"{member} holds {found[0][:40]!r}")
    # The exchange can still be read: the scrubbed capture decodes to uid 20's attributes, their
    # values placeholders. It began on a live link (no GATT discovery in it): the README says
    # which handles to give ancsd decode, learnt from bluetoothd's object paths.
    top = os.path.join(unpacked, next(d for d in os.listdir(unpacked) if d.startswith("ancsd-report-")))
    said = re.search(r"ancsd decode --handles (\S+) capture\.btsnoop", members["README.txt"].decode())
    check(said, f"the report's README does not say how to decode its capture:\n{members['README.txt'].decode()}")
    # The handles are hci0's view (the accessory's side); the phone's side of the link, in the same
    # capture here since one machine plays both, decodes to nonsense with them (exit 1): only
    # hci0's connection is read.
    decoded = [json.loads(line) for line in run(f"{BIN}/ancsd", "decode", "--handles", said.group(1),
                                               os.path.join(top, "capture.btsnoop"), check_status=False).splitlines()]
    decoded = [record for record in decoded if record.get("conn", "").startswith("hci0/")]
    check(not [record for record in decoded if "error" in record], f"errors decoding hci0's side: {decoded}")
    uid20 = [record for record in decoded if record.get("uid") == 20]
    check(uid20, f"ancsd decode found no record of uid 20 in the scrubbed capture: {decoded[:3]}")
    listing = [line.split(None, 5) for line in run("tar", "-tvzf", archive).splitlines()]
    ctx["report"] = {"archive_bytes": os.path.getsize(archive), "handles": said.group(1),
                     "members": {fields[5].split("/", 1)[-1]: int(fields[2]) for fields in listing if not fields[5].endswith("/")},
                     "decoded_uid20": uid20[0]}
    say(f"   {os.path.getsize(archive)} bytes: " + ", ".join(f"{m} {b}" for m, b in ctx["report"]["members"].items()))
    say(f"   none of {len(needles)} needles (title, message, the phone's name, {len(keys)} keys) in any member; "
        f"decoded from the scrubbed capture: {json.dumps(uid20[0])[:200]}")


@step("actions from the control socket reach the phone; a refused action and refused sharing are reported")
def actions(stack, ctx):
    phone, daemon = ctx["phone"], ctx["daemon"]
    phone.do(notification(3, "Calendar", "Standup in 5 minutes", app="com.apple.mobilecal", category="schedule",
                          flags=["negative_action"], negative_action="Dismiss"))
    expect_added(daemon, 3, "Calendar", "Standup in 5 minutes")
    answer = run(f"{BIN}/ancsd", "action", "--control", "/run/ancsd.control", ctx["hci1"], "3", "negative")
    check("performed" in answer, f"ancsd action: {answer!r}")
    wanted = "02" + (3).to_bytes(4, "little").hex() + "01"  # PerformNotificationAction(3, negative)
    phone.wait(lambda e: e.get("event") == "control_point" and e.get("request") == wanted, f"the action write {wanted}")
    # The phone refuses the next write as "unknown notification" (ANCS 0xA2); a BlueZ 5.66
    # application can only send that as 0x80, which ancsd must report as a failure.
    phone.event("step", line=phone.do({"do": "cp_error", "code": 0xA2, "count": 1}))
    refused = run(f"{BIN}/ancsd", "action", "--control", "/run/ancsd.control", ctx["hci1"], "3", "negative",
                  check_status=False)
    check("performed" not in refused, f"a refused action was reported as performed: {refused!r}")
    cp = phone.wait(lambda e: e.get("event") == "control_point" and "rejected" in e, "the refused write")
    check(cp["att_error_sent"] == "0x80", f"the phone's refusal: {cp}")
    # "Share System Notifications" off: every Control Point write fails with Write Not Permitted.
    phone.do({"do": "deny_sharing"})
    phone.do(notification(7, "Hidden", "Sharing is off"))
    event = daemon.wait(lambda e: e.get("type") == "added" and e.get("uid") == 7, '"added" for uid 7 without attributes')
    check(event["complete"] is False and event["title"] is None, f"uid 7 while sharing is off: {event}")
    # ancsd says so once a second write in a row is refused (its alive check confirms at once).
    def told():
        with open(f"{LOGS}/ancsd-run.stderr") as log:
            return "Share System Notifications" in log.read()
    poll_until(told, 20, "ancsd did not tell how to allow notification sharing")
    status = json.loads(run(f"{BIN}/ancsd", "status", "--json", "--control", "/run/ancsd.control"))
    check(status["devices"][0]["sharing_allowed"] is False, f"status while sharing is off: {status['devices']}")
    phone.do({"do": "allow_sharing"})
    phone.do({"do": "remove", "uid": 7})
    daemon.wait(lambda e: e.get("type") == "removed" and e.get("uid") == 7, '"removed" for uid 7')


@step("the phone's player (AMS): a new track reaches ancsd's media events, its long title read whole; ancsd media toggle "
      "reaches the phone as Remote Command 2 and the new state comes back")
def media(stack, ctx):
    phone, daemon = ctx["phone"], ctx["daemon"]
    # ancsd followed the player since the first session (again after the link loss, where
    # bluetoothd restored the Remote Command and Entity Update subscriptions from the bond).
    def first_track(e):
        return e.get("type") == "media" and e.get("title") == MEDIA["title"]
    seen = daemon.all(first_track)
    first = seen[-1] if seen else daemon.wait(first_track, "a media event of the first track", timeout=30)
    check(first["state"] == "paused" and first["player"] == "Music" and first["artist"] == MEDIA["artist"], f"first track: {first}")
    check("toggle" in first["commands"], f"the player's commands as ancsd saw them: {first['commands']}")
    began = time.monotonic()
    phone.event("step", line=phone.do({"do": "media_track", "title": LONG_TITLE, "artist": "Johann Sebastian Bach",
                                        "album": "Goldberg Variations", "duration": 2832}))
    event = daemon.wait(lambda e: e.get("type") == "media" and e.get("title") == LONG_TITLE, "a media event with the new title",
                        timeout=5)
    track_seconds = time.monotonic() - began
    check(event["artist"] == "Johann Sebastian Bach" and event["album"] == "Goldberg Variations", f"new track: {event}")
    check(event["duration"] == 2832 and event["truncated"] == [], f"new track: {event}")
    cut = phone.all(lambda e: e.get("event") == "media_update" and e.get("entity") == 2 and e.get("attribute") == 2
                    and e.get("value") != MEDIA["title"])
    check(cut and cut[-1]["truncated"] is True, f"the title's Entity Update was not cut: {cut[-1:]}")
    reads = phone.all(lambda e: e.get("event") == "media_attribute" and e.get("op") == "read" and e.get("outcome") == "accepted")
    check(sum(r["length"] for r in reads if r.get("attribute") == 2) >= len(LONG_TITLE.encode()) and
          any(r["offset"] > 0 for r in reads), f"the title was not read whole by a long read: {reads}")
    began = time.monotonic()
    answer = run(f"{BIN}/ancsd", "media", "--control", "/run/ancsd.control", ctx["hci1"], "toggle")
    check("took the toggle command" in answer, f"ancsd media toggle: {answer!r}")
    command = phone.event("media_command", timeout=10)
    check(command.get("id") == 2 and command.get("outcome") == "performed", f"the phone received {command}, not toggle (2)")
    event = daemon.wait(lambda e: e.get("type") == "media" and e.get("state") == "playing", "a media event saying playing",
                        timeout=5)
    check(event["title"] == LONG_TITLE, f"ancsd's media event after toggle: {event}")
    toggle_seconds = time.monotonic() - began
    ctx["media"] = {"track_change_s": round(track_seconds, 2), "toggle_s": round(toggle_seconds, 2),
                    "title_notified_bytes": cut[-1]["bytes"], "title_reads": [(r["offset"], r["length"]) for r in reads
                                                                              if r.get("attribute") == 2]}
    say(f"   first track: {first['title']} ({first['state']}); commands {first['commands']}")
    say(f"   new track in ancsd's media event {track_seconds:.2f} s after the step; the title ({len(LONG_TITLE)} bytes) "
        f"notified cut to {cut[-1]['bytes'] - 3} bytes, read whole (offset, length): {ctx['media']['title_reads']}")
    say(f"   ancsd media toggle: phone received command {command['id']} ({command.get('command')}), "
        f"ancsd's media event says {event['state']} {toggle_seconds:.2f} s after the command")


@step("the phone goes out of range (hci1 powered off) and comes back with its bond")
def power_cycle(stack, ctx):
    phone, daemon = ctx["phone"], ctx["daemon"]
    stack.power("hci1", False)
    daemon.wait(lambda e: e.get("type") == "disconnected", '"disconnected"')
    phone.event("link_down")
    phone.do(notification(4, "Alan Turing", "Can machines think?"))
    phone.event("notification", uid=4, sent=False)
    stack.power("hci1", True)
    daemon.wait(lambda e: e.get("type") == "connected", '"connected" after the power cycle', timeout=90)
    # --replays all: the ones shown before are marked seen_before, the one that arrived while
    # the phone was away is not.
    for uid, title, message, seen in [(2, "Ada Lovelace", LONG_MESSAGE, True), (3, "Calendar", "Standup in 5 minutes", True),
                                      (4, "Alan Turing", "Can machines think?", False)]:
        expect_added(daemon, uid, title, message, pre_existing=True, seen_before=seen)
    # A Security Request from hci0 asks the phone to encrypt with the bond's key: allowed. A new
    # Pairing Request or Response would be a second pairing.
    again = smp_pdus(f"{LOGS}/ancs.btsnoop")[ctx["smp_after_pair"]:]
    check(not [code for _, code in again if code in (0x01, 0x02)], f"paired again ({describe_smp(again)}): the bond was not used")


def device_property(path, name):
    """A Device1 property as busctl prints it ("b true"), or None when the object is not there."""
    out = run("busctl", "--system", "get-property", "org.bluez", path, "org.bluez.Device1", name, check_status=False)
    return out.strip() or None


def stranger_visit(hci0, adapter, log_text):
    """A neighbour's device on `adapter` (on hci0's radio, taken from bluetoothd for the HCI user
    channel: SystemTest/raw_stranger.py) while the phone is away: it asks hci0 for passkey-entry
    pairing (KeyboardOnly, MITM: hci0's side must display a passkey, so bluetoothd calls
    DisplayPasskey on the default agent, ancsd run's, and goes on without waiting for its answer;
    ancsd ends the pairing), then connects again and holds the link, which ancsd drops after its
    grace. `log_text()` is the daemon's log so far. Never bonded. Returns what it saw."""
    address = Stack.address(None, adapter)
    on_hci0 = "/org/bluez/hci0/dev_" + address.replace(":", "_")
    graces = log_text().count("disconnected a device that is not bonded")
    Stack.power(None, adapter, False)
    try:
        stranger = raw_stranger.Stranger(int(adapter[3:]))
    except (OSError, TimeoutError) as error:
        raise Failure(f"the stranger's controller {adapter}: {error}")
    try:
        handle = stranger.connect(hci0)
        asked = time.monotonic()
        stranger.ask_passkey_entry(handle)
        _, pairing_reason = stranger.wait_disconnected(handle, 40)
        pairing_ended_s = time.monotonic() - asked
        received = [code for _, code in stranger.smp]
        poll_until(lambda: "(passkey entry)" in log_text(), 10, "ancsd never said it refused the stranger's passkey-entry pairing")
        lines = log_text().splitlines()
        refused = [line for line in lines if "(passkey entry)" in line]
        ended_by = [line.split("debug: ", 1)[-1] for line in lines if address in line and ("CancelPairing" in line or "Disconnect:" in line)]
        check(address in refused[0], f"the passkey-entry refusal names another device: {refused[0]}")
        check(0x02 in received, f"hci0 never answered the Pairing Request: {received}")
        check(not [c for c in received if c in (0x06, 0x07, 0x08, 0x09, 0x0A)], f"keys were sent to the stranger: {received}")
        check(pairing_ended_s < 10, f"the pairing's link lasted {pairing_ended_s:.1f} s after the request: not ended at once")
        check(device_property(on_hci0, "Bonded") != "b true" and device_property(on_hci0, "Paired") != "b true",
              f"hci0 bonded with the stranger: {run('bluetoothctl', 'info', address, check_status=False)}")
        # Connect and hold, the phone still away: btvirt gives every LE connection of a controller
        # the same handle (42), so a second link to hci0 while the stranger holds one collides with
        # it and neither survives (seen in the VM). That the phone's way back stays open while a
        # stranger is connected is the simulator's test (StrangerTests); here the phone comes back
        # once ancsd has dropped the stranger.
        poll_until(lambda: device_property(on_hci0, "Connected") != "b true", 30, "hci0 still shows the stranger connected")
        handle = stranger.connect(hci0)
        held, reason = stranger.wait_disconnected(handle, 40)
    except (OSError, TimeoutError) as error:
        raise Failure(f"the stranger on {adapter}: {error}")
    finally:
        stranger.close()
    check(8 <= held <= 20, f"the stranger was dropped after {held:.1f} s, not after the 10 s grace")
    # Said once, then counted: the line for this stranger is new, or the count that follows it is.
    poll_until(lambda: log_text().count("disconnected a device that is not bonded") > graces, 10,
               "ancsd did not say it disconnected the stranger after its grace")
    # The controller goes back to bluetoothd when the user channel closes; it stays off.
    poll_until(lambda: adapter in run("busctl", "--system", "tree", "org.bluez", check_status=False), 20,
               f"bluetoothd did not get {adapter} back")
    Stack.power(None, adapter, False)
    check(device_property(on_hci0, "Paired") != "b true", "the stranger is paired with hci0")
    return {"bluez": run("bluetoothd", "--version", check_status=False).strip(),
            "passkey_entry_answered": [SMP_NAMES.get(c, hex(c)) for c in received],
            "passkey_entry_link_ended_s": round(pairing_ended_s, 2), "passkey_entry_reason": f"0x{pairing_reason:02x}",
            "refused": refused[0].split("ancsd: ", 1)[-1].strip(),
            # ancsd logs CancelPairing's and Disconnect's errors only (debug): none, both answered without one.
            "ended_by": ended_by or ["CancelPairing and Disconnect answered without an error"],
            "held_s": round(held, 1), "hold_ended_reason": f"0x{reason:02x}"}


def describe_stranger(seen):
    say(f"   passkey entry: hci0 answered {', '.join(seen['passkey_entry_answered'])}; the link ended "
        f"{seen['passkey_entry_link_ended_s']} s after the Pairing Request (reason {seen['passkey_entry_reason']})")
    say(f"   ancsd: {seen['refused']}")
    say(f"   how it ended (bluetoothd {seen['bluez']}): {seen['ended_by']}")
    say(f"   connect and hold: dropped after {seen['held_s']} s (reason {seen['hold_ended_reason']})")


@step(f"strangers: with the phone away, {STRANGER} (on the phone's radio, driven by hand) asks hci0 for passkey-entry pairing "
      "(KeyboardOnly, MITM), then connects and holds the link; ancsd ends the pairing and drops the stranger after 10 s; "
      "never bonded; the phone comes back")
def strangers(stack, ctx):
    phone, daemon = ctx["phone"], ctx["daemon"]
    stack.power("hci1", False)
    daemon.wait(lambda e: e.get("type") == "disconnected", '"disconnected"')
    phone.event("link_down")
    seen = ctx["strangers"] = stranger_visit(ctx["hci0"], STRANGER, lambda: open(f"{LOGS}/ancsd-run.stderr").read())
    describe_stranger(seen)
    back_from = time.monotonic()
    stack.power("hci1", True)
    daemon.wait(lambda e: e.get("type") == "connected", '"connected": the phone back after the strangers', timeout=90)
    seen["phone_back_s"] = round(time.monotonic() - back_from, 1)
    say(f"   the phone back {seen['phone_back_s']} s after its radio came on")


def restart_bluetoothd(stack, ctx, mtu, eatt=False):
    """Stops bluetoothd (SIGTERM) and starts it again with ExchangeMTU `mtu`, the phone away
    meanwhile.

    The strict phone leaves reconnecting to its bluetoothd's HID host, whose bonded accessory
    stays on hci1's auto-connect list in the kernel, and in the VM that is the same bluetoothd as
    the accessory's: started again, it resets the adapters and sets hci1 up before hci0, and btvirt
    completes hci1's auto-connection at once although hci0 is neither set up nor advertising: a
    half-open link whose services never resolve and that hci1 cannot even be powered off from.
    Two machines' stacks do not restart together: the phone's radio is off (hci1 powered off)
    before bluetoothd stops, bluetoothd comes back with AutoEnable off, hci0 is powered on, and
    the phone's radio comes on once ancsd advertises again; its bluetoothd then reconnects by
    itself."""
    phone, daemon = ctx["phone"], ctx["daemon"]
    stack.power("hci1", False)
    phone.event("link_down")
    daemon.wait(lambda e: e.get("type") == "disconnected", '"disconnected" when the phone goes away')
    stack.stop()
    if eatt:
        # EATT is set up only after a discovery that reads the server's features: forget the
        # GATT caches of the earlier phases, as after a BlueZ upgrade.
        for adapter in os.listdir("/var/lib/bluetooth"):
            cache = f"/var/lib/bluetooth/{adapter}/cache"
            for name in os.listdir(cache) if os.path.isdir(cache) else []:
                os.remove(f"{cache}/{name}")
    stack.start(mtu, eatt=eatt, auto_enable=False)
    phone.event("registered")
    # An iPhone's ANCS is in its GATT database all along once bonded; the stand-in registers it
    # again with its restarted bluetoothd, and does so before its radio comes on: registered
    # while the link is up, it is announced by a Service Changed whose rediscovery bluetoothd
    # 5.66 sometimes never finishes (the accessory then never sees ANCS; seen twice in the VM).
    phone.event("application_registered")
    stack.power("hci0", True)
    wait_advertising_again()
    stack.power("hci1", True)
    daemon.wait(lambda e: e.get("type") == "connected", f'"connected" after bluetoothd restarted (MTU {mtu})', timeout=90)
    phone.event("consumer_subscribed")


def wait_advertising_again():
    def advertising():
        out = run("busctl", "--system", "get-property", "org.bluez", "/org/bluez/hci0", "org.bluez.LEAdvertisingManager1",
                  "ActiveInstances", check_status=False)
        return out.strip().endswith(("1", "2", "3"))
    poll_until(advertising, 60, "ancsd did not advertise again on hci0 within 60 s of bluetoothd's restart")


def long_message_at(ctx, uid, mtu):
    phone, daemon = ctx["phone"], ctx["daemon"]
    message = f"MTU {mtu}: " + LONG_MESSAGE
    phone.do(notification(uid, f"Long at {mtu}", message))
    expect_added(daemon, uid, f"Long at {mtu}", message)
    cp = phone.event("control_point")
    while cp.get("response_bytes", 0) < len(message):
        cp = phone.event("control_point")
    check(cp["mtu"] == mtu, f"the link's MTU is {cp['mtu']}, not {mtu}")
    ctx["fragments"][mtu] = cp["fragments"]
    say(f"   MTU {mtu}: {cp['response_bytes']} bytes in {cp['fragments']} fragments")


@step("bluetoothd restarts (ExchangeMTU 185), the phone away meanwhile: ancsd recovers by itself")
def restart_185(stack, ctx):
    restart_bluetoothd(stack, ctx, 185)
    expect_added(ctx["daemon"], 4, "Alan Turing", "Can machines think?", pre_existing=True, seen_before=True)
    long_message_at(ctx, 5, 185)


@step("StartNotify path: a new ancsd with --no-acquire-notify takes over the live link")
def start_notify(stack, ctx):
    ctx["daemon"].stop()
    ctx["daemon"] = daemon = ancsd("ancsd-run-startnotify", "run", "--format", "json", "--adapter", "hci0",
                                   "--no-acquire-notify", "--log-level", "debug")
    daemon.wait(lambda e: e.get("type") == "connected", '"connected"', timeout=60)
    with open(f"{LOGS}/ancsd-run-startnotify.stderr") as log:
        check("StartNotify)" in log.read(), "ancsd --no-acquire-notify did not subscribe with StartNotify")
    long_message_at(ctx, 6, 185)
    ctx["phone"].do({"do": "remove", "uid": 6})
    daemon.wait(lambda e: e.get("type") == "removed" and e.get("uid") == 6, '"removed" for uid 6')


@step("silent drop: the phone stops NS and DS and leaves the Control Point unanswered; ancsd's alive check (5 s) "
      "re-subscribes and the notification comes")
def silent_drop(stack, ctx):
    phone = ctx["phone"]
    ctx["daemon"].stop()
    ctx["daemon"] = daemon = ancsd("ancsd-run-alive", "run", "--format", "json", "--adapter", "hci0", "--alive-check", "5",
                                   "--log-level", "debug")
    daemon.wait(lambda e: e.get("type") == "connected", '"connected"', timeout=60)
    phone.event("consumer_subscribed")
    began = time.monotonic()
    phone.do({"do": "silent_drop_all"})
    phone.event("silent_drop")
    phone.do(notification(10, "Dropped", "Sent while the phone had dropped the subscriptions"))
    phone.event("notification", uid=10, dropped_silently=True)
    phone.event("control_point_unanswered", timeout=30)
    phone.event("silent_drop_ended", timeout=60, characteristic="notification_source")
    expect_added(daemon, 10, "Dropped", "Sent while the phone had dropped the subscriptions", pre_existing=True, timeout=30)
    with open(f"{LOGS}/ancsd-run-alive.stderr") as log:
        text = log.read()
    check("did not answer the alive check" in text, "ancsd's log does not say the alive check went unanswered")
    say(f"   recovered {time.monotonic() - began:.1f} s after the drop")


def consumer_characteristics(ctx):
    """hci0's object paths of the phone's Notification Source and Data Source."""
    objects = json.loads(run("busctl", "--system", "--json=short", "call", "org.bluez", "/",
                             "org.freedesktop.DBus.ObjectManager", "GetManagedObjects"))["data"][0]
    device = "/org/bluez/hci0/dev_" + ctx["hci1"].replace(":", "_")
    paths = {}
    for path, interfaces in objects.items():
        chrc = interfaces.get("org.bluez.GattCharacteristic1")
        if path.startswith(device + "/") and chrc:
            paths[chrc["UUID"]["data"].upper()] = path
    return paths["9FBF120D-6301-42D9-8C58-25E699A21DBD"], paths["22EAC6E9-24D6-4BB5-BE44-B36ACE7C7BFB"]


def notifying(path):
    out = run("busctl", "--system", "get-property", "org.bluez", path, "org.bluez.GattCharacteristic1", "Notifying")
    return out.strip() == "b true"


@step("another client already holds StartNotify: AcquireNotify is refused and ancsd falls back to StartNotify")
def fallback(stack, ctx):
    phone = ctx["phone"]
    ns, ds = consumer_characteristics(ctx)
    # The link stays up while the previous ancsd goes; bluetoothctl subscribes and stays (a
    # StartNotify session lives as long as its client); then a new ancsd comes.
    ctx["daemon"].stop()
    poll_until(lambda: not (notifying(ns) or notifying(ds)), 10, "bluetoothd kept the stopped ancsd's notification sessions")
    other = subprocess.Popen(["bluetoothctl"], stdin=subprocess.PIPE, stdout=open(f"{LOGS}/bluetoothctl.log", "w"),
                             stderr=subprocess.STDOUT, text=True)
    ctx["bluetoothctl"] = other
    other.stdin.write("menu gatt\n")
    for path in [ds, ns]:
        other.stdin.write(f"select-attribute {path}\nnotify on\n")
        other.stdin.flush()
        poll_until(lambda: notifying(path), 30, f"bluetoothctl did not subscribe to {path} within 30 s")
    ctx["daemon"] = daemon = ancsd("ancsd-run-fallback", "run", "--format", "json", "--adapter", "hci0",
                                   "--log-level", "debug")
    daemon.wait(lambda e: e.get("type") == "connected", '"connected"', timeout=60)
    phone.do(notification(8, "Fallback", "Delivered as PropertiesChanged signals"))
    expect_added(daemon, 8, "Fallback", "Delivered as PropertiesChanged signals")
    with open(f"{LOGS}/ancsd-run-fallback.stderr") as log:
        text = log.read()
    check("AcquireNotify on" in text and "using StartNotify" in text, "ancsd did not log the fallback")
    check("StartNotify)" in text, "ancsd did not report StartNotify delivery")
    # bluetoothd sends one PropertiesChanged per StartNotify client: ancsd must drop the copies.
    check("delivers every notification 2 times" in text, "ancsd did not notice bluetoothd's copies")
    other.stdin.close()
    other.terminate()
    other.wait(10)


@step("bluetoothd with EATT (ATT over L2CAP credit-based channels) after a restart, the phone away meanwhile")
def eatt(stack, ctx):
    # Runs last and is never stopped: stopping an EATT bluetoothd can hit the guest kernel's
    # hci_chan_del BUG (see Stack.start).
    restart_bluetoothd(stack, ctx, 517, eatt=True)
    # ancsd's AMS registrations first: in the VM one bluetoothd under emulation serves both ends,
    # and with the registrations' writes and values on one EATT channel while the Data Source
    # response ran on the others, a fragment reached ancsd more than its 400 ms quiet period after
    # the one before (docs/system-test.md); the MTU 185 phase interleaves them on one bearer.
    ctx["daemon"].wait(lambda e: e.get("type") == "media" and e.get("title") == LONG_TITLE, "AMS settled over EATT", timeout=30)
    long_message_at(ctx, 9, 517)
    ctx["phone"].do({"do": "modify", "uid": 9, "message": "Over EATT"})
    event = ctx["daemon"].wait(lambda e: e.get("type") == "modified" and e.get("uid") == 9, '"modified" for uid 9')
    check(event["message"] == "Over EATT", f"modified over EATT: {event['message']!r}")


@step("ancsd capture recorded the real exchange; ancsd decode reads it back")
def capture(stack, ctx):
    for name in ["capture-btsnoop", "capture-ancs"]:
        status = ctx[name].stop()
        check(status == 0, f"{name} exited {status}")
    decoded = [json.loads(line) for line in run(f"{BIN}/ancsd", "decode", f"{LOGS}/ancs.btsnoop").splitlines()]
    check(decoded, "ancsd decode found no ANCS traffic in the btsnoop capture")
    with open(f"{LOGS}/decoded.jsonl", "w") as out:
        out.writelines(json.dumps(record) + "\n" for record in decoded)
    text = json.dumps(decoded)
    for needle in ["Grace Hopper", "Part 021 of a long message", "Standup in 5 minutes", "MTU 185: Part 000",
                   "MTU 517: Part 000", "Over EATT"]:
        check(needle in text, f"the decoded capture lacks {needle!r}")
    eatt = eatt_frames(f"{LOGS}/ancs.btsnoop")
    check(eatt > 0, "the capture shows no EATT traffic: the last phase did not run over EATT")
    live = ancsd_lines("ancs.capture")
    check(any("Grace Hopper" in json.dumps(line) for line in live), "the ancs-capture/1 recording lacks uid 1")
    say(f"   btsnoop: {os.path.getsize(LOGS + '/ancs.btsnoop')} bytes ({eatt} EATT frames), {len(decoded)} ANCS records decoded; "
        f"ancs-capture/1 recorded live: {len(live)} lines")


@step(f"advertising PDUs: what hci0 and {DUAL[0]} were told to advertise, and what hci1 and {DUAL[1]} received")
def advertising_pdus(stack, ctx):
    found = advertising(f"{LOGS}/ancs.btsnoop")
    lines = []
    windows = [("LE-only", 0, 1, "ancsd-system-test")]
    if "advertising_dual" in ctx:
        windows.append(("dual-mode", int(DUAL[0][3:]), int(DUAL[1][3:]), "ancsd on a dual-mode controll"))
    for label, advertiser, scanner, name in windows:
        primary, response = check_pair_advertisement(found, advertiser, scanner, name, label)
        lines.append(f"{label} pair window: primary {primary}; scan response {response}")
    # ancsd run's advertisement on hci0: the solicitation, and no discoverable flag.
    run_ads = [d for d in found.get(0, {"adv": []})["adv"]
               if ad_field(d, 0x15) == ANCS_SOLICITATION and not (ad_field(d, 0x01) or b"\0")[0] & 0x03]
    check(run_ads, "ancsd run's advertisement (the solicitation, not discoverable) was never set on hci0")
    lines.append(f"LE-only ancsd run: primary {describe_ad(run_ads[-1])}")
    # Both shapes' pair windows: the HID UUID and each shape's appearance (the keyboard's on hci0,
    # the remote pass's on its own accessory controller).
    for shape, appearance, index in (("keyboard", b"\xc1\x03", 0), ("remote", b"\x80\x01", int(REMOTE[0][3:]))):
        if shape == "remote" and "pairing_remote" not in ctx:
            continue
        windows = [d for d in found.get(index, {"adv": []})["adv"]
                   if ad_field(d, 0x15) == ANCS_SOLICITATION and (ad_field(d, 0x01) or b"\0")[0] & 0x02]
        shown = [d for d in windows if ad_field(d, 0x19) == appearance and ad_field(d, 0x03) == b"\x12\x18"]
        check(shown, f"hci{index}'s {shape} pair window (HID 0x1812, appearance {appearance[::-1].hex()}) was never set: "
                     f"{[describe_ad(d) for d in windows]}")
        lines.append(f"hci{index} {shape} pair window: primary {describe_ad(shown[-1])}")
    ctx["advertising"] = lines
    for line in lines:
        say(f"   {line}")


def eatt_frames(path):
    """L2CAP frames on LE dynamic channels (0x0040-0x007F: EATT here) in a BlueZ monitor btsnoop file."""
    count = 0
    with open(path, "rb") as f:
        data = f.read()
    offset = 16  # "btsnoop\0", version, datalink
    while offset + 24 <= len(data):
        included = int.from_bytes(data[offset + 4:offset + 8], "big")
        opcode = int.from_bytes(data[offset + 8:offset + 12], "big") & 0xFFFF
        packet = data[offset + 24:offset + 24 + included]
        offset += 24 + included
        if opcode in (4, 5) and len(packet) >= 8 and (packet[1] >> 4) & 0x3 in (0, 2):  # ACL, first fragment
            cid = int.from_bytes(packet[6:8], "little")
            count += 0x0040 <= cid <= 0x007F
    return count


def ancsd_lines(name):
    decoded = run(f"{BIN}/ancsd", "decode", f"{LOGS}/{name}")
    return [json.loads(line) for line in decoded.splitlines()]


@step("zero input reports: none reached the phone's HID host, none left hci0")
def input_reports(stack, ctx):
    reports = ctx["phone"].all(lambda e: e.get("event") == "input_report")
    check(not reports, f"the phone's HID host got input reports: {reports[:3]}")
    sent = notifications_sent(f"{LOGS}/ancs.btsnoop", 0)
    check(sent == 0, f"hci0's host sent {sent} ATT notifications: the accessory has no other notifying attribute")
    say("   input reports on the phone: 0; ATT notifications sent by hci0: 0")


@step("every notification was shown exactly once per connection")
def exactly_once(stack, ctx):
    for name in [name for name in ["ancsd-run", "ancsd-run-startnotify", "ancsd-run-fallback"]
                 if os.path.exists(f"{LOGS}/{name}.stdout")]:
        seen = {}
        session = 0
        with open(f"{LOGS}/{name}.stdout") as out:
            for line in out:
                event = json.loads(line)
                if event["type"] == "connected":
                    session += 1
                if event["type"] == "added":
                    key = (session, event["uid"])
                    check(key not in seen, f"{name}: uid {event['uid']} added twice in connection {session}")
                    seen[key] = event
        say(f"   {name}: {len(seen)} notifications over {session} connections, none twice")


def diagnosis(ctx):
    """What a failure's output should end with, taken before the daemons stop (their shutdown
    lines would push the failing moment out of a log's tail): the phone as hci0's bluetoothd sees
    it, ancsd's last lines and bluetoothd's last GATT/ATT lines. CI keeps only an output's tail."""
    lines = []
    if "hci1" in ctx:
        device = "/org/bluez/hci0/dev_" + ctx["hci1"].replace(":", "_")
        state = []
        for prop in ["Connected", "ServicesResolved", "Paired", "Bonded"]:
            state.append(f"{prop}={(device_property(device, prop) or '?').removeprefix('b ')}")
        tree = run("busctl", "--system", "tree", "--list", "org.bluez", check_status=False).split()
        services = [p for p in tree if p.startswith(device + "/service") and "/char" not in p]
        lines.append(f"the phone on hci0: {' '.join(state)}; {len(services)} GATT service object(s)")
    daemon = ctx.get("daemon")
    if daemon is not None:
        with open(f"{LOGS}/{daemon.name}.stderr", errors="replace") as log:
            lines += [f"{daemon.name}: {line.rstrip()[:160]}" for line in log.readlines()[-8:]]
    try:
        with open(f"{LOGS}/bluetoothd.log", errors="replace") as log:
            gatt = [line.rstrip()[:160] for line in log
                    if re.search(r"error|fail|timed? ?out|eatt|discover|service_changed|disconnect", line, re.I)]
        lines += [f"bluetoothd: {line}" for line in gatt[-6:]]
    except OSError:
        pass
    return lines


# Two boots (SystemTest/run): "main" on Debian 12's kernel, as before; "first-contact" on Debian
# 13's, whose steps end links from the accessory's side often enough to meet Linux 6.1's
# hci_chan_del list corruption in every boot (docs/system-test.md), while bluetoothd 5.66 over EATT
# died of a general protection fault on 6.12 in two runs of three: each where it passes.
SCENARIOS = {
    "main": [advertising_dual, pair_from_peripheral_step, pair, first_session, hid_host, modify_remove, link_loss, clients,
             actions, media, power_cycle, restart_185, start_notify, silent_drop, fallback, eatt, capture, advertising_pdus,
             input_reports, exactly_once],
    "first-contact": [pair_remote, pair, first_session, hid_host, clients, report, strangers, advertising_pdus, input_reports,
                      exactly_once],
}


def main():
    scenario = sys.argv[1] if len(sys.argv) > 1 else "main"
    if scenario not in SCENARIOS:
        say(f"FAIL: no scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
        return 2
    os.makedirs(LOGS, exist_ok=True)
    threading.Thread(target=watch_kernel, daemon=True).start()
    stack = Stack()
    ctx = {}
    failed = None
    try:
        # The kernel's HCI monitor, recorded by ancsd itself: all of it as btsnoop, and the ANCS
        # exchange of hci0's first connection live as ancs-capture/1.
        ctx["capture-btsnoop"] = Lines("capture-btsnoop", [f"{BIN}/ancsd", "capture", "--output", f"{LOGS}/ancs.btsnoop"])
        ctx["capture-ancs"] = Lines("capture-ancs", [f"{BIN}/ancsd", "capture", "--format", "capture", "--index", "hci0",
                                                     "--output", f"{LOGS}/ancs.capture"])
        # Three MTUs with two restarts: every reconnect after a restart risks the guest kernel BUG
        # described in Stack.start, so the first phase runs at 48, the restart at 185, EATT at 517.
        stack.start(48)
        ctx["hci0"], ctx["hci1"] = stack.address("hci0"), stack.address("hci1")
        say(f"bluetoothd up: hci0 {ctx['hci0']} (ancsd), hci1 {ctx['hci1']} (the phone)")
        for body in SCENARIOS[scenario]:
            body(stack, ctx)
    except Failure as failure:
        failed = str(failure)
    except Exception as error:  # a bug in the test itself must fail it too
        where = traceback.extract_tb(error.__traceback__)[-1]
        failed = f"{type(error).__name__}: {error} (at {os.path.basename(where.filename)}:{where.lineno}: {where.line})"
    if failed:
        try:
            with open("/out/diagnosis.txt", "w") as out:
                lines = diagnosis(ctx)
                out.writelines(line + "\n" for line in lines)
            # The phone is back on the air but hci0's bluetoothd never finished discovering its
            # services after its restart (its ServicesResolved stays false): bluetoothd's stall
            # under emulation, not ancsd's (docs/system-test.md); SystemTest/run tries once more.
            if "after bluetoothd restarted" in failed and lines and "Connected=true ServicesResolved=false" in lines[0]:
                with open("/out/bluetoothd-discovery-stalled", "w") as mark:
                    mark.write("its discovery of the reconnected phone never resolved\n")
            # bluetoothd itself died of a signal (seen once on 2026-12-06: 5.66 over EATT on Linux
            # 6.12, as ancsd's AcquireNotify met the reconnected phone): not ancsd's; SystemTest/run
            # tries once more, as for the stall.
            if stack.process is not None and stack.process.poll() is not None and stack.process.returncode < 0:
                say(f"   bluetoothd died of signal {-stack.process.returncode}")
                with open("/out/bluetoothd-discovery-stalled", "w") as mark:
                    mark.write(f"bluetoothd died of signal {-stack.process.returncode}\n")
        except Exception as error:  # the diagnosis must never hide the failure
            say(f"   (no diagnosis: {type(error).__name__}: {error})")
    if "bluetoothctl" in ctx and ctx["bluetoothctl"].poll() is None:
        ctx["bluetoothctl"].kill()
    for name in ["daemon", "phone", "capture-btsnoop", "capture-ancs"]:
        if name in ctx:
            try:
                ctx[name].stop()
            except Failure as failure:
                failed = failed or str(failure)
    with open("/out/summary.txt", "w") as summary:
        for name, seconds in results:
            summary.write(f"ok   {seconds:5.1f} s  {name}\n")
        if failed:
            summary.write(f"FAIL {failed}\n")
        for line in ctx.get("advertising", []):
            summary.write(f"advertising: {line}\n")
        if "pair_from_peripheral" in ctx:
            summary.write(f"Device1.Pair() from the peripheral role: {json.dumps(ctx['pair_from_peripheral'])}\n")
        if "pairing_remote" in ctx:
            summary.write(f"pairing with --accessory remote: {json.dumps(ctx['pairing_remote'])}\n")
        if "pairing" in ctx:
            summary.write(f"pairing (keyboard): {json.dumps(ctx['pairing'])}\n")
        if "report_map" in ctx:
            summary.write(f"report map as the phone read it: {ctx['report_map']['hex']}\n")
        if "strangers" in ctx:
            summary.write(f"strangers: {json.dumps(ctx['strangers'])}\n")
        if "report" in ctx:
            summary.write(f"ancsd report: {json.dumps(ctx['report'])}\n")
        if "media" in ctx:
            summary.write(f"media (AMS): {json.dumps(ctx['media'])}\n")
        if "fragments" in ctx:
            summary.write("fragments of the long message by MTU: "
                          + ", ".join(f"{m}: {f}" for m, f in sorted(ctx["fragments"].items())) + "\n")
    if failed:
        say(f"FAIL: {failed}")
        return 1
    say(f"PASS: {len(results)} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
