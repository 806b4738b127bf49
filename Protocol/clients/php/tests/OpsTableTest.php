<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\Tests\Support\Paths;
use PHPUnit\Framework\TestCase;

/** The client's embedded safe-to-repeat table is Protocol/ops.json's, and every non-debug op has a helper. */
final class OpsTableTest extends TestCase
{
    private static function operations(): array
    {
        $doc = json_decode((string)file_get_contents(Paths::protocol('ops.json')), true, 512, JSON_THROW_ON_ERROR);
        return $doc['operations'];
    }

    public function testEmbeddedTableEqualsOpsJson(): void
    {
        $fromFile = [];
        foreach (self::operations() as $operation) {
            $fromFile[$operation['op']] = $operation['safe_to_repeat'];
        }
        $this->assertSame($fromFile, Client::SAFE_TO_REPEAT);
    }

    public function testEveryNonDebugOperationHasAHelper(): void
    {
        foreach (self::operations() as $operation) {
            $name = lcfirst(str_replace(' ', '', ucwords(str_replace(['.', '_'], ' ', $operation['op']))));
            $this->assertSame(!$operation['debug'], method_exists(Client::class, $name), "{$operation['op']}: $name");
        }
    }
}
