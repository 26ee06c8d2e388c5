#!/usr/bin/env python3
"""Writes Fuzz/seeds/ from the real captures (Tests/ANCSCaptureTests/Fixtures/captures/*.jsonl)
in the input format of Fuzz/ANCSFuzz.swift: for each capture, a reassembler session with the
captured Control Point request and the phone's fragments as captured (plus variants split finer,
with finishEarly, and with the request from the built-in table); NS and CP decoder seeds too.
Run from the repository root: python3 Fuzz/make-seeds.py"""
import glob, hashlib, json, os

CAPTURES = "Tests/ANCSCaptureTests/Fixtures/captures"
OUT = "Fuzz/seeds"

def session(cp, fragments, limits=0x00, ops_after=b""):
    data = bytearray([2, limits, 0xF0, len(cp)]) + cp
    for fragment in fragments:
        while len(fragment) > 0xFD:  # 0xFE/0xFF are operations
            data += bytes([0xFD]) + fragment[:0xFD]
            fragment = fragment[0xFD:]
        data += bytes([len(fragment)]) + fragment
    return bytes(data + ops_after)

def cut(blob, size):
    return [blob[i:i + size] for i in range(0, len(blob), size)]

seeds = {}
for path in sorted(glob.glob(f"{CAPTURES}/*.jsonl")):
    name = os.path.basename(path)[:-len(".jsonl")].replace("real-", "")
    records = [json.loads(line) for line in open(path)][1:]
    cps = [bytes.fromhex(r["hex"]) for r in records if r["char"] == "cp"]
    ds = [bytes.fromhex(r["hex"]) for r in records if r["char"] == "ds"]
    for r in records:
        if r["char"] == "ns":
            seeds[f"ns-{name}"] = bytes([0]) + bytes.fromhex(r["hex"])
    if not cps:
        continue
    cp = cps[0]
    seeds[f"cp-{name}"] = bytes([1]) + cp
    if not ds:
        continue
    seeds[f"ds-{name}"] = session(cp, ds)
    blob = b"".join(ds)
    seeds[f"ds20-{name}"] = session(cp, cut(blob, 20))
    seeds[f"dsearly-{name}"] = session(cp, [blob[: len(blob) // 2]], ops_after=b"\xff")
    if "sms-uid0x97" in name or "appattrs-pebbletime" in name:  # a few variants; the fuzzer finds the rest
        seeds[f"ds1-{name}"] = session(cp, cut(blob, 1))
        seeds[f"dslimits-{name}"] = session(cp, cut(blob, 20), limits=0x84)
        seeds[f"dsagain-{name}"] = session(cp, [blob[:9]], ops_after=b"\xfe" + bytes([len(blob[:200])]) + blob[:200])
# CP mode also builds a request straight from the bytes to check expect's validation.
seeds["cpv-notif-reserved"] = bytes([1, 0x00, 0x00, 0x01, 0x01, 0x0C, 0x00, 0x01, 0x00])
seeds["cpv-app-nul"] = bytes([1, 0x01]) + b"com.\x00x\xff\x00\x01"
seeds["cpv-action"] = bytes([1, 0x02, 0x05])
seeds["ds-idle-feed"] = bytes([2, 0, 11, 5]) + bytes.fromhex("021400000001") + bytes([3, 0, 1, 2])

os.makedirs(OUT, exist_ok=True)
for old in glob.glob(f"{OUT}/*"):
    os.remove(old)
for name, data in sorted(seeds.items()):
    with open(f"{OUT}/{name}", "wb") as f:
        f.write(data)
print(f"{len(seeds)} seeds in {OUT}")
