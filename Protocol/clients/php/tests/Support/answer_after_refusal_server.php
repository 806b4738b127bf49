<?php

// A server that reads one request, sends an error with a null id, then the request's answer, and
// closes the connection; then answers one ping on a new connection with {"reconnected": true}.
//
//     php answer_after_refusal_server.php SOCKET

declare(strict_types=1);

require __DIR__ . '/scripted.php';

$server = listen_on($argv[1]);
$conn = stream_socket_accept($server, 10);
$echo = request($conn);
fwrite($conn, frame(['id' => null, 'ok' => false, 'error' => ['code' => 'frame_too_large', 'message' => 'frame of 70000 bytes']]));
usleep(50000);
fwrite($conn, frame(['id' => $echo['id'], 'ok' => true, 'result' => $echo['args']]));
fclose($conn);
$conn = stream_socket_accept($server, 10);
if ($conn === false) {
    fwrite(STDERR, "no second connection\n");
    exit(1);
}
$ping = request($conn);
fwrite($conn, frame(['id' => $ping['id'], 'ok' => true, 'result' => ['reconnected' => true]]));
fread($conn, 1);
unlink($argv[1]);
exit(0);
