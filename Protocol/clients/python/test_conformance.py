"""The shared client conformance scenarios, the operations table, and keyholed restarted under load.

Protocol/testing/README.md says how every client runs these; this is the Python client's suite.
Run from the repository root (the restart tests need $KEYHOLED or .build/debug/keyholed):

    python3 -m unittest discover -s Protocol/clients/python -p 'test_conformance.py' -v
"""

import json
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import keyhole  # noqa: E402

PROTOCOL = os.path.join(os.path.dirname(os.path.dirname(HERE)))
TESTING = os.path.join(PROTOCOL, "testing")
with open(os.path.join(PROTOCOL, "vectors", "client_scenarios.json"), encoding="utf-8") as _f:
    SCENARIOS = json.load(_f)
SERVER_EXIT_TIMEOUT = 15


class OperationsTableTests(unittest.TestCase):
    def test_embedded_table_is_ops_json(self):
        with open(os.path.join(PROTOCOL, "ops.json"), encoding="utf-8") as f:
            ops = json.load(f)["operations"]
        self.assertEqual(keyhole.OPERATIONS, {o["op"] for o in ops})
        self.assertEqual(keyhole.SAFE_TO_REPEAT, {o["op"] for o in ops if o["safe_to_repeat"]})

    def test_typed_helper_for_every_operation(self):
        with open(os.path.join(PROTOCOL, "ops.json"), encoding="utf-8") as f:
            ops = [o["op"] for o in json.load(f)["operations"] if not o["debug"]]
        helpers = {"ping": "ping", "stats": "stats", "token.verify": "verify_token",
                   "jwks.status": "jwks_status", "jwks.refresh": "jwks_refresh",
                   "session.create": "create_session", "session.get": "get_session",
                   "session.revoke": "revoke_session", "session.revoke_all": "revoke_all_sessions",
                   "session.list": "list_sessions", "user.get": "get_user", "user.update": "update_user",
                   "user.delete": "delete_user", "admin.snapshot": "admin_snapshot",
                   "admin.reload": "admin_reload"}
        for op in ops:
            name = helpers.get(op) or op.replace(".", "_")
            self.assertTrue(callable(getattr(keyhole.Client, name, None)), f"no helper {name} for {op}")


class ErrorCodesTests(unittest.TestCase):
    def test_error_codes_are_section_6(self):
        """keyhole.ERROR_CODES is the table of PROTOCOL.md section 6, no more and no less."""
        with open(os.path.join(PROTOCOL, "PROTOCOL.md"), encoding="utf-8") as f:
            text = f.read()
        section = text[text.index("\n## 6. Error codes\n"):text.index("\n## 7. ")]
        codes = set(re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE))
        self.assertGreater(len(codes), 20)
        self.assertEqual(keyhole.ERROR_CODES, codes)
        self.assertFalse(keyhole.ERROR_CODES & keyhole.CLIENT_CODES)


def _check_outcome(test, call, outcome):
    expect = call["expect"]
    kind, value = outcome
    if "ok" in expect:
        test.assertEqual(kind, "ok", f"{call['op']}: expected a result, got {value!r}")
        test.assertEqual(value, expect["ok"])
    elif "ok_padding_bytes_at_least" in expect:
        test.assertEqual(kind, "ok", f"{call['op']}: expected a result, got {value!r}")
        test.assertIsInstance(value.get("padding"), str)
        test.assertGreaterEqual(len(value["padding"]), expect["ok_padding_bytes_at_least"])
    else:
        test.assertEqual(kind, "error", f"{call['op']}: expected an error, got {value!r}")
        test.assertIsInstance(value, keyhole.KeyholeError)
        want = expect["error"]
        test.assertEqual(value.code, want["code"], str(value))
        if want["code"] in keyhole.CLIENT_CODES:
            test.assertIsInstance(value, keyhole.KeyholeConnectionError)
        if "message" in want:
            test.assertEqual(value.message, want["message"])
        if "retry_after_ms" in want:
            test.assertEqual(value.retry_after_ms, want["retry_after_ms"])


def _perform(client, call):
    try:
        return ("ok", client.call(call["op"], call["args"]))
    except keyhole.KeyholeError as e:
        return ("error", e)


class ScenarioTests(unittest.TestCase):
    """Every scenario of Protocol/vectors/client_scenarios.json against the scripted server."""

    def run_scenario(self, scenario):
        calls = scenario["calls"]
        outcomes = [None] * len(calls)
        with ScriptedServer(scenario["name"]) as server:
            deadline = scenario.get("deadline_ms", SCENARIOS["deadline_ms"]) / 1000
            client = keyhole.Client(server.path, timeout=deadline)
            try:
                if scenario["pipelined"]:
                    def run(i):
                        outcomes[i] = _perform(client, calls[i])
                    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                else:
                    for i, call in enumerate(calls):
                        outcomes[i] = _perform(client, call)
            finally:
                client.close()
        for call, outcome in zip(calls, outcomes):
            _check_outcome(self, call, outcome)


def _scenario_test(scenario):
    def test(self):
        self.run_scenario(scenario)
    test.__doc__ = f"{scenario['name']}: {scenario['description']}"
    return test


for _scenario in SCENARIOS["scenarios"]:
    setattr(ScenarioTests, "test_" + _scenario["name"].replace("-", "_"), _scenario_test(_scenario))


class ScriptedServer:
    """Protocol/testing/scenario_server.py playing one scenario; it must exit 0 once the client is done."""

    def __init__(self, scenario):
        self.dir = tempfile.mkdtemp(prefix="khs", dir="/tmp")
        self.path = os.path.join(self.dir, "s.sock")
        self.proc = subprocess.Popen([sys.executable, os.path.join(TESTING, "scenario_server.py"), self.path,
                                      scenario], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            raise AssertionError(f"scenario server did not start: {self.proc.communicate()[1]}")

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        try:
            status = self.proc.wait(SERVER_EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            status = self.proc.wait()
        stderr = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        if exc_info[0] is None and status != 0:
            raise AssertionError(f"scenario server: {stderr}")


class InlineServer:
    """A Unix socket whose connections, in turn, are served by `handlers` (each `handle(conn,
    read_request)`) in a thread, for cases the scenarios do not play. read_request() reads one
    request frame and returns it as a dict."""

    def __init__(self, *handlers):
        self.dir = tempfile.mkdtemp(prefix="khi", dir="/tmp")
        self.path = os.path.join(self.dir, "i.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.read = threading.Event()  # set by handlers once they have read what they wait for
        self.thread = threading.Thread(target=self._serve, args=(handlers,), daemon=True)
        self.thread.start()

    def _serve(self, handlers):
        for handle in handlers:
            conn, _ = self.listener.accept()
            conn.settimeout(10)
            self._one(conn, handle)

    def _one(self, conn, handle):

        def read_request():
            header = conn.recv(4, socket.MSG_WAITALL)
            (length,) = struct.unpack(">I", header)
            return json.loads(conn.recv(length, socket.MSG_WAITALL))
        try:
            handle(conn, read_request)
        finally:
            conn.close()

    def close(self):
        self.thread.join(10)
        self.listener.close()
        os.unlink(self.path)
        os.rmdir(self.dir)
        self.assert_done()

    def assert_done(self):
        if self.thread.is_alive():
            raise AssertionError("the inline server is still waiting for the client")


def _frame(message):
    payload = json.dumps(message).encode()
    return struct.pack(">I", len(payload)) + payload


class ClientEdgeTests(unittest.TestCase):
    def test_close_with_a_change_in_flight_is_connection_lost(self):
        """A written change is never reported as "unavailable" (never sent) when the client closes."""
        def handle(conn, read_request):
            self.assertEqual(read_request()["op"], "session.create")
            server.read.set()
            conn.recv(1)  # until the client closes
        server = InlineServer(handle)
        self.addCleanup(server.close)
        client = keyhole.Client(server.path, timeout=5)
        outcome = []
        caller = threading.Thread(target=lambda: outcome.append(_perform(client, {"op": "session.create",
                                                                                  "args": {"sub": "a"}})))
        caller.start()
        self.assertTrue(server.read.wait(10))
        client.close()
        caller.join(10)
        kind, error = outcome[0]
        self.assertEqual((kind, error.code), ("error", "connection_lost"), str(error))

    def test_goodbyes_resend_a_change_other_null_id_errors_fail_it(self):
        """A null-id overloaded fails a change (keyholed may have read it); keyholed's goodbye, a
        null-id shutting_down, sends it again on a new connection, twice in a row, with a new id."""
        requests = []

        def refuse(conn, read_request):
            requests.append(read_request())
            conn.sendall(_frame({"id": None, "ok": False, "error": {
                "code": "overloaded", "message": "too many connections", "retry_after_ms": 1000}}))

        def goodbye(conn, read_request):
            requests.append(read_request())
            conn.sendall(_frame({"id": None, "ok": False, "error": {
                "code": "shutting_down", "message": "keyholed is shutting down: requests on this connection "
                "still unanswered were not read; send them again on a new connection"}}))

        def answer(conn, read_request):
            request = read_request()
            requests.append(request)
            conn.sendall(_frame({"id": request["id"], "ok": True, "result": {"id": "A"}}))
        server = InlineServer(refuse, goodbye, goodbye, answer)
        self.addCleanup(server.close)
        client = keyhole.Client(server.path, timeout=5)
        self.addCleanup(client.close)
        with self.assertRaises(keyhole.KeyholeError) as caught:
            client.create_session("alice")
        self.assertNotIsInstance(caught.exception, keyhole.KeyholeConnectionError)
        self.assertEqual((caught.exception.code, caught.exception.retry_after_ms), ("overloaded", 1000))
        self.assertEqual(len(requests), 1, "not sent again after overloaded")
        self.assertEqual(client.create_session("alice"), {"id": "A"})
        self.assertEqual([(r["op"], r["args"]) for r in requests], [("session.create", {"sub": "alice"})] * 4)
        self.assertEqual(len({r["id"] for r in requests}), 4, "a re-send uses a new id")

    def test_deeply_nested_answer_is_protocol_error_and_the_client_recovers(self):
        def handle(conn, read_request):
            request = read_request()
            nested = "[" * 100000 + "]" * 100000
            payload = ('{"id":%d,"ok":true,"result":{"x":%s}}' % (request["id"], nested)).encode()
            conn.sendall(struct.pack(">I", len(payload)) + payload)
            conn.recv(1)
        def answer_ping(conn, read_request):
            request = read_request()
            conn.sendall(_frame({"id": request["id"], "ok": True, "result": {"op": request["op"]}}))
        server = InlineServer(handle, answer_ping)
        self.addCleanup(server.close)
        client = keyhole.Client(server.path, timeout=2)
        self.addCleanup(client.close)
        with self.assertRaises(keyhole.KeyholeConnectionError) as caught:
            client.call("debug.echo", {})
        self.assertEqual(caught.exception.code, "protocol_error")
        # The connection was closed and not left unread: the next call goes out on a new one.
        self.assertEqual(client.call("ping"), {"op": "ping"})


class Harness:
    """Protocol/testing/keyholed_harness.py as a child process; config_extra is appended to its
    keyholed.toml (--config-extra)."""

    def __init__(self, config_extra=""):
        command = [sys.executable, os.path.join(TESTING, "keyholed_harness.py")]
        if config_extra:
            command += ["--config-extra", config_extra]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"keyholed_harness.py did not start (status {self.proc.wait()})")
        self.info = json.loads(line)

    def command(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def chaos_done(self):
        """Whether the harness has printed its chaos line (without waiting); raises if it failed."""
        if not select.select([self.proc.stdout], [], [], 0)[0]:
            return False
        message = json.loads(self.proc.stdout.readline())
        if message.get("chaos") != "done":
            raise AssertionError(f"harness: {message}")
        return True

    def stop(self):
        self.proc.stdin.write("stop\n")
        self.proc.stdin.close()
        status = self.proc.wait(60)
        self.proc.stdout.close()
        if status != 0:
            raise AssertionError(f"keyholed_harness.py exited {status}")


class RestartTests(unittest.TestCase):
    """keyholed stopped and started again, with its socket kept and with it gone for a moment."""

    CYCLES = 6

    def setUp(self):
        self.harness = Harness()
        self.client = keyhole.Client(self.harness.info["socket"])

    def tearDown(self):
        self.client.close()
        self.harness.stop()

    def test_reads_never_fail(self):
        session = self.client.create_session("reader")
        self.assertEqual(self.harness.command(f"chaos {self.CYCLES} 200"), {"ok": True})
        calls = 0
        while not self.harness.chaos_done():
            self.assertEqual(self.client.get_session(session["session"])["id"], session["id"])
            calls += 1
        self.assertGreater(calls, self.CYCLES)

    def test_creates_all_succeed_each_applied_once(self):
        """A graceful restart fails no call: a create keyholed did not read is turned away by its
        goodbye and sent again on a new connection, so every create succeeds (never connection_lost),
        and each sub has exactly the one session its create answered (none lost, none applied twice)."""
        self.assertEqual(self.harness.command(f"chaos {self.CYCLES} 200"), {"ok": True})
        created = {}
        n = 0
        while not self.harness.chaos_done():
            sub = f"restart-{n}"
            n += 1
            try:
                created[sub] = self.client.create_session(sub)["id"]
            except keyhole.KeyholeError as e:
                self.fail(f"session.create for {sub} failed across a graceful restart: {e!r}")
        self.assertGreater(len(created), self.CYCLES)
        for sub, session_id in created.items():
            self.assertEqual([s["id"] for s in self.client.list_sessions(sub)], [session_id], sub)


if __name__ == "__main__":
    unittest.main()
