#!/usr/bin/env python3
"""`ancsd decode` against baselines measured in the same run (make bench).

  decode_bench.py BIN_DIR      (env: DECODE_RUNS, default 5; DECODE_RESPONSES, default 20000;
                                BTSNOOP_MB, default 52)

1. An ancs-capture/1 file of 20,000 responses (make_capture.py) through the built `ancsd decode`
   and through the Python baseline decoder (baseline_decode.py), output to a file; the runs are
   interleaved and the fastest of each counts. The two outputs must be identical.
2. A btsnoop file of at least 50 MB (make_btsnoop.py) through `ancsd decode`, in MB/s of input,
   with `tshark -r` on the same file as a reference figure.
Targets (docs/performance.md): decode at least 20 times as fast as the Python baseline, btsnoop
at least 100 MB/s; each is printed with PASS or FAIL (Benchmarks/figures.py).
"""
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from figures import report  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else ".build/release"
# Five runs a side: the ancsd runs last tens of milliseconds, so one scheduling delay on a
# shared machine moves a single run by a fifth; the fastest of five interleaved runs is the
# figure for both sides alike.
RUNS = int(os.environ.get("DECODE_RUNS", "5"))
RESPONSES = int(os.environ.get("DECODE_RESPONSES", "20000"))
BTSNOOP_MB = float(os.environ.get("BTSNOOP_MB", "52"))
HANDLES = "ns=0x000c,cp=0x000f,ds=0x0012"


def timed(argv, output):
    """Wall-clock and CPU seconds of one run, its output to `output`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(output, "wb") as out:
        status = subprocess.run(argv, stdout=out, stderr=subprocess.DEVNULL).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if status not in (0, 1):
        sys.exit(f"decode bench: {' '.join(argv)} exited with {status}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    work = tempfile.mkdtemp(prefix="ancsd-decode-bench-")
    try:
        capture = f"{work}/capture.jsonl"
        snoop = f"{work}/capture.btsnoop"
        subprocess.run([sys.executable, f"{HERE}/make_capture.py", capture, str(RESPONSES)], check=True)
        subprocess.run([sys.executable, f"{HERE}/make_btsnoop.py", snoop, str(BTSNOOP_MB)], check=True)
        capture_mb = os.path.getsize(capture) / 1e6
        snoop_mb = os.path.getsize(snoop) / 1e6

        ancsd, python = [], []
        for _ in range(RUNS):  # interleaved, so load from elsewhere hits both alike
            ancsd.append(timed([f"{BIN}/ancsd", "decode", capture], f"{work}/ancsd.out"))
            python.append(timed([sys.executable, f"{HERE}/baseline_decode.py", capture], f"{work}/python.out"))
        same = open(f"{work}/ancsd.out", "rb").read() == open(f"{work}/python.out", "rb").read()
        best, base = min(w for w, _ in ancsd), min(w for w, _ in python)
        cpu, base_cpu = min(c for _, c in ancsd), min(c for _, c in python)
        ratio = base / best
        print(f"decode, ancs-capture/1 ({RESPONSES:,} responses, {capture_mb:.1f} MB; fastest of {RUNS} interleaved runs, output to a file)")
        report("decode, ancs-capture/1", f"{ratio:.1f}x the Python baseline",
               ">= 20x", ratio >= 20 and same, f"ancsd {best * 1000:.0f} ms, Python {base * 1000:.0f} ms"
               + ("" if same else "; the outputs DIFFER"))
        print(f"  ancsd decode, CPU time: {cpu * 1000:.0f} ms (python baseline {base_cpu * 1000:.0f} ms, ratio {base_cpu / cpu:.1f}x)")
        print(f"  outputs identical: {'yes' if same else 'NO'}")

        walls = [timed([f"{BIN}/ancsd", "decode", "--handles", HANDLES, snoop], f"{work}/snoop.out")[0] for _ in range(RUNS)]
        rate = snoop_mb / min(walls)
        print(f"decode, btsnoop ({snoop_mb:.1f} MB, H4, ACL fragments of 27 bytes, ANCS among other traffic; fastest of {RUNS})")
        reference = ""
        if shutil.which("tshark"):
            tshark = timed(["tshark", "-r", snoop], f"{work}/tshark.out")[0]
            reference = f"tshark -r {snoop_mb / tshark:.1f} MB/s, ratio {rate / (snoop_mb / tshark):.1f}x"
        else:
            reference = "tshark not installed"
        report("decode, btsnoop", f"{rate:.0f} MB/s", ">= 100 MB/s", rate >= 100, reference)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
