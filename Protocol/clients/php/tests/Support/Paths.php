<?php

declare(strict_types=1);

namespace Keyhole\Tests\Support;

final class Paths
{
    /** The repository's root. */
    public static function root(): string
    {
        return dirname(__DIR__, 5);
    }

    public static function protocol(string $path): string
    {
        return self::root() . '/Protocol/' . $path;
    }

    /** A fresh socket path under /tmp (short: sun_path is 108 bytes). */
    public static function socket(string $tag): string
    {
        return sprintf('/tmp/khphp-%s-%s.sock', $tag, bin2hex(random_bytes(4)));
    }
}
