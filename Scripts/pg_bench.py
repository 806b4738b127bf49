#!/usr/bin/env python3
"""`make bench`, PostgreSQL part (issue 30): keyholed with `[storage] backend = "postgres"` against
keyholed's local backend and against pgbench running keyholed's own SQL on the same cluster.

One throwaway cluster (Scripts/pg_cluster.py: socket only, fsync on, synchronous_commit on, so every
commit is durable as keyholed's local store with fsync "always" is; shared_buffers raised to 128MB,
PostgreSQL's own default, from pg_cluster's 32MB for tests) serves the whole run. Each scenario has
its own schema in database `keyhole` (`[postgres] schema`), so that no listener hears another's
notifications. Release keyholeds, all on the cluster's socket directory, `pool_size` 16 (as many
connections to PostgreSQL as pgbench opens):

- "reads", cache on, and "reads-nocache" (`cache_entries = 0`), both on schema `reads`, which holds
  --sessions sessions for keyholed (deterministic tokens, rows written by SQL in keyholed's layout)
  and as many for pgbench (ids from their number), with --sessions / 10 users each;
- "creates", on schema `creates`, emptied of sessions before every round;
- "local", the local backend with fsync "always", --sessions sessions made through it;
- for goal 4, "fanout-a" and "fanout-b" on schema `fanout`, started after the rounds.

Clients: lean-load (Scripts/lean/lean_load.c) for every keyholed; pgbench (`-M prepared -c 16 -j 1
-n`, a script file) for PostgreSQL alone. pgbench's scripts are keyholed's SQL for one call at a time,
as an app doing its own would send it: the cache miss's SELECT ... LEFT JOIN users ... WHERE s.id = $1,
and session.create's transaction whole: BEGIN, the user's upsert (INSERT ... ON CONFLICT DO UPDATE SET
last_login_at), the session's INSERT ... ON CONFLICT (id) DO NOTHING RETURNING id, COMMIT. keyholed
sends the same rows in batches (PostgresStatements.swift: many ids in one SELECT; many users' upserts
and sessions' inserts in one statement, one commit); the mean batch, from `stats`, is reported. Each
round runs every pair once, in turn keyholed first and its peer first; a ratio is keyholed's
throughput over its peer's within a round, the report gives the median over rounds. Nothing is
pinned: on this two-core machine keyholed, PostgreSQL and the client share both cores, so CPU per
request (keyholed's, PostgreSQL's, the client's, from /proc over the middle of each run) is reported
beside the throughput.

Goal 4: B caches a session (two session.get), A revokes it, and B is asked again and again until it
answers session_not_found: the time from A's answer to B's first refusal, --fanout-samples times.

Appends a "PostgreSQL backend (issue 30)" section to BENCHMARKS.md and a "postgres" member to
BENCHMARKS.json, or writes --out alone.
"""

import argparse
import base64
import datetime
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import bench_report  # noqa: E402
import pg_cluster  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Protocol", "clients",
                                "python"))
import keyhole  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEAN_LOAD = os.path.join(ROOT, ".build", "lean", "lean-load")
HEADING = "PostgreSQL backend (issue 30)"
TTL = 30 * 86400  # keyholed's default [sessions] ttl and idle_timeout: what lean-load's creates get
IDLE = 7 * 86400
# (keyholed scenario, its peer, the least ratio of keyholed's throughput to the peer's): issue 30's goals 1 to 3.
# The unprepared peers (pgbench -M extended: parsed and planned on every call, as keyholed's postgres-nio
# queries are) are no goal: they show what part of a gap is PostgreSQL's parsing and planning.
PAIRS = [
    ("session.get cache hit", "session.get local backend", 0.9),
    ("session.create", "pgbench create", 0.8),
    ("session.create", "pgbench create unprepared", None),
    ("session.get cache miss", "pgbench select", 0.8),
    ("session.get cache miss", "pgbench select unprepared", None),
]


def round_order(round_number):
    """The cases of one round: each keyholed scenario next to its peers, the scenario first in even
    rounds and last in odd ones, each case once."""
    groups = {}
    for scenario, peer, _ in PAIRS:
        groups.setdefault(scenario, []).append(peer)
    order = []
    for scenario, peers in groups.items():
        order += [scenario, *peers] if round_number % 2 == 0 else [*peers, scenario]
    return order
FANOUT_LIMIT_MS = 50.0
# Where the CPU of a run is read: after the client's connections and warm-up, and before its end.
WINDOW_START = 0.6
WINDOW_SHORTER = 0.3


def token(n):
    """Session n's token for keyholed's rows: `kh_` and the base64url of 32 bytes, as SessionToken
    makes them; here SHA-256 of a counter rather than random bytes, so that the same text can be
    computed by PostgreSQL when the rows are written (`seed_sql`)."""
    return "kh_" + base64.urlsafe_b64encode(hashlib.sha256(b"khbench%d" % n).digest()).rstrip(b"=").decode()


def session_id(text):
    """The id (primary key) and check of a token: the halves of its SHA-256, as SessionToken."""
    digest = hashlib.sha256(text.encode()).digest()
    return digest[:16], digest[16:]


def seed_sql(schema, sessions, users, now):
    """SQL writing, in keyholed's layout (POSTGRES.md, "Tables"), `sessions` sessions for keyholed
    (token(1) .. token(sessions): id and check from PostgreSQL's sha256 of the same text `token`
    makes) and as many for pgbench (id int8send(n) || int8send(n), as pgbench's select asks), each
    with `users` users of its own (`fields` '{}', as session.create writes a new user), times as
    keyholed's session.create writes them. One line: pg_cluster's `sql` takes one."""
    kh_token = ("'kh_' || translate(rtrim(encode(sha256(convert_to('khbench' || n, 'UTF8')), 'base64'), '='), "
                "'+/', '-_')")
    digest = f"sha256(convert_to({kh_token}, 'UTF8'))"
    sub = "convert_to('{prefix}.' || lpad(to_hex(n % {users}), 32, '0'), 'UTF8')"
    columns = "check_bytes, issuer, sub, created_at, expires_at, last_seen_at, idle_seconds, data"
    times = f"{now}, {now + TTL}, {now}, {IDLE}, NULL"
    statements = [
        f"INSERT INTO {schema}.users (issuer, sub, created_at, updated_at, last_login_at, fields, revision) "
        f"SELECT 'local'::bytea, {sub.format(prefix=prefix, users=users)}, {now}, {now}, {now}, "
        f"convert_to('{{}}', 'UTF8'), 1 FROM generate_series(0, {users - 1}) AS n"
        for prefix in ("kh", "pgb")
    ] + [
        f"INSERT INTO {schema}.sessions (id, {columns}) SELECT substring({digest} FROM 1 FOR 16), "
        f"substring({digest} FROM 17 FOR 16), 'local'::bytea, {sub.format(prefix='kh', users=users)}, {times} "
        f"FROM generate_series(1, {sessions}) AS n",
        f"INSERT INTO {schema}.sessions (id, {columns}) SELECT int8send(n::bigint) || int8send(n::bigint), "
        f"substring(sha256(int8send(n::bigint)) FROM 1 FOR 16), 'local'::bytea, "
        f"{sub.format(prefix='pgb', users=users)}, {times} FROM generate_series(1, {sessions}) AS n",
        f"ANALYZE {schema}.users",
        f"ANALYZE {schema}.sessions",
    ]
    return "; ".join(statements)


def pgbench_select(schema, sessions):
    """pgbench's cache miss: keyholed's read of a session with its user (readSession), one of
    pgbench's `sessions` rows at random."""
    return (f"\\set n random(1, {sessions})\n"
            "SELECT s.check_bytes, s.issuer, s.sub, s.created_at, s.expires_at, s.last_seen_at, s.idle_seconds, "
            "s.data, u.created_at, u.updated_at, u.last_login_at, u.fields "
            f"FROM {schema}.sessions s LEFT JOIN {schema}.users u ON u.issuer = s.issuer AND u.sub = s.sub "
            "WHERE s.id = int8send(:n::bigint) || int8send(:n::bigint);\n")


def pgbench_create(schema, now, subjects=10000):
    """pgbench's session.create: keyholed's transaction whole (createSession), the user's upsert
    included. As lean-load's creates, subjects :prefix-0 .. -9999 of issuer `local` (at random here,
    in turn there), a new prefix every run (-D prefix=...), no data. The id and check are 126 random
    bits each, drawn by pgbench, as keyholed draws them before it sends its INSERT."""
    sub = "convert_to(:prefix::text || '-' || :k::text, 'UTF8')"
    return (f"\\set k random(0, {subjects - 1})\n"
            "\\set a random(0, 4611686018427387903)\n\\set b random(0, 4611686018427387903)\n"
            "\\set c random(0, 4611686018427387903)\n\\set d random(0, 4611686018427387903)\n"
            "BEGIN;\n"
            f"INSERT INTO {schema}.users (issuer, sub, created_at, updated_at, last_login_at, fields, revision) "
            f"VALUES ('local'::bytea, {sub}, {now}, {now}, {now}, convert_to('{{}}', 'UTF8'), 1) "
            f"ON CONFLICT (issuer, sub) DO UPDATE SET last_login_at = "
            f"greatest({schema}.users.last_login_at, EXCLUDED.last_login_at);\n"
            f"INSERT INTO {schema}.sessions (id, check_bytes, issuer, sub, created_at, expires_at, last_seen_at, "
            "idle_seconds, data) VALUES (int8send(:a::bigint) || int8send(:b::bigint), "
            f"int8send(:c::bigint) || int8send(:d::bigint), 'local'::bytea, {sub}, {now}, {now + TTL}, {now}, "
            f"{IDLE}, NULL) ON CONFLICT (id) DO NOTHING RETURNING id;\n"
            "COMMIT;\n")


def parse_pgbench(output):
    """pgbench's transactions per second (without the connections' set-up) and transactions done, from
    its report; a run with any failed transaction is refused (a benchmark of failures measures nothing)."""
    tps = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", output, re.M)
    done = re.search(r"^number of transactions actually processed: (\d+)", output, re.M)
    failed = re.search(r"^number of failed transactions: (\d+)", output, re.M)
    if not tps or not done:
        raise ValueError(f"pgbench's report has no tps: {output.strip()[-500:]}")
    if failed and int(failed.group(1)):
        raise ValueError(f"pgbench: {failed.group(1)} transactions failed")
    return float(tps.group(1)), int(done.group(1))


def percentile(values, fraction):
    """The nearest-rank percentile: the smallest value with at least `fraction` of them at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summarize(samples, rounds):
    """Per pair: each side's medians, and the median over rounds of keyholed's throughput over the peer's
    within each round."""
    def sample(name, round_number):
        return next((s for s in samples if s["name"] == name and s["round"] == round_number), None)

    def med(pairs, side, key):
        values = [p[side][key] for p in pairs if p[side].get(key) is not None]
        return statistics.median(values) if values else None

    rows = []
    for scenario, peer, limit in PAIRS:
        pairs = [(sample(scenario, r), sample(peer, r)) for r in range(rounds)]
        pairs = [p for p in pairs if p[0] and p[1]]
        if not pairs:
            continue
        row = {"scenario": scenario, "peer": peer, "limit": limit, "rounds": len(pairs),
               "throughput_ratio": round(statistics.median(k["per_second"] / p["per_second"] for k, p in pairs), 2)}
        for side, name in ((0, "keyholed"), (1, "peer")):
            for key in ("per_second", "keyholed_ns", "postgres_ns", "client_ns", "mean_batch"):
                row[f"{name}_{key}"] = med(pairs, side, key)
        rows.append(row)
    return rows


def fanout_summary(latencies_ms, timeouts):
    if not latencies_ms:
        return {"samples": 0, "timeouts": timeouts}
    return {"samples": len(latencies_ms), "timeouts": timeouts,
            "p50_ms": round(percentile(latencies_ms, 0.5), 2), "p99_ms": round(percentile(latencies_ms, 0.99), 2),
            "max_ms": round(max(latencies_ms), 2)}


def report(rows, fanout, options, machine, started=0):
    """The section for BENCHMARKS.md and the goals, judged; `started`: PostgreSQL processes started
    within the measured windows, all runs together."""
    def ns(value):
        return "-" if value is None else f"{value:.0f}"

    today = datetime.date.today().isoformat()
    lines = [
        f"## {HEADING}", "",
        f"Written by Scripts/pg_bench.py on {today}, on {machine}. One throwaway PostgreSQL "
        f"{options.pg_version} cluster (Scripts/pg_cluster.py: Unix socket only, fsync on, synchronous_commit on: "
        "every commit durable; shared_buffers 128MB) for the whole run. keyholed: release build, "
        f"`[storage] backend = \"postgres\"`, `[postgres] url` the socket directory, pool_size {options.pool_size}, "
        "max_staleness 2s, a schema per scenario; its peer for the cache hit is a release keyholed on the local "
        "backend with fsync \"always\". keyholed is driven by lean-load (one C thread on epoll), PostgreSQL alone by "
        f"pgbench (`-M prepared -c {options.connections} -j 1 -n`) running keyholed's SQL one call at a time, as an "
        "app doing its own would: the cache miss's SELECT ... LEFT JOIN users ... WHERE s.id = $1, and "
        "session.create's whole transaction (BEGIN, the user's INSERT ... ON CONFLICT DO UPDATE SET last_login_at, "
        "the session's INSERT ... ON CONFLICT (id) DO NOTHING RETURNING id, COMMIT: pgbench's script includes the "
        "user's upsert, as keyholed's create does). keyholed sends the same rows in batches on connections of their "
        "own (Sources/KeyholePostgres/POSTGRES.md, \"Cost per request\": misses as one SELECT ... WHERE s.id = "
        "ANY($1), creates as one statement and one commit for many); the mean batch is keyholed's calls per "
        "statement over the run, from `stats`. "
        "The unprepared peers run the same scripts with `-M extended`: unnamed statements, parsed and planned on "
        "every call, as keyholed's queries through postgres-nio are; they are shown, not judged. "
        f"{options.connections} connections, depth 1; reads over {options.sessions} sessions each side; "
        f"{options.rounds} rounds of {options.seconds:g} s per case, keyholed and its peer first in turn; a ratio "
        "is keyholed's throughput over its peer's within a round, median of the rounds.", "",
        "Nothing is pinned: keyholed, PostgreSQL and the client share the machine's two cores, so a keyholed "
        "request pays for keyholed's CPU and PostgreSQL's on the same cores where pgbench's pays PostgreSQL's "
        "alone. CPU per request (ns, from /proc over the middle of each run; PostgreSQL's is every backend's and "
        "background process's, the exited ones through the postmaster's children's times; the local peer's column "
        "is the local keyholed's own CPU) shows where it goes. "
        "keyholed's PostgreSQL figure includes what it does besides the request's statement: the heartbeat "
        "NOTIFY and the batched last-use UPDATE every 0.5 s. "
        f"PostgreSQL processes started within the measured windows, all runs together: {started} (a pool "
        "reconnecting under load would show here).", "",
        "| keyholed | peer | keyholed/s | peer/s | ratio | keyholed CPU ns/req | its PostgreSQL ns/req | "
        "peer's PostgreSQL ns/req | client ns/req (keyholed's, peer's) | mean batch |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['peer']} | {r['keyholed_per_second']:.0f} | {r['peer_per_second']:.0f} | "
                     f"{r['throughput_ratio']:.2f}x | {ns(r['keyholed_keyholed_ns'])} | "
                     f"{ns(r['keyholed_postgres_ns'])} | "
                     f"{ns(r['peer_postgres_ns'] if r['peer'].startswith('pgbench') else r['peer_keyholed_ns'])}"
                     f"{'' if r['peer'].startswith('pgbench') else ' (local keyholed)'} | "
                     f"{ns(r['keyholed_client_ns'])}, {ns(r['peer_client_ns'])} | "
                     f"{'-' if r.get('keyholed_mean_batch') is None else format(r['keyholed_mean_batch'], '.1f')} |")
    goals = []
    lines += ["", f"| goal ({options.connections} connections) | measured | met |", "|---|---|---|"]
    for r in rows:
        if r["limit"] is None:
            continue
        text = f"{r['scenario']} throughput at least {r['limit']}x {r['peer']}'s"
        met = r["throughput_ratio"] >= r["limit"]
        goals.append({"goal": text, "measured": r["throughput_ratio"], "met": met})
        lines.append(f"| {text} | {r['throughput_ratio']:.2f}x | {'yes' if met else 'no'} |")
    if fanout and fanout.get("samples"):
        text = (f"revoked on one host to refused on the other: p99 under {FANOUT_LIMIT_MS:g} ms, listener healthy")
        met = fanout["p99_ms"] < FANOUT_LIMIT_MS and not fanout["timeouts"]
        goals.append({"goal": text, "measured": fanout["p99_ms"], "met": met})
        lines.append(f"| {text} | p50 {fanout['p50_ms']:.2f} ms, p99 {fanout['p99_ms']:.2f} ms, max "
                     f"{fanout['max_ms']:.2f} ms ({fanout['samples']} samples, {fanout['timeouts']} past 5 s) | "
                     f"{'yes' if met else 'no'} |")
        lines += ["", "Revoked to refused: two keyholed (cache on, pool and staleness as above) on one schema. For "
                      "each sample B reads a session twice (cached), A revokes it, and B is asked again at once and "
                      "again until it answers session_not_found (Python client, one connection each); the time from "
                      "A's answer to B's first refusal. It is bounded below by B's own answer, and includes the "
                      "NOTIFY's delivery to B's listener and B's read of the database after its entry is dropped."]
    return "\n".join(lines) + "\n", goals


# --- Processes ----------------------------------------------------------------------------------


def process_cpu_ns(pid):
    """A single-threaded process's run time (its main thread's schedstat), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (FileNotFoundError, ProcessLookupError):
        return None


def postgres_cpu_ns(postmaster, children):
    """Every PostgreSQL process's run time so far: the postmaster's, each live child's, and the
    children that have exited and been waited for (the postmaster's cutime and cstime, in clock
    ticks): a backend that ends between two readings (pgbench's, at its end) is counted whole.
    The live children's pids are added to `children`."""
    with open(f"/proc/{postmaster}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    total = (int(fields[13]) + int(fields[14])) * 1_000_000_000 // ticks  # cutime, cstime
    total += process_cpu_ns(postmaster) or 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != postmaster:
                    continue
        except (OSError, ValueError, IndexError):
            continue
        children.add(int(entry))
        total += process_cpu_ns(int(entry)) or 0
    return total


class CPUWindow(threading.Thread):
    """Reads keyholed's, PostgreSQL's and the client's CPU at `start` seconds into a run and `length`
    seconds later: the rates over the middle of the run, after its connections' set-up."""

    def __init__(self, keyholed_pid, postmaster, client_pid, start, length):
        super().__init__(daemon=True)
        self.keyholed_pid, self.postmaster, self.client_pid = keyholed_pid, postmaster, client_pid
        self.start_at, self.length = start, length
        self.rates = None
        # PostgreSQL processes started within the window: a pool that reconnects under load would
        # show here, and its backends' start-up in PostgreSQL's CPU.
        self.started = None

    def read(self, children):
        return (time.monotonic(), bench_report.cpu_ns(self.keyholed_pid) if self.keyholed_pid else 0,
                postgres_cpu_ns(self.postmaster, children), process_cpu_ns(self.client_pid))

    def run(self):
        time.sleep(self.start_at)
        before, after = set(), set()
        first = self.read(before)
        time.sleep(self.length)
        last = self.read(after)
        if first[3] is None or last[3] is None:
            return  # the client ended before the window did: the run was too short to measure
        self.started = len(after - before)
        seconds = last[0] - first[0]
        self.rates = [(b - a) / seconds for a, b in zip(first[1:], last[1:])]  # ns of CPU per second


def measured(argv, keyholed_pid, postmaster, seconds):
    """Runs a client, reading the CPU over the middle of its run; its output and the CPU rates."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    window = CPUWindow(keyholed_pid, postmaster, process.pid, WINDOW_START, max(0.2, seconds - WINDOW_SHORTER))
    window.start()
    out, err = process.communicate()
    window.join()
    if process.returncode != 0:
        raise SystemExit(f"pg_bench: {' '.join(argv)} failed ({process.returncode}): {err.strip()[-1000:]}")
    return out, (window.rates, window.started)


def per_request(rates, per_second):
    """CPU ns per request from CPU rates (ns per second) and the requests' rate."""
    if not rates:
        return {"keyholed_ns": None, "postgres_ns": None, "client_ns": None}
    return {"keyholed_ns": round(rates[0] / per_second) if rates[0] else None,
            "postgres_ns": round(rates[1] / per_second), "client_ns": round(rates[2] / per_second)}


class Cluster:
    """Scripts/pg_cluster.py, driven over its stdin."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, os.path.join(ROOT, "Scripts", "pg_cluster.py")],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit("pg_bench: pg_cluster.py did not start a cluster")
        self.info = json.loads(line)

    def command(self, text):
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if answer.get("ok") is False:
            raise SystemExit(f"pg_bench: pg_cluster {text[:80]}: {answer.get('error')}")
        return answer

    def sql(self, text):
        return self.command("sql " + text)["out"]

    @property
    def postmaster(self):
        return self.command("pid")["pid"]

    def close(self):
        try:
            self.process.stdin.close()
        finally:
            self.process.wait(timeout=120)


class Keyholed(bench.Keyholed):
    @property
    def pid(self):
        return self.process.pid


def postgres_config(cluster, schema, pool_size, cache_entries=None):
    lines = ['[storage]', 'backend = "postgres"', '', '[postgres]', f'url = "{cluster.info["socket_dir"]}"',
             f'port = {cluster.info["port"]}', f'user = "{cluster.info["user"]}"',
             f'database = "{cluster.info["database"]}"', f'schema = "{schema}"', f'pool_size = {pool_size}']
    if cache_entries is not None:
        lines.append(f"cache_entries = {cache_entries}")
    return "\n".join(lines) + "\n"


def stats_store(socket):
    client = keyhole.Client(socket, timeout=10)
    try:
        return client.stats().get("store", {})
    finally:
        client.close()


def wait_fresh(socket, seconds=30):
    """Until keyholed's cache is in use (its listener connected and its heartbeat heard)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if stats_store(socket).get("cache_fresh"):
            return
        time.sleep(0.1)
    raise SystemExit(f"pg_bench: keyholed on {socket} never had a fresh cache")


def lean_load(socket, seconds, connections, *extra, keyholed_pid, postmaster, warmup=0.5):
    argv = [LEAN_LOAD, "--socket", socket, "--connections", str(connections), "--depth", "1",
            "--seconds", str(seconds), "--warmup", str(warmup), *extra]
    before = stats_store(socket)
    out, (rates, started) = measured(argv, keyholed_pid, postmaster, seconds)
    result = json.loads(out)
    if not result.get("answered") or result.get("failed"):
        raise SystemExit(f"pg_bench: {' '.join(argv)}: {result}")
    return {"per_second": result["per_second"], "postgres_started": started, "mean_batch": mean_batch(before, stats_store(socket)),
            **per_request(rates, result["per_second"])}


def mean_batch(before, after):
    """The calls per batch keyholed sent to PostgreSQL between two `stats` (reads' or creates',
    whichever it sent): None for the local backend, or when it sent none."""
    for calls, batches in (("reads", "read_batches"), ("creates", "create_batches")):
        sent = after.get(batches, 0) - before.get(batches, 0)
        if sent > 0:
            return round((after[calls] - before[calls]) / sent, 2)
    return None


def pgbench(options, cluster, script, seconds, *extra, mode="prepared"):
    # pgbench's -T is whole seconds, and it has no warm-up: one more second covers the CPU window's start.
    argv = [os.path.join(options.pg_bin, "pgbench"), "-h", cluster.info["socket_dir"], "-p", str(cluster.info["port"]),
            "-U", cluster.info["user"], "-n", "-M", mode, "-c", str(options.connections), "-j", "1",
            "-T", str(math.ceil(seconds + WINDOW_START)), "-f", script, *extra, cluster.info["database"]]
    out, (rates, started) = measured(argv, None, cluster.postmaster, seconds)
    per_second, _ = parse_pgbench(out)
    return {"per_second": per_second, "postgres_started": started, **per_request(rates, per_second)}


def fill_cache(keyholed, tokens_file, sessions, connections, postmaster):
    """Reads every session once through keyholed so that its cache holds them all before a hit is timed."""
    deadline = time.monotonic() + 120
    while stats_store(keyholed.socket).get("cache_entries", 0) < sessions:
        if time.monotonic() > deadline:
            raise SystemExit("pg_bench: the cache never held every session")
        lean_load(keyholed.socket, 2, connections, "--op", "session.get", "--args", tokens_file,
                  keyholed_pid=keyholed.pid, postmaster=postmaster)


def fanout(a, b, samples):
    """Goal 4: A's revocation to B's first refusal, in ms, `samples` times; and how many never came within 5 s."""
    maker = keyhole.Client(a.socket, timeout=30)
    tokens = []
    lock = threading.Lock()

    def make(count):
        for n in range(count):
            made = maker.create_session("fanout.%06d" % n, issuer="local")["session"]
            with lock:
                tokens.append(made)

    threads = [threading.Thread(target=make, args=(samples // 8 + 1,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    maker.close()
    revoker, reader = keyhole.Client(a.socket, timeout=10), keyhole.Client(b.socket, timeout=10)
    latencies, timeouts = [], 0
    try:
        for made in tokens[:samples]:
            reader.get_session(made)
            reader.get_session(made)  # served from B's cache now
            revoker.revoke_session(session=made)
            revoked = time.perf_counter()
            while True:
                try:
                    reader.get_session(made)
                except keyhole.KeyholeError as error:
                    if error.code != "session_not_found":
                        raise
                    latencies.append((time.perf_counter() - revoked) * 1000)
                    break
                if time.perf_counter() - revoked > 5:
                    timeouts += 1
                    break
    finally:
        revoker.close()
        reader.close()
    return fanout_summary(latencies, timeouts)


def machine_note():
    cpus = os.cpu_count()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return f"{cpus} cores (load average {' '.join(load)} at the start; other work may share the machine)"


def measure(options, directory):
    now = int(time.time())
    cluster = Cluster()
    servers = []
    try:
        # PostgreSQL's own default instead of pg_cluster's 32MB for tests, and room for three keyholeds'
        # pools and listeners beside pgbench's connections; a restart takes them.
        cluster.sql("ALTER SYSTEM SET shared_buffers = '128MB'")
        cluster.sql(f"ALTER SYSTEM SET max_connections = {4 * (options.pool_size + 1) + options.connections + 20}")
        cluster.command("stop")
        cluster.command("start")
        options.pg_version = cluster.sql("SHOW server_version").strip().split()[0]
        postmaster = cluster.postmaster
        users = max(1, options.sessions // 10)

        def start(name, config):
            keyholed = Keyholed(directory, name, config).start()
            servers.append(keyholed)
            return keyholed

        reads = start("reads", postgres_config(cluster, "reads", options.pool_size))
        misses = start("reads-nocache", postgres_config(cluster, "reads", options.pool_size, cache_entries=0))
        creates = start("creates", postgres_config(cluster, "creates", options.pool_size))
        local = start("local", '[storage]\nfsync = "always"\n')
        cluster.sql(seed_sql('"reads"', options.sessions, users, now))
        tokens_file = os.path.join(directory, "tokens.txt")
        with open(tokens_file, "w") as f:
            f.write("\n".join(token(n) for n in range(1, options.sessions + 1)) + "\n")
        local_tokens = os.path.join(directory, "local-tokens.txt")
        subprocess.run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-sessions.py"), "--socket",
                        local.socket, "--count", str(options.sessions), "--users", str(users), "--issuer", "local",
                        "--out", local_tokens], check=True, capture_output=True)
        # The creates' snapshot would run through the first cases in the background.
        snapshot = keyhole.Client(local.socket, timeout=300)
        snapshot.call("admin.snapshot", {})
        snapshot.close()
        select_script = os.path.join(directory, "select.sql")
        with open(select_script, "w") as f:
            f.write(pgbench_select('"reads"', options.sessions))
        create_script = os.path.join(directory, "create.sql")
        with open(create_script, "w") as f:
            f.write(pgbench_create('"creates"', now))
        for keyholed in (reads, misses, creates):
            wait_fresh(keyholed.socket)
        fill_cache(reads, tokens_file, options.sessions, options.connections, postmaster)
        print(f"pg_bench: set up; cache holds {stats_store(reads.socket).get('cache_entries')} sessions",
              file=sys.stderr, flush=True)

        runs = {"n": 0}

        def prefix():
            runs["n"] += 1
            return f"bench{runs['n']}"

        c = options.connections
        cases = {
            "session.get cache hit": lambda s: lean_load(reads.socket, s, c, "--op", "session.get", "--args",
                                                         tokens_file, keyholed_pid=reads.pid, postmaster=postmaster),
            "session.get local backend": lambda s: lean_load(local.socket, s, c, "--op", "session.get", "--args",
                                                             local_tokens, keyholed_pid=local.pid,
                                                             postmaster=postmaster),
            "session.get cache miss": lambda s: lean_load(misses.socket, s, c, "--op", "session.get", "--args",
                                                          tokens_file, keyholed_pid=misses.pid, postmaster=postmaster),
            "pgbench select": lambda s: pgbench(options, cluster, select_script, s),
            "session.create": lambda s: lean_load(creates.socket, s, c, "--op", "session.create", "--keys", "10000",
                                                  "--key-prefix", prefix(), keyholed_pid=creates.pid,
                                                  postmaster=postmaster),
            "pgbench create": lambda s: pgbench(options, cluster, create_script, s, "-D", f"prefix={prefix()}"),
            "pgbench create unprepared": lambda s: pgbench(options, cluster, create_script, s, "-D",
                                                           f"prefix={prefix()}", mode="extended"),
            "pgbench select unprepared": lambda s: pgbench(options, cluster, select_script, s, mode="extended"),
        }
        samples = []
        for round_number in range(options.rounds):
            # Every round's creates start from the same table: the seeded sessions gone, the users kept.
            cluster.sql('TRUNCATE "creates".sessions')
            for name in round_order(round_number):
                result = cases[name](options.seconds)
                result.update({"name": name, "round": round_number})
                samples.append(result)
                print(f"pg_bench: round {round_number + 1} {name:26} {result['per_second']:>8.0f}/s "
                      f"keyholed {result['keyholed_ns'] or 0:>6} ns postgres {result['postgres_ns'] or 0:>6} ns "
                      f"client {result['client_ns'] or 0:>6} ns, {result['postgres_started']} backends started, "
                      f"mean batch {result.get('mean_batch')}",
                      file=sys.stderr, flush=True)
        for keyholed in (reads, misses, creates, local):
            keyholed.stop()
        a = start("fanout-a", postgres_config(cluster, "fanout", options.pool_size))
        b = start("fanout-b", postgres_config(cluster, "fanout", options.pool_size))
        wait_fresh(a.socket)
        wait_fresh(b.socket)
        fanned = fanout(a, b, options.fanout_samples) if options.fanout_samples else None
        print(f"pg_bench: revoked to refused {fanned}", file=sys.stderr, flush=True)
        return samples, fanned
    finally:
        for keyholed in servers:
            keyholed.stop()
        cluster.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=20000, help="sessions read, on each side")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--pool-size", type=int, default=16, help="keyholed's [postgres] pool_size")
    parser.add_argument("--fanout-samples", type=int, default=1000)
    parser.add_argument("--out", help="write the section to this file alone")
    options = parser.parse_args()
    options.pg_bin = pg_cluster.newest_bin()
    for path in (LEAN_LOAD, os.path.join(bench.RELEASE, "keyholed"), os.path.join(options.pg_bin, "pgbench")):
        if not os.path.exists(path):
            raise SystemExit(f"pg_bench: {path} is missing (make bench builds it; pgbench is in postgresql)")
    machine = machine_note()
    directory = tempfile.mkdtemp(prefix="khpb", dir="/tmp")
    try:
        samples, fanned = measure(options, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    rows = summarize(samples, options.rounds)
    section, goals = report(rows, fanned, options, machine, sum(s.get("postgres_started") or 0 for s in samples))
    print(section)
    bench_report.write(section, HEADING, "postgres",
                       {"rows": rows, "fanout": fanned, "goals": goals, "samples": samples, "machine": machine},
                       options.out)


if __name__ == "__main__":
    main()
