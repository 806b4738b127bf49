<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Harness;
use PHPUnit\Framework\TestCase;

/**
 * The two restart tests of Protocol/testing/README.md: keyholed restarted (socket kept) and
 * bounced (socket gone for 200 ms), alternately, six times, under a loop of calls.
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

    public function testCreatesAreNeverAppliedTwice(): void
    {
        $client = new Client($this->harness->socket);
        $this->chaos();
        $outcomes = [];
        for ($n = 0; $this->done() === null; $n++) {
            $sub = "restart-$n";
            try {
                $outcomes[$sub] = $client->sessionCreate($sub, 'local')['id'];
            } catch (KeyholeException $e) {
                $this->assertSame('connection_lost', $e->code(), "$sub: $e");
                $outcomes[$sub] = null;
            }
        }
        $this->assertGreaterThan(self::CYCLES, count($outcomes));
        foreach ($outcomes as $sub => $id) {
            $ids = array_column($client->sessionList($sub, 'local')['sessions'], 'id');
            if ($id !== null) {
                $this->assertSame([$id], $ids, "$sub succeeded: exactly its one session");
            } else {
                $this->assertLessThanOrEqual(1, count($ids), "$sub failed: at most one session");
            }
        }
    }
}
