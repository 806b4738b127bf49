# frozen_string_literal: true

# One process, one connection, depth 1: Keyhole's session.get against ruby-redis's GET of a 300-byte
# value, on the same machine in the same run. Prints one JSON line (median microseconds per call
# over rounds). Not run by the tests: timing belongs in `make bench`.
#
#   ruby bench/bench.rb --keyhole SOCKET --redis-socket PATH --seconds S
#
# Needs ruby-redis (Debian) for the Redis side.

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "keyhole"
require "json"
require "optparse"
require "redis"

options = { seconds: 5.0 }
OptionParser.new do |o|
  o.on("--keyhole SOCKET") { |v| options[:keyhole] = v }
  o.on("--redis-socket PATH") { |v| options[:redis] = v }
  o.on("--seconds S", Float) { |v| options[:seconds] = v }
end.parse!
abort "usage: bench.rb --keyhole SOCKET --redis-socket PATH --seconds S" unless options[:keyhole] && options[:redis]

ROUNDS = 10

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

# Calls the block in rounds of a fixed share of the time; answers [median µs per call, calls].
def measure(seconds)
  calls = 0
  per_call = Array.new(ROUNDS) do
    n = 0
    started = now
    stop = started + seconds / ROUNDS
    while now < stop
      50.times { yield }
      n += 50
    end
    calls += n
    (now - started) * 1e6 / n
  end.sort
  [per_call[ROUNDS / 2 - 1, 2].sum / 2, calls]
end

keyhole = Keyhole::Client.new(socket: options[:keyhole])
token = keyhole.create_session("bench-ruby-#{Process.pid}")["session"]
redis = Redis.new(path: options[:redis])
key = "bench:ruby:#{Process.pid}"
redis.set(key, "v" * 300)

2000.times { keyhole.get_session(token) } # warm-up
2000.times { redis.get(key) }
half = options[:seconds] / 2
keyhole_us, keyhole_calls = measure(half) { keyhole.get_session(token) }
redis_us, redis_calls = measure(half) { redis.get(key) }

keyhole.revoke_session(session: token)
redis.del(key)
keyhole.close
redis.close
puts JSON.generate({ "client" => "ruby", "keyhole_session_get_us" => keyhole_us.round(1),
                     "redis_get_us" => redis_us.round(1), "calls" => keyhole_calls + redis_calls })
