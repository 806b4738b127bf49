"""Unit tests of churn_bench.py's judging and report (no keyholed: the rounds are made up)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import churn_bench  # noqa: E402


def run(p99, cores, failed=0, attacker=None, per_second=None):
    figures = {"p99_us": p99, "failed": failed, "per_second": 4000, "cores": cores, "churn": None}
    if attacker:
        figures["attacker"] = attacker
        figures["churn"] = {"per_second": per_second, "refused": 900, "frame_errors": 100, "cpu_us_per_connection": 21.5}
    return figures


def churn_round(quiet, attacked, quiet_after):
    """`attacked`: (p99, cores) per attacker, in ATTACKERS' order."""
    outcome = {"quiet": run(*quiet), "quiet_after": run(*quiet_after),
               "attacked": [run(p99, cores, attacker=name, per_second=1000 * (index + 1))
                            for index, ((name, _), (p99, cores)) in enumerate(zip(churn_bench.ATTACKERS, attacked))]}
    churn_bench.judge_round(outcome)
    return outcome


class ChurnTests(unittest.TestCase):
    def test_round_is_judged_against_the_worse_quiet_run(self):
        outcome = churn_round((100, 0.05), [(180, 0.25), (110, 0.06)], (120, 0.07))
        first, second = outcome["attacked"]
        # 180 / max(100, 120); 0.25 - max(0.05, 0.07).
        self.assertEqual(first["ratio"], 1.5)
        self.assertEqual(first["attacker_cores"], 0.18)
        self.assertEqual(second["attacker_cores"], 0.0, "never below nothing")

    def test_goals_per_attacker_on_the_medians(self):
        rounds = [churn_round((100, 0.05), [(140, 0.40), (110, 0.06)], (100, 0.05)),
                  churn_round((100, 0.05), [(200, 0.20), (110, 0.06)], (100, 0.05)),
                  churn_round((100, 0.05), [(150, 0.30), (300, 0.06)], (100, 0.05))]
        early, waiting = churn_bench.judge(rounds)
        self.assertEqual((early["median_ratio"], early["median_cores"]), (1.5, 0.25))
        self.assertTrue(early["met"], "1.5x and 25 % of a core are within the goals")
        self.assertEqual(waiting["median_ratio"], 1.1)
        self.assertTrue(waiting["met"])
        costly = [churn_round((100, 0.05), [(120, 0.40), (110, 0.06)], (100, 0.05))]
        self.assertFalse(churn_bench.judge(costly)[0]["met"], "40 % of a core is past the goal")

    def test_a_failed_request_misses_the_goal(self):
        outcome = churn_round((100, 0.05), [(100, 0.05), (100, 0.05)], (100, 0.05))
        outcome["attacked"][1]["failed"] = 2
        verdicts = churn_bench.judge([outcome])
        self.assertTrue(verdicts[0]["met"])
        self.assertFalse(verdicts[1]["met"])

    def test_rows_and_section(self):
        rounds = [churn_round((100, 0.05), [(130, 0.12), (105, 0.06)], (110, 0.05))]
        rows = churn_bench.goal_rows(rounds)
        self.assertEqual(len(rows), 2)
        self.assertIn("median 1.18×, 0.070 of a core | yes |", rows[0])
        text = "\n".join(churn_bench.churn_section(rounds))
        self.assertIn("## Under connection churn", text)
        self.assertIn("| 1 | reads its refusal, closes at once | 100 | 130 | 110 | 1.18 | 0.050 / 0.120 | 0.070 | "
                      "1000 (900, 100) | 21.5 |", text)


if __name__ == "__main__":
    unittest.main()
