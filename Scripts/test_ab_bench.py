"""Tests of ab_bench.py's pure parts: its settings and its judging of paired rounds.

No server runs here. make test runs these (`python3 -m unittest discover -s Scripts`).
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_bench  # noqa: E402


class SettingsTests(unittest.TestCase):
    def test_connections_by_depth(self):
        self.assertEqual(ab_bench.parse_settings("16x1,16x8"), [(16, 1), (16, 8)])
        self.assertEqual(ab_bench.parse_settings(" 64x1"), [(64, 1)])

    def test_malformed_settings_are_refused(self):
        for text in ("16", "x8", "16x", "0x1", "16x0", "16x-1", "a x b", "16*8"):
            with self.assertRaises(ValueError, msg=text):
                ab_bench.parse_settings(text)


class SummaryTests(unittest.TestCase):
    def test_the_median_of_the_rounds_ratios_not_the_ratio_of_medians(self):
        # The machine slowed down in the third round: both sides cost more, their ratio held.
        pairs = [(1000, 900), (1100, 990), (3000, 2700), (1000, 1100), (1050, 945)]
        summary = ab_bench.summarize(pairs)
        self.assertAlmostEqual(summary["ratio"], 0.9)
        self.assertEqual(summary["old_ns"], 1050)
        self.assertEqual(summary["new_ns"], 990)
        self.assertEqual(summary["new_lower"], 4)
        self.assertEqual(summary["rounds"], 5)

    def test_quartiles_bound_the_median(self):
        pairs = [(100, n) for n in (80, 90, 95, 100, 105, 110, 130, 150)]
        summary = ab_bench.summarize(pairs)
        self.assertEqual(summary["ratio_q1"], 0.95)
        self.assertEqual(summary["ratio_q3"], 1.3)
        self.assertLessEqual(summary["ratio_q1"], summary["ratio"])
        self.assertLessEqual(summary["ratio"], summary["ratio_q3"])

    def test_a_round_equal_on_both_sides_is_not_counted_lower(self):
        self.assertEqual(ab_bench.summarize([(100, 100), (100, 99)])["new_lower"], 1)

    def test_report_line_names_everything(self):
        line = ab_bench.report_line("session.get", (16, 8), ab_bench.summarize([(5000, 4500), (5200, 4680)]))
        self.assertIn("session.get", line)
        self.assertIn("16 x 8", line)
        self.assertIn("new/old 0.900", line)
        self.assertIn("new lower in 2 of 2 rounds", line)


if __name__ == "__main__":
    unittest.main()
