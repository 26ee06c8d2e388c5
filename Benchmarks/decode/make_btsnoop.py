#!/usr/bin/env python3
"""Writes the decode benchmark's btsnoop file (make bench).

  make_btsnoop.py [--ams] OUT [MEGABYTES]     (default 52)

An H4 btsnoop file (datalink 1002, as Android's HCI snoop log and `btmon -w` write) of one LE
connection carrying ANCS among other traffic: per notification, a Notification Source value, a
Control Point write and its response, and the Data Source response in ATT notifications of
MTU - 3 = 244 bytes; between them heart-rate-style notifications and reads on other handles, LE
signaling (connection parameter updates) and a second link's traffic. Every ATT PDU longer than
27 bytes goes out in ACL fragments of 27 bytes (LE Data Length 27), so the reader reassembles
L2CAP frames throughout. ANCS value handles: ns=0x000c, cp=0x000f, ds=0x0012 (no GATT
discovery in the file: give them with --handles). Deterministic.

With --ams (the fuzz seeds; not the benchmark's file) the phone also speaks Apple Media
Service, discovered at the start after an MTU exchange (23) with ANCS: per notification an
Entity Update notification of the track's title (truncated), and now and then a Remote Command
notification, a registration written and answered, the whole title asked for and read (a Read
Request, then Read Blob Requests), a command refused with 0xA0. AMS value handles: rc=0x0020,
eu=0x0023, ea=0x0026.
"""
import random
import struct
import sys

EPOCH = 0x00DCDDB30F2F8000 + 1_764_000_000 * 1_000_000
NS, CP, DS = 0x000C, 0x000F, 0x0012
RC, EU, EA = 0x0020, 0x0023, 0x0026
ACL_FRAGMENT = 27
ATT_MTU = 23

# 128-bit UUIDs as ATT carries them (little-endian).
def uuid_le(text):
    return bytes.fromhex(text.replace("-", ""))[::-1]


ANCS_SERVICE = uuid_le("7905F431-B5CE-4E99-A40F-4B1E122D00D0")
ANCS_CHARACTERISTICS = [(NS, uuid_le("9FBF120D-6301-42D9-8C58-25E699A21DBD"), 0x10),
                        (CP, uuid_le("69D1D8F3-45E1-49A8-9821-9BBDFDAAD9D9"), 0x08),
                        (DS, uuid_le("22EAC6E9-24D6-4BB5-BE44-B36ACE7C7BFB"), 0x10)]
AMS_SERVICE = uuid_le("89D3502B-0F36-433A-8EF4-C502AD55F8DC")
AMS_CHARACTERISTICS = [(RC, uuid_le("9B3C81D8-57B1-4A8A-B8DF-0E56F7CA51C2"), 0x18),
                       (EU, uuid_le("2F7CABCE-808D-411F-9A0C-BB92BA96C102"), 0x18),
                       (EA, uuid_le("C6B2F38C-23AB-46D8-A6AB-A3A870BBD5D7"), 0x0A)]


class Writer:
    def __init__(self, out):
        self.out = out
        self.time = EPOCH
        self.size = 16
        out.write(b"btsnoop\0" + struct.pack(">II", 1, 1002))

    def record(self, data, received, command_or_event=False):
        self.time += 137
        flags = (1 if received else 0) | (2 if command_or_event else 0)
        header = struct.pack(">IIIIq", len(data), len(data), flags, 0, self.time)
        self.out.write(header + data)
        self.size += len(header) + len(data)

    def event(self, code, parameters):
        self.record(bytes([0x04, code, len(parameters)]) + parameters, True, True)

    def l2cap(self, handle, cid, payload, received):
        frame = struct.pack("<HH", len(payload), cid) + payload
        for start in range(0, len(frame), ACL_FRAGMENT):
            piece = frame[start:start + ACL_FRAGMENT]
            boundary = 0x0 if start == 0 else 0x1
            header = struct.pack("<HH", handle | boundary << 12, len(piece))
            self.record(bytes([0x02]) + header + piece, received)

    def att(self, handle, pdu, received):
        self.l2cap(handle, 0x0004, pdu, received)


def discovery(w, handle, service, characteristics):
    """A primary service and its characteristic declarations, as BlueZ discovers them."""
    values = [value for value, _, _ in characteristics]
    start, end = min(values) - 2, max(values) + 2
    w.att(handle, bytes([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28]), False)
    w.att(handle, bytes([0x11, 20]) + struct.pack("<HH", start, end) + service, True)
    w.att(handle, bytes([0x08]) + struct.pack("<HH", start, end) + bytes([0x03, 0x28]), False)
    w.att(handle, bytes([0x09, 21]) + b"".join(struct.pack("<HBH", value - 1, properties, value) + uuid
                                                for value, uuid, properties in characteristics), True)


def ams_traffic(w, phone, uid, title):
    """One notification's worth of Apple Media Service."""
    w.att(phone, bytes([0x1B]) + struct.pack("<H", EU) + bytes([0x02, 0x02, 0x01]) + title[:ATT_MTU - 6], True)
    if uid % 5 == 1:
        w.att(phone, bytes([0x1B]) + struct.pack("<H", RC) + bytes(range(uid % 14)), True)
        w.att(phone, bytes([0x12]) + struct.pack("<H", EU) + bytes([0x02, 0x00, 0x01, 0x02, 0x03]), False)
        w.att(phone, bytes([0x13]), True)
    if uid % 5 == 2:
        w.att(phone, bytes([0x12]) + struct.pack("<H", EA) + bytes([0x02, 0x02]), False)
        w.att(phone, bytes([0x13]), True)
        part = ATT_MTU - 1
        w.att(phone, bytes([0x0A]) + struct.pack("<H", EA), False)
        w.att(phone, bytes([0x0B]) + title[:part], True)
        offset = part
        while len(title) >= part and offset <= len(title):
            w.att(phone, bytes([0x0C]) + struct.pack("<HH", EA, offset), False)
            w.att(phone, bytes([0x0D]) + title[offset:offset + part], True)
            if len(title[offset:offset + part]) < part:
                break
            offset += part
    if uid % 5 == 3:
        w.att(phone, bytes([0x12]) + struct.pack("<H", RC) + bytes([uid % 16]), False)
        w.att(phone, bytes([0x01, 0x12]) + struct.pack("<H", RC) + bytes([0xA0]), True)


def connection_complete(handle, address):
    return bytes([0x01, 0x00]) + struct.pack("<H", handle) + bytes([0x00, 0x01]) + address[::-1] \
        + struct.pack("<HHHB", 24, 0, 400, 0)


def main():
    arguments = sys.argv[1:]
    ams = "--ams" in arguments
    arguments = [a for a in arguments if a != "--ams"]
    path = arguments[0]
    megabytes = float(arguments[1]) if len(arguments) > 1 else 52
    rng = random.Random(14)
    words = ["Hello", "are", "you", "coming", "tonight", "…", "„Kino“", "β", "👍", "the", "train", "late"]
    with open(path, "wb") as out:
        w = Writer(out)
        phone, band = 0x0040, 0x0041
        w.event(0x3E, connection_complete(phone, bytes.fromhex("a4c13800ba01")))
        w.event(0x3E, connection_complete(band, bytes.fromhex("c0ffee000002")))
        if ams:
            w.att(phone, bytes([0x02]) + struct.pack("<H", 517), False)
            w.att(phone, bytes([0x03]) + struct.pack("<H", ATT_MTU), True)
            discovery(w, phone, ANCS_SERVICE, ANCS_CHARACTERISTICS)
            discovery(w, phone, AMS_SERVICE, AMS_CHARACTERISTICS)
        uid = 0
        while w.size < megabytes * 1_000_000:
            uid += 1
            # Other traffic: a sensor on a second link, reads and notifications on other handles.
            for _ in range(6):
                w.att(band, bytes([0x1B]) + struct.pack("<H", 0x002A) + bytes(rng.randrange(256) for _ in range(rng.choice((4, 20, 120)))), True)
            w.att(phone, bytes([0x0A]) + struct.pack("<H", 0x0003), False)
            w.att(phone, bytes([0x0B]) + b"iPhone", True)
            if uid % 50 == 0:
                w.l2cap(phone, 0x0005, bytes([0x12, uid & 0xFF]) + struct.pack("<HHHHH", 8, 24, 40, 0, 400), True)
                w.l2cap(phone, 0x0005, bytes([0x13, uid & 0xFF]) + struct.pack("<HH", 2, 0), False)
            # ANCS: NS, the CP write and its response, the DS response in notifications.
            w.att(phone, bytes([0x1B]) + struct.pack("<H", NS) + struct.pack("<BBBBI", 0, 0x18, 4, 1, uid), True)
            cp = bytes([0]) + struct.pack("<I", uid) + bytes([0, 1]) + struct.pack("<H", 64) + bytes([3]) \
                + struct.pack("<H", 512) + bytes([4, 5])
            w.att(phone, bytes([0x12]) + struct.pack("<H", CP) + cp, False)
            w.att(phone, bytes([0x13]), True)
            message = " ".join(rng.choice(words) for _ in range(rng.randrange(5, 90))).encode()[:512]
            values = [(0, b"com.apple.MobileSMS"), (1, "Grace ❤️".encode()), (3, message),
                      (4, str(len(message)).encode()), (5, b"20261201T174500")]
            response = bytes([0]) + struct.pack("<I", uid)
            for attribute_id, value in values:
                response += bytes([attribute_id]) + struct.pack("<H", len(value)) + value
            for start in range(0, len(response), 244):
                w.att(phone, bytes([0x1B]) + struct.pack("<H", DS) + response[start:start + 244], True)
            if ams:
                ams_traffic(w, phone, uid, message[:70])
        w.event(0x05, bytes([0x00]) + struct.pack("<H", phone) + bytes([0x13]))


if __name__ == "__main__":
    main()
