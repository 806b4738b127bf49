#!/usr/bin/env python3
"""Two keyholed binaries, side by side: is a change cheaper per request? (issue 31)

Run before and after a change meant to cut keyholed's CPU per request:

    python3 Scripts/ab_bench.py OLD NEW [--ops session.get,token.verify,ping,session.create] [--settings 16x1,16x8]

OLD and NEW are release keyholed binaries (copy .build/release/keyholed aside before the change).

Measured one after the other (as lean_bench.py measures keyholed against Redis), the same binary's CPU
per request moves by a tenth or more between runs on this virtual machine, and by a third on a busy
hour: other guests share its host. A change worth 5 % cannot be seen that way without dozens of
rounds. Here both keyholeds serve the same load at the same moment: both on the same CPU (every
thread), each driven by its own lean-load on the other CPU, for --seconds. Whatever slows the machine
slows both alike, so the ratio of their CPU per request within a round holds still: run with the same
binary twice, the median ratio was 0.99-1.01 with quartiles within 2 % (10 rounds), where consecutive
runs gave quartiles 20 % apart.

Each keyholed holds 100 000 sessions of 10 000 users and one issuer, with fsync "always" (as
lean_bench.py's); a round runs every op at every setting. The report gives, per op and setting, each
side's median CPU per request, and the median of the rounds' new/old ratios with its quartiles and
the number of rounds NEW was lower in. The two sides share one CPU, so each runs at about half of
it: compare them with each other here, and against Redis with lean_bench.py.

`--ops miss` (issue 30) compares session.get's cache misses on the PostgreSQL backend instead: one
throwaway cluster (Scripts/pg_cluster.py), each keyholed on a schema of its own holding the same
20 000 sessions, with `cache_entries = 0`, each driven by 16 clients at depth 1. These runs are not
pinned: a miss crosses from the client's loop to the database connection's thread and back, and
what that costs (wake-ups across cores, the allocator's lock between threads) only shows when the
threads run on both CPUs. Unpinned, the same binary on both sides gave quartiles within about 4 %.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import lean_bench  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = ("session.get", "token.verify", "ping", "session.create")
MISS_SESSIONS = 20000


def parse_settings(text):
    """"16x1,16x8" as [(16, 1), (16, 8)]: connections by depth."""
    settings = []
    for item in text.split(","):
        connections, _, depth = item.strip().partition("x")
        if not connections.isdigit() or not depth.isdigit() or int(connections) < 1 or int(depth) < 1:
            raise ValueError(f"a setting is connections x depth, as 16x8: {item!r}")
        settings.append((int(connections), int(depth)))
    return settings


def quantile(values, fraction):
    """The value at `fraction` of the sorted values (the lower of two at a boundary)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summarize(pairs):
    """Pairs of (old, new) CPU ns per request, one per round, as the report's figures: each side's
    median, and the median and quartiles of the rounds' new/old ratios (not the ratio of medians: a
    round's two figures were measured together, under the same conditions)."""
    ratios = [new / old for old, new in pairs]
    return {
        "old_ns": statistics.median(old for old, _ in pairs),
        "new_ns": statistics.median(new for _, new in pairs),
        "ratio": statistics.median(ratios),
        "ratio_q1": quantile(ratios, 0.25),
        "ratio_q3": quantile(ratios, 0.75),
        "new_lower": sum(1 for old, new in pairs if new < old),
        "rounds": len(pairs),
    }


def report_line(op, setting, summary):
    connections, depth = setting
    return (f"{op:14} {connections:3} x {depth}: old {summary['old_ns']:7.0f} ns, new {summary['new_ns']:7.0f} ns; "
            f"new/old {summary['ratio']:.3f} (quartiles {summary['ratio_q1']:.3f}-{summary['ratio_q3']:.3f}), "
            f"new lower in {summary['new_lower']} of {summary['rounds']} rounds")


class Side(lean_bench.Keyholed):
    """One of the two keyholeds, run from its own binary."""

    def __init__(self, directory, name, binary, config):
        super().__init__(directory, name, config)
        self.binary = binary

    def start(self):
        log = open(self.log, "a")
        self.process = subprocess.Popen(
            [self.binary, "--config", self.config, "--socket", self.socket,
             "--state-dir", os.path.join(self.directory, "state"), "--log-level", "info"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        bench.wait_for_socket(self.socket, self.process)
        return self


def tokens_and_config(directory):
    """One issuer's key and a cached token of it (make-bench-tokens.py) in DIRECTORY/tokens, and the
    configuration each side runs with: fsync "always" and that issuer."""
    tokens = os.path.join(directory, "tokens")
    subprocess.run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-tokens.py"), "--out", tokens, "--count", "1"],
                   check=True, capture_output=True)
    with open(os.path.join(tokens, "issuer.toml")) as f:
        return tokens, f'[storage]\nfsync = "always"\n\n{f.read()}\n'


def loaded(op, argvs):
    """Runs one lean-load per side at once (argvs: side's name -> argv, started in that order); each
    side's result."""
    loads = {name: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name, argv in argvs.items()}
    results = {}
    for name, load in loads.items():
        out, err = load.communicate()
        if load.returncode != 0:
            raise SystemExit(f"ab_bench: lean-load against {name} failed ({load.returncode}): {err.strip()}")
        results[name] = json.loads(out)
        if results[name]["failed"]:
            raise SystemExit(f"ab_bench: {name} failed {results[name]['failed']} {op} requests")
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", help="the keyholed binary before the change")
    parser.add_argument("new", help="the keyholed binary after it")
    parser.add_argument("--ops", default="session.get,token.verify,ping",
                        help=f"comma-separated, of {', '.join(OPS)}; or miss alone (PostgreSQL cache misses)")
    parser.add_argument("--settings", default="16x1,16x8", help="connections x depth, comma-separated")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=2.0)
    options = parser.parse_args()
    ops = options.ops.split(",")
    for binary in (options.old, options.new):
        if not os.access(binary, os.X_OK):
            parser.error(f"not an executable: {binary}")
    if not os.access(lean_bench.LEAN_LOAD, os.X_OK):
        parser.error(f"{lean_bench.LEAN_LOAD} is missing: make build-lean")
    if ops == ["miss"]:
        return misses(options)
    if any(op not in OPS for op in ops):
        parser.error(f"--ops: each of {', '.join(OPS)}")
    settings = parse_settings(options.settings)

    directory = tempfile.mkdtemp(prefix="keyhole-ab-")
    sides = {}
    try:
        tokens, config = tokens_and_config(directory)
        sessions = {}
        for name, binary in (("old", options.old), ("new", options.new)):
            side = sides[name] = Side(directory, name, binary, config).start()
            sessions[name] = os.path.join(directory, f"sessions-{name}.txt")
            subprocess.run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-sessions.py"), "--socket", side.socket,
                            "--count", "100000", "--users", "10000", "--issuer", "local", "--out", sessions[name]],
                           check=True, capture_output=True)
            lean_bench.snapshot(side.socket)
            lean_bench.pin_server(side.pid)

        def arguments(op, name):
            return {"ping": (), "session.get": ("--op", "session.get", "--args", sessions[name]),
                    "token.verify": ("--op", "token.verify", "--args", os.path.join(tokens, "tokens.txt")),
                    # Durable creates (fsync "always"), for 10 000 subjects of issuer local.
                    "session.create": ("--op", "session.create", "--keys", "10000", "--key-prefix", f"ab-{name}")}[op]

        pairs = {}
        for round_number in range(options.rounds):
            for setting in settings:
                connections, depth = setting
                for op in ops:
                    results = loaded(op, {name: ["taskset", "-c", str(lean_bench.client_cpu(connections)), lean_bench.LEAN_LOAD,
                                                 "--socket", side.socket, "--connections", str(connections), "--depth", str(depth),
                                                 "--seconds", str(options.seconds), "--warmup", "0.3", *arguments(op, name),
                                                 "--server-pid", str(side.pid)] for name, side in sides.items()})
                    pairs.setdefault((op, setting), []).append(
                        (results["old"]["server_cpu_ns_per_request"], results["new"]["server_cpu_ns_per_request"]))
            print(f"ab_bench: round {round_number + 1} of {options.rounds} done", file=sys.stderr, flush=True)
        for op in ops:
            for setting in settings:
                print(report_line(op, setting, summarize(pairs[(op, setting)])))
    finally:
        for side in sides.values():
            side.stop()
        shutil.rmtree(directory, ignore_errors=True)


def misses(options):
    """`--ops miss`: session.get's cache misses on one PostgreSQL cluster, both sides at once."""
    import pg_bench  # noqa: E402 (its cluster and seeding; imported only for this mode)
    directory = tempfile.mkdtemp(prefix="keyhole-ab-")
    cluster = pg_bench.Cluster()
    sides = {}
    try:
        cluster.sql("ALTER SYSTEM SET max_connections = 120")
        cluster.command("stop")
        cluster.command("start")
        now = int(time.time())
        for name, binary in (("old", options.old), ("new", options.new)):
            config = pg_bench.postgres_config(cluster, name, 16, cache_entries=0)
            sides[name] = Side(directory, name, binary, config).start()
            cluster.sql(pg_bench.seed_sql(f'"{name}"', MISS_SESSIONS, MISS_SESSIONS // 10, now))
        tokens = os.path.join(directory, "tokens.txt")
        with open(tokens, "w") as f:
            f.write("\n".join(pg_bench.token(n) for n in range(1, MISS_SESSIONS + 1)) + "\n")
        for side in sides.values():
            pg_bench.wait_fresh(side.socket)
        pairs = []
        for round_number in range(options.rounds):
            # Started in turn, old first in even rounds: neither side always gets the head start.
            order = list(sides.items()) if round_number % 2 == 0 else list(reversed(sides.items()))
            results = loaded("session.get", {name: [lean_bench.LEAN_LOAD, "--socket", side.socket, "--connections", "16", "--depth", "1",
                                                    "--seconds", str(options.seconds), "--warmup", "0.5", "--op", "session.get",
                                                    "--args", tokens, "--server-pid", str(side.pid)] for name, side in order})
            pairs.append((results["old"]["server_cpu_ns_per_request"], results["new"]["server_cpu_ns_per_request"]))
            print(f"ab_bench: round {round_number + 1} of {options.rounds} done", file=sys.stderr, flush=True)
        print(report_line("session.get miss", (16, 1), summarize(pairs)))
    finally:
        for side in sides.values():
            side.stop()
        cluster.close()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
