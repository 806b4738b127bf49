#!/usr/bin/env python3
"""Two keyholed binaries' instructions per request, counted by callgrind (issue 31).

    python3 Scripts/ab_instructions.py OLD NEW [--ops ping,session.get,token.verify] [--settings 16x8]

OLD and NEW are release keyholed binaries (copy .build/release/keyholed aside before the change).

ab_bench.py measures CPU time side by side, and on this virtual machine its run-to-run spread is
2-3 %: a change worth 1-2 % takes eight rounds or more to show, and sometimes none settles it.
Instructions do not move with the machine. Each binary runs under valgrind's callgrind, which
counts every instruction keyholed executes in user space (its own code, the Swift runtime, libc,
libcrypto; not the kernel's), with counting switched on only while lean-load drives one op at one
setting. The count over the requests answered is the figure: the same binary measured twice gave
5 734 and 5 733 instructions per ping at 16 x 8.

What it does not show: the cost of an instruction. An atomic reference count, a cache miss or a
system call costs far more time than an addition, so a cut in instructions is a cut in CPU only
roughly; judge time with ab_bench.py. Under callgrind keyholed runs about fifty times slower, one
thread at a time, so the client always has requests waiting: a pass finds every connection ready, at
any depth, as on a loaded server.

Each keyholed holds 2 000 sessions of 200 users and one issuer (fewer than ab_bench's 100 000: they
are made through keyholed under callgrind), fsync "always". Valgrind 3.19, Debian 12's, stops with an
internal error on a Swift program whose main is async; .build/lean/dispatch_main_shim.so
(Scripts/lean/dispatch_main_shim.c, make build-lean) is preloaded to avoid that, and its comment
says why the count is the shipped build's. Debug information is stripped from a copy of each binary
first: valgrind 3.19 cannot read the DWARF 5 that Swift writes (the symbol table, kept, names the
functions). --keep DIR keeps callgrind's files, for `callgrind_annotate` (one per op and setting).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_bench  # noqa: E402
import bench  # noqa: E402
import lean_bench  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM = os.path.join(ROOT, ".build", "lean", "dispatch_main_shim.so")
OPS = ("ping", "session.get", "token.verify")


def totals(path):
    """The instructions a callgrind output file counts (its `totals:` line); ValueError when it has
    none (a dump cut short, or not callgrind's)."""
    with open(path) as f:
        for line in f:
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise ValueError(f"{path} has no totals: line")


def part_number(path):
    """The `part:` a callgrind dump says it is, or None."""
    with open(path) as f:
        for line in f:
            if line.startswith("part:"):
                return int(line.split()[1])
            if line.startswith("totals:"):
                return None
    return None


def per_request(instructions, answered):
    if answered <= 0:
        raise ValueError("no request was answered")
    return instructions / answered


def report_line(op, setting, old, new):
    connections, depth = setting
    return (f"{op:14} {connections:3} x {depth}: old {old:8.0f}, new {new:8.0f} instructions per request; "
            f"new/old {new / old:.4f} ({new - old:+.0f})")


class Counted(lean_bench.Keyholed):
    """A keyholed under callgrind, counting nothing until asked (`counting`)."""

    def __init__(self, directory, name, binary, config):
        super().__init__(directory, name, config)
        self.binary = os.path.join(self.directory, "keyholed")
        subprocess.run(["objcopy", "--strip-debug", binary, self.binary], check=True)
        self.out = os.path.join(self.directory, "callgrind.out")
        self.parts = 0

    def start(self):
        env = dict(os.environ, LD_PRELOAD=SHIM)
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self.out}",
                 self.binary, "--config", self.config, "--socket", self.socket,
                 "--state-dir", os.path.join(self.directory, "state"), "--log-level", "info"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        try:
            # Valgrind translates a release Swift binary's start-up slowly on a busy machine.
            bench.wait_for_socket(self.socket, self.process, seconds=300)
        except BaseException:
            self.stop()
            raise
        return self

    def control(self, *arguments):
        if self.process.poll() is not None:
            raise Failure(f"keyholed under callgrind exited with {self.process.returncode}", self)
        done = subprocess.run(["callgrind_control", *arguments, str(self.pid)], capture_output=True, text=True)
        if done.returncode != 0:
            raise Failure(f"callgrind_control {' '.join(arguments)} failed ({done.returncode}): {done.stderr.strip()}", self)

    def counting(self, load):
        """Runs `load()` with counting on; its result and the instructions counted meanwhile."""
        self.control("-i", "on")
        result = load()
        self.control("-i", "off")
        # A dump writes what was counted since the last one to the next part file (callgrind numbers
        # them from 1), then starts afresh.
        self.control("-d")
        self.parts += 1
        path = f"{self.out}.{self.parts}"
        if not os.path.exists(path) or part_number(path) != self.parts:
            raise Failure(f"callgrind's dump is not {path} (part {self.parts})", self)
        return result, totals(path)


class Failure(Exception):
    """A measurement that went wrong, with the end of valgrind's and keyholed's log."""

    def __init__(self, message, side):
        try:
            with open(side.log, errors="replace") as f:
                tail = "".join(f.readlines()[-50:])
        except OSError:
            tail = "(no log)"
        super().__init__(f"{message}\n--- {side.log}, last lines:\n{tail}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", help="the keyholed binary before the change")
    parser.add_argument("new", help="the keyholed binary after it")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)}")
    parser.add_argument("--settings", default="16x8", help="connections x depth, comma-separated")
    parser.add_argument("--seconds", type=float, default=8.0, help="of load counted, per op and setting")
    parser.add_argument("--keep", help="a directory to copy callgrind's output files into")
    options = parser.parse_args()
    ops = options.ops.split(",")
    if any(op not in OPS for op in ops):
        parser.error(f"--ops: each of {', '.join(OPS)}")
    settings = ab_bench.parse_settings(options.settings)
    for binary in (options.old, options.new):
        if not os.access(binary, os.X_OK):
            parser.error(f"not an executable: {binary}")
    if not os.access(lean_bench.LEAN_LOAD, os.X_OK) or not os.access(SHIM, os.R_OK):
        parser.error(f"{lean_bench.LEAN_LOAD} or {SHIM} is missing: make build-lean")
    for tool in ("valgrind", "callgrind_control", "objcopy"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is missing: apt-get install valgrind binutils")

    directory = tempfile.mkdtemp(prefix="keyhole-abi-")
    figures = {}
    try:
        tokens, config = ab_bench.tokens_and_config(directory)
        for name, binary in (("old", options.old), ("new", options.new)):
            side = Counted(directory, name, binary, config).start()
            try:
                sessions = os.path.join(directory, f"sessions-{name}.txt")
                subprocess.run([sys.executable, os.path.join(ROOT, "Scripts", "make-bench-sessions.py"), "--socket", side.socket,
                                "--count", "2000", "--users", "200", "--issuer", "local", "--out", sessions],
                               check=True, capture_output=True)
                lean_bench.snapshot(side.socket)
                arguments = {"ping": (), "session.get": ("--op", "session.get", "--args", sessions),
                             "token.verify": ("--op", "token.verify", "--args", os.path.join(tokens, "tokens.txt"))}
                for connections, depth in settings:
                    for op in ops:
                        argv = [lean_bench.LEAN_LOAD, "--socket", side.socket, "--connections", str(connections),
                                "--depth", str(depth), "--warmup", "0", *arguments[op]]

                        def load(seconds):
                            done = subprocess.run([*argv, "--seconds", str(seconds)], capture_output=True, text=True)
                            if done.returncode != 0:
                                raise Failure(f"lean-load failed ({done.returncode}): {done.stderr.strip()}", side)
                            result = json.loads(done.stdout)
                            if result["failed"]:
                                raise Failure(f"{name} failed {result['failed']} {op} requests", side)
                            return result

                        load(1.5)  # uncounted: the first requests of an op make its caches and buffers
                        result, instructions = side.counting(lambda: load(options.seconds))
                        figures[(name, op, (connections, depth))] = per_request(instructions, result["answered"])
                        if options.keep:
                            os.makedirs(options.keep, exist_ok=True)
                            shutil.copy(f"{side.out}.{side.parts}",
                                        os.path.join(options.keep, f"callgrind.{name}.{op}.{connections}x{depth}"))
                        print(f"ab_instructions: {name} {op} {connections} x {depth}: {result['answered']} answered, "
                              f"{figures[(name, op, (connections, depth))]:.0f} per request", file=sys.stderr, flush=True)
            finally:
                side.stop()
        for setting in settings:
            for op in ops:
                print(report_line(op, setting, figures[("old", op, setting)], figures[("new", op, setting)]))
    except Failure as failure:
        # The logs and callgrind's files are kept: they are what says why.
        raise SystemExit(f"ab_instructions: {failure}\n(kept: {directory})")
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
