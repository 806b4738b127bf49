"""Tests of pg_bench.py's pure parts: the tokens and the seeding's agreement on them, pgbench's scripts and
report, the per-round ratios, the percentiles and the goals table.

No server runs here (the seeding SQL is checked as text; it is run against a real cluster by make bench).
make test runs these (`python3 -m unittest discover -s Scripts`).
"""
import argparse
import base64
import hashlib
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_bench  # noqa: E402


def sample(name, round_number, per_second, keyholed_ns=None, postgres_ns=1000, client_ns=100, mean_batch=None):
    return {"name": name, "round": round_number, "per_second": per_second, "keyholed_ns": keyholed_ns,
            "postgres_ns": postgres_ns, "client_ns": client_ns, "mean_batch": mean_batch}


class TokenTests(unittest.TestCase):
    def test_tokens_have_a_session_tokens_form(self):
        # SessionToken: "kh_" and the base64url of 32 bytes, unpadded: 46 characters of its alphabet.
        text = pg_bench.token(7)
        self.assertEqual(len(text), 46)
        self.assertTrue(text.startswith("kh_"))
        self.assertTrue(all(c.isalnum() or c in "-_" for c in text[3:]))
        self.assertEqual(base64.urlsafe_b64decode(text[3:] + "="), hashlib.sha256(b"khbench7").digest())
        self.assertNotEqual(pg_bench.token(1), pg_bench.token(2))

    def test_id_and_check_are_the_halves_of_the_tokens_sha256(self):
        text = pg_bench.token(3)
        digest = hashlib.sha256(text.encode()).digest()
        self.assertEqual(pg_bench.session_id(text), (digest[:16], digest[16:]))

    def test_seeding_computes_the_same_tokens_as_python(self):
        # The SQL builds the token from the same text ('khbench' || n), turns standard base64 into
        # base64url and drops the padding, as token() does.
        sql = pg_bench.seed_sql('"reads"', 100, 10, 1_764_115_200)
        self.assertIn("sha256(convert_to('khbench' || n, 'UTF8'))", sql)
        self.assertIn("translate(rtrim(", sql)
        self.assertIn("'+/', '-_'", sql)
        self.assertIn("generate_series(1, 100)", sql)      # sessions 1 .. N, as the tokens file
        self.assertIn("generate_series(0, 9)", sql)        # users, n % users
        self.assertIn(f"{1_764_115_200 + pg_bench.TTL}", sql)
        self.assertNotIn("\n", sql)                         # pg_cluster's sql command is one line


class PgbenchTests(unittest.TestCase):
    def test_select_is_keyholeds_read_by_primary_key(self):
        script = pg_bench.pgbench_select('"reads"', 500)
        self.assertIn("\\set n random(1, 500)", script)
        self.assertIn('LEFT JOIN "reads".users u ON u.issuer = s.issuer AND u.sub = s.sub', script)
        self.assertIn("WHERE s.id = int8send(:n::bigint) || int8send(:n::bigint);", script)

    def test_create_is_keyholeds_transaction_with_the_users_upsert(self):
        script = pg_bench.pgbench_create('"creates"', 100)
        statements = [line for line in script.splitlines() if not line.startswith("\\")]
        self.assertEqual(statements[0], "BEGIN;")
        self.assertTrue(statements[1].startswith('INSERT INTO "creates".users'))
        self.assertIn("ON CONFLICT (issuer, sub) DO UPDATE SET last_login_at", statements[1])
        self.assertTrue(statements[2].startswith('INSERT INTO "creates".sessions'))
        self.assertIn("ON CONFLICT (id) DO NOTHING RETURNING id", statements[2])
        self.assertEqual(statements[3], "COMMIT;")

    def test_report_parsed_and_failures_refused(self):
        output = ("transaction type: select.sql\nnumber of clients: 16\n"
                  "number of transactions actually processed: 98765\nnumber of failed transactions: 0 (0.000%)\n"
                  "latency average = 0.486 ms\ninitial connection time = 21.3 ms\n"
                  "tps = 32921.667 (without initial connection time)\n")
        self.assertEqual(pg_bench.parse_pgbench(output), (32921.667, 98765))
        with self.assertRaises(ValueError):
            pg_bench.parse_pgbench(output.replace("failed transactions: 0", "failed transactions: 3"))
        with self.assertRaises(ValueError):
            pg_bench.parse_pgbench("pgbench: error: connection refused\n")


class SummaryTests(unittest.TestCase):
    def test_percentile_is_nearest_rank(self):
        values = list(range(1, 101))  # 1 .. 100
        self.assertEqual(pg_bench.percentile(values, 0.5), 50)
        self.assertEqual(pg_bench.percentile(values, 0.99), 99)
        self.assertEqual(pg_bench.percentile(values, 1.0), 100)
        self.assertEqual(pg_bench.percentile([3.0], 0.99), 3.0)
        summary = pg_bench.fanout_summary([float(v) for v in reversed(values)], 0)
        self.assertEqual((summary["p50_ms"], summary["p99_ms"], summary["max_ms"]), (50.0, 99.0, 100.0))

    def test_ratio_is_the_median_of_each_rounds_ratio(self):
        samples = [
            sample("session.create", 0, 800), sample("pgbench create", 0, 1000),    # 0.8
            sample("session.create", 1, 1800), sample("pgbench create", 1, 1000),   # 1.8
            sample("session.create", 2, 500), sample("pgbench create", 2, 1000),    # 0.5
        ]
        row = next(r for r in pg_bench.summarize(samples, 3) if r["scenario"] == "session.create")
        self.assertEqual(row["throughput_ratio"], 0.8)
        self.assertEqual(row["keyholed_per_second"], 800)
        # The median of the ratios, not the ratio of the medians: ratios 0.4, 1.8 and 1.25 (median 1.25),
        # where the sides' medians, 500 and 1000, would give 0.5.
        samples[0]["per_second"] = 400
        samples[5]["per_second"] = 400
        row = next(r for r in pg_bench.summarize(samples, 3) if r["scenario"] == "session.create")
        self.assertEqual(row["throughput_ratio"], 1.25)

    def test_each_case_once_a_round_and_keyholed_first_in_turn(self):
        even, odd = pg_bench.round_order(0), pg_bench.round_order(1)
        self.assertEqual(sorted(even), sorted(set(even)))
        self.assertEqual(sorted(even), sorted(odd))
        self.assertEqual(even[:2], ["session.get cache hit", "session.get local backend"])
        self.assertEqual(odd[:2], ["session.get local backend", "session.get cache hit"])
        self.assertEqual(even[2:5], ["session.create", "pgbench create", "pgbench create unprepared"])
        self.assertEqual(odd[4], "session.create")

    def test_a_round_missing_a_side_is_left_out(self):
        samples = [sample("session.get cache hit", 0, 900), sample("session.get local backend", 0, 1000),
                   sample("session.get cache hit", 1, 100)]
        row = next(r for r in pg_bench.summarize(samples, 2) if r["scenario"] == "session.get cache hit")
        self.assertEqual((row["rounds"], row["throughput_ratio"]), (1, 0.9))

    def test_goals_judged_against_their_limits(self):
        samples = []
        for r in range(3):
            samples += [sample("session.get cache hit", r, 95, keyholed_ns=5000),
                        sample("session.get local backend", r, 100, keyholed_ns=4000),
                        sample("session.create", r, 70, keyholed_ns=20000),
                        sample("pgbench create", r, 100),
                        sample("session.get cache miss", r, 80, keyholed_ns=9000, mean_batch=7 + r),
                        sample("pgbench select", r, 100), sample("pgbench select unprepared", r, 85)]
        rows = pg_bench.summarize(samples, 3)
        options = argparse.Namespace(rounds=3, seconds=3.0, sessions=100, connections=16, pool_size=16,
                                     pg_version="15.0")
        fanout = pg_bench.fanout_summary([1.0] * 98 + [60.0, 70.0], 0)  # p99 60 ms
        section, goals = pg_bench.report(rows, fanout, options, "2 cores")
        verdicts = {goal["goal"]: goal["met"] for goal in goals}
        self.assertTrue(verdicts["session.get cache hit throughput at least 0.9x session.get local backend's"])
        self.assertFalse(verdicts["session.create throughput at least 0.8x pgbench create's"])     # 0.7
        self.assertTrue(verdicts["session.get cache miss throughput at least 0.8x pgbench select's"])  # exactly 0.8
        self.assertEqual(len(goals), 4)  # the unprepared peers are shown, not judged
        self.assertFalse(next(met for goal, met in verdicts.items() if goal.startswith("revoked")))
        self.assertTrue(section.startswith(f"## {pg_bench.HEADING}\n"))
        self.assertIn("| session.get cache hit | session.get local backend | 95 | 100 | 0.95x | 5000 |", section)
        self.assertTrue(next(line for line in section.splitlines() if line.startswith("| session.get cache miss | pgbench select |"))
                        .endswith("| 8.0 |"), "the mean batch is the median of the rounds'")
        fanout = pg_bench.fanout_summary([1.0] * 100, 1)  # fast, but one never refused: not met
        _, goals = pg_bench.report(rows, fanout, options, "2 cores")
        self.assertFalse(goals[-1]["met"])


if __name__ == "__main__":
    unittest.main()
