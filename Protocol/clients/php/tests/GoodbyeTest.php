<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Paths;
use Keyhole\Tests\Support\Process;
use PHPUnit\Framework\TestCase;

/**
 * keyholed's goodbye (section 8, rule 3: `shutting_down` with a null id) in the ways the
 * scenarios do not play (Support/goodbye_server.php): every request on the connection still
 * unanswered was never read, so the call goes on a new connection whatever its operation, as
 * often as it is turned away, and without using rule 2's one re-send; found after a write that
 * failed, before a byte of the request went out or part way, or after one that succeeded; on a
 * persistent socket PHP handed back too. Another error with a null id (overloaded) still fails
 * the call (rule 4).
 */
final class GoodbyeTest extends TestCase
{
    private const SESSION = 'kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';

    private function server(string ...$steps): array
    {
        $socket = Paths::socket('bye');
        $server = new Process([PHP_BINARY, __DIR__ . '/Support/goodbye_server.php', $socket, ...$steps]);
        $this->assertSame('ready', $server->readLine(10.0));
        return [$server, $socket];
    }

    /** Which connection (the first is 1) answered, and the operation it was asked. */
    private static function served(array $result): array
    {
        return [$result['connection'], $result['op']];
    }

    private function finish(Process $server, Client $client): void
    {
        $client->close();
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }

    /**
     * A change turned away by goodbyes, once or several times in a row, is sent again each time
     * and answered on the connection after the last.
     *
     * @testWith [1]
     *           [3]
     */
    public function testChangeIsSentAgainAfterEachGoodbye(int $goodbyes): void
    {
        [$server, $socket] = $this->server(...array_fill(0, $goodbyes, 'goodbye'));
        $client = new Client($socket);
        $this->assertSame([$goodbyes + 1, 'session.create'], self::served($client->sessionCreate('alice', 'local')));
        $this->finish($server, $client);
    }

    /**
     * A goodbye does not use rule 2's one re-send, nor does the re-send, once used, stop the
     * goodbye's: a safe call lost once and then turned away goes a third time. A change lost
     * after a goodbye is still connection_lost: the goodbye does not make it safe to repeat.
     */
    public function testGoodbyeIsNotTheOneResend(): void
    {
        [$server, $socket] = $this->server('lost', 'goodbye');
        $client = new Client($socket);
        $this->assertSame([3, 'session.get'], self::served($client->sessionGet(self::SESSION)));
        $this->finish($server, $client);

        [$server, $socket] = $this->server('goodbye', 'lost');
        $client = new Client($socket);
        try {
            $client->sessionCreate('alice', 'local');
            $this->fail('session.create was sent again after it was lost');
        } catch (KeyholeException $e) {
            $this->assertSame('connection_lost', $e->code(), "$e");
        }
        $this->assertSame([3, 'ping'], self::served($client->ping()));
        $this->finish($server, $client);
    }

    /**
     * The goodbye came while the connection was idle, and the next call is a change: whether its
     * write fails (keyholed has closed) or succeeds (keyholed has not closed yet) and then finds
     * the goodbye, it goes on a new connection. The same on a persistent socket PHP hands to a
     * later Client with the goodbye on it: the goodbye is about every request on the connection.
     *
     * @testWith ["idle-goodbye", "closed", false]
     *           ["idle-goodbye-open", "said", false]
     *           ["idle-goodbye", "closed", true]
     *           ["idle-goodbye-open", "said", true]
     */
    public function testGoodbyeWhileIdle(string $step, string $cue, bool $persistent): void
    {
        [$server, $socket] = $this->server($step);
        $earlier = new Client($socket, ['persistent' => $persistent]);
        $this->assertSame(['first' => true], $earlier->ping());
        $stream = $earlier->stream();
        $later = $earlier;
        if ($persistent) {
            unset($earlier, $later); // a persistent socket is not closed with its Client
            $later = new Client($socket, ['persistent' => true]);
        }
        $server->write("go\n");
        $this->assertSame($cue, $server->readLine(10.0));
        if ($persistent) {
            // PHP hands the socket back: the goodbye waiting on it makes it look alive.
            $this->assertSame($stream, stream_socket_client("unix://$socket", $errno, $errstr, 1.0, STREAM_CLIENT_CONNECT | STREAM_CLIENT_PERSISTENT));
        }
        $this->assertSame([2, 'session.create'], self::served($later->sessionCreate('alice', 'local')));
        $this->finish($server, $later);
    }

    /**
     * Another error with a null id left on an idle connection (overloaded, as keyholed's on
     * connect) is not a goodbye: the call fails with it and is not sent again (rule 4); the
     * next call opens a new connection.
     */
    public function testOtherNullIdErrorStillFailsTheCall(): void
    {
        [$server, $socket] = $this->server('idle-overloaded');
        $client = new Client($socket);
        $this->assertSame(['first' => true], $client->ping());
        $server->write("go\n");
        $this->assertSame('closed', $server->readLine(10.0));
        try {
            $client->sessionCreate('alice', 'local');
            $this->fail('the error with a null id was not reported');
        } catch (KeyholeException $e) {
            $this->assertSame('overloaded', $e->code());
            $this->assertSame(1000, $e->retryAfterMs());
        }
        $this->assertNull($client->stream());
        $this->assertSame([2, 'ping'], self::served($client->ping()));
        $this->finish($server, $client);
    }

    /**
     * A large change whose write keyholed cut short, closing after its goodbye: part of it went
     * out, but the goodbye says it was not read, so it goes whole on a new connection.
     */
    public function testGoodbyeAfterPartOfARequest(): void
    {
        [$server, $socket] = $this->server('cut');
        $client = new Client($socket);
        // Far more than a Unix socket's buffers hold: the write is still going when keyholed closes.
        $blob = str_repeat('x', 4 << 20);
        $result = $client->sessionCreate('alice', 'local', data: ['blob' => $blob]);
        $this->assertSame([2, 'session.create'], self::served($result));
        $this->assertGreaterThan(4 << 20, $result['bytes'], 'the whole request was sent again');
        $this->finish($server, $client);
    }
}
