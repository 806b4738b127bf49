"""Heap allocations per request of a release keyholed, held to budgets (issue 31; `make test-allocations`).

As swift-nio's own allocation tests do, but from outside the process: keyholed runs as it ships (a
release build) with Scripts/lean/malloc_count.c preloaded, which counts every allocation of the
process into a file, and lean-load (Scripts/lean/lean_load.c) sends one kind of request over 16
connections, at depths 1 and 8, and reads the counts at the edges of its measured window (after a
warm-up: no connection's set-up is in it). A request's count is the process's allocations over the
requests answered, so the work of every thread is in it (the committer's, the touches'), as it is in
the cost.

budgets.json holds each request's budget, as measured when it was last lowered: a change that makes
a request allocate more fails here; one that makes it allocate less should lower the budget. The
least of three runs is judged, since a background task's allocations (the session sweeper's, say)
only ever add to a run's count.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "Scripts"))
sys.path.insert(0, os.path.join(ROOT, "Protocol", "clients", "python"))
import keyhole  # noqa: E402
import lean_bench  # noqa: E402

# What one run's background work can add to a request's count, spread over a second of requests.
TOLERANCE = 0.3


class AllocationBudgetTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for path in (lean_bench.LEAN_LOAD, lean_bench.MALLOC_COUNT, os.path.join(lean_bench.RELEASE, "keyholed")):
            if not os.path.exists(path):
                raise AssertionError(f"{path} is missing: make test-allocations builds it")
        with open(os.path.join(HERE, "budgets.json")) as f:
            cls.budgets = json.load(f)
        cls.directory = tempfile.TemporaryDirectory(prefix="khal", dir="/tmp")
        tokens = os.path.join(cls.directory.name, "tokens")
        subprocess.run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-tokens.py"), "--out", tokens,
                        "--count", "1"], check=True, capture_output=True)
        with open(os.path.join(tokens, "issuer.toml")) as f:
            issuer = f.read()
        cls.token_file = os.path.join(tokens, "tokens.txt")
        # KEYHOLE_TEST_LOOP: keyholed's event loop (nio or epoll) when not its default.
        loop = os.environ.get("KEYHOLE_TEST_LOOP")
        server = f'[server]\nloop = "{loop}"\n' if loop else ""
        cls.keyholed = lean_bench.Keyholed(cls.directory.name, "k", f'{server}[storage]\nfsync = "always"\n\n{issuer}\n',
                                           count_allocations=True).start()
        client = keyhole.Client(cls.keyholed.socket)
        cls.sessions = os.path.join(cls.directory.name, "sessions.txt")
        with open(cls.sessions, "w") as f:
            for n in range(500):
                f.write(client.create_session(f"user-{n}", issuer="local")["session"] + "\n")
        client.close()

    @classmethod
    def tearDownClass(cls):
        cls.keyholed.stop()
        cls.directory.cleanup()

    def requests(self, name):
        return {
            "ping": (),
            "session.get": ("--op", "session.get", "--args", self.sessions),
            "token.verify cached": ("--op", "token.verify", "--args", self.token_file),
            "session.create": ("--op", "session.create", "--keys", "1000", "--key-prefix", "budget"),
        }[name]

    def least_of_runs(self, name, depth=1, runs=3, least_answered=1000):
        extra = self.requests(name)
        figures = [lean_bench.allocations_per_request(self.keyholed, extra, depth=depth) for _ in range(runs)]
        for figure in figures:
            self.assertGreaterEqual(figure["answered"], least_answered, f"{name}: too few answers to judge")
        return min(figure["allocations"] for figure in figures)

    def test_the_counter_counts(self):
        # A create allocates (its session, its record): a counter that reads zero measures nothing. Not
        # held to a budget: a durable create's count moves with how many share each sync.
        self.assertGreater(self.least_of_runs("session.create", runs=1, least_answered=20), 1.0)

    def test_each_request_within_its_budget(self):
        for name, budget in self.budgets.items():
            for depth in (1, 8):
                with self.subTest(request=name, depth=depth):
                    measured = self.least_of_runs(name, depth=depth)
                    print(f"allocations per request: {name} at depth {depth}: {measured:.2f} (budget {budget})",
                          file=sys.stderr)
                    self.assertLessEqual(measured, budget + TOLERANCE, f"{name} at depth {depth} allocates "
                                         f"{measured:.2f} times a request, past its budget of {budget}")


if __name__ == "__main__":
    unittest.main()
