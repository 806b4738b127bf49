#!/usr/bin/env python3
"""Bytes written per session.create on a large store, with snapshots taken at a fixed size of log
against in proportion to the last snapshot (issue 32, item 6: `[storage] snapshot_wal_percent`).

For each setting (`snapshot_wal_percent = 0`, the fixed `snapshot_wal_bytes` of before, and the
default 100): a keyholed of its own (release build, fsync "batch") is filled with --sessions sessions
by lean-load (session.create, 16 connections at depth 8), a snapshot is taken (`admin.snapshot`), then
--creates more sessions are created and the bytes keyholed caused to be written to storage
(/proc/PID/io write_bytes: the log and the snapshots, less what was deleted before write-back,
cancelled_write_bytes) are divided by the sessions created. The creates go on past --creates until
keyholed has taken a snapshot by itself, so that the window holds at least one whole cycle of log and
snapshot whatever the setting (with 100 %, the log must grow to the size of the snapshot taken at the
start: about twice as many creates as sessions, at about 110 bytes of log per create and 180 bytes
of snapshot per session).

    swift build -c release && make build-lean && python3 Scripts/snapshot_bench.py [--sessions 5000000]
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Protocol", "clients", "python"))
import bench  # noqa: E402
import keyhole  # noqa: E402
import lean_bench  # noqa: E402


def io_bytes(pid):
    """Bytes `pid` caused to be written to storage, less those cancelled (files deleted while dirty)."""
    fields = {}
    with open(f"/proc/{pid}/io") as file:
        for line in file:
            name, value = line.split(":")
            fields[name] = int(value)
    return fields["write_bytes"] - fields["cancelled_write_bytes"]


def store_figures(client):
    store = client.call("stats")["store"]
    return store["sessions"], store["snapshots"], store.get("snapshot_at_wal_bytes"), store["wal_bytes"]


def create_until(keyholed, client, target, snapshots=None, seconds=5, limit_s=3600):
    """session.creates by lean-load in runs of `seconds` until the store holds `target` sessions and,
    with `snapshots`, until keyholed has taken that many since start; never past `limit_s`, nor
    while storage fails."""
    deadline = time.monotonic() + limit_s
    while True:
        sessions, taken, _, _ = store_figures(client)
        if sessions >= target and (snapshots is None or taken >= snapshots):
            return
        if client.call("stats")["store"]["failing"]:
            raise SystemExit("snapshot_bench: keyholed's storage is failing (disk full?)")
        if time.monotonic() > deadline:
            raise SystemExit(f"snapshot_bench: no snapshot after {limit_s} s of creates")
        lean_bench.lean_load(keyholed.socket, seconds, 16, 8, "--op", "session.create", "--keys", "1000000",
                             "--key-prefix", f"s{time.monotonic_ns()}")


def measure(directory, percent, sessions, creates):
    keyholed = bench.Keyholed(directory, f"percent-{percent}",
                              f'[storage]\nfsync = "batch"\nsnapshot_wal_percent = {percent}\n').start()
    try:
        # A snapshot of millions of sessions takes seconds: more than the client's default bound.
        client = keyhole.Client(keyholed.socket, timeout=600)
        create_until(keyholed, client, sessions)
        snapshot = client.call("admin.snapshot")
        before_sessions, before_snapshots, threshold, _ = store_figures(client)
        before_bytes = io_bytes(keyholed.process.pid)
        started = time.monotonic()
        # On until keyholed took a snapshot by itself: the window holds at least one whole cycle of
        # log and snapshot, whatever the setting.
        create_until(keyholed, client, before_sessions + creates, snapshots=before_snapshots + 1)
        after_sessions, after_snapshots, after_threshold, wal_bytes = store_figures(client)
        written = io_bytes(keyholed.process.pid) - before_bytes
        created = after_sessions - before_sessions
        result = {"snapshot_wal_percent": percent, "sessions_wanted": sessions, "creates_wanted": creates,
                  "sessions_at_start": before_sessions, "created": created,
                  "snapshot_bytes": snapshot["bytes"], "threshold_bytes": threshold, "snapshots_taken": after_snapshots - before_snapshots,
                  "wal_bytes_left": wal_bytes, "threshold_after": after_threshold, "bytes_written": written,
                  "bytes_per_create": round(written / created), "seconds": round(time.monotonic() - started, 1)}
        print(json.dumps(result), flush=True)
        return result
    finally:
        keyholed.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5_000_000)
    parser.add_argument("--creates", type=int, default=9_000_000)
    parser.add_argument("--out", help="write the results here as JSON")
    parser.add_argument("--percents", default="0,100", help="the settings of snapshot_wal_percent to measure")
    options = parser.parse_args()
    for tool in (os.path.join(bench.RELEASE, "keyholed"), lean_bench.LEAN_LOAD):
        if not os.access(tool, os.X_OK):
            raise SystemExit(f"snapshot_bench: {tool} missing: swift build -c release && make build-lean")
    results = []
    for percent in (int(value) for value in options.percents.split(",")):
        with tempfile.TemporaryDirectory(prefix="keyhole-snapshot-bench.") as directory:
            results.append(measure(directory, percent, options.sessions, options.creates))
    if options.out:
        with open(options.out, "w") as file:
            json.dump(results, file, indent=1)


if __name__ == "__main__":
    main()
