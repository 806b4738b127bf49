<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Harness;
use Keyhole\Tests\Support\Paths;
use Keyhole\Wire;
use PHPUnit\Framework\TestCase;

/** The client against a real keyholed (Protocol/testing/keyholed_harness.py). */
final class IntegrationTest extends TestCase
{
    private static ?Harness $harness = null;

    public static function setUpBeforeClass(): void
    {
        self::$harness = new Harness();
    }

    public static function tearDownAfterClass(): void
    {
        $status = self::$harness?->stop();
        self::$harness = null;
        if ($status !== 0) {
            throw new \RuntimeException("keyholed_harness exited with $status");
        }
    }

    private function client(array $options = []): Client
    {
        return new Client(self::$harness->socket, $options);
    }

    public function testPing(): void
    {
        $pong = $this->client()->ping();
        $this->assertSame(1, $pong['protocol']);
        $this->assertIsString($pong['version']);
        $this->assertIsInt($pong['uptime_ms']);
    }

    public function testSocketFromEnvironment(): void
    {
        putenv('KEYHOLE_SOCKET=' . self::$harness->socket);
        try {
            $client = new Client();
            $this->assertSame(self::$harness->socket, $client->socketPath());
            $this->assertSame(1, $client->ping()['protocol']);
        } finally {
            putenv('KEYHOLE_SOCKET');
        }
        $this->assertSame(Client::DEFAULT_SOCKET, (new Client())->socketPath());
    }

    public function testTokenVerify(): void
    {
        $claims = $this->client()->tokenVerify(self::$harness->token);
        $this->assertSame(self::$harness->issuer, $claims['issuer']);
        $this->assertSame(self::$harness->sub, $claims['sub']);
        $this->assertContains(self::$harness->audience, (array)$claims['aud']);
    }

    public function testForgedTokenIsRefused(): void
    {
        [$head, $payload, $signature] = explode('.', self::$harness->token);
        $signature[10] = $signature[10] === 'A' ? 'B' : 'A';
        try {
            $this->client()->tokenVerify("$head.$payload.$signature");
            $this->fail('a forged token verified');
        } catch (KeyholeException $e) {
            $this->assertSame('token_signature_invalid', $e->code());
            $this->assertFalse($e->isClientSide());
        }
    }

    public function testSessionLifecycleAndUser(): void
    {
        $client = $this->client();
        $sub = 'php-' . bin2hex(random_bytes(4));
        $created = $client->sessionCreate($sub, 'local', data: ['plan' => 'pro', 'tags' => ['a', 'b']]);
        $this->assertMatchesRegularExpression('/^kh_[A-Za-z0-9_-]{43}$/', $created['session']);
        $this->assertIsInt($created['expires_at']);

        $session = $client->sessionGet($created['session']);
        $this->assertSame($created['id'], $session['id']);
        $this->assertSame($sub, $session['sub']);
        $this->assertSame('local', $session['issuer']);
        $this->assertSame(['plan' => 'pro', 'tags' => ['a', 'b']], $session['data']);
        $this->assertSame($sub, $session['user']['sub']);

        $this->assertSame([$created['id']], array_column($client->sessionList($sub, 'local')['sessions'], 'id'));
        $user = $client->userGet($sub, 'local');
        $this->assertSame($sub, $user['sub']);
        $this->assertIsInt($user['last_login_at']);

        $this->assertSame(['revoked' => true], $client->sessionRevoke($created['session']));
        $this->assertSame(['revoked' => false], $client->sessionRevoke(id: $created['id']));
        $this->assertSame([], $client->sessionList($sub, 'local')['sessions']);
        try {
            $client->sessionGet($created['session']);
            $this->fail('a revoked session was found');
        } catch (KeyholeException $e) {
            $this->assertSame('session_not_found', $e->code());
            $this->assertSame(0, $e->getCode());
            $this->assertNull($e->retryAfterMs());
        }
    }

    /**
     * keyholed's answers to session.get (a hit and a miss) and ping as they come off the socket:
     * a success is in the usual form that Wire::result decodes without its envelope (the client's
     * short way, which would otherwise be lost without a test failing), to what Wire::decode makes of it.
     */
    public function testUsualAnswersTakeTheShortWay(): void
    {
        $token = $this->client()->sessionCreate('php-short-way', 'local', data: ['é' => "\"\\/\n"])['session'];
        $stream = stream_socket_client('unix://' . self::$harness->socket, $errno, $errstr, 5.0);
        $this->assertIsResource($stream, $errstr);
        stream_set_timeout($stream, 5);
        $answer = static function (string $id, string $op, array|\stdClass $args) use ($stream): string {
            fwrite($stream, Wire::encode($id, $op, $args));
            $length = unpack('N', (string)stream_get_contents($stream, 4))[1];
            return (string)stream_get_contents($stream, $length);
        };
        foreach ([['session.get', ['session' => $token]], ['ping', new \stdClass()]] as $n => [$op, $args]) {
            $id = "0a1b2c3d4e5f.$n";
            $payload = $answer($id, $op, $args);
            $result = Wire::result($payload, $id);
            $this->assertNotNull($result, $payload);
            $this->assertSame(Wire::decode($payload)['result'], $result);
        }
        $this->assertSame(['é' => "\"\\/\n"], Wire::result($answer('0a1b2c3d4e5f.2', 'session.get', ['session' => $token]), '0a1b2c3d4e5f.2')['data']);
        $payload = $answer('0a1b2c3d4e5f.3', 'session.get', ['session' => 'kh_' . str_repeat('A', 43)]);
        $this->assertNull(Wire::result($payload, '0a1b2c3d4e5f.3'));
        $this->assertSame('session_not_found', Wire::decode($payload)['error']->code());
        fclose($stream);
    }

    public function testEmptyArraysAreSentAsObjects(): void
    {
        $client = $this->client();
        // keyholed refuses args or data that are not objects (bad_request): these pass only as {}.
        $this->assertSame([], $client->call('debug.echo'));
        $this->assertSame([], $client->call('debug.echo', []));
        $created = $client->sessionCreate('php-empty-data', 'local', data: []);
        $this->assertSame([], $client->sessionGet($created['session'])['data']);
        $echo = $client->call('debug.echo', ['list' => [], 'object' => new \stdClass(), 'n' => 1.0]);
        ksort($echo);
        $this->assertSame(['list' => [], 'n' => 1.0, 'object' => []], $echo);
    }

    public function testUnknownOpAndBadRequest(): void
    {
        $client = $this->client();
        try {
            $client->call('no.such_op');
            $this->fail('an unknown op succeeded');
        } catch (KeyholeException $e) {
            $this->assertSame('unknown_op', $e->code());
        }
        try {
            $client->call('session.get', ['session' => 'x', 'extra' => true]);
            $this->fail('an unknown argument was accepted');
        } catch (KeyholeException $e) {
            $this->assertSame('bad_request', $e->code());
        }
        $this->assertSame(1, $client->ping()['protocol'], 'the connection stays usable');
    }

    public function testArgumentsThatAreNotJson(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        $this->client()->call('debug.echo', ['bad' => "\xff"]);
    }

    public function testUnavailableWithinTheDeadline(): void
    {
        $client = new Client(Paths::socket('none'), ['timeout' => 0.3]);
        $start = hrtime(true);
        try {
            $client->ping();
            $this->fail('a call to a missing socket succeeded');
        } catch (KeyholeException $e) {
            $this->assertSame('unavailable', $e->code());
            $this->assertTrue($e->isClientSide());
        }
        $elapsed = (hrtime(true) - $start) / 1e9;
        $this->assertGreaterThanOrEqual(0.29, $elapsed, 'it kept trying until the deadline');
        $this->assertLessThan(1.0, $elapsed);
    }

    public function testTimeoutKeepsTheConnectionAndDropsTheLateAnswer(): void
    {
        $client = $this->client(['timeout' => 0.3]);
        try {
            $client->call('debug.sleep', ['ms' => 400]);
            $this->fail('debug.sleep 400 answered within 300 ms');
        } catch (KeyholeException $e) {
            $this->assertSame('timeout', $e->code());
        }
        $stream = $client->stream();
        // Sent at about 300 ms and answered at about 500: the late answer of the first call
        // ({"slept_ms": 400}, at 400 ms) comes first on the connection and must be skipped.
        $this->assertSame(['padding' => 'xxx', 'slept_ms' => 200],
            self::withPadding($client->call('debug.sleep', ['ms' => 200, 'reply_bytes' => 3])));
        $this->assertSame($stream, $client->stream(), 'the same connection');
    }

    /**
     * PHP-FPM keeps a persistent socket for the worker's next request, with whatever answer an
     * abandoned call left on it; a new Client on it must never take that answer for its own.
     */
    /**
     * A server that forks its workers after the app has used its client (pcntl_fork, Swoole,
     * Workerman): sharing the parent's connection, with the same ids, two children read each
     * other's answers and one is handed the other's session. Each child opens its own, and the
     * parent keeps its own. For a plain and a persistent socket.
     *
     * @dataProvider persistence
     */
    public function testForkedChildrenOpenTheirOwnConnections(bool $persistent): void
    {
        $client = $this->client(['persistent' => $persistent, 'timeout' => 2.0]);
        $tokens = [];
        foreach ([0, 1] as $i) {
            $tokens[$i] = $client->sessionCreate("php-fork-$i", 'local')['session'];
        }
        $parentStream = $client->stream();
        $pipes = [];
        $children = [];
        foreach ([0, 1, 2] as $i) {
            $pair = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
            $pid = pcntl_fork();
            $this->assertNotSame(-1, $pid);
            if ($pid === 0 && $i === 2) { // a child that never calls: it only closes what it inherited
                fclose($pair[0]);
                $client->close();
                unset($client);
                fwrite($pair[1], "2 closed");
                posix_kill(getmypid(), SIGKILL);
            }
            if ($pid === 0) { // the child: one line to the parent, then out, whatever happens
                fclose($pair[0]);
                try {
                    $wrong = 0;
                    // A new Client of the child's own, made before the inherited one let go of the
                    // parent's socket: not handed the parent's persistent socket either.
                    $fresh = new Client(self::$harness->socket, ['persistent' => $persistent]);
                    $wrong += $fresh->sessionGet($tokens[$i])['sub'] === "php-fork-$i" ? 0 : 1;
                    $freshOwn = $fresh->stream() !== null && $fresh->stream() !== $parentStream;
                    for ($n = 0; $n < 300; $n++) {
                        $wrong += $client->sessionGet($tokens[$i])['sub'] === "php-fork-$i" ? 0 : 1;
                    }
                    $own = $client->stream() !== null && $client->stream() !== $parentStream;
                    $own = $own && $freshOwn;
                    // Closing in the child (as its destructor does when it exits) must leave the
                    // parent's connection alone.
                    $client->close();
                    unset($client);
                    fwrite($pair[1], "$i wrong=$wrong own=" . ($own ? 'yes' : 'no'));
                } catch (\Throwable $e) {
                    fwrite($pair[1], "$i failed " . $e->getMessage());
                }
                posix_kill(getmypid(), SIGKILL); // no destructors, no PHPUnit shutdown in the child
            }
            fclose($pair[1]);
            $pipes[$i] = $pair[0];
            $children[] = $pid;
        }
        $lines = [];
        foreach ($pipes as $pipe) {
            stream_set_timeout($pipe, 60); // bounded, so that a hung child fails the test, not the run
            $lines[] = stream_get_contents($pipe);
            fclose($pipe);
        }
        foreach ($children as $pid) {
            posix_kill($pid, SIGKILL);
            pcntl_waitpid($pid, $status);
        }
        sort($lines);
        $this->assertSame(['0 wrong=0 own=yes', '1 wrong=0 own=yes', '2 closed'], $lines);
        $this->assertSame($parentStream, $client->stream(), 'the parent keeps its connection');
        $this->assertSame('php-fork-0', $client->sessionGet($tokens[0])['sub']);
        $this->assertSame($parentStream, $client->stream(), 'still its connection: no child shut it down');
    }

    public static function persistence(): array
    {
        return ['plain socket' => [false], 'persistent socket' => [true]];
    }

    public function testPersistentSocketSkipsAnAnswerLeftByAnEarlierClient(): void
    {
        $connections = fn () => $this->client()->stats()['connections']['total'];
        $first = $this->client(['persistent' => true, 'timeout' => 0.2]);
        try {
            $first->call('debug.sleep', ['ms' => 400]);
            $this->fail('debug.sleep 400 answered within 200 ms');
        } catch (KeyholeException $e) {
            $this->assertSame('timeout', $e->code());
        }
        $before = $connections();
        unset($first); // the next request's Client, on the same persistent socket
        $second = $this->client(['persistent' => true]);
        // Both answers come on the one connection, the abandoned one's first ({"slept_ms": 400}).
        $this->assertSame(['padding' => 'xxxxx', 'slept_ms' => 400],
            self::withPadding($second->call('debug.sleep', ['ms' => 400, 'reply_bytes' => 5])));
        // The stats call itself is one new connection: none was opened for $second.
        $this->assertSame($before + 1, $connections(), 'the persistent connection was reused');
        $second->close();
    }

    /**
     * PHP keys persistent sockets by address: two persistent Clients of one process on the same
     * path share one socket. When one closes it (after a refusal, a protocol error, a timeout
     * mid-frame, or close()), the other has no connection and opens a new one on its next call.
     */
    public function testPersistentClientsSharingASocketSurviveTheOtherClosingIt(): void
    {
        $one = $this->client(['persistent' => true]);
        $other = $this->client(['persistent' => true]);
        $this->assertSame(1, $one->ping()['protocol']);
        $this->assertSame(1, $other->ping()['protocol']);
        $this->assertSame($one->stream(), $other->stream(), 'one socket for both');
        $other->close();
        $this->assertSame(1, $one->ping()['protocol'], 'a new connection (before: a TypeError from stream_set_timeout)');
        $this->assertSame(1, $other->ping()['protocol']);
        $one->close();
        $this->assertSame(1, $other->ping()['protocol']);
        $other->close();
        $this->assertNull($one->stream(), 'closed by the other');
    }

    private static function withPadding(array $result): array
    {
        $result['padding'] = str_repeat('x', strlen($result['padding'] ?? ''));
        ksort($result);
        return $result;
    }

    public function testRetryOverloadedIsOffByDefault(): void
    {
        $harness = new Harness('[server]' . "\n" . 'requests_per_second_per_uid = 2' . "\n" . 'request_burst_per_uid = 1');
        try {
            $plain = new Client($harness->socket);
            $plain->ping();
            try {
                $plain->ping();
                $this->fail('a request over the rate was answered');
            } catch (KeyholeException $e) {
                $this->assertSame('overloaded', $e->code());
                $this->assertIsInt($e->retryAfterMs());
                $this->assertGreaterThan(0, $e->retryAfterMs());
            }
            $patient = new Client($harness->socket, ['retry_overloaded' => true]);
            for ($n = 0; $n < 3; $n++) {
                $this->assertSame(1, $patient->ping()['protocol'], "ping $n waited out overloaded");
            }
            $short = new Client($harness->socket, ['retry_overloaded' => true, 'timeout' => 0.05]);
            try {
                $short->ping();
                $this->fail('a request over the rate was answered within 50 ms');
            } catch (KeyholeException $e) {
                $this->assertSame('overloaded', $e->code(), 'a wait past the deadline is not made');
            }
        } finally {
            $this->assertSame(0, $harness->stop());
        }
    }

    public function testOverloadedOnConnectClosesTheConnection(): void
    {
        $harness = new Harness('[server]' . "\n" . 'max_connections_per_uid = 1');
        try {
            $holder = new Client($harness->socket);
            $holder->ping();
            $refused = new Client($harness->socket, ['timeout' => 2]);
            for ($n = 0; $n < 5; $n++) {
                try {
                    $refused->ping();
                    $this->fail('a connection over the limit was served');
                } catch (KeyholeException $e) {
                    $this->assertSame('overloaded', $e->code(), "$e");
                    // A second from the refusal, counted from the answer keyholed sends 100 ms after it.
                    $this->assertSame(900, $e->retryAfterMs());
                    $this->assertNull($refused->stream(), 'the connection keyholed refused is closed');
                }
            }
            $holder->close();
            $this->assertSame(1, $refused->ping()['protocol']);
        } finally {
            $this->assertSame(0, $harness->stop());
        }
    }
}
