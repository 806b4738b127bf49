#!/usr/bin/env python3
"""A real keyholed for a client's tests, restarted on command the way systemd restarts it.

    python3 keyholed_harness.py [--keyholed PATH] [--config-extra TOML]

Starts keyholed (--keyholed, else $KEYHOLED, else <repo>/.build/debug/keyholed) in a fresh directory
under /tmp, with debug operations on, a clock fixed at a real Sign in with Apple identity token's
issue time and that token's issuer configured (issuer "apple"), so that token.verify accepts it.
When keyholed is ready the harness prints one JSON line on stdout:

    {"socket": "/tmp/kh.../k.sock", "dir": "/tmp/kh...", "token": "<identity token>",
     "issuer": "apple", "sub": "<the token's sub>", "audience": "<its aud>"}

The harness holds the listening socket itself, as systemd's keyholed.socket does, and hands it to
each keyholed it starts (LISTEN_FDS=1, LISTEN_FDNAMES=keyhole, LISTEN_PID). systemd-socket-activate
cannot play that part: it execs keyholed, so its socket dies with the first one. Commands, one per
line on stdin, each answered with one JSON line on stdout:

- restart        Stop keyholed (SIGTERM, exit status 0 required) and start a new one on the same
                 socket: clients that connect meanwhile wait in the backlog. {"ok": true}
- bounce MS      Close the socket and remove its file, then stop keyholed (as stopping
                 keyholed.socket and keyholed.service together does: no connection waits in a
                 backlog that is about to go), leave it gone for MS milliseconds (the outage:
                 connects fail with ENOENT), then bind it again and start keyholed. {"ok": true}
- chaos N MS     In the background: N cycles, alternately restart and bounce MS, each begun when
                 the previous keyholed has been up for UP ms (--chaos-up, default 300), so that a
                 request sent again after one restart is not caught by the next. Answered {"ok": true} at once, then
                 {"chaos": "done", "cycles": N} when the last keyholed is ready (or
                 {"chaos": "failed", "error": "..."}). Tests run their loop until that line.
- pid            The running keyholed's process id, for a benchmark that reads its CPU time from
                 /proc. {"pid": N}
- stop           Stop keyholed and exit; also at end of input. Exit status 0 only if every keyholed
                 exited 0 after SIGTERM.

An `[apple]` section in --config-extra that sets no team_id gets code exchange added (a team key
and a store key made in the directory, team_id HARNESS001, key_id HARNESSK01): what
`apple.authorize` and the web pages need. Unless the section names an endpoint, Apple's is
http://127.0.0.1:9 (the discard port, which refuses connections): authorization URLs start there,
and a code exchange, a revocation or a transfer answers upstream_unavailable without any test
reaching the real Apple.

Standard library and the openssl command. keyholed's log is in DIR/keyholed.log; on failure it is
copied to stderr.
"""

import argparse
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
APPLE_FIXTURES = os.path.join(REPO_ROOT, "Tests", "KeyholeJOSETests", "Fixtures", "apple")
TOKEN_FILE = os.path.join(APPLE_FIXTURES, "apple_token_4.jwt")
JWKS_FILE = os.path.join(APPLE_FIXTURES, "apple_jwks_panva-wellknown-20241001.json")
READY_TIMEOUT = 60.0
UNREACHABLE_APPLE = "http://127.0.0.1:9"  # Apple's endpoint under the harness: connections are refused


class HarnessError(Exception):
    pass


def claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


class Harness:
    def __init__(self, binary, extra_config):
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="kh", dir="/tmp")  # socket paths must stay short
        self.socket_path = os.path.join(self.dir, "k.sock")
        self.log_path = os.path.join(self.dir, "keyholed.log")
        with open(TOKEN_FILE, encoding="utf-8") as f:
            self.token = "".join(f.read().split())
        self.claims = claims(self.token)
        aud = self.claims["aud"]
        self.audience = aud if isinstance(aud, str) else aud[0]
        self.config_path = os.path.join(self.dir, "keyholed.toml")
        extra_config = self.with_code_exchange(extra_config)
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(f'[[issuer]]\nname = "apple"\npreset = "apple"\njwks_uri = "{JWKS_FILE}"\n'
                    f'audiences = ["{self.audience}"]\n\n{extra_config}\n')
        self.listener = None
        self.proc = None
        self.failed_exits = []
        self.lock = threading.Lock()  # whole stdout lines: chaos reports from its own thread

    def with_code_exchange(self, extra_config):
        """An [apple] section of extra_config without team_id, with code exchange added: a team key
        (a fresh P-256 key, by openssl) and a store key made here, so that the web flow can start;
        and unless it names one, an endpoint no call reaches."""
        lines = extra_config.split("\n")
        if "[apple]" not in [line.strip() for line in lines] or re.search(r"^\s*team_id\s*=", extra_config, re.M):
            return extra_config
        team_key = os.path.join(self.dir, "AuthKey_HARNESSK01.p8")
        store_key = os.path.join(self.dir, "store.key")
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", team_key],
                       check=True, capture_output=True)
        with open(store_key, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(team_key, 0o600)
        os.chmod(store_key, 0o600)
        added = ['team_id = "HARNESS001"', 'key_id = "HARNESSK01"', f'private_key_file = "{team_key}"',
                 f'store_key_file = "{store_key}"']
        if not re.search(r"^\s*endpoint\s*=", extra_config, re.M):
            added.append(f'endpoint = "{UNREACHABLE_APPLE}"')
        at = [line.strip() for line in lines].index("[apple]") + 1
        return "\n".join(lines[:at] + added + lines[at:])

    def say(self, message):
        with self.lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def bind(self):
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.socket_path)
        listener.listen(1024)
        self.listener = listener

    def unbind(self):
        self.listener.close()
        self.listener = None
        os.unlink(self.socket_path)

    def start(self):
        fd = self.listener.fileno()
        log = open(self.log_path, "ab")
        env = dict(os.environ, LISTEN_FDS="1", LISTEN_FDNAMES="keyhole")
        # LISTEN_PID must be keyholed's own pid: a shell sets it to its own and execs keyholed.
        cmd = ["/bin/sh", "-c", 'exec 3<&"$KH_FD"; export LISTEN_PID=$$; exec "$@"',
               "sh", self.binary, "--config", self.config_path, "--socket", self.socket_path,
               "--state-dir", os.path.join(self.dir, "state"), "--log-level", "info",
               "--enable-debug-ops", "--fixed-clock", str(self.claims["iat"] + 60)]
        env["KH_FD"] = str(fd)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.PIPE,
                                     env=env, pass_fds=(fd,))
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT
        ready = False
        lines = []
        # Read keyholed's stderr until its ready line, then keep copying it to the log in a thread.
        while time.monotonic() < deadline:
            raw = self.proc.stderr.readline()
            if not raw:
                break
            lines.append(raw)
            if b"keyholed.ready" in raw:
                ready = True
                break
        with open(self.log_path, "ab") as out:
            out.writelines(lines)
        threading.Thread(target=self.copy_log, args=(self.proc.stderr,), daemon=True).start()
        if not ready:
            self.proc.kill()
            self.proc.wait()
            raise HarnessError(f"keyholed did not get ready (exit status {self.proc.returncode})")

    def copy_log(self, pipe):
        with open(self.log_path, "ab") as out:
            for raw in pipe:
                out.write(raw)
                out.flush()

    def stop(self):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(READY_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            status = self.proc.wait()
        if status != 0:
            self.failed_exits.append(status)
        self.proc = None

    def restart(self):
        self.stop()
        self.start()

    def bounce(self, ms):
        self.unbind()
        self.stop()
        time.sleep(ms / 1000)  # the outage itself, not a wait for anything
        self.bind()
        self.start()

    def chaos(self, cycles, ms, up_ms):
        try:
            for n in range(cycles):
                time.sleep(up_ms / 1000)  # keyholed's time up between restarts, not a wait for anything
                if n % 2 == 0:
                    self.restart()
                else:
                    self.bounce(ms)
            self.say({"chaos": "done", "cycles": cycles})
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails
            self.say({"chaos": "failed", "error": str(e)})

    def dump_log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                sys.stderr.write(f.read())
        except OSError:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keyholed", default=os.environ.get("KEYHOLED")
                        or os.path.join(REPO_ROOT, ".build", "debug", "keyholed"))
    parser.add_argument("--config-extra", default="", help="TOML appended to the configuration")
    parser.add_argument("--chaos-up", type=int, default=300, help="ms each keyholed is up during chaos")
    options = parser.parse_args()
    if not os.access(options.keyholed, os.X_OK):
        print(f"keyholed_harness: keyholed not found or not executable: {options.keyholed}", file=sys.stderr)
        return 2
    harness = Harness(os.path.abspath(options.keyholed), options.config_extra)
    chaos = None
    try:
        harness.bind()
        harness.start()
        harness.say({"socket": harness.socket_path, "dir": harness.dir, "token": harness.token,
                     "issuer": "apple", "sub": harness.claims["sub"], "audience": harness.audience})
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if chaos is not None and chaos.is_alive() and words[0] != "stop":
                harness.say({"ok": False, "error": "chaos is running"})
                continue
            if words[0] == "restart":
                harness.restart()
                harness.say({"ok": True})
            elif words[0] == "bounce":
                harness.bounce(int(words[1]))
                harness.say({"ok": True})
            elif words[0] == "chaos":
                chaos = threading.Thread(target=harness.chaos, args=(int(words[1]), int(words[2]), options.chaos_up),
                                         daemon=True)
                harness.say({"ok": True})
                chaos.start()
            elif words[0] == "pid":
                harness.say({"pid": harness.proc.pid})
            elif words[0] == "stop":
                break
            else:
                harness.say({"ok": False, "error": f"unknown command {words[0]!r}"})
        if chaos is not None:
            chaos.join()
        harness.stop()
    except (HarnessError, OSError) as e:
        print(f"keyholed_harness: {e}", file=sys.stderr)
        harness.dump_log()
        harness.stop()
        return 1
    finally:
        if harness.listener is not None:
            harness.listener.close()
    if harness.failed_exits:
        print(f"keyholed_harness: keyholed exited with {harness.failed_exits} after SIGTERM", file=sys.stderr)
        harness.dump_log()
        return 1
    shutil.rmtree(harness.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
