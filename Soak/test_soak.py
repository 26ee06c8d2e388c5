#!/usr/bin/env python3
"""Tests of the soak driver's own plumbing (make soak runs them before the soak).

    python3 Soak/test_soak.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak  # noqa: E402

LINES = 20_000
# Like ancsd's standard output (docs/output.md): never waits for its reader. A line the output
# cannot take at once is dropped (ancsd first queues 1 MiB, then drops the oldest); 20,000
# lines of 400 bytes are 8 MB, more than ancsd's queue and any pipe hold.
WRITER = f"""
import os, sys
os.set_blocking(1, False)
dropped = 0
for i in range({LINES}):
    line = ('{{"v": 1, "type": "removed", "uid": %d, "pad": "%s"}}\\n' % (i, "x" * 340)).encode()
    try:
        if os.write(1, line) != len(line):
            dropped += 1
    except BlockingIOError:
        dropped += 1
sys.stderr.write("dropped %d\\n" % dropped)
"""


class OutputCaptureTests(unittest.TestCase):
    def test_a_reader_late_by_a_whole_burst_loses_no_line(self):
        """Seed 873082048 (90 s), the settle after the warm-up's removals: the soak read ancsd's
        standard output through a pipe, fell behind while ancsd printed 13,500 removals at up to
        6 MB/s (a 0.4 s garbage collection, CPU waits; its readers 1.5 s behind), and ancsd,
        which never waits for its output, dropped 368 lines past its 1 MiB queue ("dropped 368
        events for standard output"): the 283 removals of one phone never shown looked like a
        1.92 s stall. Here the soak reads nothing until a writer that never waits has written
        8 MB: every line must still reach it, in order."""
        with tempfile.TemporaryDirectory() as workdir:
            path = os.path.join(workdir, "stdout-1.jsonl")
            process = soak.start_with_output([sys.executable, "-c", WRITER], path, stderr=subprocess.PIPE)
            process.wait(timeout=60)        # the soak reads nothing meanwhile
            errors = process.stderr.read()
            process.stderr.close()
            self.assertEqual(process.returncode, 0, errors)
            got, caught_up = [], []
            soak.follow(path, process, lambda t, lines: got.extend(lines), caught_up.append)
            self.assertEqual(errors.decode().strip(), "dropped 0")
            self.assertEqual(len(got), LINES)
            self.assertEqual([json.loads(line)["uid"] for line in got], list(range(LINES)))

    def test_follow_hands_over_only_whole_lines_and_reports_catching_up(self):
        """A line written in two parts is handed over once whole; a last piece without its
        newline (a kill in the middle of a write) is never a line."""
        with tempfile.TemporaryDirectory() as workdir:
            path = os.path.join(workdir, "out")
            script = ("import os, time\n"
                      "os.write(1, b'{\"a\": 1}\\n{\"b\"')\n"
                      "time.sleep(0.3)\n"
                      "os.write(1, b': 2}\\n{\"cut')\n")
            process = soak.start_with_output([sys.executable, "-c", script], path)
            got, caught_up = [], []
            soak.follow(path, process, lambda t, lines: got.extend(lines), caught_up.append, poll=0.01)
            self.assertEqual(got, [b'{"a": 1}', b'{"b": 2}'])
            self.assertTrue(caught_up, "the end of the file was reached while the writer ran")


class MemoryFiguresTests(unittest.TestCase):
    def test_the_trend_is_the_least_squares_slope_in_kb_an_hour(self):
        """Samples (t, instance, rss_kb, …) every 2 s: 1 kB more every 2 s is 1,800 kB an hour,
        whatever a sample's swing about the line; a flat run with one spike in the middle is 0."""
        rising = [(t, 2, 5000 + t // 2 + (40 if t % 4 else -40)) for t in range(0, 600, 2)]
        self.assertAlmostEqual(soak.rss_trend_kb_per_hour(rising), 1800, delta=30)
        spike = [(t, 2, 5000 + (3000 if t == 300 else 0)) for t in range(0, 602, 2)]
        self.assertAlmostEqual(soak.rss_trend_kb_per_hour(spike), 0, delta=1e-6)
        self.assertIsNone(soak.rss_trend_kb_per_hour(rising[:2]))

    def test_malloc_stats_are_read_per_arena(self):
        text = ("Arena 0:\nsystem bytes     =     135168\nin use bytes     =      80768\n"
                "Arena 2:\nsystem bytes     =    8585216\nin use bytes     =    1458496\n"
                "Total (incl. mmap):\nsystem bytes     =    8855552\nin use bytes     =    1543312\n"
                "max mmap regions =          3\nmax mmap bytes   =    6889472\n")
        self.assertEqual(soak.parse_malloc_stats(text), {"arena 0": (135168, 80768), "arena 2": (8585216, 1458496),
                                                         "total": (8855552, 1543312)})


if __name__ == "__main__":
    unittest.main(verbosity=1)
