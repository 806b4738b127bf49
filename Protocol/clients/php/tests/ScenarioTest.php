<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Paths;
use Keyhole\Tests\Support\Process;
use PHPUnit\Framework\TestCase;

/**
 * Every scenario of Protocol/vectors/client_scenarios.json that a blocking client can run (not
 * pipelined), through Protocol/testing/scenario_server.py (Protocol/testing/README.md).
 */
final class ScenarioTest extends TestCase
{
    private static function document(): array
    {
        return json_decode((string)file_get_contents(Paths::protocol('vectors/client_scenarios.json')), true, 512, JSON_THROW_ON_ERROR);
    }

    /** @return array<string, array{array, int}> */
    public function scenarios(): array
    {
        $doc = self::document();
        $cases = [];
        foreach ($doc['scenarios'] as $scenario) {
            if (!$scenario['pipelined']) {
                $cases[$scenario['name']] = [$scenario, $scenario['deadline_ms'] ?? $doc['deadline_ms']];
            }
        }
        return $cases;
    }

    /** Only the pipelined scenarios are left out, and there are scenarios to run. */
    public function testOnlyPipelinedScenariosAreLeftOut(): void
    {
        $left = [];
        foreach (self::document()['scenarios'] as $scenario) {
            if (!array_key_exists($scenario['name'], $this->scenarios())) {
                $left[] = $scenario['name'];
                $this->assertTrue($scenario['pipelined'], $scenario['name']);
            }
        }
        $this->assertSame(['pipelined-split-every-byte', 'coalesced', 'out-of-order', 'null-id-error-then-answers', 'goodbye-after-answers'], $left);
        $this->assertGreaterThanOrEqual(18, count($this->scenarios()));
    }

    /** @dataProvider scenarios */
    public function testScenario(array $scenario, int $deadlineMs): void
    {
        $socket = Paths::socket('sc');
        $server = Process::scenarioServer($socket, $scenario['name']);
        $this->assertSame('ready', $server->readLine(10.0));
        $client = new Client($socket, ['timeout' => $deadlineMs / 1000]);
        foreach ($scenario['calls'] as $n => $call) {
            $what = "{$scenario['name']} call $n ({$call['op']})";
            $expect = $call['expect'];
            try {
                $result = $client->call($call['op'], $call['args']);
            } catch (KeyholeException $e) {
                $this->assertArrayHasKey('error', $expect, "$what failed: $e");
                $this->assertSame($expect['error']['code'], $e->code(), "$what: $e");
                if (array_key_exists('message', $expect['error'])) {
                    $this->assertSame($expect['error']['message'], $e->message(), $what);
                }
                if (array_key_exists('retry_after_ms', $expect['error'])) {
                    $this->assertSame($expect['error']['retry_after_ms'], $e->retryAfterMs(), $what);
                }
                continue;
            }
            $this->assertArrayNotHasKey('error', $expect, "$what succeeded: " . json_encode($result));
            if (array_key_exists('ok', $expect)) {
                $this->assertSame(self::canonical($expect['ok']), self::canonical($result), $what);
            } else {
                $this->assertIsString($result['padding'] ?? null, $what);
                $this->assertGreaterThanOrEqual($expect['ok_padding_bytes_at_least'], strlen($result['padding']), $what);
            }
        }
        $client->close();
        $status = $server->wait(10.0);
        $this->assertSame(0, $status, "scenario_server: " . $server->stderr());
    }

    private static function canonical(mixed $value): mixed
    {
        if (is_array($value)) {
            ksort($value);
            return array_map([self::class, 'canonical'], $value);
        }
        return $value;
    }
}
