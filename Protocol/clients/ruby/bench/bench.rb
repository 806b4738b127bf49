# frozen_string_literal: true

# One process, one connection, depth 1: Keyhole's session.get against ruby-redis's GET of a 300-byte
# value, on the same machine in the same run. Prints one JSON line: wall and this process's CPU
# microseconds per call (medians over rounds); floor_us, the same session.get with no client at all
# (the frame written on a plain UNIXSocket and its answer read whole, not decoded), the least any
# Ruby client could pay; and the requests each server was sent, warm-up and
# setup included, so that the caller can divide the server's CPU time by them. Not run by the
# tests: timing belongs in `make bench`.
#
#   ruby bench/bench.rb --keyhole SOCKET --redis-socket PATH --seconds S
#
# Needs ruby-redis (Debian) for the Redis side.

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "keyhole"
require "json"
require "optparse"
require "redis"
require "socket"

options = { seconds: 5.0 }
OptionParser.new do |o|
  o.on("--keyhole SOCKET") { |v| options[:keyhole] = v }
  o.on("--redis-socket PATH") { |v| options[:redis] = v }
  o.on("--seconds S", Float) { |v| options[:seconds] = v }
end.parse!
abort "usage: bench.rb --keyhole SOCKET --redis-socket PATH --seconds S" unless options[:keyhole] && options[:redis]

ROUNDS = 10

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
def cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)

def median(values)
  sorted = values.sort
  (sorted[(sorted.size - 1) / 2] + sorted[sorted.size / 2]) / 2
end

# Calls the block in rounds of a fixed share of the time; answers [median µs per call, median CPU
# µs per call, calls].
def measure(seconds)
  calls = 0
  wall = []
  used = []
  ROUNDS.times do
    n = 0
    started = now
    cpu_started = cpu
    stop = started + seconds / ROUNDS
    while now < stop
      50.times { yield }
      n += 50
    end
    calls += n
    used << (cpu - cpu_started) * 1e6 / n
    wall << (now - started) * 1e6 / n
  end
  [median(wall), median(used), calls]
end

keyhole = Keyhole::Client.new(socket: options[:keyhole])
token = keyhole.create_session("bench-ruby-#{Process.pid}")["session"]
redis = Redis.new(path: options[:redis])
key = "bench:ruby:#{Process.pid}"
redis.set(key, "v" * 300)

raw = UNIXSocket.new(options[:keyhole])
payload = JSON.generate({ "id" => 1, "op" => "session.get", "args" => { "session" => token } })
raw_frame = [payload.bytesize].pack("N") + payload
floor_us, _, floor_calls = measure(options[:seconds] / 4) do
  raw.write(raw_frame)
  answer = raw.readpartial(65_536)
  answer << raw.readpartial(65_536) while answer.bytesize < 4 || answer.bytesize < 4 + answer.unpack1("N")
end
raw.close

2000.times { keyhole.get_session(token) } # warm-up
2000.times { redis.get(key) }
half = options[:seconds] / 2
keyhole_us, keyhole_cpu, keyhole_calls = measure(half) { keyhole.get_session(token) }
redis_us, redis_cpu, redis_calls = measure(half) { redis.get(key) }

keyhole.revoke_session(session: token)
redis.del(key)
keyhole.close
redis.close
puts JSON.generate({ "client" => "ruby", "keyhole_session_get_us" => keyhole_us.round(1),
                     "redis_get_us" => redis_us.round(1), "floor_us" => floor_us.round(1), "keyhole_cpu_us" => keyhole_cpu.round(1),
                     "redis_cpu_us" => redis_cpu.round(1),
                     "keyhole_requests" => keyhole_calls + floor_calls + 2000 + 2, # warm-up, create, revoke
                     "redis_requests" => redis_calls + 2000 + 2, # warm-up, set, del
                     "calls" => keyhole_calls + redis_calls })
