"""Tests of make bench's judging (Scripts/bench.py): medians, the head-to-head order, and the goals table.

No server runs here: the measurements are stand-ins that record their calls. make test runs these
(`python3 -m unittest discover -s Scripts`); the benchmark itself needs minutes and redis-server.
"""
import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import test_churn_bench  # noqa: E402


def run_(name, connections, per_second, p99=100, target="keyholed"):
    return {"name": name, "target": target, "connections_run": connections, "per_second": per_second,
            "latency_us": {"p50": 50, "p99": p99, "p99_9": 300}, "server_cpu_us_per_request": 5.0}


class MedianTests(unittest.TestCase):
    def test_odd_and_even(self):
        self.assertEqual(bench.median([3, 1, 2]), 2)
        self.assertEqual(bench.median([4, 1, 3, 2]), 2.5)
        self.assertEqual(bench.median([0.9]), 0.9)


class HeadToHeadTests(unittest.TestCase):
    def test_order_alternates_and_ratios_pair_each_round(self):
        calls = []
        keyholed_rates = iter([100, 80, 120])
        redis_rates = iter([100, 100, 100])

        def keyholed():
            calls.append("k")
            return {"per_second": next(keyholed_rates)}

        def redis():
            calls.append("r")
            return {"per_second": next(redis_rates)}

        with mock.patch("builtins.print"):
            outcomes = bench.head_to_head(3, [("session.get", "redis GET", 16, keyholed, redis)])
        # keyholed first in odd rounds (1st, 3rd), Redis first in even ones.
        self.assertEqual(calls, ["k", "r", "r", "k", "k", "r"])
        self.assertEqual(outcomes[0]["ratios"], [1.0, 0.8, 1.2])
        self.assertEqual(outcomes[0]["median_ratio"], 1.0)

    def test_verify_round_without_a_figure_is_skipped(self):
        figures = iter([None, 16.0])
        with mock.patch.object(bench, "verify_microseconds", side_effect=lambda *a: next(figures)), \
                mock.patch.object(bench, "openssl_speed", return_value={"rsa2048": {"verify_us": 12.5}}), \
                mock.patch("builtins.print"):
            pairs = bench.verify_rounds(2, "dir", "token")
        self.assertEqual(len(pairs), 1)
        self.assertEqual(pairs[0]["ratio"], 1.28)


class ReportTests(unittest.TestCase):
    def results(self, get_ratios, verify_ratios, p99s):
        runs = [run_("session.get", 16, 100), run_("token.verify cached", 1, 10)]
        runs += [run_("session.get at half peak", 16, 50, p99=p) for p in p99s]
        return {
            "machine": {"cpu": "test"}, "date": "2026-11-25", "took_s": 1, "seconds": 5, "rounds": len(get_ratios),
            "runs": runs, "notes": [], "directory": "/tmp/x", "pyjwt_us": 40.0, "pyjwt_version": "0",
            "head_to_head": [{"name": "session.get", "against": "redis GET", "connections": 16,
                              "keyholed": [], "redis": [], "ratios": get_ratios,
                              "median_ratio": bench.median(get_ratios)}],
            "verify_rounds": [{"keyhole_us": 16.0, "openssl_us": 12.5, "ratio": r} for r in verify_ratios],
        }

    def goal(self, text, label):
        for line in text.splitlines():
            if line.startswith("| " + label):
                return line.rsplit("|", 2)[-2].strip()
        self.fail(f"no goal row '{label}' in:\n{text}")

    def test_goals_follow_the_medians_not_single_rounds(self):
        text = bench.report(self.results([0.9, 1.05, 1.1], [1.2, 1.4, 1.25], [150, 250, 190]))
        self.assertEqual(self.goal(text, "session.get ≥ 1.0× Redis GET"), "yes")
        self.assertEqual(self.goal(text, "distinct RS256 token verification CPU"), "yes")
        self.assertEqual(self.goal(text, "session.get p99 at half the peak"), "yes")
        # The cached p50 (50 µs) is not under PyJWT's 40 µs.
        self.assertEqual(self.goal(text, "1-connection cached token.verify p50"), "no")

    def test_a_median_below_the_bar_is_not_met(self):
        text = bench.report(self.results([1.2, 0.95, 0.9], [1.35, 1.2, 1.31], [150, 210, 220]))
        self.assertEqual(self.goal(text, "session.get ≥ 1.0× Redis GET"), "no")
        self.assertEqual(self.goal(text, "distinct RS256 token verification CPU"), "no")
        self.assertEqual(self.goal(text, "session.get p99 at half the peak"), "no")
        self.assertIn("rounds 0.90× to 1.20×", text)


def hostile_round(quiet, attacked, quiet_after, failed=0):
    def figures(p99, failed=0):
        return {"per_second": 4000, "failed": failed, "latency_us": {"p50": 60, "p99": p99, "p99_9": 400}}
    return {"quiet": figures(quiet), "attacked": figures(attacked, failed), "quiet_after": figures(quiet_after),
            "attack": "hostile: 900 connections, 1 bytes sent, 0 connects refused; attacks: unread=1",
            "attacker_uid": 4242, "rss_quiet_kib": 30000, "rss_peak_kib": 31000}


class HostileTests(unittest.TestCase):
    def test_ratio_is_over_the_worse_quiet_run(self):
        verdict = bench.judge_hostile([hostile_round(100, 250, 150)])
        # 250 / max(100, 150), not 250 / 100.
        self.assertAlmostEqual(verdict["median_ratio"], 1.6667, places=4)
        self.assertTrue(verdict["met"])

    def test_goal_follows_the_median_of_the_rounds(self):
        rounds = [hostile_round(100, 150, 100), hostile_round(100, 300, 100), hostile_round(100, 210, 90)]
        verdict = bench.judge_hostile(rounds)
        self.assertEqual([r["ratio"] for r in rounds], [1.5, 3.0, 2.1])
        self.assertEqual(verdict["median_ratio"], 2.1)
        self.assertFalse(verdict["met"])
        self.assertTrue(bench.judge_hostile([hostile_round(100, 200, 100)])["met"], "2.0× is within the goal")

    def test_a_failed_well_behaved_request_misses_the_goal_whatever_the_latency(self):
        verdict = bench.judge_hostile([hostile_round(100, 100, 100, failed=3)])
        self.assertEqual(verdict["failed"], 3)
        self.assertFalse(verdict["met"])

    def test_report_row_and_table(self):
        results = {"machine": {"cpu": "test"}, "date": "2026-11-25", "took_s": 1, "seconds": 5, "rounds": 2, "runs": [],
                   "notes": [], "directory": "/tmp/x",
                   "hostile": [hostile_round(100, 120, 110), hostile_round(100, 260, 100, failed=1)]}
        text = bench.report(results)
        row = next(line for line in text.splitlines() if line.startswith("| session.get p99 under a hostile client"))
        self.assertIn("median 1.85× (rounds 1.09× to 2.60×); 1 well-behaved requests failed", row)
        self.assertTrue(row.endswith("| no |"), row)
        self.assertIn("## Under a hostile client", text)
        self.assertIn("| 2 | 100 | 260 | 100 | 2.60 | 4000 | 1 | 30000 / 31000 | 900 connections,", text)

    def test_hostile_only_report_has_the_goal_and_rounds_and_nothing_else(self):
        results = {"machine": {"cpu": "test"}, "date": "2026-11-25", "took_s": 1, "seconds": 5,
                   "hostile": [hostile_round(100, 150, 120)],
                   "churn": [test_churn_bench.churn_round((100, 0.05), [(130, 0.12), (105, 0.06)], (110, 0.05))]}
        text = bench.report_hostile_only(results)
        self.assertIn("| session.get p99 under a hostile client", text)
        self.assertIn("| 1 | 100 | 150 | 120 | 1.25 |", text)
        self.assertIn("| under connection churn from one uid (reads its refusal, closes at once)", text)
        self.assertIn("## Under connection churn", text)
        for absent in ("Redis", "Throughput", "Head to head", "Optimisations"):
            self.assertNotIn(absent, text)


if __name__ == "__main__":
    unittest.main()
