<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Paths;
use Keyhole\Tests\Support\Process;
use PHPUnit\Framework\TestCase;

/**
 * Answers in keyholed's usual form that come in pieces (Support/pieces_server.php): the client
 * reads a frame the short way (its header, then its payload at once) and hands whatever it got
 * short of that to its general read: a header alone, a header in halves, a payload in parts, and
 * a timeout with part of a frame read, whose rest the next call reads past (a connection of its
 * own) or that closes the connection (a persistent one, which the next request could not read
 * from mid-frame).
 */
final class PiecesTest extends TestCase
{
    /** @return array{Process, Client} */
    private function start(array $options): array
    {
        $socket = Paths::socket('pcs');
        $server = new Process([PHP_BINARY, __DIR__ . '/Support/pieces_server.php', $socket]);
        $this->assertSame('ready', $server->readLine(10.0));
        return [$server, new Client($socket, ['timeout' => 0.5] + $options)];
    }

    private function assertAnswer(int $n, int $connection, array $result): void
    {
        $this->assertSame(['n' => $n, 'connection' => $connection, 'op' => 'ping', 'pad' => str_repeat('p', 200)], $result);
    }

    /** @return array{Process, Client} the server and the client, after the third call timed out with part of its answer read */
    private function throughTheTimeout(array $options): array
    {
        [$server, $client] = $this->start($options);
        $this->assertAnswer(1, 1, $client->ping());
        $this->assertAnswer(2, 1, $client->ping());
        try {
            $client->ping();
            $this->fail('the third ping was answered');
        } catch (KeyholeException $e) {
            $this->assertSame('timeout', $e->code());
        }
        return [$server, $client];
    }

    public function testPiecesAndATimeoutMidFrame(): void
    {
        [$server, $client] = $this->throughTheTimeout([]);
        $this->assertAnswer(4, 1, $client->ping());
        $client->close();
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }

    public function testPersistentSocketIsClosedOnATimeoutMidFrame(): void
    {
        [$server, $client] = $this->throughTheTimeout(['persistent' => true]);
        $this->assertNull($client->stream());
        $this->assertAnswer(4, 2, $client->ping());
        $client->close();
        $this->assertSame(0, $server->wait(10.0), $server->stderr());
    }
}
