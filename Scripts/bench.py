#!/usr/bin/env python3
"""`make bench`: keyholed next to Redis, PyJWT and OpenSSL on this machine, in one run; writes BENCHMARKS.md.

Every keyholed and Redis figure comes from the same client, `keyhole-bench load` (release build), at
depth 1 (each connection waits for its answer before asking again) and 1, 16 and 64 connections:

- keyholed (fresh state directories, fsync = "always"): ping; session.get over 100 000 sessions;
  token.verify of distinct RS256 and ES256 tokens (more than the verified-token cache holds: every one
  is a real signature check) and of one repeated token (cached), all on a keyholed that holds only
  those 100 000 sessions, as Redis's GET reads 100 000 keys; session.create with fsync "always" (and
  the sign-ins) on a keyholed of their own, and with "batch" and "off" (a keyholed each).
- Redis (Debian's redis-server, Unix socket, appendonly with appendfsync always): GET over 100 000
  keys of 256 bytes and SET over the same keys (overwriting), on a store that stays at 100 000 keys; and,
  on a second Redis, SET of new keys (each run a prefix of its own: every SET creates its key, as every
  session.create creates a session, and that Redis's store and AOF grow as keyholed's do).
- keyholed's apple.sign_in without a code: 4000 distinct RS256 identity tokens for an [[issuer]] with
  preset "apple" (its key set a local file), each signing its user in (a user upsert and a session,
  both durable) after a full signature check.
- PyJWT verifying the same RS256 tokens in-process; `openssl speed rsa2048 ecdsap256`.
- keyhole-bench floor-server (SwiftNIO and the framing answering canned bytes), the least any
  operation can cost, as a reference;
- session.get paced at half its peak, for p99 at a steady load; start-up with 1 000 000 sessions
  (time and resident memory), unless --skip-million.
- Under a hostile client: well-behaved clients (4 connections, a session.get each millisecond) on a
  keyholed of their own, quiet, then while `keyhole-bench hostile` attacks it from another uid
  (random bytes, random and maximum-size frames, bad JSON, half frames, unread answers), then quiet
  again; their p99 under attack against the worse of the two quiet ones, --rounds times.
  Then under connection churn from one uid (Scripts/churn_bench.py). `--hostile-only` runs these
  parts alone (no Redis, PyJWT or OpenSSL needed).
- Head to head, for the goals that compare: --rounds rounds (default 5) of keyholed and Redis run
  back to back, which one goes first alternating, and of `keyhole-bench verify` next to
  `openssl speed rsa2048`. A goal is judged on the median of the rounds' ratios: on a shared 2-core
  machine one 5 s run of either server varies by 5-15 %, and a ratio from two runs taken minutes apart
  measures the machine as much as the servers.

session.create runs cycle over 10 000 subjects (keyhole-bench load --subjects), as Redis's SET cycles
over 100 000 keys: one subject with millions of sessions is not a site's load.

Needs: a release build (`swift build -c release`), redis-server, and Python's `cryptography` and
`jwt` (PyJWT). `make bench` installs them and runs this.
"""
import argparse
import datetime
import functools
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, ".build", "release")
CONNECTIONS = (1, 16, 64)
ES_ISSUER = "https://bench-es.keyhole.invalid"
# SETs that create their keys, as session.create creates sessions: each run a prefix of its own, and
# more keys than a 6 s run at 64 connections sends.
NEW_KEYS = {"count": 0}


def new_key_args():
    NEW_KEYS["count"] += 1
    return ("--redis", "--op", "SET", "--keys", "900000", "--key-prefix", f"new{NEW_KEYS['count']}")


CREATE_ARGS = ("--op", "session.create", "--args", '{"sub":"bench","issuer":"local"}', "--subjects", "10000")
# The hostile client's uid when the bench runs as root (setpriv): another user's process, as an attacker's
# would be. Not 65534, the overflow uid, which keyholed treats as unknown.
HOSTILE_UID = 4242
# The goal under attack: the well-behaved clients' p99 at most this many times their quiet p99.
HOSTILE_P99_GOAL = 2.0


def run(argv, **kwargs):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs).stdout


def wait_for_socket(path, process, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return
        if process.poll() is not None:
            raise SystemExit(f"bench: {process.args[0]} exited with {process.returncode}")
        time.sleep(0.05)
    raise SystemExit(f"bench: no socket at {path}")


def redis_server(directory, name, helpers, *options):
    """A redis-server on a Unix socket in DIRECTORY/NAME, AOF with appendfsync always (and `options`),
    added to `helpers` (stopped by the caller); its process and socket."""
    redis_dir = os.path.join(directory, name)
    os.makedirs(redis_dir)
    socket = os.path.join(redis_dir, "redis.sock")
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", socket, "--dir", redis_dir, "--save", "",
         "--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes", "--loglevel",
         "warning", *options], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    helpers.append(process)
    wait_for_socket(socket, process)
    return process, socket


class Keyholed:
    """A keyholed on a fresh state directory, stopped with SIGTERM."""

    def __init__(self, directory, name, config):
        self.directory = os.path.join(directory, name)
        os.makedirs(self.directory)
        self.socket = os.path.join(self.directory, "k.sock")
        self.config = os.path.join(self.directory, "keyholed.toml")
        with open(self.config, "w") as file:
            file.write(config)
        self.log = os.path.join(self.directory, "keyholed.log")
        self.process = None
        # The environment keyholed starts with (None: this process's).
        self.env = None

    def start(self):
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                [os.path.join(RELEASE, "keyholed"), "--config", self.config, "--socket", self.socket,
                 "--state-dir", os.path.join(self.directory, "state"), "--log-level", "info"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env)
        try:
            wait_for_socket(self.socket, self.process)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """SIGTERM, then SIGKILL after 60 s: a bench run never leaves a keyholed behind."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if os.path.exists(self.socket):
            os.unlink(self.socket)


def load(socket, seconds, connections, *extra, server_pid=None):
    argv = [os.path.join(RELEASE, "keyhole-bench"), "load", "--socket", socket, "--connections", str(connections),
            "--depth", "1", "--seconds", str(seconds), "--json", *extra]
    if server_pid:
        argv += ["--server-pid", str(server_pid)]
    result = json.loads(run(argv))
    result["command"] = argv
    if result.get("failed"):
        raise SystemExit(f"bench: {result['failed']} requests failed: {' '.join(argv)}")
    return result


def pyjwt_microseconds(tokens_dir, count):
    """PyJWT's time per RS256 verification of the bench's tokens, in-process (best of three passes)."""
    import jwt
    with open(os.path.join(tokens_dir, "jwks.json")) as file:
        key = jwt.PyJWK(json.load(file)["keys"][0]).key
    with open(os.path.join(tokens_dir, "tokens.txt")) as file:
        tokens = [line.strip() for line in file if line.strip()][:count]
    claims = jwt.decode(tokens[0], key, algorithms=["RS256"], options={"verify_aud": False})
    best = None
    for _ in range(3):
        started = time.perf_counter()
        for token in tokens:
            jwt.decode(token, key, algorithms=["RS256"], audience=claims["aud"], issuer=claims["iss"])
        elapsed = (time.perf_counter() - started) / len(tokens) * 1e6
        best = elapsed if best is None else min(best, elapsed)
    return best, jwt.__version__


def verify_microseconds(tokens_dir, token_file, issuer="https://bench.keyhole.invalid"):
    """`keyhole-bench verify`: CPU per whole token verification in keyholed's code, one thread."""
    text = run([os.path.join(RELEASE, "keyhole-bench"), "verify", "--token", token_file, "--jwks",
                os.path.join(tokens_dir, "jwks.json"), "--issuer", issuer, "--audience", "dev.keyhole.bench"])
    match = re.search(r"whole token.*?:\s*([\d.]+) µs", text)
    return float(match.group(1)) if match else None


def openssl_speed(seconds, algorithms=("rsa2048", "ecdsap256")):
    """Microseconds per rsa2048 and ecdsap256 sign and verify, one core."""
    text = run(["openssl", "speed", "-seconds", str(seconds), *algorithms])
    figures = {}
    # The table's last two columns, sign/s and verify/s (its seconds columns are rounded to 0.1 ms).
    for name, pattern in (("rsa2048", r"^rsa\s+2048 bits\s.*\s([\d.]+)\s+([\d.]+)\s*$"),
                          ("ecdsap256", r"^\s*256 bits ecdsa \(nistp256\)\s.*\s([\d.]+)\s+([\d.]+)\s*$")):
        match = re.search(pattern, text, re.M)
        if match:
            figures[name] = {"sign_us": 1e6 / float(match.group(1)), "verify_us": 1e6 / float(match.group(2))}
    return figures


def paced_session_gets(socket, seconds, sessions, server_pid):
    """Well-behaved clients: 4 connections, each a session.get every millisecond. Returns keyhole-bench
    load's figures; requests that failed are counted there (`failed`), not raised."""
    argv = [os.path.join(RELEASE, "keyhole-bench"), "load", "--socket", socket, "--connections", "4", "--depth", "1",
            "--interval-ms", "1", "--seconds", str(seconds), "--json", "--sessions", sessions, "--server-pid", str(server_pid)]
    return argv, subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished_load(started, keyholed_pid=None):
    """Waits for a load started by paced_session_gets; its figures, and keyholed's peak RSS meanwhile."""
    argv, process = started
    peak = 0
    while keyholed_pid and process.poll() is None:
        peak = max(peak, rss_kib(keyholed_pid))
        time.sleep(0.1)
    out, err = process.communicate()
    try:
        result = json.loads(out)
    except ValueError:
        raise SystemExit(f"bench: {' '.join(argv)} printed no figures: {out}{err}")
    result["command"] = argv
    return result, peak


def hostile_rounds(directory, seconds, rounds):
    """session.get's p99 quiet, under `keyhole-bench hostile`, and quiet again, `rounds` times, on a keyholed
    of its own holding 1000 sessions (its socket open to every user, as the attacker is another one)."""
    os.chmod(directory, 0o711)
    keyholed = Keyholed(directory, "hostile", '[server]\nsocket_mode = "0666"\n').start()
    try:
        sessions = os.path.join(keyholed.directory, "sessions.txt")
        run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-sessions.py"), "--socket", keyholed.socket,
             "--count", "1000", "--users", "100", "--out", sessions])
        os.chmod(sessions, 0o644)
        pid = keyholed.process.pid
        outcomes = []
        for number in range(rounds):
            quiet, _ = finished_load(paced_session_gets(keyholed.socket, seconds, sessions, pid))
            rss_quiet = rss_kib(pid)
            # The attack covers the load's warm-up (1 s) and its measured seconds, with a margin.
            attacker = [os.path.join(RELEASE, "keyhole-bench"), "hostile", "--socket", keyholed.socket,
                        "--seconds", str(seconds + 3), "--connections", "4", "--seed", str(number + 1)]
            if os.geteuid() == 0:
                attacker = ["/usr/bin/setpriv", f"--reuid={HOSTILE_UID}", f"--regid={HOSTILE_UID}", "--clear-groups"] + attacker
            attack = subprocess.Popen(attacker, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
            attacked, rss_peak = finished_load(paced_session_gets(keyholed.socket, seconds, sessions, pid), pid)
            attack_out, attack_err = attack.communicate()
            if attack.returncode != 0:
                raise SystemExit(f"bench: {' '.join(attacker)} exited with {attack.returncode}: {attack_out}{attack_err}")
            quiet_after, _ = finished_load(paced_session_gets(keyholed.socket, seconds, sessions, pid))
            outcome = {"quiet": quiet, "attacked": attacked, "quiet_after": quiet_after, "attack": attack_out.strip(),
                       "attacker_uid": HOSTILE_UID if os.geteuid() == 0 else os.geteuid(),
                       "rss_quiet_kib": rss_quiet, "rss_peak_kib": rss_peak}
            outcomes.append(outcome)
            print(f"hostile round {number + 1}: session.get p99 quiet {quiet['latency_us']['p99']} µs, under attack "
                  f"{attacked['latency_us']['p99']} µs ({attacked['failed']} failed), quiet again "
                  f"{quiet_after['latency_us']['p99']} µs; {outcome['attack']}", flush=True)
        return outcomes
    finally:
        keyholed.stop()


def judge_hostile(outcomes):
    """Each round's p99 under attack over the worse of its two quiet p99s (the machine may be busier during
    either); the goal is judged on the median of the rounds' ratios, and on no well-behaved request failing."""
    for outcome in outcomes:
        quiet = max(outcome["quiet"]["latency_us"]["p99"], outcome["quiet_after"]["latency_us"]["p99"])
        outcome["ratio"] = round(outcome["attacked"]["latency_us"]["p99"] / quiet, 4)
    ratio = median([outcome["ratio"] for outcome in outcomes])
    failed = sum(outcome["attacked"]["failed"] for outcome in outcomes)
    return {"median_ratio": ratio, "failed": failed, "met": ratio <= HOSTILE_P99_GOAL and failed == 0}


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def head_to_head(rounds, cases):
    """keyholed and Redis back to back, `rounds` times per case; which goes first alternates by round, so
    that a machine getting busier or quieter over a pair favours neither."""
    outcomes = [{"name": name, "against": against, "connections": connections, "keyholed": [], "redis": []}
                for name, against, connections, _, _ in cases]
    for number in range(rounds):
        for outcome, (_, _, _, keyholed, redis) in zip(outcomes, cases):
            order = ((keyholed, "keyholed"), (redis, "redis"))
            for measure, side in (order if number % 2 == 0 else order[::-1]):
                outcome[side].append(measure()["per_second"])
            ratio = outcome["keyholed"][-1] / outcome["redis"][-1]
            print(f"round {number + 1}: {outcome['name']} / {outcome['against']}, {outcome['connections']} conn: "
                  f"{outcome['keyholed'][-1]} / {outcome['redis'][-1]} = {ratio:.3f}", flush=True)
    for outcome in outcomes:
        outcome["ratios"] = [round(k / r, 4) for k, r in zip(outcome["keyholed"], outcome["redis"])]
        outcome["median_ratio"] = median(outcome["ratios"])
    return outcomes


def verify_rounds(rounds, tokens_dir, token_file):
    """`keyhole-bench verify` next to `openssl speed rsa2048`, `rounds` times: (ours µs, openssl's µs) pairs."""
    pairs = []
    for number in range(rounds):
        ours = verify_microseconds(tokens_dir, token_file)
        theirs = openssl_speed(2, ("rsa2048",)).get("rsa2048", {}).get("verify_us")
        if not ours or not theirs:
            print(f"verify round {number + 1}: no figure (keyhole-bench verify {ours}, openssl {theirs}); skipped", flush=True)
            continue
        pairs.append({"keyhole_us": ours, "openssl_us": round(theirs, 2), "ratio": round(ours / theirs, 4)})
        print(f"verify round {number + 1}: {ours} µs against openssl's {theirs:.2f} µs = {ours / theirs:.3f}", flush=True)
    return pairs


def machine():
    model = ""
    with open("/proc/cpuinfo") as file:
        for line in file:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    def version(argv):
        return run(argv).strip() if shutil.which(argv[0]) else "not installed"

    return {
        "cpu": f"{os.cpu_count()} × {model}", "kernel": platform.release(), "swift": version(["swift", "--version"]).splitlines()[0],
        "redis": version(["redis-server", "--version"]), "openssl": version(["openssl", "version"]),
        "python": platform.python_version(),
    }


def startup_with_million(directory, seconds_budget):
    """Fills a keyholed with 1 000 000 sessions, restarts it, and returns (ms to open, RSS KiB, sessions)."""
    keyholed = Keyholed(directory, "million", '[storage]\nfsync = "off"\n').start()
    try:
        run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-sessions.py"), "--socket", keyholed.socket,
             "--count", "1000000", "--users", "100000"], timeout=seconds_budget)
    finally:
        keyholed.stop()
    empty = Keyholed(directory, "empty", "").start()
    empty_rss = rss_kib(empty.process.pid)
    empty.stop()
    open(keyholed.log, "w").close()
    keyholed.start()
    try:
        opened = None
        deadline = time.monotonic() + 30
        while opened is None and time.monotonic() < deadline:
            with open(keyholed.log) as file:
                match = re.search(r"storage\.opened.*?\bms=(\d+).*?\bsessions=(\d+)", file.read())
            if match:
                opened = (int(match.group(1)), int(match.group(2)))
            else:
                time.sleep(0.05)
        if opened is None:
            raise SystemExit("bench: keyholed never logged storage.opened")
        return opened[0], rss_kib(keyholed.process.pid), empty_rss, opened[1]
    finally:
        keyholed.stop()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def measure_all(options, results, directory, servers, helpers):
    """Everything but the hostile client: keyholed, Redis, PyJWT and OpenSSL (see the module's docstring)."""
    # Tokens: more distinct ones than the verified-token cache keeps, so the cycle never hits it.
    tokens_dir = os.path.join(directory, "tokens")
    run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-tokens.py"), "--out", tokens_dir, "--count", "4000"])
    es_dir = os.path.join(directory, "tokens-es")
    run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-tokens.py"), "--out", es_dir, "--count", "4000",
         "--alg", "ES256", "--name", "bench-es", "--issuer", ES_ISSUER])
    apple_dir = os.path.join(directory, "tokens-apple")
    run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-tokens.py"), "--out", apple_dir, "--count", "4000",
         "--issuer", "https://appleid.apple.com", "--name", "apple"])
    one_token, one_es_token = os.path.join(directory, "one-token.txt"), os.path.join(directory, "one-es-token.txt")
    for source, target in ((tokens_dir, one_token), (es_dir, one_es_token)):
        with open(os.path.join(source, "tokens.txt")) as file, open(target, "w") as out:
            out.write(file.readline())
    issuer_config = "[tokens]\ncache_entries = 1000\n\n"
    for source in (tokens_dir, es_dir):
        with open(os.path.join(source, "issuer.toml")) as file:
            issuer_config += file.read() + "\n"
    # Sign in with Apple without a code needs no team key: the preset's issuer, with the bench's key set.
    issuer_config += (f'[[issuer]]\nname = "apple"\npreset = "apple"\njwks_uri = "{os.path.join(apple_dir, "jwks.json")}"\n'
                      'audiences = ["dev.keyhole.bench"]\n\n[apple]\n\n')

    policies = {"always": '[storage]\nfsync = "always"\n', "batch": '[storage]\nfsync = "batch"\n',
                "off": '[storage]\nfsync = "off"\n'}
    # Reads (session.get, token.verify) go to a keyholed holding only the 100 000 sessions they read,
    # as Redis's GET reads a store of 100 000 keys; writes (creates, sign-ins) to one of their own,
    # whose store grows with every one of them.
    main_server = Keyholed(directory, "always", issuer_config + policies["always"]).start()
    servers.append(main_server)
    writer = Keyholed(directory, "always-writes", issuer_config + policies["always"]).start()
    servers.append(writer)
    others = {}
    for policy in ("batch", "off"):
        others[policy] = Keyholed(directory, policy, policies[policy]).start()
        servers.append(others[policy])
    sessions = os.path.join(directory, "sessions.txt")
    run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-sessions.py"), "--socket", main_server.socket,
         "--count", "100000", "--users", "10000", "--issuer", "local", "--out", sessions])

    def start_redis(name):
        return redis_server(directory, name, helpers)

    # GET and the SET that overwrites: a store that stays at 100 000 keys.
    redis, redis_socket = start_redis("redis")
    run(["redis-cli", "-s", redis_socket, "DEBUG", "POPULATE", "100000", "kh", "256"])
    # The SET that creates its keys has a Redis of its own, whose store grows as keyholed's does.
    redis_new, redis_new_socket = start_redis("redis-new")
    # SwiftNIO and keyholed's framing alone, answering canned bytes: the floor under every operation.
    floor_socket = os.path.join(directory, "floor.sock")
    floor = subprocess.Popen([os.path.join(RELEASE, "keyhole-bench"), "floor-server", "--socket", floor_socket],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    helpers.append(floor)
    wait_for_socket(floor_socket, floor)

    def record(name, target, connections, result):
        result.update({"name": name, "target": target, "connections_run": connections})
        results["runs"].append(result)
        print(f"{name:28} {connections:3} conn: {result['per_second']:8} /s  p50 {result['latency_us']['p50']:6} µs"
              f"  p99 {result['latency_us']['p99']:6} µs  server CPU {result.get('server_cpu_us_per_request', '-')} µs",
              flush=True)

    def scenario(server_socket, server_pid, *extra):
        return lambda connections: load(server_socket, options.seconds, connections, *extra, server_pid=server_pid)

    pid, writer_pid = main_server.process.pid, writer.process.pid
    # Every scenario, in the table's order: who answers it, and how to run it at a number of connections.
    scenarios = {
        "ping": ("keyholed", scenario(main_server.socket, pid)),
        "session.get": ("keyholed", scenario(main_server.socket, pid, "--sessions", sessions)),
        "token.verify cached": ("keyholed", scenario(main_server.socket, pid, "--tokens", one_token)),
        "token.verify cached ES256": ("keyholed", scenario(main_server.socket, pid, "--tokens", one_es_token)),
        "token.verify distinct RS256": ("keyholed", scenario(main_server.socket, pid, "--tokens",
                                                             os.path.join(tokens_dir, "tokens.txt"))),
        "token.verify distinct ES256": ("keyholed", scenario(main_server.socket, pid, "--tokens",
                                                             os.path.join(es_dir, "tokens.txt"))),
        "apple.sign_in distinct RS256": ("keyholed", scenario(writer.socket, writer_pid, "--op", "apple.sign_in",
                                                              "--tokens", os.path.join(apple_dir, "tokens.txt"))),
        "redis GET": ("redis", scenario(redis_socket, redis.pid, "--redis", "--op", "GET")),
        "floor (NIO and framing only)": ("floor", scenario(floor_socket, floor.pid)),
        "session.create fsync=always": ("keyholed", scenario(writer.socket, writer_pid, *CREATE_ARGS)),
        "session.create fsync=batch": ("keyholed", scenario(others["batch"].socket, others["batch"].process.pid,
                                                            *CREATE_ARGS)),
        "session.create fsync=off": ("keyholed", scenario(others["off"].socket, others["off"].process.pid,
                                                          *CREATE_ARGS)),
        "redis SET": ("redis", scenario(redis_socket, redis.pid, "--redis", "--op", "SET")),
        # A fresh key prefix for every run.
        "redis SET new keys": ("redis", lambda connections: scenario(redis_new_socket, redis_new.pid,
                                                                     *new_key_args())(connections)),
    }
    for connections in CONNECTIONS:
        for name, (target, measure) in scenarios.items():
            record(name, target, connections, measure(connections))

    # p99 at a steady half of the peak: 16 connections, each paced.
    peak = max(r["per_second"] for r in results["runs"] if r["name"] == "session.get")
    interval_ms = 16 * 1000.0 / (peak / 2)
    paced = scenario(main_server.socket, pid, "--sessions", sessions, "--interval-ms", f"{interval_ms:.4f}")
    for _ in range(3):
        record("session.get at half peak", "keyholed", 16, paced(16))

    pairs = (("session.get", "redis GET", 16), ("token.verify cached", "redis GET", 16),
             ("session.create fsync=always", "redis SET", 16), ("session.create fsync=always", "redis SET", 64),
             ("session.create fsync=always", "redis SET new keys", 16),
             ("session.create fsync=always", "redis SET new keys", 64))
    cases = [(name, against, connections, functools.partial(scenarios[name][1], connections),
              functools.partial(scenarios[against][1], connections)) for name, against, connections in pairs]
    results["head_to_head"] = head_to_head(options.rounds, cases)
    for process in (redis, redis_new):
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    floor.send_signal(signal.SIGTERM)
    floor.wait(timeout=30)
    for server in servers:
        server.stop()

    results["verify_rounds"] = verify_rounds(options.rounds, tokens_dir, one_token)
    # RS256's figure is the rounds' median; ES256 is measured once, as a reference point only.
    rsa_figures = [pair["keyhole_us"] for pair in results["verify_rounds"]]
    results["verify_us"] = median(rsa_figures) if rsa_figures else None
    results["verify_es_us"] = verify_microseconds(es_dir, one_es_token, ES_ISSUER)
    print(f"keyhole-bench verify: {results['verify_us']} µs CPU per whole RS256 verification, "
          f"{results['verify_es_us']} µs per ES256", flush=True)
    results["pyjwt_us"], results["pyjwt_version"] = pyjwt_microseconds(tokens_dir, 2000)
    print(f"PyJWT {results['pyjwt_version']}: {results['pyjwt_us']:.1f} µs per RS256 verification", flush=True)
    results["openssl"] = openssl_speed(3)
    print(f"openssl speed: {results['openssl']}", flush=True)
    if not options.skip_million:
        ms, rss, empty_rss, count = startup_with_million(directory, 900)
        results["million"] = {"open_ms": ms, "rss_kib": rss, "empty_rss_kib": empty_rss, "sessions": count}
        print(f"start-up with {count} sessions: {ms} ms, RSS {rss} KiB (empty {empty_rss} KiB)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5, help="measured seconds per run (after 1 s of warm-up)")
    parser.add_argument("--out", help="the report (default: BENCHMARKS.md; with --hostile-only, "
                        "keyhole-bench-hostile.md in the temporary directory, not to overwrite the full report)")
    parser.add_argument("--skip-million", action="store_true", help="skip start-up with 1 000 000 sessions")
    parser.add_argument("--rounds", type=int, default=5, help="head-to-head rounds for the goals that compare")
    parser.add_argument("--hostile-only", action="store_true",
                        help="only the well-behaved clients' latency under a hostile client (no Redis, PyJWT or OpenSSL)")
    options = parser.parse_args()
    if options.out is None:
        options.out = (os.path.join(tempfile.gettempdir(), "keyhole-bench-hostile.md") if options.hostile_only
                       else os.path.join(ROOT, "BENCHMARKS.md"))
    if options.rounds < 1 or options.seconds <= 0:
        raise SystemExit("bench: --rounds and --seconds must be positive")
    for tool in ("keyholed", "keyhole-bench"):
        if not os.access(os.path.join(RELEASE, tool), os.X_OK):
            raise SystemExit(f"bench: {RELEASE}/{tool} missing: swift build -c release")
    import churn_bench  # here: it imports this module back, for the keyholed and load helpers
    churn_left_out = churn_bench.check()
    if not options.hostile_only and not shutil.which("redis-server"):
        raise SystemExit("bench: redis-server missing (apt-get install redis-server)")

    directory = tempfile.mkdtemp(prefix="keyhole-bench.")
    results = {"machine": machine(), "date": datetime.date.today().isoformat(), "seconds": options.seconds,
               "rounds": options.rounds, "runs": [], "notes": [], "directory": directory}
    started = time.monotonic()
    servers = []
    helpers = []  # redis-server and floor-server, ended on the way out whatever happened
    try:
        if not options.hostile_only:
            measure_all(options, results, directory, servers, helpers)
        results["hostile"] = hostile_rounds(directory, options.seconds, options.rounds)
        if churn_left_out:
            results["notes"].append(f"Connection churn (Scripts/churn_bench.py): {churn_left_out}.")
        else:
            results["churn"] = churn_bench.churn_rounds(directory, options.seconds, options.rounds)
    finally:
        for server in servers:
            try:
                server.stop()
            except Exception as error:  # the rest must still be stopped
                print(f"bench: stopping {server.directory}: {error}", file=sys.stderr)
        for helper in helpers:
            if helper.poll() is None:
                helper.kill()
                helper.wait(timeout=30)
        shutil.rmtree(directory, ignore_errors=True)
    results["took_s"] = round(time.monotonic() - started)
    os.makedirs(os.path.dirname(os.path.abspath(options.out)), exist_ok=True)
    with open(options.out, "w") as file:
        file.write(report_hostile_only(results) if options.hostile_only else report(results))
    with open(os.path.splitext(options.out)[0] + ".json", "w") as file:
        json.dump(results, file, indent=1, sort_keys=True)
    print(f"bench: wrote {options.out}")


def figure(results, name, connections):
    for run_ in results["runs"]:
        if run_["name"] == name and run_["connections_run"] == connections:
            return run_
    return None


def hostile_goal_row(hostile):
    """The goals table's row for the rounds under a hostile client (judge_hostile decides)."""
    verdict = judge_hostile(hostile)
    ratios = [outcome["ratio"] for outcome in hostile]
    failed = f"; {verdict['failed']} well-behaved requests failed" if verdict["failed"] else ""
    return (f"| session.get p99 under a hostile client ≤ {HOSTILE_P99_GOAL:g}× its quiet p99, every request answered "
            f"(4 connections at 1 request/ms each) | median {verdict['median_ratio']:.2f}× (rounds {min(ratios):.2f}× "
            f"to {max(ratios):.2f}×){failed} | {'yes' if verdict['met'] else 'no'} |")


def hostile_section(hostile):
    """The section with each round under a hostile client."""
    judge_hostile(hostile)  # each round's ratio
    lines = ["", "## Under a hostile client", "",
              "Well-behaved clients (`keyhole-bench load --sessions --connections 4 --depth 1 --interval-ms 1`) on a "
              "keyholed of their own holding 1000 sessions: quiet, then while `keyhole-bench hostile --connections 4` "
              f"attacks it as uid {hostile[0]['attacker_uid']}, then quiet again. A round's ratio is its p99 under attack "
              "over the worse of its two quiet p99s (the machine may be busier during either).", "",
              "| round | quiet p99 µs | under attack p99 µs | quiet again p99 µs | ratio | answered/s under attack | failed "
              "| keyholed RSS quiet / peak KiB | the attack |", "|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for number, outcome in enumerate(hostile, 1):
        attacked = outcome["attacked"]
        lines.append(f"| {number} | {outcome['quiet']['latency_us']['p99']} | {attacked['latency_us']['p99']} | "
                     f"{outcome['quiet_after']['latency_us']['p99']} | {outcome['ratio']:.2f} | {attacked['per_second']} | "
                     f"{attacked['failed']} | {outcome['rss_quiet_kib']} / {outcome['rss_peak_kib']} | "
                     f"{outcome['attack'].removeprefix('hostile: ')} |")
    return lines


def report_hostile_only(results):
    """`--hostile-only`'s report: the machine, the goal and the rounds, nothing of the runs it did not make."""
    lines = ["# Benchmarks: under a hostile client only", "",
             f"Written by `Scripts/bench.py --hostile-only` on {results['date']}, in {results['took_s']} s; "
             f"{results['seconds']:g} s per run after 1 s of warm-up.", "", "## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in results["machine"].items()]
    import churn_bench
    lines += ["", "## Goals", "", "| goal | measured | met |", "|---|---|---|", hostile_goal_row(results["hostile"])]
    churn = results.get("churn")
    lines += churn_bench.goal_rows(churn) if churn else []
    lines += hostile_section(results["hostile"]) + (churn_bench.churn_section(churn) if churn else [])
    for note in results.get("notes", []):
        lines += ["", note]
    return "\n".join(lines + [""])


def report(results):
    lines = ["# Benchmarks", "",
             f"Written by `make bench` (Scripts/bench.py) on {results['date']}, in {results['took_s']} s. Every keyholed",
             "and Redis figure comes from the same client, `keyhole-bench load`, at depth 1 (each connection waits",
             f"for its answer before asking again), {results['seconds']:g} s per run after 1 s of warm-up; the client",
             "runs on the same machine and takes its share of the cores. Latencies are from send to answer.", "",
             "## Machine", ""]
    for key, value in results["machine"].items():
        lines.append(f"- {key}: {value}")
    lines += ["", "## Throughput and latency", "",
              "| scenario | connections | requests/s | p50 µs | p99 µs | p99.9 µs | server CPU µs/request |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for run_ in results["runs"]:
        latency = run_["latency_us"]
        lines.append(f"| {run_['name']} | {run_['connections_run']} | {run_['per_second']} | {latency['p50']} | "
                     f"{latency['p99']} | {latency['p99_9']} | {run_.get('server_cpu_us_per_request', '')} |")
    lines += ["", "## Commands", "",
              "Each scenario's `keyhole-bench load` command, at 16 connections ($DIR: the run's temporary directory, with",
              "the tokens and sessions Scripts/make-bench-tokens.py and make-bench-sessions.py made; PID: the server's):", ""]
    shown = set()
    for run_ in results["runs"]:
        if run_["name"] in shown or run_["connections_run"] != 16 or "command" not in run_:
            continue
        shown.add(run_["name"])
        words = []
        for word in run_["command"]:
            word = word.replace(results.get("directory", "\0"), "$DIR").replace(RELEASE, ".build/release")
            words.append("PID" if words and words[-1] == "--server-pid" else (f"'{word}'" if "{" in word else word))
        lines.append(f"- {run_['name']}: `{' '.join(words)}`")
    lines += ["", "Redis: `redis-server --port 0 --unixsocket $DIR/redis/redis.sock --save '' --appendonly yes "
              "--appendfsync always`, filled with `redis-cli DEBUG POPULATE 100000 kh 256`; SET of new keys goes to a "
              "second, empty one started alike ($DIR/redis-new). Also: `keyhole-bench verify`, "
              "`openssl speed -seconds 3 rsa2048 ecdsap256` and PyJWT's `jwt.decode` in-process (Scripts/bench.py).",
              "", "## Goals (issue 8)", "",
              f"Ratios against Redis and OpenSSL are the median of the {results.get('rounds', '')} "
              "head-to-head rounds below; p99 at half the peak is the median of three runs.", "",
              "| goal | measured | met |", "|---|---|---|"]

    def ratio_row(label, name, connections, against=None):
        for outcome in results.get("head_to_head", []):
            if outcome["name"] == name and outcome["connections"] == connections and against in (None, outcome["against"]):
                ratio = outcome["median_ratio"]
                lines.append(f"| {label} | median {ratio:.2f}× (rounds {min(outcome['ratios']):.2f}× to "
                             f"{max(outcome['ratios']):.2f}×) | {'yes' if ratio >= 1.0 else 'no'} |")

    ratio_row("session.get ≥ 1.0× Redis GET, 16 connections", "session.get", 16)
    ratio_row("cached token.verify ≥ 1.0× Redis GET, 16 connections", "token.verify cached", 16)
    for connections in (16, 64):
        ratio_row(f"session.create (fsync always) ≥ 1.0× Redis SET (appendfsync always), {connections} connections: "
                  "SET overwriting 100 000 keys", "session.create fsync=always", connections, "redis SET")
        ratio_row(f"session.create (fsync always) ≥ 1.0× Redis SET (appendfsync always), {connections} connections: "
                  "SET creating its keys, as a create does", "session.create fsync=always", connections, "redis SET new keys")
    distinct = figure(results, "token.verify distinct RS256", 64)
    rounds = results.get("verify_rounds")
    if rounds:
        ratio = median([pair["ratio"] for pair in rounds])
        served = (f"; served over the socket at 64 connections, {distinct['server_cpu_us_per_request']} µs of keyholed's "
                  "CPU per request" if distinct else "")
        lines.append(f"| distinct RS256 token verification CPU ≤ 1.3× openssl's rsa2048 verify | median {ratio:.2f}× "
                     f"(keyhole-bench verify {median([p['keyhole_us'] for p in rounds])} µs, openssl "
                     f"{median([p['openssl_us'] for p in rounds])} µs{served}) | {'yes' if ratio <= 1.3 else 'no'} |")
    cached = figure(results, "token.verify cached", 1)
    if cached and results.get("pyjwt_us"):
        lines.append(f"| 1-connection cached token.verify p50 < PyJWT {results['pyjwt_version']} in-process | "
                     f"{cached['latency_us']['p50']} µs vs {results['pyjwt_us']:.1f} µs | "
                     f"{'yes' if cached['latency_us']['p50'] < results['pyjwt_us'] else 'no'} |")
    halves = [r for r in results["runs"] if r["name"] == "session.get at half peak"]
    if halves:
        p99 = median([r["latency_us"]["p99"] for r in halves])
        lines.append(f"| session.get p99 at half the peak < 200 µs | median {p99} µs (runs: "
                     f"{', '.join(str(r['latency_us']['p99']) for r in halves)} µs at about {halves[0]['per_second']}/s) | "
                     f"{'yes' if p99 < 200 else 'no'} |")
    million = results.get("million")
    if million:
        per_session = (million["rss_kib"] - million["empty_rss_kib"]) * 1024 / max(1, million["sessions"])
        lines.append(f"| start with 1 000 000 sessions < 2 s | {million['open_ms']} ms | "
                     f"{'yes' if million['open_ms'] < 2000 else 'no'} |")
        lines.append(f"| resident memory < 300 B per session | {per_session:.0f} B ({million['rss_kib']} KiB with "
                     f"{million['sessions']}, {million['empty_rss_kib']} KiB empty) | {'yes' if per_session < 300 else 'no'} |")
    hostile = results.get("hostile")
    if hostile:
        lines.append(hostile_goal_row(hostile))
    if results.get("churn"):
        import churn_bench
        lines += churn_bench.goal_rows(results["churn"])
    if results.get("head_to_head"):
        lines += ["", "## Head to head", "",
                  "Each round runs keyholed and Redis back to back at the same settings, keyholed first in odd rounds and "
                  "Redis first in even ones; requests per second, and the round's ratio.", "",
                  "| scenario | against | connections | keyholed | Redis | ratio | median |", "|---|---|---:|---|---|---|---:|"]
        for outcome in results["head_to_head"]:
            lines.append(f"| {outcome['name']} | {outcome['against']} | {outcome['connections']} | "
                         f"{' '.join(str(v) for v in outcome['keyholed'])} | {' '.join(str(v) for v in outcome['redis'])} | "
                         f"{' '.join(f'{v:.2f}' for v in outcome['ratios'])} | {outcome['median_ratio']:.2f} |")
    if hostile:
        lines += hostile_section(hostile)
    if results.get("churn"):
        import churn_bench
        lines += churn_bench.churn_section(results["churn"])
    for note in results.get("notes", []):
        lines += ["", note]
    if results.get("verify_rounds"):
        lines += ["", "RS256 verification, `keyhole-bench verify` (whole token, one thread) and `openssl speed -seconds 2 rsa2048` "
                  "(verify) back to back, µs: " + ", ".join(
                      f"{p['keyhole_us']} / {p['openssl_us']} = {p['ratio']:.2f}" for p in results["verify_rounds"]) + "."]
    history = os.path.join(ROOT, "Scripts", "bench-history.md")
    if os.path.exists(history):
        with open(history) as file:
            lines += ["", file.read().rstrip()]
    lines += ["", "## Reference points", ""]
    if results.get("verify_us"):
        lines.append(f"- `keyhole-bench verify` (keyholed's verification code, one thread): RS256 {results['verify_us']} µs, "
                     f"ES256 {results.get('verify_es_us')} µs per whole token (parse, key, signature, claims).")
    if results.get("pyjwt_us"):
        lines.append(f"- PyJWT {results['pyjwt_version']}, in-process, RS256: {results['pyjwt_us']:.1f} µs per verification.")
    for name, figures in results.get("openssl", {}).items():
        lines.append(f"- `openssl speed {name}`: sign {figures['sign_us']:.1f} µs, verify {figures['verify_us']:.1f} µs (one core).")
    lines += ["", "Notes:", "",
              "- session.get runs that come a minute or more after the sessions were made also write their touches",
              "  (a session's last use is logged at most once a minute; with fsync = \"always\" each batch of them is",
              "  synced by the log's thread): on this machine that costs session.get about 10 to 15 %.",
              "- Runs of 5 s on a shared 2-core machine vary by 5 to 15 % from one run to the next (Redis's as much",
              "  as keyholed's): the goals are judged on the head-to-head medians, not on the single runs above.",
              "- Reads go to a keyholed holding the 100 000 sessions they read (as Redis's GET reads 100 000 keys);",
              "  creates and sign-ins to a keyholed of their own.",
              "- session.create cycles over 10 000 subjects (`--subjects 10000`). Every create adds a session, so",
              "  keyholed's tables and snapshots grow over the run: later create rounds face a larger store, which",
              "  alternating the order does not offset. Redis's SET is measured both ways: overwriting 100 000 keys (its",
              "  store stays small and in cache) and creating new keys (its store and its AOF rewrites grow as keyholed's do).",
              "- apple.sign_in is without an authorization code (the exchange is a round trip to Apple): a full RS256",
              "  check (4000 distinct tokens, more than the cache holds), then the user's upsert and a new session, both",
              "  synced (fsync = \"always\") before the answer.",
              "- Not measured yet: pipelined depths.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
