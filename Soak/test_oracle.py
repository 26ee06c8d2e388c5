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

    def test_connected_line_after_the_link_came_back(self):
        """Seed 22 (600 s), 162 s in, on a loaded machine: the phone's link of session 76
        replayed, dropped (session 77) and came back (session 78) within 3.4 ms; ancsd's
        `connected` line and session 76's replayed UID came after that. The connection is
        session 76's; the next one may be session 78's."""
        self.sim("link", up=True, session=76)
        self.sim("subscribed", session=76, replay=1)
        self.sim("ns", event="added", uid=12106, session=76, pre_existing=True)
        self.sim("cp", session=76, outcome="disconnect", request="notification", uid=12106)
        self.sim("link", up=False, session=77)
        self.sim("link", up=True, session=78)
        self.push("ancsd", {"v": 1, "type": "connected", "device": PHONE, "name": "Phone 1"})
        self.push("ancsd", added_line(12106))
        self.push("ancsd", {"v": 1, "type": "disconnected", "device": PHONE, "reason": "disconnected"})
        self.sim("subscribed", session=78, replay=1)
        self.sim("ns", event="added", uid=12107, session=78, pre_existing=True)
        self.push("ancsd", {"v": 1, "type": "connected", "device": PHONE, "name": "Phone 1"})
        self.push("ancsd", added_line(12107))
        self.oracle.advance(self.t)
        self.assertEqual(self.oracle.shown["added"], 2)

    def test_a_connection_is_not_bound_to_a_session_before_the_previous_one(self):
        """Only sessions begun after ancsd's previous connection may bind a late `connected`
        line, and only by its first shown line: a UID of an older session still fails."""
        self.sim("link", up=True, session=5)
        self.sim("subscribed", session=5, replay=1)
        self.sim("ns", event="added", uid=40, session=5, pre_existing=True)
        self.push("ancsd", {"v": 1, "type": "connected", "device": PHONE, "name": "Phone 1"})
        self.push("ancsd", added_line(40))
        self.push("ancsd", {"v": 1, "type": "disconnected", "device": PHONE, "reason": "disconnected"})
        self.sim("link", up=False, session=6)
        self.sim("link", up=True, session=7)
        self.sim("subscribed", session=7, replay=0)
        self.push("ancsd", {"v": 1, "type": "connected", "device": PHONE, "name": "Phone 1"})
        self.push("ancsd", added_line(40))
        with self.assertRaises(Violation):
            self.oracle.advance(self.t)

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

    def modification_after_its_answer(self, refetched_message):
        """Seed 7207 (an hour), 3,280 s in: the phone replayed UID 140095 and answered its fetch
        with a modification already in it; the Modified event came after ancsd had shown that,
        and ancsd's fetch again got `refetched_message`."""
        attributes = {"0": "net.whatsapp.WhatsApp", "1": "Burst 2 of 364", "2": "", "3": "Grüße emoji 🎉 see",
                      "4": "22", "5": "20261130T101500"}
        self.sim("link", up=True, session=1093)
        self.sim("subscribed", session=1093, replay=1)
        self.push("ancsd", {"v": 1, "type": "connected", "device": PHONE, "name": "Phone 1"})
        self.sim("ns", event="added", uid=140095, session=1093, pre_existing=True)
        self.sim("cp", session=1093, outcome="accepted", request="notification", uid=140095, attributes=attributes)
        self.push("ancsd", added_line(140095, app_id="net.whatsapp.WhatsApp", title="Burst 2 of 364", subtitle="",
                                      message="Grüße emoji 🎉 see", date="2026-11-30T10:15:00", complete=True))
        self.sim("ns", event="modified", uid=140095, session=1093, pre_existing=False)
        self.sim("cp", session=1093, outcome="accepted", request="notification", uid=140095,
                 attributes=dict(attributes, **{"3": refetched_message}))
        self.oracle.advance(self.t + int(1.5 * NS))

    def test_a_modification_the_shown_line_already_carries_is_not_owed(self):
        self.modification_after_its_answer("Grüße emoji 🎉 see")
        self.assertEqual(self.oracle.shown["added"], 1)

    def test_a_modification_with_new_text_is_still_owed(self):
        with self.assertRaises(Violation):
            self.modification_after_its_answer("something else")


if __name__ == "__main__":
    unittest.main(verbosity=1)
