#!/usr/bin/env python3
"""Writes the decode benchmark's ancs-capture/1 file (make bench).

  make_capture.py OUT [RESPONSES]     (default 20,000 responses)

Per notification: a Notification Source "added", a GetNotificationAttributes Control Point
write for all eight attributes, and its Data Source response cut into notification values of
20, 155 or 244 bytes (ATT MTU 23, 158, 247), in turn. Text mixes ASCII with "…", "„“", "β"
and emoji, as real notifications do. Deterministic: the same file every run.
"""
import json
import random
import struct
import sys

CUTS = (20, 155, 244)
WORDS = ["Hello", "are", "you", "coming", "tonight", "…", "„Kino“", "β-test", "👍", "the", "train",
         "is", "late", "again", "see", "you", "at", "8", "Café", "🎉", "ok"]
APPS = ["com.apple.MobileSMS", "com.apple.mobilemail", "net.whatsapp.WhatsApp", "com.apple.mobilecal"]


def text(rng, low, high):
    out = []
    while True:
        word = rng.choice(WORDS)
        candidate = (" ".join(out + [word])).encode()
        if len(candidate) > high:
            break
        out.append(word)
        if len(candidate) >= low and rng.random() < 0.3:
            break
    return " ".join(out).encode()


def main():
    out_path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    rng = random.Random(14)
    t = 0.0
    with open(out_path, "w") as out:
        out.write(json.dumps({"format": "ancs-capture/1", "source": "make bench"}, separators=(",", ":")) + "\n")
        for n in range(count):
            uid = 1000 + n
            t += 0.001
            ns = struct.pack("<BBBBI", 0, 0x18, 4, 1, uid)
            out.write('{"t":%.3f,"char":"ns","hex":"%s"}\n' % (t, ns.hex()))
            cp = bytes([0]) + struct.pack("<I", uid) + bytes([0]) + bytes([1]) + struct.pack("<H", 64) \
                + bytes([2]) + struct.pack("<H", 32) + bytes([3]) + struct.pack("<H", 256) + bytes([4, 5, 6, 7])
            out.write('{"t":%.3f,"char":"cp","hex":"%s"}\n' % (t, cp.hex()))
            message = text(rng, 10, 200)
            values = [
                (0, rng.choice(APPS).encode()), (1, text(rng, 3, 40)), (2, b"" if n % 3 else text(rng, 3, 20)),
                (3, message), (4, str(len(message) + (50 if n % 7 == 0 else 0)).encode()),
                (5, b"20261201T%02d%02d%02d" % (n // 3600 % 24, n // 60 % 60, n % 60)),
                (6, b"Reply"), (7, b"Clear"),
            ]
            response = bytes([0]) + struct.pack("<I", uid)
            for attribute_id, value in values:
                response += bytes([attribute_id]) + struct.pack("<H", len(value)) + value
            cut = CUTS[n % len(CUTS)]
            for start in range(0, len(response), cut):
                out.write('{"t":%.3f,"char":"ds","hex":"%s"}\n' % (t, response[start:start + cut].hex()))


if __name__ == "__main__":
    main()
