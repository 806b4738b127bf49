<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Harness;
use PHPUnit\Framework\TestCase;

/**
 * The two restart tests of Protocol/testing/README.md: keyholed restarted (socket kept) and
 * bounced (socket gone for 200 ms), alternately, six times, under a loop of calls. Both are
 * graceful: no call may fail, a create no more than a read.
 */
final class RestartTest extends TestCase
{
    private const CYCLES = 6;

    private Harness $harness;

    protected function setUp(): void
    {
        $this->harness = new Harness();
    }

    protected function tearDown(): void
    {
        $this->assertSame(0, $this->harness->stop(), 'every keyholed exited 0 after SIGTERM');
    }

    private function chaos(): void
    {
        $this->assertSame(['ok' => true], $this->harness->command('chaos ' . self::CYCLES . ' 200'));
    }

    /** The chaos line once it came, else null. */
    private function done(): ?array
    {
        $line = $this->harness->chaosLine();
        if ($line !== null) {
            $this->assertSame('done', $line['chaos'] ?? null, json_encode($line));
        }
        return $line;
    }

    public function testReadsNeverFail(): void
    {
        $client = new Client($this->harness->socket);
        $token = $client->sessionCreate('restart-reader', 'local')['session'];
        $this->chaos();
        $calls = 0;
        while ($this->done() === null) {
            $session = $client->sessionGet($token); // any failure throws and fails the test
            $this->assertSame('restart-reader', $session['sub']);
            $calls++;
        }
        $this->assertGreaterThan(self::CYCLES, $calls);
    }

    /**
     * A graceful restart fails no call (PROTOCOL.md section 8): keyholed answers every request it
     * read and says goodbye, and a create it did not read goes again on a new connection. So
     * every create succeeds, none is lost, and none is applied twice: each sub has exactly the
     * one session its create returned.
     */
    public function testEveryCreateSucceedsExactlyOnce(): void
    {
        $client = new Client($this->harness->socket);
        $this->chaos();
        $created = [];
        for ($n = 0; $this->done() === null; $n++) {
            $sub = "restart-$n";
            try {
                $created[$sub] = $client->sessionCreate($sub, 'local')['id'];
            } catch (KeyholeException $e) {
                $this->fail("$sub failed (after " . count($created) . " creates): $e");
            }
        }
        $this->assertGreaterThan(self::CYCLES, count($created));
        foreach ($created as $sub => $id) {
            $ids = array_column($client->sessionList($sub, 'local')['sessions'], 'id');
            $this->assertSame([$id], $ids, "$sub: exactly its one session");
        }
    }
}
