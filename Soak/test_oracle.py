#!/usr/bin/env python3
"""Tests of the soak's oracle (make soak runs them before the soak): each one replays, item by
item, a moment a soak run met, so a harness mistake once fixed stays fixed.

    python3 Soak/test_oracle.py
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import NS, Oracle, Violation  # noqa: E402

PHONE = "AA:BB:CC:DD:EE:01"


def added_line(uid, **fields):
    line = {"v": 1, "type": "added", "device": PHONE, "uid": uid, "category": "location", "flags": ["pre_existing"],
            "app_id": None, "title": None, "subtitle": None, "message": None, "date": None,
            "positive_action": None, "negative_action": None, "complete": False}
    line.update(fields)
    return line


class OracleTests(unittest.TestCase):
    def setUp(self):
        self.oracle = Oracle([PHONE])
        self.t = 1000 * NS
        self.push("driver", {"kind": "ancsd-started"})

    def push(self, source, item, after_ms=1):
        self.t += after_ms * 1_000_000
        self.oracle.push(self.t, source, item)

    def sim(self, kind, after_ms=1, **fields):
        self.push("sim", dict(kind=kind, dev=0, t_ns=self.t, **fields), after_ms)

    def test_connected_line_after_the_link_dropped_again(self):
        """Seed 345850489 (600 s), 28 s in: the phone connected (session 15), replayed, and lost
        the link within a millisecond (the simulator numbers session 16 at once); ancsd's
        `connected` line and the replayed UID came after that. The connection is session 15's."""
        self.sim("link", up=True, session=15)
        self.sim("subscribed", session=15, replay=1)
        self.sim("ns", event="added", uid=2511, session=15, pre_existing=True)
        self.sim("cp", session=15, outcome="disconnect", request="notification", uid=2511)
        self.sim("link", up=False, session=16)
        self.push("ancsd", {"v": 1, "type": "connected", "device": PHONE, "name": "Phone 1"})
        self.push("ancsd", added_line(2511))
        self.push("ancsd", {"v": 1, "type": "disconnected", "device": PHONE, "reason": "disconnected"})
        self.oracle.advance(self.t)
        self.assertEqual(self.oracle.shown["added"], 1)

    def test_a_uid_of_another_session_is_still_refused(self):
        self.sim("link", up=True, session=3)
        self.sim("subscribed", session=3, replay=0)
        self.push("ancsd", {"v": 1, "type": "connected", "device": PHONE, "name": "Phone 1"})
        self.push("ancsd", added_line(77))
        with self.assertRaises(Violation):
            self.oracle.advance(self.t)

    def test_a_stall_of_ancsd_is_caught(self):
        """The 1 s rule: an event owed for 1.2 s with no output for that phone fails."""
        self.sim("link", up=True, session=1)
        self.sim("subscribed", session=1, replay=0)
        self.push("ancsd", {"v": 1, "type": "connected", "device": PHONE, "name": "Phone 1"})
        self.sim("ns", event="added", uid=5, session=1, pre_existing=False)
        self.oracle.advance(self.t + int(0.9 * NS))
        with self.assertRaises(Violation):
            self.oracle.advance(self.t + int(1.2 * NS))


if __name__ == "__main__":
    unittest.main(verbosity=1)
