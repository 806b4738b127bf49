#!/usr/bin/env python3
"""Plays the server's side of one client conformance scenario (Protocol/vectors/client_scenarios.json).

    python3 scenario_server.py SOCKET_PATH SCENARIO_NAME
    python3 scenario_server.py --list          # the scenarios' names, one JSON array

Binds SOCKET_PATH (removing a stale file), prints "ready" on stdout, then runs the scenario's server
steps in order and exits 0 when the client did everything the script expects of it, or 1 with the
reason on stderr. Every wait is bounded (STEP_TIMEOUT), so a client that goes wrong fails the run
instead of hanging it. Standard library only, like every client's tests.

Steps (each a JSON object):
- {"accept": true}: wait for the next connection; it becomes the current one.
- {"read": [op, ...], "same_args_as": i?}: read that many request frames from the current connection,
  each with that op, and record them (requests are numbered across connections from 0). With
  same_args_as, each must carry the same args as request i (a re-send).
- {"read_any": [op, ...]}: as read, but the ops may come in any order (pipelined calls).
- {"reply": [answer, ...], "write": "whole"|"together"|"bytewise"}: send answers. An answer's
  "to": i is replaced by "id": request i's id (answers may also give "id" directly), and
  "echo": true by "result": request i's args (debug.echo); "to_op": op names the first request read
  with that op instead of i. "whole": one write per answer;
  "together": all in one write; "bytewise": one byte per write, 1 ms apart.
- {"pad_reply": {"to": i, "payload_bytes": n}}: an ok answer whose payload is exactly n bytes.
- {"raw": hex}: write these bytes as they are.
- {"close": true}: end the current connection's sending side (the client sees end of stream); it is
  still read, and closed at the end, so nothing the client wrote is answered with a reset.
- {"expect_closed": true}: the client must close the current connection (read until end of stream).
"""

import json
import os
import socket
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(os.path.dirname(HERE), "vectors", "client_scenarios.json")
STEP_TIMEOUT = 10.0
MAX_REQUEST = 16 * 1024 * 1024


class Failure(Exception):
    pass


def load():
    with open(VECTORS, encoding="utf-8") as f:
        return json.load(f)


class Player:
    def __init__(self, path, scenario):
        self.scenario = scenario
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self.listener.bind(path)
        self.listener.listen(16)
        self.listener.settimeout(STEP_TIMEOUT)
        self.conn = None
        self.requests = []
        self.ended = []  # connections whose sending side we closed: drained until the client closes

    def run(self):
        for n, step in enumerate(self.scenario["server"]):
            try:
                self.step(step)
            except Failure as e:
                raise Failure(f"step {n} {json.dumps(step)[:120]}: {e}") from None

    def step(self, step):
        if step.get("accept"):
            try:
                self.conn, _ = self.listener.accept()
            except socket.timeout:
                raise Failure(f"no connection within {STEP_TIMEOUT} s") from None
            self.conn.settimeout(STEP_TIMEOUT)
        elif "read" in step:
            for op in step["read"]:
                request = self.read_request()
                if request.get("op") != op:
                    raise Failure(f"expected a {op} request, got {request!r}")
                if "same_args_as" in step:
                    first = self.requests[step["same_args_as"]]
                    if request.get("args") != first.get("args"):
                        raise Failure(f"re-sent {op} has args {request.get('args')!r}, "
                                      f"the first had {first.get('args')!r}")
                self.requests.append(request)
        elif "read_any" in step:
            wanted = sorted(step["read_any"])
            got = [self.read_request() for _ in wanted]
            if sorted(r.get("op") for r in got) != wanted:
                raise Failure(f"expected requests {wanted} in any order, got {got!r}")
            self.requests.extend(got)
        elif "reply" in step:
            frames = []
            for answer in step["reply"]:
                answer = dict(answer)
                if "to_op" in answer:
                    op = answer.pop("to_op")
                    answer["to"] = next(i for i, r in enumerate(self.requests) if r.get("op") == op)
                if "to" in answer:
                    request = self.requests[answer.pop("to")]
                    answer = {"id": request.get("id"), **answer}
                    if answer.pop("echo", False):
                        answer["result"] = request.get("args", {})
                frames.append(frame(json.dumps(answer).encode()))
            self.write(frames, step.get("write", "whole"))
        elif "pad_reply" in step:
            spec = step["pad_reply"]
            rid = self.requests[spec["to"]].get("id")
            head = json.dumps({"id": rid, "ok": True}).encode()[:-1] + b',"result":{"padding":"'
            tail = b'"}}'
            padding = spec["payload_bytes"] - len(head) - len(tail)
            self.write([frame(head + b"x" * padding + tail)], "whole")
        elif "raw" in step:
            self.write([bytes.fromhex(step["raw"])], "whole")
        elif step.get("close"):
            self.conn.shutdown(socket.SHUT_WR)
            drain = threading.Thread(target=read_until_closed, args=(self.conn,), daemon=True)
            drain.start()
            self.ended.append((self.conn, drain))
            self.conn = None
        elif step.get("expect_closed"):
            if not read_until_closed(self.conn):
                raise Failure(f"the client did not close the connection within {STEP_TIMEOUT} s")
            self.conn.close()
            self.conn = None
        else:
            raise Failure("unknown step")

    def write(self, frames, mode):
        if self.conn is None:
            raise Failure("no current connection")
        try:
            if mode == "together":
                self.conn.sendall(b"".join(frames))
            elif mode == "bytewise":
                for byte in b"".join(frames):
                    self.conn.sendall(bytes([byte]))
                    time.sleep(0.001)  # shaping, not synchronisation: lets the client read partial frames
            else:
                for f in frames:
                    self.conn.sendall(f)
        except OSError as e:
            raise Failure(f"cannot write to the client: {e}") from None

    def read_request(self):
        if self.conn is None:
            raise Failure("no current connection")
        header = self.read_exact(4)
        (length,) = struct.unpack(">I", header)
        if not 1 <= length <= MAX_REQUEST:
            raise Failure(f"request frame length {length}")
        try:
            request = json.loads(self.read_exact(length).decode("utf-8"))
        except ValueError as e:
            raise Failure(f"request is not JSON: {e}") from None
        if not isinstance(request, dict):
            raise Failure(f"request is not an object: {request!r}")
        if type(request.get("id")) not in (int, str):
            raise Failure(f"request has no integer or string id (clients always send one): {request!r}")
        return request

    def read_exact(self, n):
        data = b""
        while len(data) < n:
            try:
                chunk = self.conn.recv(n - len(data))
            except socket.timeout:
                raise Failure(f"no request within {STEP_TIMEOUT} s") from None
            except OSError as e:
                raise Failure(f"reading a request: {e}") from None
            if not chunk:
                raise Failure(f"the client closed the connection after {len(data)} of {n} bytes")
            data += chunk
        return data

    def finish(self):
        for conn, drain in self.ended:
            drain.join(STEP_TIMEOUT)
            conn.close()
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


def frame(payload):
    return struct.pack(">I", len(payload)) + payload


def read_until_closed(conn):
    """Read and discard until end of stream; False if it does not come within STEP_TIMEOUT."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while True:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not conn.recv(65536):
                return True
        except socket.timeout:
            return False
        except OSError:
            return True  # reset: closed too


def main(argv):
    doc = load()
    if argv[1:] == ["--list"]:
        print(json.dumps([s["name"] for s in doc["scenarios"]]))
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, name = argv[1], argv[2]
    scenario = next((s for s in doc["scenarios"] if s["name"] == name), None)
    if scenario is None:
        print(f"scenario_server: no scenario named {name!r}", file=sys.stderr)
        return 2
    player = Player(path, scenario)
    print("ready", flush=True)
    try:
        player.run()
    except Failure as e:
        print(f"scenario_server: {name}: {e}", file=sys.stderr)
        return 1
    finally:
        player.finish()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
