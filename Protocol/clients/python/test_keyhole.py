"""Tests for keyhole.py against a real keyholed, started as a child process.

Run from the repository root:

    KEYHOLED=.build/debug/keyholed python3 -m unittest discover -s Protocol/clients/python -v

The binary is $KEYHOLED if set, else <repo root>/.build/debug/keyholed. Every test class starts its
own keyholed in a fresh directory under /tmp, waits for its `keyholed.ready` log line, and at the end
stops it with SIGTERM and requires exit status 0.
"""

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

# Only the tests use jsonschema (make deps installs it); keyhole.py itself is standard library only.
import jsonschema
import referencing

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import keyhole  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
VECTORS = os.path.join(REPO_ROOT, "Protocol", "vectors")
SCHEMAS = os.path.join(REPO_ROOT, "Protocol", "schema")


def _load_validators():
    """One validator per schema in Protocol/schema, sharing a registry so cross-file $refs resolve."""
    schemas = {}
    for name in os.listdir(SCHEMAS):
        if name.endswith(".schema.json"):
            with open(os.path.join(SCHEMAS, name), encoding="utf-8") as f:
                schemas[name[: -len(".schema.json")]] = json.load(f)
    registry = referencing.Registry().with_resources(
        (schema["$id"], referencing.Resource.from_contents(schema)) for schema in schemas.values()
    )
    validators = {}
    for name, schema in schemas.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        validators[name] = jsonschema.Draft202012Validator(schema, registry=registry)
    return validators


VALIDATORS = _load_validators()
DEFAULT_MAX_FRAME_BYTES = 65536
# keyholed accepts [server] max_frame_bytes from 256 to 16 MiB (a smaller value is a configuration
# error), so the framing vectors written for a smaller limit ("small limit", max_frame_bytes = 16)
# cannot be run against a server and are skipped.
MIN_CONFIGURABLE_MAX_FRAME_BYTES = 256
READY_TIMEOUT = 30  # seconds for keyholed to log keyholed.ready, and to exit after SIGTERM
IO_TIMEOUT = 10  # seconds any single socket operation of a test may take


def keyholed_binary():
    path = os.path.abspath(os.environ.get("KEYHOLED")
                           or os.path.join(REPO_ROOT, ".build", "debug", "keyholed"))
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise AssertionError(f"keyholed binary not found or not executable: {path} "
                             "(build it with `swift build`, or set KEYHOLED to its path)")
    return path


class Keyholed:
    """A keyholed child process with its own directory, config, socket and state directory."""

    def __init__(self, debug_ops=False, config="", workdir=None, args=(), env=None):
        self.owns_dir = workdir is None
        self.dir = workdir or tempfile.mkdtemp(prefix="kh", dir="/tmp")  # socket paths <= 107 bytes
        self.socket_path = os.path.join(self.dir, "k.sock")
        config_path = os.path.join(self.dir, "keyholed.toml")
        with open(config_path, "w") as f:
            f.write(config)
        state = os.path.join(self.dir, "state")  # keyholed creates it
        self.cmd = [keyholed_binary(), "--config", config_path, "--socket", self.socket_path,
                    "--state-dir", state, "--log-level", "info"]
        if debug_ops:
            self.cmd.append("--enable-debug-ops")
        self.cmd += list(args)
        self.stderr_lines, self.stdout_lines = [], []
        self.ready = False
        self._ready_or_eof = threading.Event()
        self.returncode = None
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        # Drain both pipes in threads so that keyholed never blocks on a full pipe.
        self._threads = [threading.Thread(target=self._drain_stderr, daemon=True),
                         threading.Thread(target=self._drain, args=(self.proc.stdout,
                                                                    self.stdout_lines), daemon=True)]
        for t in self._threads:
            t.start()
        if not self._ready_or_eof.wait(READY_TIMEOUT) or not self.ready:
            self.proc.kill()
            self.proc.wait()
            self._join_output()
            if self.owns_dir:
                shutil.rmtree(self.dir, ignore_errors=True)
            raise AssertionError(f"keyholed did not log keyholed.ready within {READY_TIMEOUT} s "
                                 f"(exit status {self.proc.returncode})\n{self.output()}")

    def _join_output(self):
        for t in self._threads:
            t.join()
        self.proc.stdout.close()
        self.proc.stderr.close()

    def _drain(self, pipe, lines):
        for raw in pipe:
            lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def _drain_stderr(self):
        try:
            for raw in self.proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.stderr_lines.append(line)
                if "keyholed.ready" in line and not self.ready:
                    self.ready = True
                    self._ready_or_eof.set()
        finally:
            self._ready_or_eof.set()

    def output(self):
        return ("command: " + " ".join(self.cmd) + "\n--- stderr ---\n" + "\n".join(self.stderr_lines)
                + "\n--- stdout ---\n" + "\n".join(self.stdout_lines))

    def stop(self):
        """SIGTERM, wait for the exit, and return the exit status."""
        if self.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.returncode = self.proc.wait(READY_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.returncode = self.proc.wait()
                raise AssertionError(f"keyholed did not exit within {READY_TIMEOUT} s of SIGTERM\n"
                                     + self.output())
            finally:
                self._join_output()
                if self.owns_dir:
                    shutil.rmtree(self.dir, ignore_errors=True)
        return self.returncode

    def stop_and_check(self):
        rc = self.stop()
        if rc != 0:
            raise AssertionError(f"keyholed exited with status {rc} after SIGTERM, expected 0\n"
                                 + self.output())


class RawConnection:
    """A plain socket to keyholed, for sending arbitrary bytes."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(IO_TIMEOUT)
        self.sock.connect(path)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.sock.close()

    def send_frame(self, payload):
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)

    def _read_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise AssertionError(f"connection closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    def read_response(self):
        (length,) = struct.unpack(">I", self._read_exact(4))
        assert 1 <= length <= keyhole.MAX_FRAME_BYTES, f"response frame length {length}"
        msg = json.loads(self._read_exact(length).decode("utf-8"))
        assert isinstance(msg, dict), f"response is not an object: {msg!r}"
        # Every response any test reads must conform to the published schema.
        VALIDATORS["response"].validate(msg)
        return msg

    def assert_closed(self):
        """Assert that the server has closed the connection: recv returns b""."""
        try:
            data = self.sock.recv(1)
        except ConnectionResetError:
            # Linux reports ECONNRESET once when the peer closed an AF_UNIX stream socket with
            # bytes we sent still unread in it (the body of an oversized frame, bytes after a
            # zero length); the connection is closed all the same and the next recv returns b"".
            data = self.sock.recv(1)
        if data != b"":
            raise AssertionError(f"expected the server to close the connection, got {data!r}")

    def assert_ping(self, rid="after"):
        request = {"op": "ping"} if rid is None else {"op": "ping", "id": rid}
        self.send_frame(json.dumps(request, separators=(",", ":")).encode())
        resp = self.read_response()
        if not (resp.get("id") == rid and resp.get("ok") is True):
            raise AssertionError(f"ping {rid!r} on the same connection failed: {resp!r}")


def load_cases(name):
    with open(os.path.join(VECTORS, name), encoding="utf-8") as f:
        return json.load(f)["cases"]


def add_case_tests(cls, cases, check):
    """Add one test method per vector case, so that each shows up by name."""
    for case in cases:
        name = "test_" + re.sub(r"[^0-9a-z]+", "_", case["name"].lower()).strip("_")
        assert not hasattr(cls, name), f"duplicate case name {case['name']!r}"
        setattr(cls, name, lambda self, case=case: check(self, case))


class ServerTestCase(unittest.TestCase):
    debug_ops = False
    config = ""
    args = ()

    @classmethod
    def setUpClass(cls):
        cls.server = Keyholed(debug_ops=cls.debug_ops, config=cls.config, args=cls.args)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop_and_check()


# --- requests.json -----------------------------------------------------------------------------

class RetiredConnectionTests(unittest.TestCase):
    """A connection keyholed said shutting_down on is closed once no call waits on it."""

    def test_closed_when_idle_and_after_the_last_answer(self):
        ours, theirs = socket.socketpair()
        self.addCleanup(theirs.close)
        idle = keyhole._Connection(ours)
        idle.retire()
        self.assertEqual(ours.fileno(), -1, "nobody waited on it: closed at once")

        ours, theirs = socket.socketpair()
        self.addCleanup(theirs.close)
        conn = keyhole._Connection(ours)
        still_open = []

        def keyholed():
            # Retired while the request waits for its answer: kept open until the answer is read.
            theirs.recv(65536)
            conn.retire()
            still_open.append(ours.fileno() >= 0)
            answer = json.dumps({"id": 7, "ok": True, "result": {}}).encode()
            theirs.sendall(struct.pack(">I", len(answer)) + answer)
        server = threading.Thread(target=keyholed)
        server.start()
        self.assertEqual(conn.request(7, keyhole.encode_frame({"id": 7, "op": "ping"}), time.monotonic() + 5)["ok"], True)
        server.join()
        self.assertEqual(still_open, [True])
        self.assertEqual(ours.fileno(), -1, "the last answer read: closed")


GOODBYE = {"id": None, "ok": False, "error": {
    "code": "shutting_down", "message": "keyholed is shutting down: requests on this connection still "
    "unanswered were not read; send them again on a new connection"}}


def _read_frames(sock, n):
    """Read n request frames from sock (blocking) and return them as dicts."""
    requests, data = [], b""
    while len(requests) < n:
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">I", data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError(f"end of stream after {len(requests)} of {n} requests")
            data += chunk
        (length,) = struct.unpack_from(">I", data)
        requests.append(json.loads(data[4:4 + length]))
        data = data[4 + length:]
    return requests


class GoodbyeConnectionTests(unittest.TestCase):
    """keyholed's goodbye (a null id, shutting_down) on one _Connection: every request it left
    unanswered was never read, so it ends as _NotSent (Client.call sends it on a new connection
    whatever its operation), never as _Lost (connection_lost for a change)."""

    def setUp(self):
        self.ours, self.theirs = socket.socketpair()
        self.addCleanup(self.theirs.close)
        self.conn = keyhole._Connection(self.ours)
        self.addCleanup(self.ours.close)

    def request(self, rid, op="session.create"):
        frame = keyhole.encode_frame({"id": rid, "op": op, "args": {"sub": f"s{rid}"}, "v": 1})
        return self.conn.request(rid, frame, time.monotonic() + 5)

    def in_thread(self, rid, outcomes):
        def run():
            try:
                outcomes[rid] = self.request(rid)
            except Exception as e:  # noqa: BLE001 - the outcome under test
                outcomes[rid] = e
        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def test_goodbye_after_an_answer_turns_the_other_request_away_unread(self):
        outcomes = {}
        threads = [self.in_thread(1, outcomes), self.in_thread(2, outcomes)]
        self.assertEqual(sorted(r["id"] for r in _read_frames(self.theirs, 2)), [1, 2])
        # keyholed answers the one it read, then says goodbye in the same write, and closes.
        self.theirs.sendall(keyhole.encode_frame({"id": 1, "ok": True, "result": {"id": "A"}})
                            + keyhole.encode_frame(GOODBYE))
        self.theirs.close()
        for thread in threads:
            thread.join(10)
        self.assertEqual(outcomes[1], {"id": 1, "ok": True, "result": {"id": "A"}})
        self.assertIsInstance(outcomes[2], keyhole._NotSent)
        self.assertFalse(self.conn.usable())
        self.assertEqual(self.ours.fileno(), -1, "nobody waits on it any more: closed")

    def test_goodbye_read_before_end_of_stream_even_if_the_request_was_written(self):
        # The goodbye came while the connection was idle; keyholed still has it open (its sending
        # side shut), so the next request is written and then the goodbye found.
        self.theirs.sendall(keyhole.encode_frame(GOODBYE))
        self.theirs.shutdown(socket.SHUT_WR)
        with self.assertRaises(keyhole._NotSent):
            self.request(1)
        self.assertEqual([r["id"] for r in _read_frames(self.theirs, 1)], [1])
        with self.assertRaises(keyhole._NotSent):  # nothing more is sent on it
            self.request(2)
        self.assertEqual(self.theirs.recv(1), b"", "request 2 was written on the old connection")

    def test_goodbye_read_after_a_write_that_met_the_close(self):
        # keyholed said goodbye and closed: the write fails (EPIPE), and the goodbye before the end
        # of stream still tells the request was not read.
        self.theirs.sendall(keyhole.encode_frame(GOODBYE))
        self.theirs.close()
        with self.assertRaises(keyhole._NotSent):
            self.request(1)
        self.assertFalse(self.conn.usable())

    def test_goodbye_found_by_the_reader_after_another_write_met_the_close(self):
        # Request 1's thread reads; keyholed says goodbye and closes; request 2's write meets the
        # close before the reader has read the goodbye. Request 1 must not be failed as lost by
        # that write: the goodbye after it says it was not read.
        entered, go_on = threading.Event(), threading.Event()
        real_poller = self.conn.poller

        class HeldPoller:
            def poll(self, timeout_ms):
                entered.set()
                if not go_on.wait(10):
                    raise AssertionError("the test did not release the reader")
                return real_poller.poll(timeout_ms)
        self.conn.poller = HeldPoller()
        outcomes = {}
        reader = self.in_thread(1, outcomes)
        self.assertEqual([r["id"] for r in _read_frames(self.theirs, 1)], [1])
        self.assertTrue(entered.wait(10))
        self.theirs.sendall(keyhole.encode_frame(GOODBYE))
        self.theirs.close()
        with self.assertRaises(keyhole._NotSent):
            self.request(2)
        go_on.set()
        reader.join(10)
        self.assertIsInstance(outcomes[1], keyhole._NotSent)

    def test_other_null_id_errors_still_fail_the_request(self):
        # overloaded with a null id (or bad_frame, frame_too_large) is not a goodbye: keyholed may
        # have read the request; it fails with that error and is not sent again.
        outcomes = {}
        thread = self.in_thread(1, outcomes)
        _read_frames(self.theirs, 1)
        self.theirs.sendall(keyhole.encode_frame({"id": None, "ok": False, "error": {
            "code": "overloaded", "message": "too many connections", "retry_after_ms": 1000}}))
        self.theirs.close()
        thread.join(10)
        self.assertIsInstance(outcomes[1], keyhole.KeyholeError)
        self.assertNotIsInstance(outcomes[1], keyhole.KeyholeConnectionError)
        self.assertEqual((outcomes[1].code, outcomes[1].retry_after_ms), ("overloaded", 1000))

    def test_shutting_down_with_an_id_is_an_answer_not_a_goodbye(self):
        outcomes = {}
        threads = [self.in_thread(1, outcomes), self.in_thread(2, outcomes)]
        _read_frames(self.theirs, 2)
        self.theirs.sendall(keyhole.encode_frame({"id": 1, "ok": False, "error": {
            "code": "shutting_down", "message": "keyholed is shutting down"}}))
        threads[0].join(10)
        self.assertEqual(outcomes[1]["error"]["code"], "shutting_down")  # for Client.call's rule 3
        self.assertTrue(self.conn.usable(), "not a goodbye: the connection still carries request 2")
        self.theirs.sendall(keyhole.encode_frame({"id": 2, "ok": True, "result": {}}))
        threads[1].join(10)
        self.assertEqual(outcomes[2], {"id": 2, "ok": True, "result": {}})


class RequestVectorTests(ServerTestCase):
    """Every case of vectors/requests.json, against keyholed without --enable-debug-ops."""

    def check_case(self, case):
        if "request_hex" in case:
            payload = bytes.fromhex(case["request_hex"])
        else:
            payload = case["request"].encode("utf-8")
        expect = case["expect"]
        with RawConnection(self.server.socket_path) as conn:
            conn.send_frame(payload)
            resp = conn.read_response()
            context = f"case {case['name']!r}: sent {payload!r}, got {resp!r}"
            self.assertIn("id", resp, context)
            self.assertEqual(resp["id"], expect["id"], context)
            self.assertIs(type(resp["id"]), type(expect["id"]), context)
            self.assertIs(resp.get("ok"), expect["ok"], context)
            if expect["ok"]:
                self.assertNotIn("error", resp, context)
                self.assertIsInstance(resp.get("result"), dict, context)
                self.assertEqual(sorted(resp["result"]), sorted(expect["result_keys"]), context)
            else:
                self.assertNotIn("result", resp, context)
                self.assertIsInstance(resp.get("error"), dict, context)
                self.assertEqual(resp["error"].get("code"), expect["code"], context)
                self.assertIsInstance(resp["error"].get("message"), str, context)
            conn.assert_ping()


add_case_tests(RequestVectorTests, load_cases("requests.json"), RequestVectorTests.check_case)


# --- framing.json ------------------------------------------------------------------------------

def expected_answer(frame):
    """(id, ok, code) of keyholed's answer to a complete frame of a framing vector."""
    try:
        request = json.loads(frame.decode("utf-8"))
    except ValueError:
        return (None, False, "bad_request")
    if isinstance(request, dict) and request.get("op") == "ping":
        return (request.get("id"), True, None)
    return (None, False, "bad_request")


def summary(resp):
    return (resp.get("id"), resp.get("ok"), (resp.get("error") or {}).get("code"))


class FramingVectorTests(unittest.TestCase):
    """Every case of vectors/framing.json, sent in one write to keyholed configured with the case's
    max_frame_bytes (a server per distinct limit, started when first needed)."""

    servers = {}

    @classmethod
    def server_for(cls, max_frame_bytes):
        if max_frame_bytes not in cls.servers:
            config = ("" if max_frame_bytes == DEFAULT_MAX_FRAME_BYTES
                      else f"[server]\nmax_frame_bytes = {max_frame_bytes}\n")
            cls.servers[max_frame_bytes] = Keyholed(config=config)
        return cls.servers[max_frame_bytes]

    @classmethod
    def tearDownClass(cls):
        servers, cls.servers = cls.servers, {}
        failures = []
        for server in servers.values():
            try:
                server.stop_and_check()
            except AssertionError as e:
                failures.append(str(e))
        if failures:
            raise AssertionError("\n\n".join(failures))

    def check_case(self, case):
        limit = case["max_frame_bytes"]
        if limit < MIN_CONFIGURABLE_MAX_FRAME_BYTES:
            self.skipTest(f"keyholed cannot be configured with max_frame_bytes = {limit} "
                          f"(its minimum is {MIN_CONFIGURABLE_MAX_FRAME_BYTES})")
        server = self.server_for(limit)
        data = bytes.fromhex(case["input_hex"])
        expected = [expected_answer(bytes.fromhex(f)) for f in case["frames_hex"]]
        if case["error"] is not None:
            expected.append((None, False, case["error"]))
        with RawConnection(server.socket_path) as conn:
            conn.sock.sendall(data)
            got = [conn.read_response() for _ in expected]  # responses may come in any order
            context = f"case {case['name']!r}: sent {data.hex()}, got {got!r}"
            self.assertEqual(sorted(map(summary, got), key=repr), sorted(expected, key=repr),
                             context)
            if case["error"] is not None:
                conn.assert_closed()
            elif case["remainder"] == 0:
                conn.assert_ping()
            # else: a frame is incomplete, so there is nothing more to send on this connection.
        with RawConnection(server.socket_path) as conn:  # and keyholed still serves others
            conn.assert_ping(None)  # {"op":"ping"}: 13 bytes, within every limit of the vectors


add_case_tests(FramingVectorTests, load_cases("framing.json"), FramingVectorTests.check_case)


# --- the client --------------------------------------------------------------------------------

@contextlib.contextmanager
def event_when_sent(marker):
    """Yield an Event that is set once a socket.send() of this process has written bytes containing
    marker (the client writes each small request with one send()), to order threads on it."""
    event = threading.Event()
    original = socket.socket.send

    def send(sock, data, *flags):
        n = original(sock, data, *flags)
        if marker in bytes(data[:n]):
            event.set()
        return n

    with mock.patch.object(socket.socket, "send", send):
        yield event


class ClientTests(ServerTestCase):
    """keyhole.Client against keyholed with --enable-debug-ops."""

    debug_ops = True

    def client(self, **kwargs):
        client = keyhole.Client(self.server.socket_path, **kwargs)
        self.addCleanup(client.close)
        return client

    def test_ping(self):
        result = self.client().ping()
        self.assertEqual(sorted(result), ["protocol", "uptime_ms", "version"])
        self.assertEqual(result["protocol"], 1)
        self.assertIsInstance(result["version"], str)
        self.assertIsInstance(result["uptime_ms"], int)
        VALIDATORS["ping.result"].validate(result)

    def test_stats(self):
        client = self.client()
        with self.assertRaises(keyhole.KeyholeError):
            client.call("no.such.op")
        result = client.stats()
        self.assertEqual(sorted(result),
                         ["bytes", "connections", "errors", "in_flight", "requests", "store", "uptime_ms"])
        self.assertGreaterEqual(result["errors"]["unknown_op"], 1)
        VALIDATORS["stats.result"].validate(result)

    def test_schemas_reject_what_the_protocol_forbids(self):
        # The schemas are a contract too: they must not accept anything.
        for bad in ({"id": 1, "ok": True}, {"id": 1, "ok": False, "error": {"code": "nope", "message": ""}},
                    {"id": 1.5, "ok": True, "result": {}}, {"id": 1, "ok": True, "result": {}, "error": {}}):
            with self.assertRaises(jsonschema.ValidationError, msg=repr(bad)):
                VALIDATORS["response"].validate(bad)
        for bad in ({"id": 1}, {"op": 1}, {"op": "ping", "v": 2}, {"op": "ping", "args": []},
                    {"op": "ping", "id": 1.5}):
            with self.assertRaises(jsonschema.ValidationError, msg=repr(bad)):
                VALIDATORS["request"].validate(bad)

    def test_call(self):
        client = self.client()
        args = {"text": "α→😀", "n": [1, 2.5, None, True], "nested": {"k": {}}}
        self.assertEqual(client.call("debug.echo", args), args)
        self.assertEqual(client.call("debug.echo"), {})
        self.assertEqual(client.call("debug.sleep", {"ms": 0}), {"slept_ms": 0})
        self.assertEqual(sorted(client.call("ping", {})), ["protocol", "uptime_ms", "version"])

    def test_forked_children_open_their_own_connections(self):
        # A prefork server (gunicorn --preload, uWSGI, Celery) forks after the app has used its
        # client. Sharing the parent's connection, two children read each other's answers (with the
        # same ids): one was handed the other's session. Each child must open its own, the parent
        # keep its own, and a lock a thread of the parent holds at the fork must not hang a child.
        client = self.client(timeout=2.0)
        tokens = [client.create_session(f"fork-{i}")["session"] for i in range(2)]
        parent_conn = client._conn
        held, release = threading.Event(), threading.Event()

        def hold_the_lock():
            with client._lock:
                held.set()
                release.wait()
        holder = threading.Thread(target=hold_the_lock)
        holder.start()
        held.wait()
        reader, writer = os.pipe()
        children = []
        try:
            for i in range(2):
                pid = os.fork()
                if pid == 0:  # the child: one line on the pipe, then out, whatever happens
                    try:
                        wrong = sum(client.get_session(tokens[i])["sub"] != f"fork-{i}" for _ in range(300))
                        own = client._conn is not None and client._conn is not parent_conn
                        os.write(writer, f"{i} wrong={wrong} own={own}\n".encode())
                    except BaseException as e:
                        os.write(writer, f"{i} failed {e!r}\n".encode())
                    finally:
                        os._exit(0)
                children.append(pid)
        finally:
            release.set()
            holder.join()
            os.close(writer)
        lines = []
        with os.fdopen(reader, "rb") as pipe:
            for _ in range(2):
                # Bounded, so that a hung child fails the test rather than the run.
                ready, _, _ = select.select([pipe], [], [], 60)
                if not ready:
                    for pid in children:
                        os.kill(pid, signal.SIGKILL)
                    break
                lines.append(pipe.readline().decode().strip())
        for pid in children:
            os.waitpid(pid, 0)
        self.assertEqual(sorted(lines), ["0 wrong=0 own=True", "1 wrong=0 own=True"])
        self.assertIs(client._conn, parent_conn, "the parent keeps its connection")
        self.assertEqual(client.get_session(tokens[0])["sub"], "fork-0")

    def test_unknown_op_raises_keyhole_error(self):
        client = self.client()
        with self.assertRaises(keyhole.KeyholeError) as cm:
            client.call("frobnicate", {"a": 1})
        e = cm.exception
        self.assertIsInstance(e, Exception)
        self.assertEqual(e.code, "unknown_op")
        self.assertIsInstance(e.message, str)
        self.assertIsNone(e.retry_after_ms)
        self.assertIn("unknown_op", str(e))
        self.assertEqual(sorted(client.ping()), ["protocol", "uptime_ms", "version"])

    def test_invalid_args_raise_bad_request_naming_the_argument(self):
        client = self.client()
        for args in ({}, {"ms": -1}, {"ms": 60001}, {"ms": "5"}, {"ms": 1.5}):
            with self.subTest(args=args), self.assertRaises(keyhole.KeyholeError) as cm:
                client.call("debug.sleep", args)
            self.assertEqual(cm.exception.code, "bad_request", args)
            self.assertIn("ms", cm.exception.message, args)
        client.ping()

    def test_missing_socket_raises_connection_error(self):
        path = os.path.join(self.server.dir, "missing.sock")
        client = keyhole.Client(path)
        with self.assertRaises(keyhole.KeyholeConnectionError) as cm:
            client.ping()
        self.assertIsInstance(cm.exception, ConnectionError)
        self.assertIn(path, str(cm.exception))
        client.close()

    def test_default_path(self):
        with mock.patch.dict(os.environ, {"KEYHOLE_SOCKET": self.server.socket_path}):
            client = keyhole.Client()
            self.addCleanup(client.close)
            self.assertEqual(client.path, self.server.socket_path)
            client.ping()
        with mock.patch.dict(os.environ):
            os.environ.pop("KEYHOLE_SOCKET", None)
            self.assertEqual(keyhole.Client().path, "/run/keyhole/keyhole.sock")

    def test_context_manager_and_close(self):
        with keyhole.Client(self.server.socket_path) as client:
            client.ping()
        with self.assertRaises(keyhole.KeyholeConnectionError):
            client.ping()
        client.close()  # closing twice is fine

    def test_oversized_request_fails_and_client_reconnects(self):
        client = self.client()
        client.ping()
        with self.assertRaises(keyhole.KeyholeError) as cm:
            client.call("debug.echo", {"s": "x" * DEFAULT_MAX_FRAME_BYTES})
        self.assertEqual(cm.exception.code, "frame_too_large")
        self.assertEqual(client.call("debug.echo", {"s": "y"}), {"s": "y"})

    def test_threads_share_one_connection(self):
        probe = self.client()
        before = probe.stats()["connections"]["total"]
        client = self.client(timeout=60)
        barrier = threading.Barrier(16)
        failures = []

        def worker(t):
            try:
                barrier.wait()
                for i in range(200):
                    args = {"t": t, "i": i}
                    result = client.call("debug.echo", args)
                    if result != args:
                        failures.append(f"thread {t} call {i}: sent {args}, got {result}")
            except Exception as e:  # reported below
                failures.append(f"thread {t}: {e!r}")

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertFalse(any(t.is_alive() for t in threads), "threads did not finish")
        self.assertEqual(failures, [])
        after = probe.stats()["connections"]["total"]
        self.assertEqual(after - before, 1, "the 16 threads did not share one connection")

    def test_slow_call_does_not_hold_back_another_thread(self):
        client = self.client(timeout=30)
        client.ping()
        sleep_done = threading.Event()
        outcome = {}

        def sleeper():
            try:
                outcome["sleep"] = client.call("debug.sleep", {"ms": 500})
            except Exception as e:  # checked below
                outcome["sleep"] = e
            finally:
                sleep_done.set()

        thread = threading.Thread(target=sleeper)
        with event_when_sent(b'"debug.sleep"') as sleep_sent:
            thread.start()
            self.assertTrue(sleep_sent.wait(IO_TIMEOUT), "debug.sleep was not sent")
        pong = client.ping()  # sent after debug.sleep, on the same connection
        self.assertFalse(sleep_done.is_set(), "ping was answered only after debug.sleep")
        self.assertEqual(pong["protocol"], 1)
        thread.join(30)
        self.assertEqual(outcome["sleep"], {"slept_ms": 500})

    def test_server_answers_out_of_order(self):
        with RawConnection(self.server.socket_path) as conn:
            conn.sock.sendall(b"".join(
                struct.pack(">I", len(p)) + p for p in (
                    b'{"op":"debug.sleep","id":1,"args":{"ms":500}}', b'{"op":"ping","id":2}')))
            first, second = conn.read_response(), conn.read_response()
        self.assertEqual((first["id"], first["ok"]), (2, True), first)
        self.assertEqual(second, {"id": 1, "ok": True, "result": {"slept_ms": 500}})


class OverloadTests(ServerTestCase):
    """keyholed with max_connections = 1 refuses a second connection with overloaded."""

    config = "[server]\nmax_connections = 1\n"

    def test_overloaded_on_connect_raises_keyhole_error(self):
        with keyhole.Client(self.server.socket_path) as first:
            first.ping()
            with keyhole.Client(self.server.socket_path) as second:
                with self.assertRaises(keyhole.KeyholeError) as cm:
                    second.ping()
            e = cm.exception
            self.assertEqual(e.code, "overloaded")
            self.assertIsInstance(e.retry_after_ms, int)
            self.assertGreaterEqual(e.retry_after_ms, 0)
            self.assertGreaterEqual(first.stats()["connections"]["rejected"], 1)


class RestartTests(unittest.TestCase):
    """The client reconnects when keyholed restarted since its last call."""

    def test_reconnects_after_restart(self):
        workdir = tempfile.mkdtemp(prefix="kh", dir="/tmp")
        self.addCleanup(shutil.rmtree, workdir, True)
        server = Keyholed(workdir=workdir)
        client = keyhole.Client(server.socket_path)
        self.addCleanup(client.close)
        try:
            client.ping()
        finally:
            server.stop_and_check()
        with self.assertRaises(keyhole.KeyholeConnectionError):
            client.ping()  # nobody listens
        server = Keyholed(workdir=workdir)
        try:
            client.ping()
            self.assertEqual(client.stats()["connections"]["total"], 1)
        finally:
            server.stop_and_check()

    def test_reconnects_transparently(self):
        workdir = tempfile.mkdtemp(prefix="kh", dir="/tmp")
        self.addCleanup(shutil.rmtree, workdir, True)
        server = Keyholed(workdir=workdir)
        client = keyhole.Client(server.socket_path)
        self.addCleanup(client.close)
        try:
            client.ping()
        finally:
            server.stop_and_check()
        # The old connection is closed; the next call must not fail because of it.
        server = Keyholed(workdir=workdir)
        try:
            client.ping()
        finally:
            server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
