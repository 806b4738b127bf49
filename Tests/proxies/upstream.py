#!/usr/bin/env python3
"""The application behind the proxy in the proxy tests: it shows what reached it.

    python3 upstream.py --log FILE [--port 0]

Listens on 127.0.0.1 (port 0: a free one) and prints one JSON line, {"port": N}, when it is ready.
Every request, whatever its method and path, is answered 200 with a JSON body:

    {"method": "GET", "target": "/x?y=1", "version": "HTTP/1.1",
     "headers": [["Host", "..."], ["X-Auth-Request-User", "..."], ...], "body": "..."}

`headers` are the head's lines as they arrived, split at their first colon (values without the
surrounding blanks), in order and with their spelling kept: a header sent twice, or under another
case or with underscores, shows as it came. Bytes are decoded as Latin-1, so none is lost. The
request is also appended to FILE as one JSON line (the same object), flushed before the answer is
written: a test that has the proxy's answer in hand can read FILE to see whether, and what, reached
the application.

The answer leaves out a body over 1 KiB: there it carries "body": null, "body_length" and
"body_sha256" instead (the log keeps the body whole). An answer that arrives in the proxy's first
read is immune to a race in Caddy 2.6 (Go 1.19's HTTP/1 server): when the proxy writes the answer's
head before its transport has read the end of the client's body, the server closes that body, the
transport's read of it fails, and the transport closes the connection to the application, so a long
answer is cut short (CI saw 4021 of 100 622 bytes; packaging/proxies/README.md). Tests read what
reached the application from the log, never from the answer.

HTTP/1.1 keep-alive and HTTP/1.0, bodies by Content-Length or chunked. Standard library only. It
exits at end of its standard input, or on SIGTERM.
"""

import argparse
import hashlib
import json
import os
import signal
import socketserver
import sys
import threading

MAX_HEAD = 64 * 1024
ANSWERED_BODY = 1024  # bytes of the request's body the answer echoes at most (see above)


class BadRequest(Exception):
    pass


def read_head(rfile):
    """The request line and header lines (Latin-1 text), or None at a clean end of the connection."""
    lines = []
    size = 0
    while True:
        raw = rfile.readline(MAX_HEAD + 1)
        if not raw:
            if lines:
                raise BadRequest("connection ended inside a head")
            return None
        size += len(raw)
        if size > MAX_HEAD:
            raise BadRequest("head too large")
        line = raw.rstrip(b"\r\n").decode("latin-1")
        if not lines and line == "":
            continue  # a blank line before a request line is allowed (RFC 9112 2.2)
        if line == "":
            return lines
        lines.append(line)


def read_body(rfile, headers):
    names = {name.lower(): value for name, value in headers}
    if "chunked" in names.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line = rfile.readline(1024)
            if not size_line:
                raise BadRequest("connection ended inside a chunked body")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while rfile.readline(MAX_HEAD) not in (b"\r\n", b"\n", b""):
                    pass  # trailer fields
                return bytes(body)
            body += rfile.read(size)
            rfile.readline(3)  # the chunk's CRLF
    length = int(names.get("content-length", "0") or "0")
    return rfile.read(length) if length else b""


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            try:
                head = read_head(self.rfile)
                if head is None:
                    return
                request_line = head[0].split(" ")
                if len(request_line) != 3:
                    raise BadRequest("bad request line")
                method, target, version = request_line
                headers = []
                for line in head[1:]:
                    name, sep, value = line.partition(":")
                    if not sep:
                        raise BadRequest("header line without a colon")
                    headers.append([name, value.strip(" \t")])
                body = read_body(self.rfile, headers)
            except (BadRequest, ValueError) as e:
                self.answer(400, {"error": str(e)}, close=True)
                return
            seen = {"method": method, "target": target, "version": version, "headers": headers,
                    "body": body.decode("latin-1")}
            self.server.record(seen)
            connection = ",".join(v for n, v in headers if n.lower() == "connection").lower()
            close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
            answer = seen
            if len(body) > ANSWERED_BODY:
                answer = dict(seen, body=None, body_length=len(body), body_sha256=hashlib.sha256(body).hexdigest())
            self.answer(200, answer, close=close, head_only=method == "HEAD", version=version)
            if close:
                return

    def answer(self, status, obj, close, head_only=False, version="HTTP/1.1"):
        body = json.dumps(obj).encode("utf-8")
        reason = {200: "OK", 400: "Bad Request"}[status]
        head = [f"{version} {status} {reason}", "Content-Type: application/json",
                f"Content-Length: {len(body)}"]
        if close:
            head.append("Connection: close")
        elif version == "HTTP/1.0":
            head.append("Connection: keep-alive")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else body))
        self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port, log_path):
        super().__init__(("127.0.0.1", port), Handler)
        self.log_lock = threading.Lock()
        self.log_path = log_path

    def record(self, seen):
        with self.log_lock, open(self.log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps(seen) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True, help="file each request is appended to, one JSON line each")
    options = parser.parse_args()
    server = Server(options.port, options.log)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdout.write(json.dumps({"port": server.server_address[1]}) + "\n")
    sys.stdout.flush()
    for _ in sys.stdin:
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
