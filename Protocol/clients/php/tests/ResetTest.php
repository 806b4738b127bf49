<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Paths;
use Keyhole\Tests\Support\Process;
use PHPUnit\Framework\TestCase;

/**
 * A connection reset (the server closed with the request unread) is not an end of stream after
 * a read: a safe operation is sent again as often as that happens within the deadline; a change
 * still fails with connection_lost.
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

    public function testSafeOperationOutlivesRepeatedResets(): void
    {
        [$server, $socket] = $this->server(3);
        $client = new Client($socket);
        $this->assertSame(['reset' => 3, 'op' => 'session.get'], $client->call('session.get', ['session' => 'kh_x']));
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
}
