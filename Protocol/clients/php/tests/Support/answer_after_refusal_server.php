<?php

// A server that reads one request, sends an error with a null id, then the request's answer, and
// closes the connection; then answers one ping on a new connection with {"reconnected": true}.
//
//     php answer_after_refusal_server.php SOCKET

declare(strict_types=1);

function frame(array $message): string
{
    $json = json_encode($message);
    return pack('N', strlen($json)) . $json;
}

function request($conn): array
{
    $length = unpack('N', fread($conn, 4))[1];
    return json_decode(fread($conn, $length), true);
}

@unlink($argv[1]);
$server = stream_socket_server("unix://{$argv[1]}");
echo "ready\n";
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
