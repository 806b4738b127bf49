#!/usr/bin/env python3
"""A throwaway PostgreSQL cluster for tests, driven over stdin like Protocol/testing's harness.

    python3 Scripts/pg_cluster.py [--tcp] [--bin DIR]

Runs Debian's PostgreSQL (--bin, else the newest /usr/lib/postgresql/*/bin): initdb in a new
directory under /tmp, the server started with pg_ctl (which waits until it accepts connections) with
its socket in that directory. Without --tcp nothing listens on TCP (listen_addresses = ''); with
--tcp it also listens on a free 127.0.0.1 port, where only scram-sha-256 password logins are taken.
A role `keyhole` (LOGIN, the password printed) owns a database `keyhole`. Unix-socket logins are
trusted: the directory is the cluster's own, mode 0700. As root, every PostgreSQL program runs as
the `postgres` user (initdb refuses root) and the directory belongs to it.

When ready it prints one JSON line:

    {"dir": "/tmp/khpg...", "socket_dir": "/tmp/khpg...", "port": 5432x, "host": "127.0.0.1" or null,
     "user": "keyhole", "password": "...", "database": "keyhole", "superuser": "postgres", "pid": N}

Then commands, one per line, each answered with one JSON line:

- `stop`               pg_ctl stop -m fast. {"ok": true}
- `crash`              pg_ctl stop -m immediate: no shutdown checkpoint, as a power cut or kill -9
                       leaves it; the next start runs crash recovery. {"ok": true}
- `start`              pg_ctl start, waiting until it accepts connections. {"ok": true, "pid": N}
- `freeze` / `thaw`    SIGSTOP / SIGCONT to the postmaster and every process it started: the server
                       is there (connections are accepted by the kernel) but answers nothing. {"ok": true}
- `sql TEXT`           TEXT run by psql as the superuser on database keyhole. {"ok": true, "out": "..."}
                       or {"ok": false, "error": "..."}
- `dump`               pg_dump of database keyhole, plain SQL. {"ok": true, "out": "..."}
- `pid`                the postmaster's pid. {"pid": N}

At end of input (or `quit`): stopped (immediate) and its directory removed. Standard library only.
"""

import argparse
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

START_TIMEOUT = "120"  # seconds pg_ctl waits for the server to accept connections


class ClusterError(Exception):
    pass


def newest_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise ClusterError("PostgreSQL's server is not installed (no /usr/lib/postgresql/*/bin/initdb): "
                           "apt-get install postgresql")
    return os.path.dirname(found[-1])


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, bin_dir, tcp):
        self.bin = bin_dir
        self.tcp = tcp
        self.as_postgres = os.geteuid() == 0
        self.dir = tempfile.mkdtemp(prefix="khpg", dir="/tmp")
        os.chmod(self.dir, 0o700)
        if self.as_postgres:
            account = pwd.getpwnam("postgres")
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self.superuser = "postgres"
        else:
            self.superuser = pwd.getpwuid(os.geteuid()).pw_name
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.port = free_port()
        self.password = secrets.token_urlsafe(18)

    def run(self, program, *args, input_text=None, check=True):
        command = [os.path.join(self.bin, program), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, input=input_text, capture_output=True, text=True, cwd=self.dir)
        if check and done.returncode != 0:
            raise ClusterError(f"{program} {' '.join(args)}: exit {done.returncode}\n{done.stdout}{done.stderr}\n"
                               f"{self.server_log()}")
        return done

    def server_log(self):
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def init(self):
        # --no-sync: initdb's own fsync of every file it made is seconds of disk on a loaded machine,
        # and holds up every other test's fsync; the cluster is throwaway. The server keeps fsync on,
        # so what it acknowledges survives a crash, as the tests need.
        self.run("initdb", "-D", self.data, "-U", self.superuser, "--auth-local=trust",
                 "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
        listen = "127.0.0.1" if self.tcp else ""
        with open(os.path.join(self.data, "postgresql.conf"), "a", encoding="utf-8") as f:
            f.write(f"\nlisten_addresses = '{listen}'\nport = {self.port}\nunix_socket_directories = '{self.dir}'\n"
                    "max_connections = 60\nshared_buffers = 32MB\nfsync = on\nsynchronous_commit = on\n"
                    "password_encryption = 'scram-sha-256'\nlog_min_messages = warning\n")
        with open(os.path.join(self.data, "pg_hba.conf"), "w", encoding="utf-8") as f:
            f.write("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        self.start()
        quoted = self.password.replace("'", "''")
        self.sql(f"CREATE ROLE keyhole LOGIN PASSWORD '{quoted}'", database="postgres")
        self.sql("CREATE DATABASE keyhole OWNER keyhole", database="postgres")

    def start(self):
        self.run("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", START_TIMEOUT, "start")
        return self.pid()

    def stop(self, mode):
        self.run("pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", START_TIMEOUT, "stop")

    def pid(self):
        with open(os.path.join(self.data, "postmaster.pid"), encoding="ascii") as f:
            return int(f.readline())

    def processes(self):
        """The postmaster and its children (backends, checkpointer, ...)."""
        postmaster = self.pid()
        pids = [postmaster]
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == postmaster:
                pids.append(int(entry))
        return pids

    def signal_all(self, sig):
        for pid in self.processes():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def sql(self, text, database="keyhole"):
        done = self.run("psql", "-h", self.dir, "-p", str(self.port), "-U", self.superuser, "-d", database,
                        "-v", "ON_ERROR_STOP=1", "-X", "-q", "-A", "-t", "-c", text, check=False)
        if done.returncode != 0:
            raise ClusterError(done.stderr.strip() or done.stdout.strip())
        return done.stdout

    def dump(self):
        """pg_dump of database keyhole (schema and rows, plain SQL)."""
        return self.run("pg_dump", "-h", self.dir, "-p", str(self.port), "-U", self.superuser, "-d", "keyhole").stdout

    def remove(self):
        try:
            if os.path.exists(os.path.join(self.data, "postmaster.pid")):
                self.signal_all(signal.SIGCONT)
                self.stop("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def describe(self):
        return {"dir": self.dir, "socket_dir": self.dir, "port": self.port,
                "host": "127.0.0.1" if self.tcp else None, "user": "keyhole", "password": self.password,
                "database": "keyhole", "superuser": self.superuser, "pid": self.pid()}


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tcp", action="store_true", help="also listen on a loopback port (scram-sha-256)")
    parser.add_argument("--bin", help="the PostgreSQL programs' directory")
    options = parser.parse_args()
    cluster = Cluster(options.bin or newest_bin(), options.tcp)
    try:
        cluster.init()
        say(cluster.describe())
        for line in sys.stdin:
            words = line.strip()
            if not words:
                continue
            command, _, rest = words.partition(" ")
            try:
                if command == "stop":
                    cluster.stop("fast")
                    say({"ok": True})
                elif command == "crash":
                    cluster.stop("immediate")
                    say({"ok": True})
                elif command == "start":
                    say({"ok": True, "pid": cluster.start()})
                elif command == "freeze":
                    cluster.signal_all(signal.SIGSTOP)
                    say({"ok": True})
                elif command == "thaw":
                    cluster.signal_all(signal.SIGCONT)
                    say({"ok": True})
                elif command == "sql":
                    say({"ok": True, "out": cluster.sql(rest)})
                elif command == "dump":
                    say({"ok": True, "out": cluster.dump()})
                elif command == "pid":
                    say({"pid": cluster.pid()})
                elif command == "quit":
                    break
                else:
                    say({"ok": False, "error": f"unknown command {command!r}"})
            except (ClusterError, OSError) as error:
                say({"ok": False, "error": str(error)})
    except ClusterError as error:
        print(f"pg_cluster: {error}", file=sys.stderr)
        return 1
    finally:
        cluster.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
