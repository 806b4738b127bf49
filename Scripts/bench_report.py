"""What the bench scripts that add to BENCHMARKS.md share: a process's CPU time from /proc, and the
replacement of a script's own section of BENCHMARKS.md and member of BENCHMARKS.json."""

import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Each process's threads as last read: pid -> {tid: run time in ns}.
_SEEN = {}


def cpu_ns(pid):
    """CPU time process pid has used so far, every thread, in nanoseconds (schedstat's first field).

    A thread that has ended keeps the time it had when last read: a plain sum over the threads alive
    at each reading would drop an ended thread's whole life from the second one (libdispatch's workers
    come and go), making a difference of two readings too small, even negative. What a thread ran
    between its last reading and its end is not counted."""
    seen = _SEEN.setdefault(pid, {})
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                seen[task] = int(f.read().split()[0])
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return sum(seen.values())


def write(section, heading, member, results, out=None):
    """Writes `section` (starting with its `## heading` line) to `out` alone, or in place of an earlier
    run's section under the same heading at the end of BENCHMARKS.md, with `results` as BENCHMARKS.json's
    `member` (Scripts/bench.py writes both files anew; the other scripts add to them)."""
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(section)
        return
    path = os.path.join(ROOT, "BENCHMARKS.md")
    with open(path, encoding="utf-8") as f:
        report = f.read()
    # A section from an earlier run is replaced, not repeated.
    start = report.find(f"\n## {heading}\n")
    if start >= 0:
        end = report.find("\n## ", start + 1)
        report = report[:start] + (report[end:] if end >= 0 else "\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write(report.rstrip("\n") + "\n" + section)
    path = os.path.join(ROOT, "BENCHMARKS.json")
    with open(path, encoding="utf-8") as f:
        everything = json.load(f)
    everything[member] = results
    with open(path, "w", encoding="utf-8") as f:
        json.dump(everything, f, indent=1, sort_keys=True)
