<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Paths;
use Keyhole\Tests\Support\Process;
use PHPUnit\Framework\TestCase;

/**
 * Connections the server ended in ways the scenarios do not play: a reset (the server closed with
 * the request unread) is an end like any other (section 8, rule 2): a safe operation is sent again
 * once, and a change fails with connection_lost; a connection found closed before a request went out,
 * with an error about it (id null) waiting to be read, fails the call with that error (rule 4).
 */
final class ResetTest extends TestCase
{
    private function server(int $resets): array
    {
        $socket = Paths::socket('rst');
        $server = new Process([PHP_BINARY, __DIR__ . '/Support/reset_server.php', $socket, (string)$resets]);
        $this->assertSame('ready', $server->readLine(10.0));
        return [$server, $socket];
    }

    public function testSafeOperationIsSentAgainOnceAfterAReset(): void
    {
        [$server, $socket] = $this->server(1);
        $client = new Client($socket);
        $this->assertSame(['reset' => 1, 'op' => 'session.get'], $client->call('session.get', ['session' => 'kh_x']));
        $client->close();
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }

    public function testSafeOperationResetTwiceIsConnectionLost(): void
    {
        [$server, $socket] = $this->server(2);
        $client = new Client($socket);
        try {
            $client->call('session.get', ['session' => 'kh_x']);
            $this->fail('session.get was sent a third time');
        } catch (KeyholeException $e) {
            $this->assertSame('connection_lost', $e->code());
        }
        $this->assertSame(['reset' => 2, 'op' => 'ping'], $client->ping());
        $client->close();
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }

    public function testChangeIsNotSentAgainAfterAReset(): void
    {
        [$server, $socket] = $this->server(1);
        $client = new Client($socket);
        try {
            $client->call('session.create', ['sub' => 'alice']);
            $this->fail('session.create was sent again');
        } catch (KeyholeException $e) {
            $this->assertSame('connection_lost', $e->code());
        }
        $this->assertSame(['reset' => 1, 'op' => 'ping'], $client->ping());
        $client->close();
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }

    public function testRefusalReadBeforeTheRequestWentOut(): void
    {
        $socket = Paths::socket('ref');
        $server = new Process([PHP_BINARY, __DIR__ . '/Support/refuse_server.php', $socket]);
        $this->assertSame('ready', $server->readLine(10.0));
        $client = new Client($socket);
        $this->assertSame(['first' => true], $client->ping());
        $this->assertSame('closed', $server->readLine(10.0));
        try {
            $client->ping();
            $this->fail('the refusal was not reported');
        } catch (KeyholeException $e) {
            $this->assertSame('overloaded', $e->code());
            $this->assertSame(1000, $e->retryAfterMs());
        }
        $this->assertNull($client->stream());
        $this->assertSame(['reconnected' => true], $client->ping());
        $client->close();
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }

    /**
     * A safe operation written, then the connection ended (or was answered shutting_down) and
     * nobody listens any more: its one re-send cannot go out, but the first attempt did, so the
     * call is connection_lost, never unavailable (which says it was never sent).
     *
     * @testWith ["close"]
     *           ["shutting_down"]
     */
    public function testWrittenThenUnreachableIsConnectionLost(string $mode): void
    {
        $socket = Paths::socket('van');
        $server = new Process([PHP_BINARY, __DIR__ . '/Support/vanish_server.php', $socket, $mode]);
        $this->assertSame('ready', $server->readLine(10.0));
        $client = new Client($socket, ['timeout' => 0.5]);
        try {
            $client->sessionGet('kh_' . str_repeat('A', 43));
            $this->fail('session.get succeeded');
        } catch (KeyholeException $e) {
            $this->assertSame('connection_lost', $e->code(), "$e");
        }
        $this->assertSame('gone', $server->readLine(10.0));
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
        try {
            $client->ping();
            $this->fail('ping succeeded');
        } catch (KeyholeException $e) {
            $this->assertSame('unavailable', $e->code(), 'a call never sent is unavailable');
        }
    }

    /**
     * A persistent socket PHP hands back to a later Client (the next request of a PHP-FPM
     * worker) with a refusal (an error with a null id) and the end left on it for an earlier
     * one: that refusal is not about the later Client's request, which is sent on a new
     * connection (rule 1).
     */
    public function testStaleRefusalOnAReusedPersistentSocketIsNotReported(): void
    {
        $socket = Paths::socket('stl');
        $server = new Process([PHP_BINARY, __DIR__ . '/Support/refuse_server.php', $socket, 'on-cue']);
        $this->assertSame('ready', $server->readLine(10.0));
        $earlier = new Client($socket, ['persistent' => true]);
        $this->assertSame(['first' => true], $earlier->ping());
        $stream = $earlier->stream();
        unset($earlier); // a persistent socket is not closed with its Client
        $server->write("go\n");
        $this->assertSame('closed', $server->readLine(10.0));
        $later = new Client($socket, ['persistent' => true]);
        // PHP hands the socket back: the refusal waiting on it makes it look alive.
        $this->assertSame($stream, stream_socket_client("unix://$socket", $errno, $errstr, 1.0, STREAM_CLIENT_CONNECT | STREAM_CLIENT_PERSISTENT));
        $this->assertSame(['reconnected' => true], $later->ping());
        $later->close();
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }

    /**
     * Rule 4: after an error with a null id keyholed still answers what it had read, then closes:
     * the call gets that answer, and nothing more goes on the connection.
     */
    public function testAnswerAfterAnErrorWithANullIdIsTheCallsAnswer(): void
    {
        $socket = Paths::socket('r4');
        $server = new Process([PHP_BINARY, __DIR__ . '/Support/answer_after_refusal_server.php', $socket]);
        $this->assertSame('ready', $server->readLine(10.0));
        $client = new Client($socket);
        $this->assertSame(['n' => 1], $client->call('debug.echo', ['n' => 1]));
        $this->assertNull($client->stream(), 'the connection is closed');
        $this->assertSame(['reconnected' => true], $client->ping());
        $client->close();
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }
}
