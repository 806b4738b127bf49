"""The processes the proxy tests run: keyholed (through the harness), the upstream app, nginx, Caddy.

Each is a real child process with its own files in a temporary directory, started on free loopback
ports and waited for by connecting (bounded attempts), stopped with SIGTERM. Standard library only.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
SNIPPETS = os.path.join(REPO_ROOT, "packaging", "proxies")
HARNESS = os.path.join(REPO_ROOT, "Protocol", "testing", "keyholed_harness.py")
PYTHON_CLIENT = os.path.join(REPO_ROOT, "Protocol", "clients", "python")
# The keyholed under test: $KEYHOLED, else the lead's debug build in the main checkout.
KEYHOLED = os.environ.get("KEYHOLED") or os.path.join(REPO_ROOT, ".build", "debug", "keyholed")

READY_ATTEMPTS = 1000  # connection attempts, 10 ms apart: 10 s for a process to listen
STOP_TIMEOUT = 30.0

sys.path.insert(0, PYTHON_CLIENT)
import keyhole  # noqa: E402  (the repository's Python client)


class RigError(Exception):
    pass


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_until(connect, proc, what, log_path):
    """Call connect() until it succeeds; fail at once if proc ends, or after READY_ATTEMPTS."""
    for _ in range(READY_ATTEMPTS):
        if proc is not None and proc.poll() is not None:
            raise RigError(f"{what} exited with status {proc.returncode}:\n{read_text(log_path)}")
        try:
            connect()
            return
        except OSError:
            time.sleep(0.01)  # the interval between attempts, not a wait for the event itself
    raise RigError(f"{what} did not listen after {READY_ATTEMPTS} attempts:\n{read_text(log_path)}")


def connect_tcp(port):
    def attempt():
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return attempt


def connect_unix(path):
    def attempt():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
    return attempt


def stop_process(proc):
    if proc is None or proc.poll() is not None:
        return proc.returncode if proc is not None else None
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RigError(f"process {proc.args[0]} did not stop within {STOP_TIMEOUT} s of SIGTERM")


def request(port, method, target, headers=(), body=None, timeout=10):
    """One HTTP/1.1 request to 127.0.0.1:port, headers sent exactly as given (a list of pairs: names
    with underscores, odd case and repeats go out as they are). Returns (status, [(name, value)], body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", f"127.0.0.1:{port}")
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        data = response.read()
        return response.status, response.getheaders(), data
    finally:
        conn.close()


def unix_request(path, target, timeout=10, headers=()):
    """GET target over the Unix socket at path, with `headers` (pairs); returns (status, [(name, value)], body)."""
    class UnixConnection(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(path)
    conn = UnixConnection("keyholed", timeout=timeout)
    try:
        conn.request("GET", target, headers=dict(headers))
        response = conn.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        conn.close()


class Keyholed:
    """keyholed under Protocol/testing/keyholed_harness.py, with an [http] listener on a Unix socket."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.http_socket = os.path.join(workdir, "http.sock")
        self.stderr_path = os.path.join(workdir, "harness.stderr")
        self.proc = None
        self.info = None
        self.client = None

    def start(self):
        if not os.access(KEYHOLED, os.X_OK):
            raise RigError(f"keyholed not found or not executable: {KEYHOLED} (set KEYHOLED)")
        extra = f'[http]\nsocket = "{self.http_socket}"\n'
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([sys.executable, HARNESS, "--keyholed", KEYHOLED, "--config-extra", extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RigError(f"keyholed_harness exited with status {self.proc.returncode}:\n"
                           f"{read_text(self.stderr_path)}")
        self.info = json.loads(line)
        wait_until(connect_unix(self.http_socket), None, "keyholed's HTTP socket", self.log_path)
        self.client = keyhole.Client(self.info["socket"])

    @property
    def log_path(self):
        return os.path.join(self.info["dir"], "keyholed.log") if self.info else self.stderr_path

    def command(self, words):
        self.proc.stdin.write(words + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RigError(f"keyholed_harness ended on {words!r}:\n{read_text(self.stderr_path)}")
        return json.loads(line)

    def pid(self):
        return self.command("pid")["pid"]

    def kill_and_wait(self):
        """SIGTERM keyholed behind the harness's back (as a crash or `systemctl stop` would), and
        wait until it has exited: its process is a zombie of the harness, or gone."""
        pid = self.pid()
        os.kill(pid, signal.SIGTERM)
        for _ in range(int(STOP_TIMEOUT * 100)):
            try:
                with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                return
            if state in ("Z", "X"):
                return
            time.sleep(0.01)  # the interval between looks, not a wait for the exit itself
        raise RigError(f"keyholed (pid {pid}) still running {STOP_TIMEOUT} s after SIGTERM")

    def restart(self):
        """The harness's restart: keyholed stopped (if still running) and started again, ready."""
        answer = self.command("restart")
        if answer != {"ok": True}:
            raise RigError(f"restart: {answer}")
        wait_until(connect_unix(self.http_socket), None, "keyholed's HTTP socket", self.log_path)

    def stop(self):
        """Stop keyholed and the harness; the harness's exit status (0: every keyholed exited 0)."""
        if self.client is not None:
            self.client.close()
        if self.proc is None:
            return None
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        status = self.proc.wait(STOP_TIMEOUT * 2)
        self.proc.stdout.close()
        self.stderr.close()
        return status


class Upstream:
    """upstream.py as a child process: the application, logging each request that reaches it."""

    def __init__(self, workdir):
        self.log_path = os.path.join(workdir, "upstream.log")
        open(self.log_path, "w").close()
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "upstream.py"), "--log", self.log_path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RigError(f"upstream.py exited with status {self.proc.wait()}")
        self.port = json.loads(line)["port"]

    def requests(self):
        with open(self.log_path, encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def stop(self):
        self.proc.stdin.close()
        status = self.proc.wait(STOP_TIMEOUT)
        self.proc.stdout.close()
        return status


def fill(text, replacements, name):
    """The snippet with each placeholder replaced; each must be there, else the test would not test it."""
    for old, new in replacements:
        if old not in text:
            raise RigError(f"{name}: placeholder {old!r} not found: the snippet changed, update the test")
        text = text.replace(old, new)
    return text


class Proxy:
    """A proxy child process with its files in self.dir."""

    dir = None
    proc = None

    def logs(self):
        """Everything the proxy wrote in its directory (logs), for a look for tokens."""
        texts = []
        for name in sorted(os.listdir(self.dir)):
            path = os.path.join(self.dir, name)
            if os.path.isfile(path) and not name.endswith(".conf") and name != "Caddyfile":
                texts.append(f"--- {name}\n{read_text(path)}")
        return "\n".join(texts)

    def stop(self):
        stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class Nginx(Proxy):
    """nginx in the foreground, one process, with packaging/proxies/nginx.conf filled in and included."""

    name = "nginx"

    def __init__(self, keyholed_socket, upstream_port, replacements=()):
        """`replacements`: more (old, new) changes to the snippet, each of which must apply."""
        self.dir = tempfile.mkdtemp(prefix="khnginx", dir="/tmp")
        self.port = free_port()
        self.error_log = os.path.join(self.dir, "error.log")
        snippet = fill(read_text(os.path.join(SNIPPETS, "nginx.conf")), [
            ("listen 80;", f"listen 127.0.0.1:{self.port};"),
            ("unix:/run/keyhole/http.sock", f"unix:{keyholed_socket}"),
            ("http://127.0.0.1:8000", f"http://127.0.0.1:{upstream_port}"),
            *replacements,
        ], "nginx.conf")
        with open(os.path.join(self.dir, "keyhole.conf"), "w", encoding="utf-8") as f:
            f.write(snippet)
        d = self.dir
        self.conf = os.path.join(d, "nginx.conf")
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write(f"""daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {self.error_log} info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    include {d}/keyhole.conf;
}}
""")
        self.proc = None

    def command(self, *extra):
        return ["nginx", "-p", self.dir, "-c", self.conf, "-e", self.error_log, *extra]

    def check(self):
        """`nginx -t` on the configuration: (exit status, its output)."""
        done = subprocess.run(self.command("-t"), capture_output=True, text=True)
        return done.returncode, done.stdout + done.stderr

    def start(self):
        with open(os.path.join(self.dir, "stdout"), "wb") as out:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        wait_until(connect_tcp(self.port), self.proc, "nginx", self.error_log)


class Caddy(Proxy):
    """`caddy run` with packaging/proxies/Caddyfile filled in, behind a test-only global block."""

    name = "caddy"

    def __init__(self, keyholed_socket, upstream_port, replacements=(), host=None):
        """`host`: the site's name (requests must say it in Host), served on loopback only; else the
        site is 127.0.0.1:port itself. `replacements` as for Nginx."""
        self.dir = tempfile.mkdtemp(prefix="khcaddy", dir="/tmp")
        self.port = free_port()
        self.log = os.path.join(self.dir, "caddy.log")
        address = f"http://{host}:{self.port} {{\n\tbind 127.0.0.1" if host else f"http://127.0.0.1:{self.port} {{"
        site = fill(read_text(os.path.join(SNIPPETS, "Caddyfile")), [
            ("app.example.com {", address),
            *replacements,
            ("unix//run/keyhole/http.sock", f"unix/{keyholed_socket}"),
            ("127.0.0.1:8000", f"127.0.0.1:{upstream_port}"),
        ], "Caddyfile")
        # The test's own: no admin endpoint, no certificates, nothing written outside self.dir.
        global_options = f"{{\n\tadmin off\n\tauto_https off\n\tstorage file_system {self.dir}/data\n}}\n\n"
        self.conf = os.path.join(self.dir, "Caddyfile")
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write(global_options + site)
        self.env = dict(os.environ, HOME=self.dir, XDG_DATA_HOME=self.dir, XDG_CONFIG_HOME=self.dir)
        self.proc = None

    def check(self):
        """`caddy validate` on the configuration: (exit status, its output)."""
        done = subprocess.run(["caddy", "validate", "--config", self.conf, "--adapter", "caddyfile"],
                              capture_output=True, text=True, env=self.env)
        return done.returncode, done.stdout + done.stderr

    def start(self):
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["caddy", "run", "--config", self.conf, "--adapter", "caddyfile"],
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        wait_until(connect_tcp(self.port), self.proc, "caddy", self.log)
