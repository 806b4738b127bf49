"""Python client for keyholed, Keyhole's local auth daemon (Python 3.9+, standard library only).

keyholed listens on a Unix domain socket and speaks the protocol of Protocol/PROTOCOL.md: each
message is a 4-byte big-endian length and one UTF-8 JSON object. Copy this file into your project.

    import keyhole

    with keyhole.Client() as kh:  # $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock
        print(kh.ping()["version"])
        try:
            result = kh.call("some.op", {"user": "alice"})
        except keyhole.KeyholeError as e:  # keyholed answered with an error
            print(e.code, e.message, e.retry_after_ms)
        except keyhole.KeyholeConnectionError as e:  # cannot connect, connection lost, timeout
            print("keyholed unavailable:", e)

Share one Client among all threads. It keeps one connection and pipelines requests on it: each gets
a distinct integer id, and a reader thread hands each response to the thread waiting for its id, so
a slow operation does not hold back a fast one. The connection opens on the first call. If it is
found closed before a request has been written (keyholed closed an idle connection, or restarted),
the client reconnects once and sends the request there. A request that may have reached keyholed is
never sent again: if the connection drops while it is in flight, the call raises
KeyholeConnectionError and the operation may or may not have taken effect.

KeyholeError.code is one of ERROR_CODES or, kept as received, a code this module does not know (the
protocol asks clients to treat those as "internal").
"""

import itertools
import json
import os
import socket
import struct
import threading

__all__ = ["Client", "KeyholeError", "KeyholeConnectionError", "DEFAULT_SOCKET", "ERROR_CODES",
           "MAX_FRAME_BYTES", "encode_frame", "decode_response"]

DEFAULT_SOCKET = "/run/keyhole/keyhole.sock"
MAX_FRAME_BYTES = 16 * 1024 * 1024  # the largest frame either side may send
ERROR_CODES = frozenset({"bad_frame", "frame_too_large", "bad_request", "unknown_op",
                         "unsupported_version", "permission_denied", "overloaded",
                         "shutting_down", "internal", "token_malformed", "token_alg_not_allowed",
                         "token_key_unknown", "token_signature_invalid", "token_expired",
                         "token_not_yet_valid", "token_issuer_unknown", "token_audience_invalid",
                         "token_nonce_mismatch", "token_claim_invalid", "keys_unavailable",
                         "session_not_found", "user_not_found", "storage_unavailable", "data_too_large",
                         "upstream_rejected", "upstream_unavailable", "not_configured",
                         "config_invalid"})
_HEADER = struct.Struct(">I")


def _args(**members):
    """The members that are not None."""
    return {name: value for name, value in members.items() if value is not None}


class KeyholeError(Exception):
    """keyholed answered with an error: code (str), message (str), retry_after_ms (int or None),
    apple_error (str or None: Apple's OAuth error with upstream_rejected)."""

    def __init__(self, code, message, retry_after_ms=None, apple_error=None):
        super().__init__(code, message, retry_after_ms)
        self.code, self.message, self.retry_after_ms = code, message, retry_after_ms
        self.apple_error = apple_error

    def __str__(self):
        retry = "" if self.retry_after_ms is None else f" (retry after {self.retry_after_ms} ms)"
        return f"{self.code}: {self.message}{retry}"


class KeyholeConnectionError(ConnectionError):
    """Cannot connect to keyholed, the connection was lost, or no response came in time."""


def encode_frame(message):
    """Return a dict as one frame: compact UTF-8 JSON behind its 4-byte big-endian length."""
    payload = json.dumps(message, separators=(",", ":"), ensure_ascii=False,
                         allow_nan=False).encode("utf-8")
    if len(payload) > MAX_FRAME_BYTES:
        raise ValueError(f"request of {len(payload)} bytes is larger than a frame may be")
    return _HEADER.pack(len(payload)) + payload


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def decode_response(payload):
    """Parse one response payload (bytes) and check its shape; raise ValueError if it is invalid."""
    msg = json.loads(payload.decode("utf-8"), parse_constant=_reject_constant)
    if not isinstance(msg, dict):
        raise ValueError("response is not a JSON object")
    if type(msg.get("id")) not in (int, str, type(None)):
        raise ValueError(f"response id {msg['id']!r} is neither an integer, a string nor null")
    err = msg.get("error")
    if not (msg.get("ok") is True and isinstance(msg.get("result"), dict)
            or msg.get("ok") is False and isinstance(err, dict) and isinstance(err.get("code"), str)
            and isinstance(err.get("message", ""), str)
            and type(err.get("retry_after_ms")) in (int, float, type(None))):
        raise ValueError("response is neither ok with a result object nor an error object")
    return msg


def _error(err):
    apple_error = err.get("apple_error")
    return KeyholeError(err["code"], err.get("message", ""), err.get("retry_after_ms"),
                        apple_error if isinstance(apple_error, str) else None)


class _NotSent(Exception):
    """The connection was closed before any byte of the request was written; args[0]: why."""


class _Slot:
    __slots__ = ("done", "response", "error")

    def __init__(self):
        self.done, self.response, self.error = threading.Event(), None, None


class _Connection:
    """One socket and the thread that reads it.

    Invariants: a slot is in `pending` exactly as long as it is unfinished, and slots are finished
    only under `lock`. Once `error` is set no request is added, and when the reader stops it fails
    the remaining slots with `error`. The socket is closed only under `send_lock` and `lock` (in
    that order, the only order in which both are taken).
    """

    def __init__(self, path, timeout):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)  # bounds connect and send; the reader ignores it
            sock.connect(path)
        except OSError as e:
            sock.close()
            raise KeyholeConnectionError(f"cannot connect to keyholed at {path}: {e}") from e
        self.sock, self.pending, self.error = sock, {}, None
        self.lock, self.send_lock = threading.Lock(), threading.Lock()
        self.reader = threading.Thread(target=self._read_loop, name="keyhole-reader", daemon=True)
        self.reader.start()

    def usable(self):
        with self.lock:
            return self.error is None

    def shut(self, error):
        """Take no more requests; wake the reader, which fails pending ones and closes the socket."""
        with self.lock:
            if self.error is None:
                self.error = error
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed or shut down

    def request(self, rid, frame, timeout):
        """Send a frame with id rid and return its response; raise _NotSent if nothing was sent."""
        slot = _Slot()
        with self.send_lock:
            with self.lock:
                if self.error is not None:
                    raise _NotSent(self.error)
                self.pending[rid] = slot
            sent, view = 0, memoryview(frame)
            try:
                while sent < len(frame):  # not sendall(): we must know whether anything was sent
                    sent += self.sock.send(view[sent:])
            except OSError as e:
                with self.lock:
                    self.pending.pop(rid, None)
                if sent == 0 and isinstance(e, socket.timeout):
                    raise KeyholeConnectionError(f"timed out sending to keyholed: {e}") from e
                if sent == 0 and isinstance(e, (BrokenPipeError, ConnectionResetError)):
                    closed_by_peer = e
                else:
                    self.shut(KeyholeConnectionError(f"connection to keyholed lost: {e}"))
                    raise KeyholeConnectionError(f"connection lost while sending: {e}") from e
            else:
                closed_by_peer = None
        if closed_by_peer is not None:
            # keyholed closed the connection, maybe after saying why (overloaded): let the reader
            # take in what it sent, outside send_lock, which the reader needs to finish.
            self.reader.join(timeout)
            self.shut(KeyholeConnectionError(f"connection closed by keyholed: {closed_by_peer}"))
            with self.lock:
                raise _NotSent(self.error)
        if not slot.done.wait(timeout):
            with self.lock:
                if self.pending.pop(rid, None) is slot:  # else it was finished just now
                    raise KeyholeConnectionError(f"no response from keyholed within {timeout} s")
        if slot.error is not None:
            raise type(slot.error)(*slot.error.args)  # a fresh exception for each waiting thread
        return slot.response

    def _read_loop(self):
        try:
            while self._read_one():
                pass
            failure = KeyholeConnectionError("connection closed by keyholed")
        except ValueError as e:  # includes invalid UTF-8 and invalid JSON
            failure = KeyholeConnectionError(f"invalid response from keyholed: {e}")
        except Exception as e:
            failure = KeyholeConnectionError(f"connection to keyholed lost: {e}")
        self.shut(failure)
        with self.send_lock, self.lock:
            self.sock.close()
            for slot in self.pending.values():
                slot.error = self.error
                slot.done.set()
            self.pending.clear()

    def _read_one(self):
        """Read one frame and hand it to its waiter; return False on end of stream."""
        header = self._recv(4)
        if header is None:
            return False
        (length,) = _HEADER.unpack(header)
        if not 1 <= length <= MAX_FRAME_BYTES:
            raise ValueError(f"response frame length {length} is outside 1...{MAX_FRAME_BYTES}")
        body = self._recv(length)
        if body is None:
            raise ConnectionError("connection closed between a frame's header and its body")
        msg = decode_response(body)
        with self.lock:
            if msg.get("id") is None:
                # Our requests all have ids, so this is about the connection (overloaded, bad_frame,
                # frame_too_large): keyholed answers the requests it has read, then closes; the
                # others fail with this error.
                if not msg["ok"] and self.error is None:
                    self.error = _error(msg["error"])
            else:
                slot = self.pending.pop(msg["id"], None)
                if slot is not None:  # None: its caller has timed out
                    slot.response = msg
                    slot.done.set()
        return True

    def _recv(self, n):
        """Read exactly n bytes; None on end of stream before the first one."""
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:])
            except socket.timeout:
                continue  # merely idle; waiting callers have their own timeouts
            if k == 0:
                if got == 0:
                    return None
                raise ConnectionError("connection closed in the middle of a frame")
            got += k
        return bytes(buf)


class Client:
    """A thread-safe connection to keyholed.

    path: the socket; default $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock.
    timeout: seconds allowed for connecting, for writing a request, and for its response to
    arrive (None: no limit). A timed-out call raises KeyholeConnectionError; the connection stays
    open and a late response is discarded.
    """

    def __init__(self, path=None, timeout=5.0):
        self.path = os.fspath(path or os.environ.get("KEYHOLE_SOCKET") or DEFAULT_SOCKET)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._conn, self._closed, self._ids = None, False, itertools.count(1)

    def call(self, op, args=None):
        """Perform operation op with args (a dict) and return its result dict.

        Raises KeyholeError if keyholed answers with an error, KeyholeConnectionError if it cannot
        be reached or does not answer in time, TypeError/ValueError if args cannot be sent as JSON.
        """
        if not isinstance(op, str):
            raise TypeError(f"op must be a str, not {type(op).__name__}")
        if args is None:
            args = {}
        elif not isinstance(args, dict):
            raise TypeError(f"args must be a dict, not {type(args).__name__}")
        with self._lock:
            rid = next(self._ids)
        frame = encode_frame({"id": rid, "op": op, "args": args, "v": 1})
        for _ in range(2):  # a second attempt only if the connection was found closed before sending
            try:
                response = self._connection().request(rid, frame, self.timeout)
            except _NotSent as e:
                error = e.args[0]
                continue
            if response["ok"]:
                return response["result"]
            raise _error(response["error"])
        if isinstance(error, KeyholeError):  # such as overloaded, sent on connect
            raise type(error)(*error.args)
        raise KeyholeConnectionError(f"connection to keyholed at {self.path} closed before sending")

    def ping(self):
        """Return {"protocol": 1, "version": ..., "uptime_ms": ...}."""
        return self.call("ping")

    def stats(self):
        """Return keyholed's counters (connections, requests, in_flight, errors, bytes, uptime_ms, store)."""
        return self.call("stats")

    def verify_token(self, token, issuer=None, audience=None, nonce=None):
        """Verify an identity token (a JWT); return {issuer, sub, aud, exp, iat, claims, ...}.

        Raises KeyholeError with a token_* code (or keys_unavailable) when it does not verify.
        """
        args = {"token": token}
        for name, value in (("issuer", issuer), ("audience", audience), ("nonce", nonce)):
            if value is not None:
                args[name] = value
        return self.call("token.verify", args)

    def jwks_status(self, issuer=None):
        """Return each issuer's key-set status: kids, fetched_at, expires_at, last_error, counts."""
        return self.call("jwks.status", {} if issuer is None else {"issuer": issuer})

    def jwks_refresh(self, issuer=None):
        """Fetch the issuers' key sets now (under keyholed's refetch cool-down); return the outcomes."""
        return self.call("jwks.refresh", {} if issuer is None else {"issuer": issuer})

    def create_session(self, sub, issuer=None, ttl_s=None, idle_s=None, data=None):
        """Create a session; return {"session": token, "id", "expires_at"}. The token is shown only here."""
        return self.call("session.create", _args(sub=sub, issuer=issuer, ttl_s=ttl_s, idle_s=idle_s, data=data))

    def get_session(self, session):
        """The live session `session` (a token) names, with its user; KeyholeError session_not_found if none."""
        return self.call("session.get", {"session": session})

    def revoke_session(self, session=None, id=None):
        """Revoke a session by token or by id; return whether a live one was revoked."""
        if (session is None) == (id is None):
            raise ValueError("give exactly one of session and id")
        args = {"session": session} if session is not None else {"id": id}
        return self.call("session.revoke", args)["revoked"]

    def revoke_all_sessions(self, sub, issuer=None):
        """Revoke every session of a user; return how many were live."""
        return self.call("session.revoke_all", _args(sub=sub, issuer=issuer))["revoked"]

    def list_sessions(self, sub, issuer=None):
        """A user's live sessions (ids and times, never tokens), oldest first."""
        return self.call("session.list", _args(sub=sub, issuer=issuer))["sessions"]

    def get_user(self, sub, issuer=None):
        """A user's record; KeyholeError user_not_found if none."""
        return self.call("user.get", _args(sub=sub, issuer=issuer))

    def update_user(self, sub, issuer=None, **changes):
        """Set `email` and/or `name` ({"given", "family"}); None removes. Returns {"user", "created"}."""
        unknown = set(changes) - {"email", "name"}
        if unknown:
            raise TypeError("unknown user fields: %s" % ", ".join(sorted(unknown)))
        args = _args(sub=sub, issuer=issuer)
        args.update(changes)
        return self.call("user.update", args)

    def delete_user(self, sub, issuer=None):
        """Delete a user's record and every session of theirs; return {"deleted", "sessions_revoked"}."""
        return self.call("user.delete", _args(sub=sub, issuer=issuer))

    def admin_snapshot(self):
        """Snapshot the users and sessions now; return its figures once it is durable.

        The result is {"start_lsn", "sessions", "users", "bytes", "wal_bytes_removed", "created_at",
        "ms", "longest_pause_us"}; the log segments the snapshot covers are deleted by then. A snapshot already being
        taken is waited for, then a fresh one is taken. Raises KeyholeError storage_unavailable
        (retry after retry_after_ms) when storage is failing, keyholed is stopping, or the snapshot
        cannot be written.
        """
        return self.call("admin.snapshot")

    def close(self):
        """Close the connection; calls in flight and later calls raise KeyholeConnectionError."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.shut(KeyholeConnectionError("client closed"))
            conn.reader.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def _connection(self):
        with self._lock:
            if self._closed:
                raise KeyholeConnectionError("client is closed")
            if self._conn is None or not self._conn.usable():
                self._conn = _Connection(self.path, self.timeout)
            return self._conn
