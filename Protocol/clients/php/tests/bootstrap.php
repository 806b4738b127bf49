<?php

declare(strict_types=1);

require __DIR__ . '/../autoload.php';

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Keyhole\\Tests\\', 14) === 0) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, 14)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

// PSR-7 and PSR-17 from Debian (php-nyholm-psr7, which brings php-psr-http-message and
// php-psr-http-factory), found on PHP's include path (/usr/share/php).
require_once 'Psr/Http/Message/autoload.php';
require_once 'Nyholm/Psr7/autoload.php';
// PSR-15's two interfaces: Debian packages no psr/http-server-handler or -middleware.
require_once __DIR__ . '/psr15.php';
