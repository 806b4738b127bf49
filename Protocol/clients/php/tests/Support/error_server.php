<?php

// A server that answers every request, on every connection, with the error CODE; until killed.
//
//     php error_server.php SOCKET CODE
//
// Prints "ready" once listening.

declare(strict_types=1);

require __DIR__ . '/scripted.php';

[$_, $path, $code] = $argv;
$server = listen_on($path);
while (true) {
    $conn = @stream_socket_accept($server, -1);
    if ($conn === false) {
        continue;
    }
    while (($head = fread($conn, 4)) !== false && strlen($head) === 4) {
        $length = unpack('N', $head)[1];
        $payload = '';
        while (strlen($payload) < $length && ($chunk = fread($conn, $length - strlen($payload))) !== false && $chunk !== '') {
            $payload .= $chunk;
        }
        $request = json_decode($payload, true);
        $answer = json_encode(['id' => $request['id'] ?? null, 'ok' => false, 'error' => ['code' => $code, 'message' => "scripted $code"]]);
        fwrite($conn, pack('N', strlen($answer)) . $answer);
    }
    fclose($conn);
}
