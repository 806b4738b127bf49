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
}
