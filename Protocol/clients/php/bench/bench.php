<?php

// One process, one connection, depth 1: keyholed's session.get through Keyhole\Client, set
// against php-redis's GET of a 300-byte value over redis-server's Unix socket, in alternating
// rounds. Prints one JSON line: wall and this process's CPU microseconds per call (medians over
// the rounds); floor_us, the same session.get with no client at all (the frame written on a plain
// stream_socket_client socket and its answer read whole, not decoded), the least any PHP client
// could pay; and the requests each server was sent, warm-up and setup included, so that the
// caller can divide the server's CPU time by them. Not run by the tests (timing belongs in
// `make bench`).
//
//     php bench/bench.php --keyhole SOCKET --redis-socket PATH --seconds S

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

$options = getopt('', ['keyhole:', 'redis-socket:', 'seconds:']);
if (!isset($options['keyhole'], $options['redis-socket'])) {
    fwrite(STDERR, "usage: php bench/bench.php --keyhole SOCKET --redis-socket PATH [--seconds S]\n");
    exit(2);
}
if (!class_exists(Redis::class)) {
    fwrite(STDERR, "bench.php: the redis extension (php-redis) is not loaded\n");
    exit(2);
}
$seconds = (float)($options['seconds'] ?? 5);
const ROUNDS = 5;

$keyhole = new Keyhole\Client($options['keyhole']);
$token = $keyhole->sessionCreate('bench-php', 'local')['session'];
$redis = new Redis();
$redis->connect($options['redis-socket']);
$key = 'keyhole-bench-php';
$redis->set($key, str_repeat('v', 300));

/** This process's CPU time so far, in microseconds. */
function cpuMicroseconds(): int
{
    $usage = getrusage();
    return ($usage['ru_utime.tv_sec'] + $usage['ru_stime.tv_sec']) * 1000000
        + $usage['ru_utime.tv_usec'] + $usage['ru_stime.tv_usec'];
}

/** Calls $call for $seconds; wall microseconds per call, and CPU microseconds per call in $cpu. */
function measure(callable $call, float $seconds, int &$calls, ?float &$cpu = null): float
{
    $n = 0;
    $cpuStart = cpuMicroseconds();
    $start = hrtime(true);
    $end = $start + (int)($seconds * 1e9);
    do {
        for ($i = 0; $i < 100; $i++) {
            $call();
        }
        $n += 100;
        $now = hrtime(true);
    } while ($now < $end);
    $calls += $n;
    $cpu = (cpuMicroseconds() - $cpuStart) / $n;
    return ($now - $start) / 1e3 / $n;
}

function median(array $values): float
{
    sort($values);
    $mid = intdiv(count($values), 2);
    return count($values) % 2 ? $values[$mid] : ($values[$mid - 1] + $values[$mid]) / 2;
}

$getSession = static function () use ($keyhole, $token): void {
    $keyhole->sessionGet($token);
};
$getValue = static function () use ($redis, $key): void {
    if (strlen($redis->get($key)) !== 300) {
        throw new RuntimeException('redis GET returned the wrong value');
    }
};

$raw = stream_socket_client('unix://' . $options['keyhole']);
$payload = json_encode(['id' => 1, 'op' => 'session.get', 'args' => ['session' => $token]]);
$rawFrame = pack('N', strlen($payload)) . $payload;
$floorCall = static function () use ($raw, $rawFrame): void {
    fwrite($raw, $rawFrame);
    $answer = fread($raw, 65536);
    while (strlen($answer) < 4 || strlen($answer) < 4 + unpack('N', $answer)[1]) {
        $answer .= fread($raw, 65536);
    }
};

$keyholeRequests = 2; // create, revoke
$floorUs = [];
measure($floorCall, min(1.0, $seconds / 10), $keyholeRequests); // warm-up
$redisRequests = 2; // set, del
measure($getSession, min(1.0, $seconds / 10), $keyholeRequests); // warm-up
measure($getValue, min(1.0, $seconds / 10), $redisRequests);

$calls = 0;
$keyholeUs = [];
$redisUs = [];
$keyholeCpu = [];
$redisCpu = [];
for ($round = 0; $round < ROUNDS; $round++) {
    $before = $calls;
    $keyholeUs[] = measure($getSession, $seconds / ROUNDS / 2, $calls, $cpu);
    $keyholeCpu[] = $cpu;
    $keyholeRequests += $calls - $before;
    $redisUs[] = measure($getValue, $seconds / ROUNDS / 2, $redisRequests, $cpu);
    $redisCpu[] = $cpu;
    $floorUs[] = measure($floorCall, $seconds / ROUNDS / 4, $keyholeRequests);
}
fclose($raw);
$keyhole->sessionRevoke($token);
$redis->del($key);

echo json_encode([
    'client' => 'php',
    'keyhole_session_get_us' => round(median($keyholeUs), 2),
    'redis_get_us' => round(median($redisUs), 2),
    'floor_us' => round(median($floorUs), 2),
    'keyhole_cpu_us' => round(median($keyholeCpu), 2),
    'redis_cpu_us' => round(median($redisCpu), 2),
    'keyhole_requests' => $keyholeRequests,
    'redis_requests' => $redisRequests,
    'calls' => $calls,
]), "\n";
