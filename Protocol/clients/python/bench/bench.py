"""One Python process, one connection, depth 1: keyhole's session.get against redis-py's GET.

    python3 bench.py --keyhole SOCKET --redis-socket PATH [--seconds S]

Prints one JSON line: {"client": "python", "keyhole_session_get_us", "redis_get_us",
"floor_us", "keyhole_cpu_us", "redis_cpu_us", "keyhole_requests", "redis_requests", "calls"}: wall
and this process's CPU µs per call, each the median over rounds of a round's mean; floor_us, the
same session.get with no client at all (the frame written on a plain socket and its answer read
whole, not decoded), the least any Python client could pay; the requests each server was sent (warm-up and setup included, so that the caller can divide the server's CPU time by them). make bench (Scripts/client_bench.py) runs it;
tests do not (timing belongs to make bench). redis-py comes from PyPI.
"""

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import keyhole  # noqa: E402
import redis  # noqa: E402

ROUNDS = 5


def rounds(call, seconds):
    """Medians over ROUNDS of wall and CPU µs per call; and the calls made, warm-up included."""
    for _ in range(200):  # warm up
        call()
    per_round, cpu, total = [], [], 200
    for _ in range(ROUNDS):
        n, start, cpu_start = 0, time.perf_counter(), time.process_time()
        end = start + seconds / ROUNDS
        while True:
            for _ in range(100):
                call()
            n += 100
            now = time.perf_counter()
            if now >= end:
                break
        cpu.append((time.process_time() - cpu_start) * 1e6 / n)
        per_round.append((now - start) * 1e6 / n)
        total += n
    return statistics.median(per_round), statistics.median(cpu), total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keyhole", required=True)
    parser.add_argument("--redis-socket", required=True)
    parser.add_argument("--seconds", type=float, default=5.0)
    options = parser.parse_args()
    client = keyhole.Client(options.keyhole)
    token = client.create_session("bench-python")["session"]
    r = redis.Redis(unix_socket_path=options.redis_socket)
    r.set("bench:python", b"v" * 300)
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(options.keyhole)
    payload = json.dumps({"id": 1, "op": "session.get", "args": {"session": token}}).encode()
    frame = struct.pack(">I", len(payload)) + payload

    def floor_call():
        raw.sendall(frame)
        answer = b""
        while len(answer) < 4 or len(answer) < 4 + struct.unpack_from(">I", answer)[0]:
            got = raw.recv(65536)
            if not got:
                raise SystemExit("bench.py: keyholed closed the connection")
            answer += got
    floor_us, _, floor_calls = rounds(floor_call, options.seconds / 2)
    raw.close()
    kh_us, kh_cpu, kh_calls = rounds(lambda: client.get_session(token), options.seconds)
    redis_us, redis_cpu, redis_calls = rounds(lambda: r.get("bench:python"), options.seconds)
    client.close()
    print(json.dumps({"client": "python", "keyhole_session_get_us": round(kh_us, 2),
                      "redis_get_us": round(redis_us, 2), "floor_us": round(floor_us, 2), "keyhole_cpu_us": round(kh_cpu, 2),
                      "redis_cpu_us": round(redis_cpu, 2), "keyhole_requests": kh_calls + floor_calls + 1,
                      "redis_requests": redis_calls + 1, "calls": kh_calls + redis_calls}))


if __name__ == "__main__":
    main()
