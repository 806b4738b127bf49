<?php

// For apps without Composer: require this file and use Keyhole\Client. It maps the Keyhole\
// namespace to src/ (PSR-4), as composer.json does. The PSR-15 middleware and the Laravel guard
// load only when used, and need their own packages then (psr/http-server-middleware and a PSR-17
// factory; laravel/framework).

declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Keyhole\\', 8) !== 0) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, 8)) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
