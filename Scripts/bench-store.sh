#!/bin/bash
# The store's performance next to Redis, through the same client (keyhole-bench) in one run:
# session.get against GET, and durable session.create against SET with appendfsync always, at the
# same connections and depth; and the floor: keyhole-bench floor-server, SwiftNIO and the framing
# answering canned bytes, the least any operation can cost. Needs a release build and redis-server
# (Debian's redis-server).
#
#     swift build -c release && Scripts/bench-store.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-5}
B=$PWD/.build/release
D=$(mktemp -d /tmp/keyhole-bench-store.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
command -v redis-server >/dev/null || { echo "redis-server not found (apt-get install redis-server)" >&2; exit 1; }

wait_for_socket() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; exit 1; }

redis-server --port 0 --unixsocket "$D/redis.sock" --dir "$D" --save "" --appendonly yes \
  --appendfsync always --enable-debug-command yes --daemonize no --loglevel warning >"$D/redis.log" 2>&1 &
REDIS=$!
printf '[storage]\nfsync = "always"\n' >"$D/keyholed.toml"
"$B/keyholed" --config "$D/keyholed.toml" --socket "$D/k.sock" --state-dir "$D/state" --log-level warning 2>"$D/keyholed.err" &
KEYHOLED=$!
"$B/keyhole-bench" floor-server --socket "$D/floor.sock" >/dev/null &
FLOOR=$!
wait_for_socket "$D/redis.sock"
wait_for_socket "$D/k.sock"
wait_for_socket "$D/floor.sock"

echo "== filling: 100000 sessions in keyholed, 100000 keys of 256 bytes in Redis"
python3 Scripts/make-bench-sessions.py --socket "$D/k.sock" --count 100000 --users 10000 --out "$D/sessions.txt"
redis-cli -s "$D/redis.sock" DEBUG POPULATE 100000 kh 256 >/dev/null

run() { "$B/keyhole-bench" load --seconds "$SECONDS_PER_RUN" --depth 1 "$@"; }
echo "== reads, 16 connections x 1 in flight"
run --socket "$D/k.sock" --sessions "$D/sessions.txt" --connections 16 --server-pid $KEYHOLED
run --socket "$D/redis.sock" --redis --op GET --connections 16 --server-pid $REDIS
echo "== the floor: floor-server's canned answers (what SwiftNIO and the framing alone cost), 16 connections x 1"
run --socket "$D/floor.sock" --connections 16 --server-pid $FLOOR
for connections in 16 64; do
  echo "== durable writes, $connections connections x 1 in flight: creates over 10000 subjects; SET overwriting 100000 keys, then SET of new keys"
  run --socket "$D/k.sock" --op session.create --args '{"sub":"bench"}' --subjects 10000 --connections $connections --server-pid $KEYHOLED
  run --socket "$D/redis.sock" --redis --op SET --connections $connections --server-pid $REDIS
  run --socket "$D/redis.sock" --redis --op SET --keys 900000 --key-prefix "new$connections" --connections $connections --server-pid $REDIS
done
