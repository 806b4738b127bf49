"""Tests of ab_instructions.py: its reading of callgrind's files, and that the shim it preloads lets
valgrind run keyholed at all.

make test runs these (`python3 -m unittest discover -s Scripts`), after `make build-lean` and
`make build-debug`.
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_instructions  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "Protocol", "clients", "python"))
import keyhole  # noqa: E402
import test_keyhole  # noqa: E402  (its Keyholed: a child keyholed, waited for by its ready line)
KEYHOLED = os.environ.get("KEYHOLED", os.path.join(ROOT, ".build", "debug", "keyholed"))

# The head of a callgrind output file, as callgrind 3.19 writes a dump.
DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 19460
cmd:  /tmp/keyholed --config keyholed.toml
part: 3

desc: Timerange: Basic block 196402853 - 298716012
desc: Trigger: dump

positions: line
events: Ir
summary: 0
totals: 438050386

fl=(1) ???
fn=(1) swift_retain
0 31920948
"""


class CallgrindFileTests(unittest.TestCase):
    def write(self, text):
        handle, path = tempfile.mkstemp(prefix="callgrind-test")
        with os.fdopen(handle, "w") as f:
            f.write(text)
        self.addCleanup(os.unlink, path)
        return path

    def test_totals_are_the_instructions_counted(self):
        # `summary:` is 0 in a dump taken with counting switched on and off: the figure is `totals:`.
        self.assertEqual(ab_instructions.totals(self.write(DUMP)), 438050386)

    def test_a_file_without_totals_is_refused(self):
        # A dump cut short must not read as a count of nothing.
        with self.assertRaises(ValueError):
            ab_instructions.totals(self.write("events: Ir\n"))

    def test_part_number(self):
        self.assertEqual(ab_instructions.part_number(self.write(DUMP)), 3)
        self.assertIsNone(ab_instructions.part_number(self.write("events: Ir\ntotals: 5\n")))

    def test_per_request(self):
        self.assertAlmostEqual(ab_instructions.per_request(438050386, 76392), 5734.24, places=2)
        with self.assertRaises(ValueError):
            ab_instructions.per_request(1000, 0)

    def test_report_line_gives_both_counts_their_ratio_and_difference(self):
        line = ab_instructions.report_line("ping", (16, 8), 5734, 5458)
        self.assertIn("old     5734, new     5458", line)
        self.assertIn("new/old 0.9519 (-276)", line)


class ShimTests(unittest.TestCase):
    """keyholed's main is async: without the shim, valgrind 3.19 dies as its first thread starts."""

    def test_the_main_thread_sleeps_while_keyholed_serves(self):
        # Run natively with the shim: its main thread must wait in poll, not spin (a spinning thread
        # would be counted into every request's instructions under callgrind). Started as the Python
        # client's tests start keyholed: ready once it logs keyholed.ready.
        self.assertTrue(os.path.exists(ab_instructions.SHIM), "make build-lean")
        daemon = test_keyhole.Keyholed(env=dict(os.environ, LD_PRELOAD=ab_instructions.SHIM))
        pid = daemon.proc.pid
        try:
            client = keyhole.Client(daemon.socket_path, timeout=10)
            states = []
            for _ in range(50):
                self.assertEqual(client.call("ping", {})["protocol"], 1)
                with open(f"/proc/{pid}/task/{pid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            client.close()
            # Waiting in poll: asleep whenever looked at (a spinning thread is running, R).
            self.assertEqual(set(states), {"S"}, states)
            with open(f"/proc/{pid}/task/{pid}/wchan") as f:
                self.assertIn("poll", f.read())
        finally:
            returncode = daemon.stop()
        self.assertEqual(returncode, 0, daemon.output())
        self.assertFalse(any("cannot be preloaded" in line for line in daemon.stderr_lines), daemon.output())

    def test_keyholed_runs_under_valgrind_with_the_shim(self):
        for path in (KEYHOLED, ab_instructions.SHIM):
            self.assertTrue(os.path.exists(path), f"{path} is missing: make build-debug build-lean")
        with tempfile.TemporaryDirectory() as directory:
            stripped = os.path.join(directory, "keyholed")
            # As ab_instructions.py runs it: valgrind 3.19 cannot read Swift's DWARF 5.
            subprocess.run(["objcopy", "--strip-debug", KEYHOLED, stripped], check=True)
            run = subprocess.run(["valgrind", "--tool=none", stripped, "--help"], capture_output=True, text=True,
                                 env=dict(os.environ, LD_PRELOAD=ab_instructions.SHIM), timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        self.assertNotIn("cannot be preloaded", run.stderr)
        self.assertIn("--config", run.stdout)
        self.assertNotIn("INTERNAL ERROR", run.stderr)


if __name__ == "__main__":
    unittest.main()
