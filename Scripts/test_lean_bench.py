"""Tests of lean_bench.py's judging: per-round ratios, their medians, and the goals table.

No server runs here: the samples are made up, as lean-load would print them. make test runs these
(`python3 -m unittest discover -s Scripts`).
"""
import argparse
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lean_bench  # noqa: E402


def sample(name, round_number, ns, per_second, connections=16, depth=1, server_share=0.9, client_share=0.5):
    return {"name": name, "round": round_number, "connections": connections, "depth": depth,
            "server_cpu_ns_per_request": ns, "per_second": per_second, "server_cpu_share": server_share,
            "client_cpu_share": client_share}


class SummaryTests(unittest.TestCase):
    def test_ratios_pair_each_round_and_take_the_median(self):
        samples = [
            sample("ping", 0, 5000, 100), sample("GET", 0, 5000, 100),   # 1.0
            sample("ping", 1, 9000, 100), sample("GET", 1, 3000, 100),   # 3.0
            sample("ping", 2, 4000, 100), sample("GET", 2, 5000, 100),   # 0.8
        ]
        rows = lean_bench.summarize(samples, 3, settings=[(16, 1)])
        row = next(r for r in rows if r["scenario"] == "ping")
        # The median of the rounds' ratios (1.0), not the ratio of the medians (5000 / 5000 = 1.0 here too,
        # so a second check below tells them apart).
        self.assertEqual(row["cpu_ratio"], 1.0)
        self.assertEqual(row["keyholed_ns"], 5000)
        samples[1]["server_cpu_ns_per_request"] = 2500  # round 0 ratio 2.0: ratios 2.0, 3.0, 0.8
        row = next(r for r in lean_bench.summarize(samples, 3, settings=[(16, 1)]) if r["scenario"] == "ping")
        self.assertEqual(row["cpu_ratio"], 2.0)
        self.assertEqual(row["redis_ns"], 3000)

    def test_goals_judged_against_their_limits(self):
        samples = []
        for r in range(3):
            samples += [sample("ping", r, 4800, 90), sample("session.get", r, 7000, 80),
                        sample("GET", r, 5000, 100, server_share=0.95, client_share=0.6),
                        sample("session.get", r, 3000, 90, depth=8), sample("GET", r, 1800, 100, depth=8)]
        rows = lean_bench.summarize(samples, 3, settings=[(16, 1), (16, 8)])
        allocations = {name: {"16x1": {"allocations": n, "bytes": 10}, "16x8": {"allocations": n, "bytes": 10}}
                       for name, n in (("ping", 0.0), ("session.get", 5.0), ("token.verify cached", 3.0))}
        _, goals = lean_bench.report(rows, allocations, argparse.Namespace(rounds=3, seconds=2.0))
        verdicts = {goal["goal"]: goal["met"] for goal in goals}
        self.assertTrue(verdicts["ping CPU per request at most 1.0x Redis GET's, depth 1"])            # 0.96
        self.assertFalse(verdicts["session.get CPU per request at most 1.2x Redis GET's, depth 1"])    # 1.4
        self.assertFalse(verdicts["session.get CPU per request at most 1.5x Redis GET's, depth 8"])    # 1.67
        self.assertFalse(verdicts["session.get throughput at least 0.9x Redis GET's, depth 1"])       # 0.8
        self.assertTrue(verdicts["ping heap allocations per request at most 0"])
        self.assertFalse(verdicts["session.get heap allocations per request at most 4"])
        self.assertTrue(next(met for goal, met in verdicts.items() if goal.startswith("the client is not")))


if __name__ == "__main__":
    unittest.main()
