<?php

declare(strict_types=1);

namespace Keyhole\Tests;

use Keyhole\Client;
use Keyhole\KeyholeException;
use Keyhole\Wire;
use PHPUnit\Framework\TestCase;

/**
 * Wire's short ways, without I/O: the request envelope written by hand is byte for byte what
 * json_encode makes of it, and the usual answer decoded without its envelope gives what decoding
 * it whole gives.
 */
final class WireTest extends TestCase
{
    private const FLAGS = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR;
    private const ID = '0a1b2c3d4e5f.17';

    /** Strings JSON must escape, or must carry as they are: every control character, quote, backslash, slash, DEL, non-ASCII. */
    private static function awkwardStrings(): array
    {
        $strings = ['', 'plain', '"', '\\', '\\"', '/', '</script>', "\x7f", 'é', "\u{2028}\u{2029}", "\u{FEFF}", "\u{10FFFF}", '😀', 'kh_' . str_repeat('A', 43)];
        for ($byte = 0; $byte < 0x20; $byte++) {
            $strings[] = 'a' . chr($byte) . 'b';
        }
        $strings[] = implode('', array_map('chr', range(0, 0x7f)));
        return $strings;
    }

    private function assertFrameOf(string $op, array|\stdClass $args, string $frame): void
    {
        $json = json_encode(['v' => 1, 'id' => self::ID, 'op' => $op, 'args' => $args], self::FLAGS);
        $this->assertSame(pack('N', strlen($json)) . $json, $frame, json_encode($op) . ' ' . json_encode($args));
    }

    public function testEncodeIsJsonEncodeOfTheEnvelope(): void
    {
        $ops = array_keys(Client::SAFE_TO_REPEAT);
        foreach (self::awkwardStrings() as $string) {
            $ops[] = $string;
            $ops[] = "session.get$string";
        }
        foreach ($ops as $op) {
            $this->assertFrameOf($op, ['session' => 'kh_x'], Wire::encode(self::ID, $op, ['session' => 'kh_x']));
        }
        $argsSets = [new \stdClass(), ['a' => 1.0, 'b' => -0.0, 'c' => 1e100, 'd' => PHP_INT_MAX, 'e' => true, 'f' => null], ['list' => [1, 'two', [3]]], ['nested' => ['data' => new \stdClass(), 'deep' => ['x' => ['y' => 'z']]]]];
        foreach (self::awkwardStrings() as $string) {
            $argsSets[] = ['session' => $string];
            $argsSets[] = [$string => $string];
            $argsSets[] = ['data' => [$string => [$string]]];
        }
        foreach ($argsSets as $args) {
            $this->assertFrameOf('debug.echo', $args, Wire::encode(self::ID, 'debug.echo', $args));
        }
    }

    /** Not UTF-8 (a lone surrogate in CESU-8 or WTF-8 among them): nothing to send, for the op and for an argument alike. */
    public function testEncodeRefusesWhatIsNotUtf8(): void
    {
        foreach (["\xff", "a\xc3", "\xed\xa0\x80", "\xed\xbf\xbf", "\xc0\xaf", "\xf4\x90\x80\x80"] as $bad) {
            foreach ([[$bad, ['session' => 'kh_x']], ['session.get', ['session' => $bad]], ['debug.echo', [$bad => 1]]] as [$op, $args]) {
                try {
                    Wire::encode(self::ID, $op, $args);
                    $this->fail('encoded ' . bin2hex($bad));
                } catch (\InvalidArgumentException $e) {
                    $this->assertStringContainsString('cannot be sent as JSON', $e->getMessage());
                }
            }
        }
    }

    /**
     * apple.callback's `form`, and its `session` and that one's `data`, go as JSON objects even
     * when empty (PHP's [] would be a JSON array, which keyholed refuses); apple.authorize without
     * arguments sends {}.
     */
    public function testAppleCallbackSendsEmptyArraysAsObjects(): void
    {
        $args = Wire::objectify('apple.callback', ['form' => [], 'cookie' => 'c', 'session' => ['ttl_s' => 60, 'data' => []]]);
        $this->assertSame('{"v":1,"id":"' . self::ID . '","op":"apple.callback","args":{"form":{},"cookie":"c","session":{"ttl_s":60,"data":{}}}}',
            substr(Wire::encode(self::ID, 'apple.callback', $args), 4));
        $args = Wire::objectify('apple.callback', ['form' => ['state' => 's', 'code' => 'c'], 'cookie' => 'c', 'session' => []]);
        $this->assertSame('{"form":{"state":"s","code":"c"},"cookie":"c","session":{}}', json_encode($args));
        $this->assertSame('{}', json_encode(Wire::objectify('apple.authorize', [])));
    }

    private static function usual(string $result, string $id = self::ID): string
    {
        return '{"id":"' . $id . '","ok":true,"result":' . $result . '}';
    }

    private static function nested(int $depth): string
    {
        return str_repeat('{"a":', $depth - 1) . '{}' . str_repeat('}', $depth - 1);
    }

    /** keyholed's usual answers: result() takes them, and gives what decode() does. */
    public function testResultTakesTheUsualAnswer(): void
    {
        $session = '{"created_at":1730673678,"data":{},"expires_at":1733265678,"id":"cBjZ-nnmfKbwRwhTkbV0Zw","idle_timeout_s":604800,'
            . '"issuer":"apple","last_seen_at":1730673678,"sub":"p","user":{"created_at":1730673678,"issuer":"apple","sub":"p"}}';
        foreach ([$session, '{}', '{"0":"a","1":"b"}', '{"s":"\u00e9\"\\\\\/\n","é":"😀","f":1.5,"n":null,"l":[{}],"o":{"}":"{"}}', ' {"a":1}', self::nested(510)] as $result) {
            $payload = self::usual($result);
            if ($result[0] === '{') {
                $this->assertNotNull(Wire::result($payload, self::ID), $result);
            }
            $this->assertSameAsDecode($payload);
        }
    }

    /** Everything else is left to decode() (null), and whatever result() does take, it takes as decode() does. */
    public function testResultLeavesAnythingElseToDecode(): void
    {
        $others = [
            self::usual('{"a":1}', 'other.1'),
            self::usual('{"a":1}', self::ID . '0'),
            '{"id":"0a1b2c3d4e5f.1","ok":true,"result":{"a":1}}',
            '{"id":"\u0030a1b2c3d4e5f.17","ok":true,"result":{"a":1}}',
            '{"id":17,"ok":true,"result":{"a":1}}',
            '{"id": "' . self::ID . '","ok":true,"result":{"a":1}}',
            '{"ok":true,"id":"' . self::ID . '","result":{"a":1}}',
            self::usual('{"a":1}') . ' ',
            self::usual('{"a":1},"extra":2'),
            self::usual('{"a":1},"result":{"b":2}'),
            self::usual('{"a":1},"ok":false'),
            self::usual('{"a":1},"error":{"code":"internal"}'),
            self::usual('{"a":1}}'),
            self::usual('{"a":1'),
            self::usual('{"a":"' . "\xff" . '"}'),
            self::usual('{"a":"' . "\xed\xa0\x80" . '"}'),
            self::usual('{"a":"\ud800"}'),
            self::usual('{"a":1,}'),
            self::usual('[]'),
            self::usual('"x"'),
            self::usual('{}') . "\n",
            '{"id":"' . self::ID . '","ok":true,"result":{',
            '{"id":"' . self::ID . '","ok":true,"result":}',
            '{"id":"' . self::ID . '","ok":false,"error":{"code":"session_not_found","message":"no"}}',
            self::usual(self::nested(511)),
            self::usual(self::nested(512)),
        ];
        foreach ($others as $payload) {
            $this->assertSameAsDecode($payload);
        }
        $this->assertNull(Wire::result(self::usual('{"a":1}', 'other.1'), self::ID));
        $this->assertNull(Wire::result(self::usual('{"a":1},"result":{"b":2}'), self::ID));
        $this->assertNull(Wire::result(self::usual('{"a":"\ud800"}'), self::ID));
        $this->assertNull(Wire::result(self::usual(self::nested(511)), self::ID));
    }

    /** Whenever result() gives something, decode() reads the payload as the answer to ID with that result. */
    private function assertSameAsDecode(string $payload): void
    {
        $fast = Wire::result($payload, self::ID);
        try {
            $whole = Wire::decode($payload);
        } catch (KeyholeException $e) {
            $this->assertSame('protocol_error', $e->code());
            $this->assertNull($fast, "result() took what decode() refuses: $payload");
            return;
        }
        if ($fast !== null) {
            $this->assertSame(self::ID, $whole['id'], $payload);
            $this->assertTrue($whole['ok'], $payload);
            $this->assertSame($whole['result'], $fast, $payload);
        }
    }
}
