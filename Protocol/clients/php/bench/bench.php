<?php

// One process, one connection, depth 1: keyholed's session.get through Keyhole\Client, set
// against php-redis's GET of a 300-byte value over redis-server's Unix socket, in alternating
// rounds. Prints one JSON line. Not run by the tests (timing belongs in `make bench`).
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

/** Calls $call for $seconds; microseconds per call. */
function measure(callable $call, float $seconds, int &$calls): float
{
    $n = 0;
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

$ignored = 0;
measure($getSession, min(1.0, $seconds / 10), $ignored); // warm-up
measure($getValue, min(1.0, $seconds / 10), $ignored);

$calls = 0;
$keyholeUs = [];
$redisUs = [];
for ($round = 0; $round < ROUNDS; $round++) {
    $keyholeUs[] = measure($getSession, $seconds / ROUNDS / 2, $calls);
    $redisUs[] = measure($getValue, $seconds / ROUNDS / 2, $ignored);
}
$keyhole->sessionRevoke($token);
$redis->del($key);

echo json_encode([
    'client' => 'php',
    'keyhole_session_get_us' => round(median($keyholeUs), 2),
    'redis_get_us' => round(median($redisUs), 2),
    'calls' => $calls,
]), "\n";
