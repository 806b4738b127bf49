"""Python client for keyholed, Keyhole's local auth daemon (Python 3.9+, standard library only).

keyholed listens on a Unix domain socket and speaks the protocol of Protocol/PROTOCOL.md: each
message is a 4-byte big-endian length and one UTF-8 JSON object. Copy this file and
keyhole_operations.py (the typed helpers) into your project.

    import keyhole

    with keyhole.Client() as kh:  # $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock
        print(kh.ping()["version"])
        try:
            result = kh.call("some.op", {"user": "alice"})
        except keyhole.KeyholeConnectionError as e:  # unavailable, connection_lost, timeout, protocol_error
            print("keyholed unavailable:", e.code, e)
        except keyhole.KeyholeError as e:  # keyholed answered with an error
            print(e.code, e.message, e.retry_after_ms)

Share one Client among all threads. It keeps one connection and pipelines requests on it: each gets
a distinct integer id; the waiting threads take turns reading the socket and hand each response to
the thread waiting for its id, so a slow operation does not hold back a fast one, and a call made
alone costs no switch between threads. The connection opens on the first call and is opened
again when it ends (keyholed restarted, or closed an idle connection), within each call's deadline.
A request written and left unanswered by a connection that ended is sent again once if its operation
is safe to repeat (SAFE_TO_REPEAT: reads and session.revoke); any other fails with
KeyholeConnectionError code "connection_lost": it may or may not have taken effect. But a connection
that keyholed ended with its goodbye (a graceful shutdown: an error with a null id and code
shutting_down) had every request it left unanswered never read: those are sent again on a new
connection whatever their operation, as often as goodbyes turn them away within the deadline, so a
restart fails no call. PROTOCOL.md, section 8, has the whole rule, which every Keyhole client follows.

KeyholeError.code is one of ERROR_CODES (a code keyholed sends that this module does not know is
reported as "internal", as the protocol asks) or, for KeyholeConnectionError, one of CLIENT_CODES.
"""

import errno
import itertools
import json
import os
import select
import socket
import struct
import threading
import time
import weakref

try:  # the typed helpers, one per operation, live beside this file
    from .keyhole_operations import Operations
except ImportError:
    from keyhole_operations import Operations

__all__ = ["Client", "KeyholeError", "KeyholeConnectionError", "DEFAULT_SOCKET", "ERROR_CODES",
           "CLIENT_CODES", "SAFE_TO_REPEAT", "OPERATIONS", "MAX_FRAME_BYTES", "encode_frame",
           "decode_response"]

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
                         "state_invalid", "apple_authorization_refused", "config_invalid"})
CLIENT_CODES = frozenset({"unavailable", "connection_lost", "timeout", "protocol_error"})
_HEADER = struct.Struct(">I")


class KeyholeError(Exception):
    """A call failed: code (str), message (str), retry_after_ms (int or None), apple_error (str or
    None: Apple's OAuth error with upstream_rejected).

    code is one of ERROR_CODES (keyholed's, with a code this module does not know reported as
    "internal" and kept in received_code) or, for KeyholeConnectionError, one of CLIENT_CODES.
    """

    def __init__(self, code, message, retry_after_ms=None, apple_error=None, received_code=None):
        super().__init__(code, message, retry_after_ms)
        self.code, self.message, self.retry_after_ms = code, message, retry_after_ms
        self.apple_error = apple_error
        self.received_code = received_code or code

    def __str__(self):
        retry = "" if self.retry_after_ms is None else f" (retry after {self.retry_after_ms} ms)"
        return f"{self.code}: {self.message}{retry}"


class KeyholeConnectionError(KeyholeError, ConnectionError):
    """The client's own failures (CLIENT_CODES): keyholed could not be reached ("unavailable": the
    request was never sent), the connection ended with a change unanswered ("connection_lost":
    outcome unknown), the deadline passed ("timeout"), or keyholed's answer broke the protocol
    ("protocol_error")."""

    def __init__(self, code, message):
        super().__init__(code, message)


def encode_frame(message):
    """Return a dict as one frame: compact UTF-8 JSON behind its 4-byte big-endian length."""
    payload = json.dumps(message, separators=(",", ":"), ensure_ascii=False,
                         allow_nan=False).encode("utf-8")
    if len(payload) > MAX_FRAME_BYTES:
        raise ValueError(f"request of {len(payload)} bytes is larger than a frame may be")
    return _HEADER.pack(len(payload)) + payload


def _request_body(op, args):
    """A request's JSON after its id, ready for _request_frame."""
    body = ('"op":%s,"args":%s,"v":1}' % (
        json.dumps(op, ensure_ascii=False),
        json.dumps(args, separators=(",", ":"), ensure_ascii=False, allow_nan=False))).encode("utf-8")
    if len(body) + 32 > MAX_FRAME_BYTES:
        raise ValueError(f"request of {len(body)} bytes is larger than a frame may be")
    return body


def _request_frame(rid, body):
    """The frame of a request with id rid: the same bytes encode_frame makes of it."""
    payload = b'{"id":%d,' % rid + body
    return _HEADER.pack(len(payload)) + payload


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def decode_response(payload):
    """Parse one response payload (bytes) and check its shape; raise ValueError if it is invalid."""
    try:
        msg = json.loads(payload.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("response is nested too deeply") from None
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
    code = err["code"] if err["code"] in ERROR_CODES else "internal"
    return KeyholeError(code, err.get("message", ""), err.get("retry_after_ms"),
                        apple_error if isinstance(apple_error, str) else None, received_code=err["code"])


SAFE_TO_REPEAT = frozenset({"ping", "stats", "token.verify", "jwks.status", "session.get",
                            "session.revoke", "session.list", "user.get", "apple.pending",
                            "debug.sleep", "debug.echo"})
"""Operations sent again after a connection ended with them unanswered (Protocol/ops.json)."""
OPERATIONS = frozenset(SAFE_TO_REPEAT | {"jwks.refresh", "session.create", "session.revoke_all",
                                         "user.update", "user.delete", "apple.sign_in",
                                         "apple.notification", "apple.refresh_check",
                                         "apple.transfer.export", "apple.transfer.import",
                                         "apple.authorize", "apple.callback",
                                         "admin.snapshot", "admin.reload", "debug.block",
                                         "debug.advance_clock"})
_RETRYABLE_CONNECT = (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN, errno.ECONNRESET)
_BACKOFF_FIRST, _BACKOFF_MAX = 0.010, 0.500


class _NotSent(Exception):
    """The request never reached keyholed: nothing of it was written (the connection was found
    closed), or keyholed's goodbye said it was not read. args[0]: why."""


class _Lost(Exception):
    """The request was written and the connection ended before its answer. args[0]: why."""


class _Slot:
    __slots__ = ("done", "response", "error")

    def __init__(self):
        self.done, self.response, self.error = False, None, None


class _Connection:
    """One socket, read by the calls waiting on it: no reader thread.

    A waiting call becomes the reader (the "leader") when nobody else reads: it reads frames and hands
    each answer to its slot until its own answer has come, then wakes the others so that one of them
    takes over. A call made while no other is waiting therefore sends and reads in its own thread,
    which costs no thread switch. Bytes read but not yet a whole frame stay in `buffer`, so a reader
    that stops at its deadline in the middle of a frame loses nothing.

    Invariants (under `cond`): a slot is in `pending` exactly as long as it is not done; once `error`
    is set no request is added, the remaining slots are failed with it, and the socket is closed.
    The socket is non-blocking: every wait is a poll bounded by the caller's deadline.
    """

    def __init__(self, sock):
        sock.setblocking(False)
        self.sock, self.pending, self.error, self.retired = sock, {}, None, False
        self.cond = threading.Condition(threading.Lock())
        self.send_lock = threading.Lock()
        self.reading = False
        self.buffer = bytearray()
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)

    def usable(self):
        with self.cond:
            return self.error is None and not self.retired

    def retire(self):
        """Send nothing more on this connection (keyholed said it is shutting down, or a write found
        it closed while another call reads it); it is closed once no call waits on it."""
        with self.cond:
            self.retired = True
            self._close_if_idle()

    def _close_if_idle(self):
        # Under cond: a retired connection nobody waits on or reads is closed now, not left to the
        # garbage collector (a ResourceWarning, and a descriptor held meanwhile).
        if self.retired and not self.pending and not self.reading and self.sock.fileno() >= 0:
            self.sock.close()

    def abandon(self):
        """In the child of a fork: close this process's descriptor of the parent's connection.

        No shutdown, which would end the connection for the parent too, and no lock: one that
        another thread of the parent held at the fork stays held in the child."""
        try:
            self.sock.close()
        except OSError:
            pass

    def shut(self, error):
        """Fail every waiting call with `error`, take no more, and close the socket."""
        with self.cond:
            self._fail(error)

    def _fail(self, error):
        # Under cond. A reader in poll() is woken by the shutdown and finds the error set.
        if self.error is None:
            self.error = error
        for slot in self.pending.values():
            slot.error, slot.done = self.error, True
        self.pending.clear()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed or shut down
        if not self.reading:
            self.sock.close()
        self.cond.notify_all()

    def request(self, rid, frame, deadline):
        """Send a frame with id rid and return its response.

        Raises _NotSent when nothing was written or keyholed's goodbye said it did not read the
        request, _Lost when the connection ended with the request written and unanswered,
        KeyholeError (keyholed's, about the connection) or KeyholeConnectionError (timeout,
        protocol_error).
        """
        slot = _Slot()
        with self.cond:
            if self.error is not None or self.retired:
                raise _NotSent(self.error)
            self.pending[rid] = slot
        self._send(rid, frame, deadline)
        with self.cond:
            while not slot.done and self.reading:
                if not self.cond.wait(deadline - time.monotonic()) and not slot.done:
                    self.pending.pop(rid, None)
                    raise KeyholeConnectionError("timeout", "no answer from keyholed within the deadline")
            if not slot.done:
                self.reading = True
        if not slot.done:
            self._lead(slot, deadline)
        if slot.error is not None:
            raise _fresh(slot.error)
        if slot.response is None:
            with self.cond:
                self.pending.pop(rid, None)
                self._close_if_idle()
            raise KeyholeConnectionError("timeout", "no answer from keyholed within the deadline")
        with self.cond:
            self._close_if_idle()
        return slot.response

    def _send(self, rid, frame, deadline):
        """Write the whole frame, or raise: nothing of a frame that was not written whole can have
        reached keyholed as a request, so every failure here is _NotSent (or a timeout)."""
        sent, view = 0, memoryview(frame)
        if not self.send_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            with self.cond:
                self.pending.pop(rid, None)
            raise KeyholeConnectionError("timeout", "no turn to send to keyholed within the deadline")
        try:
            try:
                while sent < len(frame):  # not sendall(): on failure we must know how much went out
                    try:
                        sent += self.sock.send(view[sent:])
                    except BlockingIOError:
                        # keyholed is not reading now (max_in_flight): wait for room, within the deadline.
                        if not select.select([], [self.sock], [], max(0.0, deadline - time.monotonic()))[1]:
                            raise socket.timeout("no room to send to keyholed within the deadline") from None
                return
            except OSError as e:
                error = e
        finally:
            self.send_lock.release()
        if sent == 0 and isinstance(error, socket.timeout):
            # Nothing went out: the connection is as good as it was; only this call is over.
            with self.cond:
                self.pending.pop(rid, None)
            raise KeyholeConnectionError("timeout", str(error))
        with self.cond:
            self.pending.pop(rid, None)
            closed = isinstance(error, (BrokenPipeError, ConnectionResetError))
            if closed and self.reading:
                # keyholed closed the connection, and another call is reading it: what keyholed wrote
                # before closing (answers, its goodbye) is still to be read, and decides how the
                # requests waiting there end, so the reader ends the connection at end of stream,
                # not this write. Nothing more is sent on it meanwhile.
                self.retired = True
                why = self.error or f"connection to keyholed lost: {error}"
            else:
                if closed:
                    # keyholed closed the connection, maybe after saying why (overloaded) or saying
                    # goodbye: read what it sent, so that the callers hear it.
                    self._drain_closed()
                # A part of a frame went out, or the socket failed: the connection cannot carry more.
                self._fail(_Lost(f"connection to keyholed lost: {error}"))
                why = self.error
        if isinstance(error, socket.timeout):
            raise KeyholeConnectionError("timeout", str(error))
        if isinstance(why, KeyholeError) and not isinstance(why, KeyholeConnectionError):
            raise _fresh(why)
        raise _NotSent(why)

    def _drain_closed(self):
        """Under cond, the peer gone: take in the frames it left (answers, an error with a null id)."""
        if self.reading:
            return
        try:
            while self.sock.fileno() >= 0:  # a goodbye closes it (_fail)
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self.buffer += chunk
                self._dispatch()
        except (OSError, ValueError):
            pass

    def _lead(self, slot, deadline):
        """Read until slot is done, the deadline passes, or the connection ends; then hand over."""
        failure = None
        try:
            while not slot.done:
                timeout_ms = int((deadline - time.monotonic()) * 1000)
                if timeout_ms <= 0 or not self.poller.poll(timeout_ms):
                    break  # our deadline; the next reader goes on from the buffer
                try:
                    chunk = self.sock.recv(262144)
                except BlockingIOError:
                    continue
                if not chunk:
                    failure = _Lost("connection closed by keyholed" if not self.buffer
                                    else "connection closed in the middle of a frame")
                    break
                self.buffer += chunk
                with self.cond:
                    self._dispatch()
        except ValueError as e:  # includes invalid UTF-8 and invalid JSON
            failure = KeyholeConnectionError("protocol_error", f"invalid answer from keyholed: {e}")
        except OSError as e:
            failure = _Lost(f"connection to keyholed lost: {e}")
        except BaseException as e:  # noqa: BLE001 - whatever it is, the connection must not stay unread
            failure = KeyholeConnectionError("protocol_error", f"reading keyholed's answer failed: {e!r}")
            raise
        finally:
            with self.cond:
                self.reading = False
                if failure is not None or self.error is not None:
                    self._fail(failure)
                    if self.sock.fileno() >= 0:
                        self.sock.close()
                self._close_if_idle()
                self.cond.notify_all()

    def _dispatch(self):
        """Under cond: hand every whole frame in the buffer to its slot."""
        buffer = self.buffer
        while len(buffer) >= 4:
            (length,) = _HEADER.unpack_from(buffer)
            if not 1 <= length <= MAX_FRAME_BYTES:
                raise ValueError(f"answer frame length {length} is outside 1...{MAX_FRAME_BYTES}")
            if len(buffer) < 4 + length:
                return
            msg = decode_response(bytes(buffer[4:4 + length]))
            del buffer[:4 + length]
            if msg.get("id") is None:
                # Our requests all have ids, so this is about the connection.
                if msg["ok"] or self.error is not None:
                    continue
                if msg["error"]["code"] == "shutting_down":
                    # keyholed's goodbye: its last frame, after every answer it owed. It read none
                    # of the requests still waiting here, so each is sent again on a new
                    # connection (whatever its operation); nothing more is sent on this one.
                    self._fail(_NotSent("keyholed is shutting down and did not read this request"))
                else:
                    # overloaded, bad_frame, frame_too_large: keyholed answers the requests it has
                    # read, then closes; the others fail with this error.
                    self.error = _error(msg["error"])
            else:
                slot = self.pending.pop(msg["id"], None)
                if slot is not None:  # None: not ours, or its caller has timed out
                    slot.response, slot.done = msg, True
                    self.cond.notify_all()


def _fresh(error):
    """A new exception like `error`, for one waiting thread (one exception object each)."""
    if isinstance(error, _Lost):
        return _Lost(*error.args)
    if isinstance(error, _NotSent):
        return _NotSent(*error.args)
    if isinstance(error, KeyholeConnectionError):
        return KeyholeConnectionError(error.code, error.message)
    return KeyholeError(error.code, error.message, error.retry_after_ms, error.apple_error, error.received_code)


# Every live Client, for the child of a fork to drop the connections it inherited (os.register_at_fork
# runs in the child, before any other thread exists there; checking os.getpid() on every call instead
# would cost each call a system call).
_CLIENTS = weakref.WeakSet()


def _after_fork_in_child():
    for client in list(_CLIENTS):
        client._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Client(Operations):
    """A thread-safe connection to keyholed.

    path: the socket; default $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock.
    timeout: seconds a call may take in all (connecting, waiting to reconnect, writing, the answer).
    A call past it raises KeyholeConnectionError with code "timeout" (or "unavailable" when keyholed
    could not be reached at all); the connection stays open and a late answer is discarded.
    retry_overloaded: when true, an "overloaded" answer is retried after its retry_after_ms, within
    the timeout; by default it is raised at once.
    """

    def __init__(self, path=None, timeout=5.0, retry_overloaded=False):
        self.path = os.fspath(path or os.environ.get("KEYHOLE_SOCKET") or DEFAULT_SOCKET)
        if timeout is None or timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.timeout = timeout
        self.retry_overloaded = retry_overloaded
        self._lock, self._connect_lock = threading.Lock(), threading.Lock()
        self._conn, self._closed, self._ids = None, False, itertools.count(1)
        _CLIENTS.add(self)

    def _after_fork_in_child(self):
        """The child of a fork opens its own connection on its first call.

        Parent and child sharing one connection would each read answers meant for the other (the
        ids too are the same in both), so a call could be answered with another's session. Locks
        are made again: one a thread of the parent held at the fork would stay held in the child.
        """
        self._lock, self._connect_lock = threading.Lock(), threading.Lock()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abandon()

    def call(self, op, args=None):
        """Perform operation op with args (a dict) and return its result dict.

        Raises KeyholeError if keyholed answers with an error, KeyholeConnectionError (a
        KeyholeError whose code is unavailable, connection_lost, timeout or protocol_error) if it
        cannot be reached or does not answer in time, TypeError/ValueError if args cannot be sent
        as JSON. Requests are sent again as PROTOCOL.md section 8 says: one never written, or left
        unanswered on a connection keyholed ended with its goodbye, goes out on a new connection;
        one written and left unanswered otherwise (or answered shutting_down) goes again once if
        safe to repeat, else raises connection_lost (or the shutting_down error).
        """
        if not isinstance(op, str):
            raise TypeError(f"op must be a str, not {type(op).__name__}")
        if args is None:
            args = {}
        elif not isinstance(args, dict):
            raise TypeError(f"args must be a dict, not {type(args).__name__}")
        # Encoded once (it fails here on what cannot be sent); each attempt only puts its id in front.
        body = _request_body(op, args)
        deadline = time.monotonic() + self.timeout
        safe, resent, backoff = op in SAFE_TO_REPEAT, False, _BACKOFF_FIRST
        while True:
            conn = self._connection(deadline)
            with self._lock:
                rid = next(self._ids)
            try:
                response = conn.request(rid, _request_frame(rid, body), deadline)
            except KeyholeConnectionError:
                raise
            except KeyholeError as e:  # keyholed's, about the connection (overloaded on connect)
                if self._wait_overloaded(e, deadline):
                    continue
                raise
            except _NotSent:
                # Never reached keyholed (the connection was found closed, or keyholed's goodbye
                # said it was not read): sent on a new connection whatever its operation, without
                # using up the one re-send, as often as it takes within the deadline.
                backoff = self._pause(backoff, deadline)
                continue
            except _Lost as e:
                if safe and not resent:
                    resent = True
                    continue
                raise KeyholeConnectionError(
                    "connection_lost", f"{e.args[0]}; {op} may or may not have taken effect") from None
            if response["ok"]:
                return response["result"]
            error = _error(response["error"])
            if error.code == "shutting_down":
                conn.retire()
                if safe and not resent:
                    resent = True
                    continue
            elif self._wait_overloaded(error, deadline):
                continue
            raise error

    def _wait_overloaded(self, error, deadline):
        """With retry_overloaded, wait out an overloaded answer if that ends before the deadline."""
        if (error.code == "overloaded" and self.retry_overloaded and error.retry_after_ms is not None
                and time.monotonic() + error.retry_after_ms / 1000 < deadline):
            time.sleep(error.retry_after_ms / 1000)  # the caller asked for it
            return True
        return False

    def _pause(self, backoff, deadline):
        """Wait before another attempt (at most until just before the deadline, so that a last
        attempt is made then); raise unavailable once the deadline has passed."""
        left = deadline - time.monotonic()
        if left <= 0.001:
            raise KeyholeConnectionError("unavailable", f"cannot reach keyholed at {self.path} within the deadline")
        time.sleep(min(backoff, left - 0.001))
        return min(backoff * 2, _BACKOFF_MAX)

    def close(self):
        """Close the connection; calls in flight and later calls raise KeyholeConnectionError.

        A call in flight fails as its connection does: "connection_lost", or sent again when safe
        to repeat, and then "unavailable"."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            # Calls in flight are then lost as with any connection that ends: a change written is
            # connection_lost (it may have been applied), never "unavailable".
            conn.shut(_Lost("client closed"))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def _connection(self, deadline):
        """The open connection, else a new one: connecting again, with waits between attempts,
        until the deadline (then KeyholeConnectionError "unavailable")."""
        with self._lock:
            if self._closed:
                raise KeyholeConnectionError("unavailable", "client is closed")
            if self._conn is not None and self._conn.usable():
                return self._conn
        # One thread connects; the others wait for its connection, but not past their own deadline.
        if not self._connect_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise KeyholeConnectionError("unavailable", f"cannot reach keyholed at {self.path} within the deadline")
        try:
            with self._lock:
                if self._closed:
                    raise KeyholeConnectionError("unavailable", "client is closed")
                if self._conn is not None and self._conn.usable():
                    return self._conn
            return self._connect(deadline)
        finally:
            self._connect_lock.release()

    def _connect(self, deadline):
        backoff = _BACKOFF_FIRST
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                sock.connect(self.path)
                break
            except OSError as e:
                sock.close()
                if isinstance(e, socket.timeout) or e.errno not in _RETRYABLE_CONNECT:
                    raise KeyholeConnectionError("unavailable", f"cannot connect to keyholed at {self.path}: {e}") from e
                why = e
            left = deadline - time.monotonic()
            if left <= 0.001:
                raise KeyholeConnectionError(
                    "unavailable", f"cannot connect to keyholed at {self.path} within the deadline: {why}")
            time.sleep(min(backoff, left - 0.001))  # the last attempt comes just before the deadline
            backoff = min(backoff * 2, _BACKOFF_MAX)
        conn = _Connection(sock)
        with self._lock:
            if self._closed:
                conn.shut(KeyholeConnectionError("unavailable", "client is closed"))
                raise KeyholeConnectionError("unavailable", "client is closed")
            old, self._conn = self._conn, conn
        if old is not None and old is not conn:
            old.retire()
        return conn
