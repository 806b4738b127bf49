<?php

// Runs a PHP front controller under PHP's built-in server on 127.0.0.1:$PORT, and prints
// "listening <port>" on stdout once it accepts connections. PORT=0 (or unset) picks a free port:
// `php -S` cannot report the port it bound, so this finds a free one first and passes it.
//
//     PORT=0 KEYHOLE_SOCKET=/run/keyhole/keyhole.sock php example/serve.php [FRONT_CONTROLLER]
//
// FRONT_CONTROLLER defaults to the example app, example/public/index.php. SIGTERM or SIGINT
// stops the server.

declare(strict_types=1);

$router = realpath($argv[1] ?? __DIR__ . '/public/index.php');
if ($router === false) {
    fwrite(STDERR, "serve.php: no such front controller\n");
    exit(2);
}
$port = (int)(getenv('PORT') ?: 0);
if ($port === 0) {
    $probe = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
    if ($probe === false) {
        fwrite(STDERR, "serve.php: cannot find a free port: $errstr\n");
        exit(1);
    }
    $name = stream_socket_get_name($probe, false);
    $port = (int)substr($name, strrpos($name, ':') + 1);
    fclose($probe);
}
$server = proc_open(
    [PHP_BINARY, '-S', "127.0.0.1:$port", '-t', dirname($router), $router],
    [0 => ['file', '/dev/null', 'r'], 1 => ['file', 'php://stderr', 'w'], 2 => ['pipe', 'w']],
    $pipes
);
if (!is_resource($server)) {
    fwrite(STDERR, "serve.php: cannot start php -S\n");
    exit(1);
}
pcntl_async_signals(true);
$stop = static function () use ($server): void {
    proc_terminate($server, SIGTERM);
};
// Without restarting system calls, so that the wait below is interrupted and the handler runs.
pcntl_signal(SIGTERM, $stop, false);
pcntl_signal(SIGINT, $stop, false);

$ready = false;
$log = $pipes[2];
stream_set_blocking($log, false);
$pending = '';
while (true) {
    $read = [$log];
    $none = null;
    if (@stream_select($read, $none, $none, null) === false) {
        continue; // interrupted by a signal: its handler has run
    }
    $chunk = fread($log, 8192);
    if ($chunk === '' || $chunk === false) {
        if (feof($log)) {
            break;
        }
        continue;
    }
    fwrite(STDERR, $chunk);
    $pending .= $chunk;
    if (!$ready && str_contains($pending, 'Development Server') && str_contains($pending, 'started')) {
        $ready = true;
        echo "listening $port\n";
        fflush(STDOUT);
    }
    $pending = (string)substr($pending, -200);
}
$status = proc_close($server);
exit($ready ? 0 : ($status > 0 ? $status : 1));
