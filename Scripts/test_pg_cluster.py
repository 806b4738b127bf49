"""pg_cluster.py's commands against a real PostgreSQL: what the PostgreSQL store's tests rely on."""

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class Cluster:
    def __init__(self, *args):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "pg_cluster.py"), *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"pg_cluster.py did not start: {self.proc.stderr.read()}")
        self.info = json.loads(line)

    def command(self, words):
        self.proc.stdin.write(words + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def psql(self, sql, timeout=30, tcp=False, password=None):
        """psql as the keyhole role: over the socket, or over TCP with a password."""
        env = dict(os.environ, PGCONNECT_TIMEOUT="5")
        if tcp:
            args = ["-h", self.info["host"]]
            env["PGPASSWORD"] = password if password is not None else self.info["password"]
        else:
            args = ["-h", self.info["socket_dir"]]
        return subprocess.run(["psql", *args, "-p", str(self.info["port"]), "-U", "keyhole", "-d", "keyhole",
                               "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
                              capture_output=True, text=True, timeout=timeout, env=env)

    def close(self):
        self.proc.stdin.close()
        status = self.proc.wait(120)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return status


class PgClusterTests(unittest.TestCase):
    def test_socket_only_crash_keeps_committed_rows_and_directory_removed(self):
        cluster = Cluster()
        try:
            self.assertIsNone(cluster.info["host"])
            self.assertEqual(cluster.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (7)").returncode, 0)
            self.assertEqual(cluster.command("crash"), {"ok": True})
            self.assertNotEqual(cluster.psql("SELECT 1", timeout=10).returncode, 0, "down after crash")
            started = cluster.command("start")
            self.assertTrue(started["ok"])
            self.assertEqual(cluster.psql("SELECT x FROM t").stdout, "7\n", "a committed row survives an immediate stop")
            self.assertFalse(cluster.command("sql SELEC 1")["ok"], "an SQL error is reported, not a crash of the script")
        finally:
            self.assertEqual(cluster.close(), 0)
        self.assertFalse(os.path.exists(cluster.info["dir"]))

    def test_tcp_takes_scram_passwords_only_and_freeze_stops_answers(self):
        cluster = Cluster("--tcp")
        try:
            self.assertEqual(cluster.info["host"], "127.0.0.1")
            self.assertEqual(cluster.psql("SELECT current_user", tcp=True).stdout, "keyhole\n")
            wrong = cluster.psql("SELECT 1", tcp=True, password="wrong")
            self.assertNotEqual(wrong.returncode, 0)
            self.assertIn("password authentication failed", wrong.stderr)
            self.assertEqual(cluster.command("freeze"), {"ok": True})
            with self.assertRaises(subprocess.TimeoutExpired):
                cluster.psql("SELECT 1", timeout=3)
            self.assertEqual(cluster.command("thaw"), {"ok": True})
            self.assertEqual(cluster.psql("SELECT 2").stdout, "2\n")
        finally:
            self.assertEqual(cluster.close(), 0)


if __name__ == "__main__":
    unittest.main()
