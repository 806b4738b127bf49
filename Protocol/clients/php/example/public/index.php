<?php

// Front controller of the Keyhole example app (Laravel 8): `php example/serve.php` runs it
// under PHP's built-in server; any Laravel-capable web server can serve this directory.

declare(strict_types=1);

$app = require __DIR__ . '/../bootstrap/app.php';
$kernel = $app->make(Illuminate\Contracts\Http\Kernel::class);
$response = $kernel->handle($request = Illuminate\Http\Request::capture());
$response->send();
$kernel->terminate($request, $response);
