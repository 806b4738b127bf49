<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Tests\Support\Paths;
use PHPUnit\Framework\TestCase;

/**
 * The client's copies of the protocol's tables: its safe-to-repeat table is Protocol/ops.json's,
 * every non-debug op has a helper, and its error codes are PROTOCOL.md section 6's.
 */
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

    /** KeyholeException::SERVER_CODES lists the codes of section 6's table, in its order (a code left out would be taken as internal). */
    public function testServerCodesAreProtocolSection6(): void
    {
        $protocol = (string)file_get_contents(Paths::protocol('PROTOCOL.md'));
        $start = strpos($protocol, "\n## 6. Error codes\n");
        $end = strpos($protocol, "\n## 7.", (int)$start);
        $this->assertIsInt($start);
        $this->assertIsInt($end);
        preg_match_all('/^\| `([a-z_]+)` \|/m', substr($protocol, $start, $end - $start), $rows);
        $this->assertContains('config_invalid', $rows[1], 'the table was read');
        $this->assertSame($rows[1], KeyholeException::SERVER_CODES);
        $this->assertSame([], array_intersect(KeyholeException::CLIENT_CODES, $rows[1]));
    }
}
