#!/usr/bin/env python3
"""`make bench`, lean-client part (issue 31): keyholed's CPU per request against Redis's, with a client
lean enough that the server is the bottleneck, and keyholed's heap allocations per request.

The client is lean-load (Scripts/lean/lean_load.c: one C thread on epoll, requests made before the run,
no allocation per request), the same for both servers. Servers, all on Unix sockets in one temporary
directory: a release keyholed with fsync "always" holding 100 000 sessions and one issuer (reads), a
second one for session.create (writes), keyhole-bench floor-server (SwiftNIO and keyholed's framing
answering canned bytes), and two redis-servers with appendfsync always: one holding 100 000 strings of
300 bytes and 100 000 hashes shaped like a session (GET, HGETALL), one empty for SET of new keys (both
without automatic AOF rewrites, and keyholed snapshotted after its creates and after the set-up, so
that no background work of one case runs through the next: the machine has two cores);
and keyhole-bench raw-floor-server, the floor's work on a plain epoll loop in Swift without SwiftNIO:
what a purpose-built loop would cost.

Every server runs on CPU 1 (every thread); lean-load shares it at one connection (a wake-up across
CPUs costs this VM about five times one on the same CPU, and varies) and takes CPU 0 otherwise. For
each setting (connections, depth) and round, every keyholed scenario and every Redis command runs
for --seconds, Redis first in even rounds; a server's CPU per request is every thread's run time from
/proc/PID/task/*/schedstat over the requests answered. Ratios pair each keyholed scenario with its
Redis peer within a round; the report gives the median over rounds. Goals (issue 31, 16 connections):
ping at most 1.0x Redis GET's CPU per request, session.get 1.2x at depth 1 and 1.5x at depth 8,
cached token.verify 1.3x, session.get's throughput at least 0.9x GET's.

Scripts/lean/malloc_count.c, preloaded, counts every allocation of a keyholed process;
allocations per request are counted by lean-load over its measured window, on a keyholed of their own
(the counting costs every allocation two atomic additions, which the CPU figures must not pay), at
16 connections and depths 1 and 8. Tests/allocations/test_allocations.py holds make test to budgets.

Appends a "Lean client" section to BENCHMARKS.md and a "lean" member to BENCHMARKS.json, or writes
--out alone.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Protocol", "clients",
                                "python"))
import keyhole  # noqa: E402
import bench_report  # noqa: E402
from bench import wait_for_socket  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, ".build", "release")
LEAN = os.path.join(ROOT, ".build", "lean")
LEAN_LOAD = os.path.join(LEAN, "lean-load")
MALLOC_COUNT = os.path.join(LEAN, "malloc_count.so")
SETTINGS = ((1, 1), (16, 1), (64, 1), (16, 8))
# keyholed's scenarios and the Redis command each is set against (session.get against two).
PEERS = {"ping": ["GET"], "floor": ["GET"], "raw floor": ["GET"], "session.get": ["GET", "HGETALL"], "token.verify cached": ["GET"],
         "session.create": ["SET"]}
GOALS = [  # (scenario, peer, connections, depth, what, limit)
    ("ping", "GET", 16, 1, "cpu", 1.0),
    ("session.get", "GET", 16, 1, "cpu", 1.2),
    ("session.get", "GET", 16, 8, "cpu", 1.5),
    ("token.verify cached", "GET", 16, 1, "cpu", 1.3),
    ("session.get", "GET", 16, 1, "throughput", 0.9),
]
ALLOCATION_GOALS = {"ping": 0, "session.get": 4, "token.verify cached": 4}


SERVER_CPU = 1


def pin_server(pid):
    """Every thread of a server on SERVER_CPU, so that where a case runs is the same for both sides."""
    subprocess.run(["taskset", "-a", "-p", "-c", str(SERVER_CPU), str(pid)], check=True, capture_output=True)


def client_cpu(connections):
    """One connection at depth 1 sleeps and wakes for every request: a wake-up across CPUs costs this VM
    about five times one on the same CPU, and varies, so the client shares the server's CPU. With more
    connections the servers stay busy, and the client takes the other CPU, so that the server can use a
    whole one."""
    return SERVER_CPU if connections == 1 else 1 - SERVER_CPU


def lean_load(socket, seconds, connections, depth, *extra, server_pid=None, warmup=0.3, pinned=False):
    argv = [LEAN_LOAD, "--socket", socket, "--connections", str(connections), "--depth", str(depth),
            "--seconds", str(seconds), "--warmup", str(warmup), *extra]
    if pinned:
        argv = ["taskset", "-c", str(client_cpu(connections)), *argv]
    if server_pid:
        argv += ["--server-pid", str(server_pid)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"lean_bench: {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)


def allocations_per_request(keyholed, extra, seconds=1.0, connections=16, depth=1, warmup=0.5):
    """keyholed's allocations (and bytes) per request over one run, counted by lean-load itself over
    its measured window: after the warm-up, so that the connections' set-up is not in it."""
    result = lean_load(keyholed.socket, seconds, connections, depth, *extra, "--count-file", keyholed.counts,
                       warmup=warmup)
    return {"allocations": round(result.get("allocations_per_request", 0.0), 2),
            "bytes": round(result.get("allocated_bytes_per_request", 0.0)), "answered": result["answered"]}


class Keyholed(bench.Keyholed):
    """bench.py's keyholed (release build, fresh state directory, fsync as configured); with
    count_allocations, its allocations counted by malloc_count.so into self.counts (never for CPU
    figures: the counting costs every allocation two atomic additions Redis does not pay)."""

    def __init__(self, directory, name, config, count_allocations=False):
        super().__init__(directory, name, config)
        self.counts = os.path.join(self.directory, "malloc-counts") if count_allocations else None
        if count_allocations:
            self.env = dict(os.environ, LD_PRELOAD=MALLOC_COUNT, MALLOC_COUNT_FILE=self.counts)

    @property
    def pid(self):
        return self.process.pid


def snapshot(socket):
    """admin.snapshot, waited for: a store quiet before it is measured."""
    client = keyhole.Client(socket, timeout=300)
    try:
        client.call("admin.snapshot", {})
    finally:
        client.close()


def fill_redis(socket, keys):
    """keys strings kh:N of 300 bytes, and keys hashes khh:N shaped like a session's answer."""
    subprocess.run(["redis-cli", "-s", socket, "DEBUG", "POPULATE", str(keys), "kh", "300"], check=True,
                   capture_output=True)
    commands = bytearray()
    for n in range(keys):
        fields = [b"HSET", b"khh:%d" % n, b"id", b"%032x" % n, b"sub", b"001234.%032x.0001" % n,
                  b"issuer", b"local", b"created_at", b"1764115200", b"expires_at", b"1766707200",
                  b"last_seen_at", b"1764115200", b"idle_timeout_s", b"604800", b"data", b"{}"]
        commands += b"*%d\r\n" % len(fields)
        for field in fields:
            commands += b"$%d\r\n%s\r\n" % (len(field), field)
    subprocess.run(["redis-cli", "-s", socket, "--pipe"], input=bytes(commands), check=True, capture_output=True)


def median(values):
    return statistics.median(values)


def measure(options, directory):
    tokens = os.path.join(directory, "tokens")
    subprocess.run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-tokens.py"), "--out", tokens,
                    "--count", "1"], check=True, capture_output=True)
    with open(os.path.join(tokens, "issuer.toml")) as f:
        issuer = f.read()
    one_token = os.path.join(tokens, "tokens.txt")
    server = f'[server]\nloop = "{options.loop}"\n' if options.loop else ""
    reads = Keyholed(directory, "reads", f'{server}[storage]\nfsync = "always"\n\n{issuer}\n').start()
    writes = Keyholed(directory, "writes", f'{server}[storage]\nfsync = "always"\n').start()
    servers = [reads, writes]
    helpers = []
    try:
        sessions = os.path.join(directory, "sessions.txt")
        subprocess.run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-sessions.py"), "--socket",
                        reads.socket, "--count", str(options.sessions), "--users", str(options.sessions // 10),
                        "--issuer", "local", "--out", sessions], check=True, capture_output=True)
        # The sessions made, a snapshot follows in the background and takes seconds of CPU: taken now,
        # so that it is not in the first runs' figures.
        snapshot(reads.socket)

        def redis(name):
            # No automatic AOF rewrite: its child would run through the next cases.
            return bench.redis_server(directory, name, helpers, "--auto-aof-rewrite-percentage", "0")

        redis_reads, redis_reads_socket = redis("redis")
        fill_redis(redis_reads_socket, options.sessions)
        redis_writes, redis_writes_socket = redis("redis-new")
        floor_socket = os.path.join(directory, "floor.sock")
        floor = subprocess.Popen([os.path.join(RELEASE, "keyhole-bench"), "floor-server", "--socket", floor_socket],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        helpers.append(floor)
        wait_for_socket(floor_socket, floor)
        raw_socket = os.path.join(directory, "raw-floor.sock")
        raw = subprocess.Popen([os.path.join(RELEASE, "keyhole-bench"), "raw-floor-server", "--socket", raw_socket],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        helpers.append(raw)
        wait_for_socket(raw_socket, raw)
        for pid in (reads.pid, writes.pid, redis_reads.pid, redis_writes.pid, floor.pid, raw.pid):
            pin_server(pid)

        runs = {"creates": 0}

        def create_args():
            runs["creates"] += 1
            return ("--op", "session.create", "--keys", "10000", "--key-prefix", f"bench{runs['creates']}")

        def set_args():
            runs["creates"] += 1
            return ("--redis", "--op", "SET", "--keys", "1000000", "--key-prefix", f"new{runs['creates']}",
                    "--value-bytes", "300")

        keyholed_cases = {
            "ping": (reads.socket, reads.pid, lambda: ()),
            "floor": (floor_socket, floor.pid, lambda: ()),
            "raw floor": (raw_socket, raw.pid, lambda: ()),
            "session.get": (reads.socket, reads.pid, lambda: ("--op", "session.get", "--args", sessions)),
            "token.verify cached": (reads.socket, reads.pid, lambda: ("--op", "token.verify", "--args", one_token)),
            "session.create": (writes.socket, writes.pid, create_args),
        }
        redis_cases = {
            "GET": (redis_reads_socket, redis_reads.pid, lambda: ("--redis", "--op", "GET", "--keys", str(options.sessions))),
            "HGETALL": (redis_reads_socket, redis_reads.pid,
                        lambda: ("--redis", "--op", "HGETALL", "--keys", str(options.sessions), "--key-prefix", "khh")),
            "SET": (redis_writes_socket, redis_writes.pid, set_args),
        }
        if options.only:
            keep = options.only.split(",")
            keyholed_cases = {name: case for name, case in keyholed_cases.items() if name in keep}
            peers = {peer for name in keep for peer in PEERS.get(name, [])}
            redis_cases = {name: case for name, case in redis_cases.items() if name in peers}
        samples = []
        for round_number in range(options.rounds):
            for connections, depth in options.settings:
                sides = [keyholed_cases, redis_cases]
                if round_number % 2:
                    sides.reverse()
                for side in sides:
                    for name, (socket, pid, extra) in side.items():
                        result = lean_load(socket, options.seconds, connections, depth, *extra(), server_pid=pid,
                                           pinned=True)
                        if name == "session.create":
                            # The creates' snapshot would run in the background through the next cases.
                            snapshot(socket)
                        result.update({"name": name, "round": round_number, "connections": connections, "depth": depth})
                        samples.append(result)
                        if not result["answered"]:
                            raise SystemExit(f"lean_bench: {name} at {connections}x{depth} answered nothing")
                        print(f"lean_bench: round {round_number + 1} {name:20} {connections:2}x{depth}: "
                              f"{result['per_second']:>8.0f}/s server {result['server_cpu_ns_per_request']:>6.0f} ns "
                              f"(share {result['server_cpu_share']:.2f}, client {result['client_cpu_share']:.2f})",
                              file=sys.stderr, flush=True)
        reads.stop()
        writes.stop()
        counted = Keyholed(directory, "counted", f'{server}[storage]\nfsync = "always"\n\n{issuer}\n',
                           count_allocations=True)
        servers.append(counted.start())
        counted_sessions = os.path.join(directory, "counted-sessions.txt")
        subprocess.run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-sessions.py"), "--socket",
                        counted.socket, "--count", "2000", "--issuer", "local", "--out", counted_sessions],
                       check=True, capture_output=True)
        allocations = {}
        for name, extra in (("ping", ()), ("session.get", ("--op", "session.get", "--args", counted_sessions)),
                            ("token.verify cached", ("--op", "token.verify", "--args", one_token)),
                            ("session.create", create_args())):
            allocations[name] = {f"{connections}x{depth}": allocations_per_request(counted, extra, connections=connections,
                                                                                  depth=depth)
                                 for connections, depth in ((16, 1), (16, 8))}
        return samples, allocations
    finally:
        for server in servers:
            server.stop()
        for process in helpers:
            process.terminate()
            process.wait()


def summarize(samples, rounds, settings=SETTINGS):
    """Per setting and pair: medians of each side and of the per-round ratios."""
    def sample(name, round_number, connections, depth):
        for s in samples:
            if (s["name"], s["round"], s["connections"], s["depth"]) == (name, round_number, connections, depth):
                return s
        return None

    rows = []
    for connections, depth in settings:
        for scenario, peers in PEERS.items():
            for peer in peers:
                pairs = [(sample(scenario, r, connections, depth), sample(peer, r, connections, depth))
                         for r in range(rounds)]
                pairs = [(k, r) for k, r in pairs if k and r]
                if not pairs:
                    continue
                rows.append({
                    "scenario": scenario, "peer": peer, "connections": connections, "depth": depth,
                    "keyholed_ns": median([k["server_cpu_ns_per_request"] for k, _ in pairs]),
                    "redis_ns": median([r["server_cpu_ns_per_request"] for _, r in pairs]),
                    "cpu_ratio": round(median([k["server_cpu_ns_per_request"] / r["server_cpu_ns_per_request"]
                                               for k, r in pairs]), 2),
                    "keyholed_per_second": median([k["per_second"] for k, _ in pairs]),
                    "redis_per_second": median([r["per_second"] for _, r in pairs]),
                    "throughput_ratio": round(median([k["per_second"] / r["per_second"] for k, r in pairs]), 2),
                    "redis_server_share": median([r["server_cpu_share"] for _, r in pairs]),
                    "redis_client_share": median([r["client_cpu_share"] for _, r in pairs]),
                })
    return rows


def report(rows, allocations, options):
    def row(scenario, peer, connections, depth):
        for r in rows:
            if (r["scenario"], r["peer"], r["connections"], r["depth"]) == (scenario, peer, connections, depth):
                return r
        return None

    today = datetime.date.today().isoformat()
    loop = getattr(options, "loop", None)
    loop_note = f'[server] loop "{loop}", ' if loop else ""
    lines = [
        "## Lean client (issue 31)", "",
        f"Written by Scripts/lean_bench.py on {today}: lean-load (Scripts/lean/lean_load.c, one C thread on epoll, "
        f"requests made before the run) drives a release keyholed ({loop_note}"
        "fsync \"always\", 100 000 sessions) and redis-server "
        "(appendfsync always, 100 000 strings of 300 bytes and 100 000 hashes shaped like a session) on Unix sockets; "
        "every server on CPU 1, lean-load on the same CPU at one connection and on CPU 0 otherwise; "
        f"{options.rounds} rounds of {options.seconds} s per case, each side first in turn. Server CPU per request is "
        "every thread's run time over the requests answered; a ratio is keyholed's over Redis's within a round, "
        "median of the rounds.", "",
        "| connections x depth | keyholed | Redis | keyholed CPU ns/request | Redis CPU ns/request | CPU ratio | "
        "keyholed/s | Redis/s | throughput ratio |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['connections']} x {r['depth']} | {r['scenario']} | {r['peer']} | {r['keyholed_ns']:.0f} | "
                     f"{r['redis_ns']:.0f} | {r['cpu_ratio']:.2f}x | {r['keyholed_per_second']:.0f} | "
                     f"{r['redis_per_second']:.0f} | {r['throughput_ratio']:.2f}x |")
    lines += ["", "| goal (16 connections) | measured | met |", "|---|---|---|"]
    goals = []
    get16 = row("ping", "GET", 16, 1)
    if get16:
        # The measurement's own condition: the server, not the client, at the limit.
        server, client = get16["redis_server_share"], get16["redis_client_share"]
        met = server >= 0.85 and server > client
        text = "the client is not the bottleneck: Redis GET's server at 0.85 of a core or more, and busier than lean-load"
        goals.append({"goal": text, "measured": server, "met": met})
        lines.append(f"| {text} | server {server:.2f}, client {client:.2f} | {'yes' if met else 'no'} |")
    for scenario, peer, connections, depth, what, limit in GOALS:
        r = row(scenario, peer, connections, depth)
        if not r:
            continue
        if what == "cpu":
            value, met = r["cpu_ratio"], r["cpu_ratio"] <= limit
            text = f"{scenario} CPU per request at most {limit}x Redis {peer}'s, depth {depth}"
        else:
            value, met = r["throughput_ratio"], r["throughput_ratio"] >= limit
            text = f"{scenario} throughput at least {limit}x Redis {peer}'s, depth {depth}"
        goals.append({"goal": text, "measured": value, "met": met})
        lines.append(f"| {text} | {value:.2f}x | {'yes' if met else 'no'} |")
    for scenario, limit in ALLOCATION_GOALS.items():
        value = max(figures["allocations"] for figures in allocations[scenario].values())
        met = value <= limit + 0.1
        text = f"{scenario} heap allocations per request at most {limit}"
        goals.append({"goal": text, "measured": value, "met": met})
        lines.append(f"| {text} | {value:.2f} | {'yes' if met else 'no'} |")
    lines += ["", "Heap allocations per request (a keyholed of its own with Scripts/lean/malloc_count.c preloaded, "
                  "whole process, counted by lean-load over its measured window; the goals take the higher of the "
                  "two settings):", "",
              "| request | 16 x 1 allocations | bytes | 16 x 8 allocations | bytes |", "|---|---:|---:|---:|---:|"]
    for scenario, settings in allocations.items():
        one, eight = settings["16x1"], settings["16x8"]
        lines.append(f"| {scenario} | {one['allocations']:.2f} | {one['bytes']} | {eight['allocations']:.2f} | "
                     f"{eight['bytes']} |")
    return "\n".join(lines) + "\n", goals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=100000)
    parser.add_argument("--settings", default=",".join(f"{c}x{d}" for c, d in SETTINGS),
                        help="connections x depth, comma-separated (default: %(default)s)")
    parser.add_argument("--only", help="keyholed scenarios to run, comma-separated (default: all)")
    parser.add_argument("--loop", choices=("nio", "epoll"), help="keyholed's [server] loop (default: keyholed's default)")
    parser.add_argument("--out", help="write the section to this file alone")
    options = parser.parse_args()
    options.settings = [tuple(int(n) for n in setting.split("x")) for setting in options.settings.split(",")]
    for path in (LEAN_LOAD, MALLOC_COUNT, os.path.join(RELEASE, "keyholed"), os.path.join(RELEASE, "keyhole-bench")):
        if not os.path.exists(path):
            raise SystemExit(f"lean_bench: {path} is missing (make bench builds it)")
    directory = tempfile.mkdtemp(prefix="khlb", dir="/tmp")
    try:
        samples, allocations = measure(options, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    rows = summarize(samples, options.rounds, options.settings)
    section, goals = report(rows, allocations, options)
    print(section)
    bench_report.write(section, "Lean client (issue 31)", "lean",
                       {"rows": rows, "allocations": allocations, "goals": goals, "samples": samples}, options.out)


if __name__ == "__main__":
    main()
