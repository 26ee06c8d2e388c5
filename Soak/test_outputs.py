#!/usr/bin/env python3
"""Tests of the soak's checks of --exec and MQTT (outputs.py; make soak runs them before the
soak): small windows that must pass, and ones that must fail.

    python3 Soak/test_outputs.py
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import Violation  # noqa: E402
from outputs import Recent, check_window, exec_command, match_exec, match_mqtt, output_counts, parse_subscriber_line  # noqa: E402

PHONE = "AA:BB:CC:DD:EE:01"
CONNECTED = b'{"v":1,"type":"connected","device":"AA:BB:CC:DD:EE:01","name":"Phone 1"}'
DISCONNECTED = b'{"v":1,"type":"disconnected","device":"AA:BB:CC:DD:EE:01","reason":"disconnected"}'


def added(uid):
    return b'{"v":1,"type":"added","device":"AA:BB:CC:DD:EE:01","uid":%d}' % uid


class ExecTests(unittest.TestCase):
    def test_every_line_in_order(self):
        printed = [CONNECTED, added(1), added(2)]
        self.assertEqual(match_exec(PHONE, list(printed), printed), 0)

    def test_dropped_lines_are_counted_missing(self):
        printed = [CONNECTED] + [added(u) for u in range(1, 10)]
        got = [CONNECTED, added(1), added(7), added(8), added(9)]     # 2..6 dropped
        missing = match_exec(PHONE, got, printed)
        self.assertEqual(missing, 5)
        check_window("exec", missing, 5, killed=False)
        with self.assertRaisesRegex(Violation, "counted 4 dropped"):
            check_window("exec", missing, 4, killed=False)

    def test_missing_without_a_drop_count_fails(self):
        printed = [added(1), added(2), added(3)]
        missing = match_exec(PHONE, [added(1), added(3)], printed)
        with self.assertRaisesRegex(Violation, "1 lines ancsd printed never came, but ancsd counted 0"):
            check_window("exec", missing, 0, killed=False)

    def test_a_window_ended_by_a_kill_holds_order_only(self):
        printed = [added(1), added(2), added(3)]
        check_window("exec", match_exec(PHONE, [added(1)], printed), 0, killed=True)

    def test_a_line_twice_fails(self):
        with self.assertRaisesRegex(Violation, "twice, or out of order"):
            match_exec(PHONE, [added(1), added(2), added(2)], [added(1), added(2), added(3)])

    def test_out_of_order_fails(self):
        with self.assertRaisesRegex(Violation, "twice, or out of order"):
            match_exec(PHONE, [added(2), added(1)], [added(1), added(2)])

    def test_a_line_never_printed_fails(self):
        with self.assertRaisesRegex(Violation, "never printed"):
            match_exec(PHONE, [added(9)], [added(1)])

    def test_lines_ancsd_printed_twice_may_come_twice(self):
        """A phone that reconnects prints the same connected line again: both are the command's."""
        printed = [CONNECTED, added(1), DISCONNECTED, CONNECTED, added(1)]
        self.assertEqual(match_exec(PHONE, list(printed), printed), 0)
        # One of them run twice and another dropped is not hidden: the count says so.
        missing = match_exec(PHONE, [CONNECTED, added(1), CONNECTED, added(1)], printed)
        self.assertEqual(missing, 1)

    def test_the_command_variants_differ_in_text_only(self):
        commands = {exec_command("/w", v) for v in range(3)}
        self.assertEqual(len(commands), 3)
        self.assertTrue(all('"/w/exec-$ANCSD_DEVICE.jsonl"' in c for c in commands))
        self.assertTrue(exec_command("/w", 0, sleep=0.1).startswith("sleep 0.1; "))


class MQTTTests(unittest.TestCase):
    def test_in_order_with_drops(self):
        printed = [added(u) for u in range(1, 6)]
        got = [(added(1), False), (added(4), False), (added(5), False)]
        self.assertEqual(match_mqtt(PHONE, got, printed, Recent()), (2, 0))

    def test_redelivery_after_a_broker_restart_is_taken_out(self):
        """ancsd sends again what the broker had not acknowledged when it went: the subscriber
        gets 2 and 3 twice, after the restart."""
        printed = [added(u) for u in range(1, 6)]
        got = [(added(1), False), (added(2), False), (added(3), False),
               (added(2), True), (added(3), True), (added(4), True), (added(5), False)]
        self.assertEqual(match_mqtt(PHONE, got, printed, Recent()), (0, 2))

    def test_redelivery_of_the_window_before(self):
        recent = Recent()
        match_mqtt(PHONE, [(added(1), False), (added(2), False)], [added(1), added(2)], recent)
        self.assertEqual(match_mqtt(PHONE, [(added(2), True), (added(3), True)], [added(3)], recent), (0, 1))

    def test_a_line_twice_without_a_restart_fails(self):
        printed = [added(u) for u in range(1, 4)]
        got = [(added(1), False), (added(2), False), (added(2), False), (added(3), False)]
        with self.assertRaisesRegex(Violation, "twice"):
            match_mqtt(PHONE, got, printed, Recent())

    def test_out_of_order_fails(self):
        with self.assertRaisesRegex(Violation, "out of order"):
            match_mqtt(PHONE, [(added(2), False), (added(1), False)], [added(1), added(2)], Recent())

    def test_the_next_printed_line_is_not_taken_for_a_redelivery(self):
        """After a restart the phone reconnects and ancsd prints the connected line again: it is
        the next line, not a re-delivery of the one before."""
        printed = [CONNECTED, DISCONNECTED, CONNECTED]
        got = [(CONNECTED, False), (DISCONNECTED, True), (CONNECTED, True)]
        self.assertEqual(match_mqtt(PHONE, got, printed, Recent()), (0, 0))

    def test_missing_without_a_drop_count_fails(self):
        printed = [added(1), added(2), added(3)]
        missing, _ = match_mqtt(PHONE, [(added(1), False), (added(3), False)], printed, Recent())
        with self.assertRaisesRegex(Violation, "MQTT: 1 lines"):
            check_window("MQTT", missing, 0, killed=False)

    def test_subscriber_lines_and_status(self):
        self.assertEqual(parse_subscriber_line(b"ancsd/aabbccddee01/event " + added(1)), ("aabbccddee01", added(1)))
        self.assertIsNone(parse_subscriber_line(b"ancsd/status online"))
        status = {"outputs": [{"name": "standard output", "written": 3, "dropped": 0},
                              {"name": "exec", "dropped": 2, "running": 0, "waiting": 0},
                              {"name": "MQTT mqtt://127.0.0.1:1883", "connected": True, "queued": 0, "dropped": 1}]}
        self.assertEqual(output_counts(status, "exec")["dropped"], 2)
        self.assertEqual(output_counts(status, "MQTT")["dropped"], 1)


if __name__ == "__main__":
    unittest.main(verbosity=1)
