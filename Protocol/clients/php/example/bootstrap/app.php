<?php

// The example's Laravel application. Laravel comes from Composer's vendor/ when there is one
// beside the client, else from Debian's php-laravel-framework (/usr/share/php).

declare(strict_types=1);

$client = dirname(__DIR__, 2);
if (is_file("$client/vendor/autoload.php")) {
    require "$client/vendor/autoload.php";
} else {
    require_once 'Illuminate/autoload.php';
    require "$client/autoload.php";
}
spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'App\\', 4) === 0) {
        $file = dirname(__DIR__) . '/app/' . str_replace('\\', '/', substr($class, 4)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

// Laravel caches its provider and package lists in bootstrap/cache; keep them out of the tree.
$cache = sys_get_temp_dir() . '/keyhole-example-' . substr(md5(__DIR__), 0, 8);
foreach (['APP_SERVICES_CACHE' => 'services.php', 'APP_PACKAGES_CACHE' => 'packages.php'] as $name => $file) {
    $_SERVER[$name] = $_ENV[$name] = "$cache-$file";
}

$app = new Illuminate\Foundation\Application(dirname(__DIR__));
$app->useStoragePath(sys_get_temp_dir());
$app->singleton(Illuminate\Contracts\Http\Kernel::class, Illuminate\Foundation\Http\Kernel::class);
$app->singleton(Illuminate\Contracts\Debug\ExceptionHandler::class, App\ExceptionHandler::class);
return $app;
