#!/usr/bin/env python3
"""Connection churn from one uid (issue 32, item 1): what it costs keyholed, and the well-behaved clients.

Part of `make bench` (Scripts/bench.py calls `churn_rounds` with its hostile client's rounds, and
writes `churn_section` into BENCHMARKS.md). Each round, on a keyholed of its own holding 1000
sessions (defaults for every limit): well-behaved clients (4 connections, a session.get each
millisecond) quiet; then while `churn` (Scripts/lean/churn.c, two threads, as uid 4242: the bench
must run as root) opens connections and sends a frame error on each, reading its answer and closing at once
(`--close-early`: the costlier attacker for keyholed, as it never waits for a close); then while it
does the same but waits for keyholed to close (as a naive loop does); then quiet again.

keyholed's CPU is read from /proc over 2.5 s in the middle of each run; what the attacker costs it
is that under attack less the more of the two quiet runs. Goals (issue 32): the well-behaved p99
under attack within 1.5x of the worse quiet one, and keyholed spending at most 30 % of a core on the
attacker, both judged on the median of the rounds, for each kind of attacker.

Alone: `python3 Scripts/churn_bench.py [--seconds 4] [--rounds 3]` prints the rounds (release build
and `make build-lean` first).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import bench_report  # noqa: E402

CHURN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".build", "lean", "churn")
P99_GOAL = 1.5
CORE_GOAL = 0.30
# The attackers, by the name the report gives them: churn's extra arguments.
ATTACKERS = (("reads its refusal, closes at once", ["--close-early"]), ("waits for keyholed's close", []))


def attacker_argv(socket, seconds, extra):
    """churn as another user (`check` makes sure this process may switch)."""
    return ["/usr/bin/setpriv", f"--reuid={bench.HOSTILE_UID}", f"--regid={bench.HOSTILE_UID}", "--clear-groups",
            CHURN, "--socket", socket, "--threads", "2", "--seconds", str(seconds), *extra]


def measured(keyholed, sessions, seconds, attack=None):
    """One run of the well-behaved clients, under `attack` (churn's extra arguments) or quiet: their
    figures, keyholed's cores over the middle of the run, and churn's report."""
    attacker = None
    if attack is not None:
        # The attack covers the load's warm-up (1 s) and its measured seconds, with a margin.
        attacker = subprocess.Popen(attacker_argv(keyholed.socket, seconds + 2, attack), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = keyholed.process.pid
    load = bench.paced_session_gets(keyholed.socket, seconds, sessions, pid)
    time.sleep(1.2)  # past the load's warm-up
    window = min(2.5, max(0.5, seconds - 1))
    cpu_before, before = bench_report.cpu_ns(pid), time.monotonic()
    time.sleep(window)
    cores = (bench_report.cpu_ns(pid) - cpu_before) / (time.monotonic() - before) / 1e9
    figures, _ = bench.finished_load(load)
    churn = None
    if attacker:
        out, err = attacker.communicate()
        if attacker.returncode != 0:
            raise SystemExit(f"bench: churn exited with {attacker.returncode}: {out}{err}")
        churn = json.loads(out)
    return {"p99_us": figures["latency_us"]["p99"], "failed": figures["failed"], "per_second": figures["per_second"],
            "cores": round(cores, 4), "churn": churn}


def check():
    """Why the rounds are left out here, or None: churn must run as another uid than the well-behaved
    clients (setpriv, as root), or its held slots would refuse their connections. A churn not built
    ends the run."""
    if not os.access(CHURN, os.X_OK):
        raise SystemExit(f"bench: {CHURN} missing: make build-lean")
    if os.geteuid() != 0:
        return "not run: the bench was not run as root, so churn could not be another user than the well-behaved clients"
    return None


def churn_rounds(directory, seconds, rounds):
    """`rounds` rounds of quiet, each attacker, quiet again, on a keyholed of its own."""
    why = check()
    if why:
        raise SystemExit(f"bench: churn {why}")
    os.chmod(directory, 0o711)
    keyholed = bench.Keyholed(directory, "churn", '[server]\nsocket_mode = "0666"\n').start()
    try:
        sessions = os.path.join(keyholed.directory, "sessions.txt")
        bench.run([sys.executable, os.path.join(bench.ROOT, "Scripts", "make-bench-sessions.py"), "--socket",
                   keyholed.socket, "--count", "1000", "--users", "100", "--out", sessions])
        os.chmod(sessions, 0o644)
        outcomes = []
        for number in range(rounds):
            outcome = {"quiet": measured(keyholed, sessions, seconds), "attacked": []}
            for name, extra in ATTACKERS:
                outcome["attacked"].append(dict(measured(keyholed, sessions, seconds, extra), attacker=name))
            outcome["quiet_after"] = measured(keyholed, sessions, seconds)
            judge_round(outcome)
            outcomes.append(outcome)
            for attacked in outcome["attacked"]:
                print(f"churn round {number + 1}, {attacked['attacker']}: p99 {attacked['p99_us']} µs "
                      f"({attacked['ratio']:.2f}x quiet), keyholed {attacked['attacker_cores']:.3f} of a core on "
                      f"{attacked['churn']['per_second']} connections/s", flush=True)
        return outcomes
    finally:
        keyholed.stop()


def judge_round(outcome):
    """Each attacked run's p99 over the worse quiet p99, and keyholed's cores over the busier quiet run."""
    quiet_p99 = max(outcome["quiet"]["p99_us"], outcome["quiet_after"]["p99_us"])
    quiet_cores = max(outcome["quiet"]["cores"], outcome["quiet_after"]["cores"])
    for attacked in outcome["attacked"]:
        attacked["ratio"] = round(attacked["p99_us"] / quiet_p99, 4)
        attacked["attacker_cores"] = round(max(0.0, attacked["cores"] - quiet_cores), 4)


def judge(outcomes):
    """Per attacker: the medians of the rounds, and whether both goals are met (no request failed)."""
    verdicts = []
    for index, (name, _) in enumerate(ATTACKERS):
        runs = [outcome["attacked"][index] for outcome in outcomes]
        ratio = bench.median([run["ratio"] for run in runs])
        cores = bench.median([run["attacker_cores"] for run in runs])
        failed = sum(run["failed"] for run in runs)
        verdicts.append({"attacker": name, "median_ratio": ratio, "median_cores": cores, "failed": failed,
                         "met": ratio <= P99_GOAL and cores <= CORE_GOAL and failed == 0})
    return verdicts


def goal_rows(outcomes):
    """The goals table's rows, one per attacker."""
    rows = []
    for verdict in judge(outcomes):
        failed = f"; {verdict['failed']} well-behaved requests failed" if verdict["failed"] else ""
        rows.append(f"| under connection churn from one uid ({verdict['attacker']}): session.get p99 ≤ {P99_GOAL:g}× "
                    f"quiet, keyholed ≤ {CORE_GOAL:.0%} of a core on the attacker | median {verdict['median_ratio']:.2f}×, "
                    f"{verdict['median_cores']:.3f} of a core{failed} | {'yes' if verdict['met'] else 'no'} |")
    return rows


def churn_section(outcomes):
    """The section with each round under churn."""
    lines = ["", "## Under connection churn", "",
             "Well-behaved clients as above, on a keyholed of their own with every limit at its default, quiet, then "
             "while `churn` (Scripts/lean/churn.c, two threads, another uid) opens connections as fast as keyholed "
             "lets it and sends a frame error on each, then quiet again (Scripts/churn_bench.py). keyholed's CPU is "
             "read from /proc in the middle of each run; the attacker's share is that under attack less the busier "
             "quiet run's.", "",
             "| round | attacker | quiet p99 µs | under churn p99 µs | quiet again p99 µs | ratio | keyholed cores quiet "
             "/ under churn | on the attacker | connections/s (refused, frame errors) | churn's CPU µs per connection |",
             "|---:|---|---:|---:|---:|---:|---|---:|---|---:|"]
    for number, outcome in enumerate(outcomes, 1):
        for attacked in outcome["attacked"]:
            churn = attacked["churn"]
            lines.append(
                f"| {number} | {attacked['attacker']} | {outcome['quiet']['p99_us']} | {attacked['p99_us']} | "
                f"{outcome['quiet_after']['p99_us']} | {attacked['ratio']:.2f} | "
                f"{max(outcome['quiet']['cores'], outcome['quiet_after']['cores']):.3f} / {attacked['cores']:.3f} | "
                f"{attacked['attacker_cores']:.3f} | {churn['per_second']} ({churn['refused']}, {churn['frame_errors']}) | "
                f"{churn['cpu_us_per_connection']} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4, help="measured seconds per run (after 1 s of warm-up)")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="keyhole-churn.")
    outcomes = churn_rounds(directory, options.seconds, options.rounds)
    print("\n".join(["| goal | measured | met |", "|---|---|---|"] + goal_rows(outcomes) + churn_section(outcomes)))


if __name__ == "__main__":
    main()
